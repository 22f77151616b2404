//! The owning process's view of its segment.
//!
//! Lifetime: the segment name exists from [`HalBuilder::build`] until the `Hal` is dropped (clean shutdown
//! unlinks it). Handles (pins, params, stats writers) keep the *mapping* alive on their own, so a thread
//! that outlives the `Hal` by a few periods writes into valid memory, merely no longer visible by name.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::builder::HalBuilder;
use crate::error::{HalError, Result};
use crate::image::{self, Plan};
use crate::keys::{FunctionKey, ParamKey, PinKey, ThreadKey};
use crate::layout::{function, header, param, pin, signal, state, stats, thread, Table};
use crate::name::Instance;
use crate::pin::{Direction, Param, Pin};
use crate::reader::HalReader;
use crate::segment::{self, Block, Mapping};
use crate::stats::{HistogramConfig, StatsWriter, StatsWriterParts};
use crate::thread::ThreadState;
use crate::value::HalType;

struct ThreadSlot {
    name: String,
    record: usize,
    stats: usize,
    period_ns: u64,
    histogram: HistogramConfig,
    spike_threshold_ns: i64,
    functions: Vec<FunctionKey>,
    function_records: Vec<usize>,
    writer_taken: AtomicBool,
}

/// The owner of a live HAL segment, from [`HalBuilder::build`](crate::HalBuilder::build).
///
/// It holds the segment's owner lock for as long as it lives and hands out the RT handles ([`Pin`],
/// [`Param`], [`StatsWriter`]); the handles keep the mapping alive on their own. Dropping it marks the
/// segment stopped and removes its name; readers that still have it mapped see the last values.
pub struct Hal {
    instance: Instance,
    mapping: Arc<Mapping>,
    /// Holds the owner `flock` for as long as we live (see `segment`).
    fd: OwnedFd,
    builder_id: u32,
    /// Cell offset of every pin: its own VALUE, or its signal's VALUE when netted.
    pin_cells: Vec<usize>,
    param_cells: Vec<usize>,
    threads: Vec<ThreadSlot>,
}

impl Hal {
    pub(crate) fn create(b: HalBuilder) -> Result<Hal> {
        let plan = Plan::new(&b)?;
        let img = image::encode(&b, &plan, std::process::id(), segment::realtime_ns());
        let owned = segment::create(&b.instance, plan.total, b.permissions)?;
        let mapping = Arc::new(owned.mapping);
        mapping.copy_in(&img);
        // Publish: everything above happens-before any reader's acquire load of READY.
        mapping
            .word(header::STATE)
            .store(state::READY, Ordering::Release);

        let pin_cells = b
            .pins
            .iter()
            .enumerate()
            .map(|(i, p)| match p.signal {
                Some(s) => plan.record(Table::Signals, s) + signal::VALUE,
                None => plan.record(Table::Pins, i) + pin::VALUE,
            })
            .collect();
        let param_cells = (0..b.params.len())
            .map(|i| plan.record(Table::Params, i) + param::VALUE)
            .collect();
        let threads = b
            .threads
            .iter()
            .enumerate()
            .map(|(i, t)| ThreadSlot {
                name: t.config.name.clone(),
                record: plan.record(Table::Threads, i),
                stats: plan.stats[i],
                period_ns: t.config.period_ns,
                histogram: t.config.histogram,
                spike_threshold_ns: t.config.effective_spike_threshold(),
                functions: t
                    .functions
                    .iter()
                    .map(|&f| FunctionKey {
                        builder: b.id,
                        index: f,
                    })
                    .collect(),
                function_records: t
                    .functions
                    .iter()
                    .map(|&f| plan.record(Table::Functions, f))
                    .collect(),
                writer_taken: AtomicBool::new(false),
            })
            .collect();
        Ok(Hal {
            instance: b.instance,
            mapping,
            fd: owned.fd,
            builder_id: b.id,
            pin_cells,
            param_cells,
            threads,
        })
    }

    fn check_key(&self, builder: u32) {
        assert_eq!(
            builder, self.builder_id,
            "key from another HalBuilder used with this Hal"
        );
    }

    /// The instance this segment is for.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// Segment size in bytes.
    pub fn size(&self) -> usize {
        self.mapping.len()
    }

    /// The typed handle of a registered pin (a pin on a signal reads/writes the signal's cell).
    ///
    /// # Panics
    /// If `key` came from another builder.
    pub fn pin<D: Direction, T: HalType>(&self, key: PinKey<D, T>) -> Pin<D, T> {
        self.check_key(key.builder);
        Pin::new(Block::new(&self.mapping, self.pin_cells[key.index], 8))
    }

    /// The typed handle of a registered param.
    ///
    /// # Panics
    /// If `key` came from another builder.
    pub fn param<T: HalType>(&self, key: ParamKey<T>) -> Param<T> {
        self.check_key(key.builder);
        Param::new(Block::new(&self.mapping, self.param_cells[key.index], 8))
    }

    /// The functions of a thread in run order; `position` arguments of
    /// [`StatsWriter::record_function`] index this list.
    pub fn thread_functions(&self, key: ThreadKey) -> &[FunctionKey] {
        self.check_key(key.builder);
        &self.threads[key.index].functions
    }

    /// The single writer of a thread's stats, to be moved into that thread. Handed out once.
    pub fn stats_writer(&self, key: ThreadKey) -> Result<StatsWriter> {
        self.check_key(key.builder);
        let t = &self.threads[key.index];
        if t.writer_taken.swap(true, Ordering::AcqRel) {
            return Err(HalError::StatsWriterTaken {
                thread: t.name.clone(),
            });
        }
        Ok(StatsWriter::new(StatsWriterParts {
            stats: Block::new(&self.mapping, t.stats, stats::size(t.histogram.bins)),
            running: Block::new(&self.mapping, t.record + thread::RUNNING, 8),
            functions: t
                .function_records
                .iter()
                .map(|&r| Block::new(&self.mapping, r, function::SIZE))
                .collect(),
            period_ns: t.period_ns,
            bin_ns: t.histogram.bin_ns,
            bins: t.histogram.bins,
            spike_threshold_ns: t.spike_threshold_ns,
        }))
    }

    /// A handle on a thread's published state, for a supervisor outside the thread (the runtime's
    /// watchdog marks a thread stalled and running again through it).
    pub fn thread_state_cell(&self, key: ThreadKey) -> ThreadStateCell {
        self.check_key(key.builder);
        ThreadStateCell {
            cell: Block::new(
                &self.mapping,
                self.threads[key.index].record + thread::RUNNING,
                8,
            ),
        }
    }

    /// Publishes in the header whether the threads are running (`rtapi show` displays it).
    pub fn set_running(&self, running: bool) {
        let s = if running {
            state::RUNNING
        } else {
            state::READY
        };
        self.mapping.word(header::STATE).store(s, Ordering::Release);
    }

    /// A reader over this process's own mapping (no second `mmap`): the same API other processes use.
    pub fn reader(&self) -> Result<HalReader> {
        HalReader::from_mapping(self.mapping.clone(), self.instance.clone())
    }
}

/// A thread's `state` word, writable from outside the thread (see [`Hal::thread_state_cell`]).
/// Keeps the mapping alive on its own.
pub struct ThreadStateCell {
    cell: Block,
}

impl ThreadStateCell {
    /// Publishes `state` (readers see it at once; outside any seqlock).
    pub fn set(&self, state: ThreadState) {
        self.cell.at(0).store(state.encode(), Ordering::Release);
    }

    /// The state last published, by the thread or a supervisor.
    pub fn get(&self) -> ThreadState {
        ThreadState::decode(self.cell.at(0).load(Ordering::Acquire))
    }
}

impl Drop for Hal {
    /// Clean shutdown: mark the segment stopped and remove its name. The lock goes with `fd`.
    fn drop(&mut self) {
        self.mapping
            .word(header::STATE)
            .store(state::STOPPED, Ordering::Release);
        segment::unlink_if_ours(&self.instance, &self.fd);
    }
}
