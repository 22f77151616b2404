//! The owning process's view of its segment.
//!
//! Lifetime: the segment name exists from [`HalBuilder::build`] until the `Hal` is dropped (clean shutdown
//! unlinks it). Handles (pins, params, stats writers) keep the *mapping* alive on their own, so a thread
//! that outlives the `Hal` by a few periods writes into valid memory, merely no longer visible by name.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockWriteGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::builder::HalBuilder;
use crate::error::{HalError, ObjectKind, Result};
use crate::image::{self, Plan};
use crate::keys::{ComponentKey, FunctionKey, ParamKey, PinKey, ThreadKey};
use crate::layout::{
    component, flags, function, header, param, pin, signal, state, stats, table, thread, Table,
};
use crate::name::Instance;
use crate::pin::{Direction, Param, ParamAccess, Pin, PinDir, PinSlot};
use crate::reader::{HalReader, WritersGate};
use crate::room::put;
use crate::segment::{self, Block, Mapping};
use crate::stats::{StatsWriter, StatsWriterParts};
use crate::thread::ThreadState;
use crate::value::{HalType, Value, ValueType};

/// The owner's model of the structure: the builder's collections (names, nets, run lists), grown and
/// changed by the structural operations, plus where everything is in the segment.
struct Model {
    b: HalBuilder,
    plan: Plan,
    /// Pointer slot of every pin, by pin index (a reused index gets a new one).
    slots: Vec<Arc<PinSlot>>,
    /// Signals whose cell a [`Probe`](crate::Probe) reads directly: their slots are never reused.
    probed_signals: HashSet<usize>,
    writer_taken: Vec<bool>,
    /// Until when the owner does not wait for the writers' lock (it found a writer holding it for
    /// [`REUSE_WAIT`]: a stopped one would otherwise cost every later change that long).
    reuse_backoff: Option<Instant>,
}

/// One pin of a component declared whole with [`Hal::add_component_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct PinDecl {
    /// Full HAL name (`panel.button`).
    pub name: String,
    /// IN, OUT or IO.
    pub dir: PinDir,
    /// The value it starts at (its type is the pin's type).
    pub init: Value,
}

/// One param of a component declared whole with [`Hal::add_component_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct ParamDecl {
    /// Full HAL name (`panel.gain`).
    pub name: String,
    /// RO or RW (for other processes' `setp`).
    pub access: ParamAccess,
    /// The value it starts at (its type is the param's type).
    pub init: Value,
}

/// How long the owner waits for writers in other processes to finish their store before it gives a
/// deleted record's slot to a new record; a writer holds the lock for microseconds, so one that holds
/// it this long is stopped, and the new record takes a fresh slot instead. For [`REUSE_BACKOFF`] after
/// that, changes only try the lock once, without waiting.
const REUSE_WAIT: Duration = Duration::from_millis(100);
const REUSE_BACKOFF: Duration = Duration::from_secs(1);
/// How long a change that fits only in deleted records' slots waits for the exclusion before it is
/// refused for want of room: writers in other processes that keep storing (a `setp` loop) hold the
/// lock shared nearly all the time, and on a loaded machine one of them can hold it past
/// [`REUSE_WAIT`] without being stopped.
const REUSE_NEEDED_WAIT: Duration = Duration::from_secs(5);

/// The writers' exclusion (LAYOUT.md section 11) for one structural change that reuses slots: the
/// exclusive writers' lock on the segment file (writers in other processes) and the write side of the
/// gate (writers in this process, through [`Hal::reader`]).
struct Exclusive<'a> {
    fd: &'a OwnedFd,
    _gate: RwLockWriteGuard<'a, ()>,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        segment::release_writers_lock(self.fd);
    }
}

/// The owner of a live HAL segment, from [`HalBuilder::build`](crate::HalBuilder::build).
///
/// It holds the segment's owner lock for as long as it lives and hands out the RT handles ([`Pin`],
/// [`Param`], [`StatsWriter`]); the handles keep the mapping alive on its own. Dropping it marks the
/// segment stopped and removes its name; readers that still have it mapped see the last values.
///
/// **Structure that changes while it runs** (layout 2.0): components, pins, params, functions and
/// signals can be added, signals deleted, pins linked and unlinked, functions added to and removed from
/// threads, with halcmd's rules. Each change is one *structural change*: the owner takes its own mutex
/// (never taken by a real-time thread), makes the header's structure generation odd, writes the records,
/// and makes it even again; readers retry a read that overlapped one (LAYOUT.md section 7a). Pin handles
/// read through a pointer slot that a link re-points atomically, so RT threads never wait for a change.
///
/// **Room that comes back** (layout 2.1): a deleted record's slot goes to the next record added to its
/// table, oldest deletion first, so components may join and leave for ever in constant room. A change
/// that reuses a slot holds the writers' lock exclusively (LAYOUT.md section 11): no `setp` or user
/// component's write in another process is between finding a cell and storing into it meanwhile.
pub struct Hal {
    instance: Instance,
    mapping: Arc<Mapping>,
    /// Holds the owner `flock` for as long as we live (see `segment`), and the writers' lock while a
    /// change reuses a slot.
    fd: OwnedFd,
    builder_id: u32,
    model: Mutex<Model>,
    /// Writers through this process's own readers vs. slot reuse (see [`Exclusive`]).
    gate: WritersGate,
}

/// An open structural change: the generation is odd until [`end`](Change::end).
struct Change<'a> {
    m: &'a Mapping,
    odd: u64,
}

impl<'a> Change<'a> {
    fn begin(m: &'a Mapping) -> Self {
        let g = m.word(header::GENERATION).load(Ordering::Relaxed);
        let odd = if g % 2 == 0 { g + 1 } else { g + 2 };
        m.word(header::GENERATION).store(odd, Ordering::Relaxed);
        // The odd generation is visible before any record store below.
        fence(Ordering::Release);
        Change { m, odd }
    }

    fn u64(&self, off: usize, v: u64) {
        self.m.word(off).store(v, Ordering::Relaxed);
    }

    /// A u32 field: its 8-byte word is read, half replaced, stored (we are the only structural writer).
    fn u32(&self, off: usize, v: u32) {
        let word = off & !7;
        let mut bytes = self.m.load(word).to_ne_bytes();
        bytes[off & 7..(off & 7) + 4].copy_from_slice(&v.to_ne_bytes());
        self.u64(word, u64::from_ne_bytes(bytes));
    }

    /// A whole record image (only for records nobody holds a handle to yet).
    fn bytes(&self, off: usize, bytes: &[u8]) {
        for (i, c) in bytes.chunks_exact(8).enumerate() {
            self.u64(
                off + i * 8,
                u64::from_ne_bytes(c.try_into().expect("chunks_exact")),
            );
        }
    }

    fn end(self) {
        self.m
            .word(header::GENERATION)
            .store(self.odd + 1, Ordering::Release);
    }
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

        let slots = b
            .pins
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let cell = match p.signal {
                    Some(s) => plan.record(Table::Signals, s) + signal::VALUE,
                    None => plan.record(Table::Pins, i) + pin::VALUE,
                };
                Arc::new(PinSlot::new(&mapping, cell))
            })
            .collect();
        Ok(Hal {
            instance: b.instance.clone(),
            mapping,
            fd: owned.fd,
            builder_id: b.id,
            model: Mutex::new(Model {
                probed_signals: HashSet::new(),
                writer_taken: vec![false; b.threads.len()],
                reuse_backoff: None,
                slots,
                plan,
                b,
            }),
            gate: Arc::new(RwLock::new(())),
        })
    }

    fn check_key(&self, builder: u32) {
        assert_eq!(
            builder, self.builder_id,
            "key from another HalBuilder used with this Hal"
        );
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        // A panic mid-change leaves the generation odd (readers then refuse); the model is still the
        // best description of what was written, so keep using it.
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The instance this segment is for.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// Segment size in bytes.
    pub fn size(&self) -> usize {
        self.mapping.len()
    }

    /// The typed handle of a registered pin. It reads and writes its signal's cell while linked, its
    /// own cell otherwise, and follows [`link`](Self::link)/[`unlink`](Self::unlink) on its own.
    ///
    /// # Panics
    /// If `key` came from another builder, or is a key of a pin deleted since (its slot may hold
    /// another pin).
    pub fn pin<D: Direction, T: HalType>(&self, key: PinKey<D, T>) -> Pin<D, T> {
        self.check_key(key.builder);
        let m = self.model();
        Self::check_serial(&m, Table::Pins, key.index, key.serial);
        Pin::new(m.slots[key.index].clone())
    }

    /// Panics on a key of a deleted object: its slot may hold another object now, which a handle
    /// typed for the old one must never reach.
    fn check_serial(m: &Model, t: Table, index: usize, serial: u32) {
        assert!(
            m.b.room(t).holds(index, serial),
            "a key of a deleted {} used with this Hal",
            t.as_str()
        );
    }

    /// Makes a C component's pin pointer follow pin `name`: LinuxCNC's `T **data_ptr_addr` from
    /// `hal_pin_*_new`. The address of the cell in use (the pin's own, or its signal's while linked) is
    /// stored at `pointer` now and again with every later [`link`](Self::link)/[`unlink`](Self::unlink),
    /// so the component reads and writes the same cell a native [`Pin`] handle would. With
    /// `own_substitute` non-null, the pointer gets that cell instead of the pin's own (the cell the
    /// component was given before the segment existed; see `PinSlot::set_mirror`) and returns the
    /// cell of the pin's own value, which its host copies to and from the substitute.
    ///
    /// # Safety
    /// `pointer` must be valid for aligned pointer-sized writes for as long as this `Hal` lives (memory
    /// never freed, such as a C component's `hal_malloc` block), and only read by others;
    /// `own_substitute`, when non-null, an 8-aligned 8-byte cell valid as long.
    pub unsafe fn attach_pin_pointer(
        &self,
        name: &str,
        pointer: *mut *mut u8,
        own_substitute: *mut u8,
    ) -> Result<crate::pin::CellRef> {
        let m = self.model();
        let p = m.b.pin_index(name).ok_or_else(|| HalError::NotFound {
            kind: ObjectKind::Pin,
            name: name.to_string(),
        })?;
        let own = m.plan.record(Table::Pins, p) + pin::VALUE;
        // SAFETY: forwarded from this function's contract; the model lock serializes it with repoints.
        unsafe { m.slots[p].set_mirror(pointer, own, own_substitute) };
        Ok(crate::pin::CellRef::new(Block::new(&self.mapping, own, 8)))
    }

    /// The byte offset of param `name`'s cell slot and the mapping's base address: where a host of C
    /// components copies a param's value between the segment and the component's own variable.
    pub fn param_cell(&self, name: &str) -> Result<(crate::pin::CellRef, ValueType)> {
        let m = self.model();
        let i = m.b.param_index(name).ok_or_else(|| HalError::NotFound {
            kind: ObjectKind::Param,
            name: name.to_string(),
        })?;
        let cell = m.plan.record(Table::Params, i) + param::VALUE;
        Ok((
            crate::pin::CellRef::new(Block::new(&self.mapping, cell, 8)),
            m.b.params[i].ty,
        ))
    }

    /// A read-only probe of the pin or, if no pin has that name, the signal called `name` (for a
    /// recorder: [`Probe::get_f64`] is RT-safe).
    pub fn probe(&self, name: &str) -> Result<crate::pin::Probe> {
        let mut m = self.model();
        if let Some(p) = m.b.pin_index(name) {
            return Ok(crate::pin::Probe::pin(m.slots[p].clone(), m.b.pins[p].ty));
        }
        if let Some(s) = m.b.signal_index(name) {
            // The probe reads this record's cell for good: its slot is never given to another signal.
            m.probed_signals.insert(s);
            let cell = m.plan.record(Table::Signals, s) + signal::VALUE;
            return Ok(crate::pin::Probe::cell(
                Block::new(&self.mapping, cell, 8),
                m.b.signals[s].ty,
            ));
        }
        Err(HalError::NotFound {
            kind: ObjectKind::Any,
            name: name.to_string(),
        })
    }

    /// The typed handle of a registered param.
    ///
    /// # Panics
    /// If `key` came from another builder, or is a key of a param deleted since.
    pub fn param<T: HalType>(&self, key: ParamKey<T>) -> Param<T> {
        self.check_key(key.builder);
        let m = self.model();
        Self::check_serial(&m, Table::Params, key.index, key.serial);
        let cell = m.plan.record(Table::Params, key.index) + param::VALUE;
        Param::new(Block::new(&self.mapping, cell, 8))
    }

    /// The functions of a thread in run order now (a copy: [`addf`](Self::addf) and
    /// [`delf`](Self::delf) change it); `position` arguments of [`StatsWriter::record_function`]
    /// index the list as it was when the stats writer was taken.
    pub fn thread_functions(&self, key: ThreadKey) -> Vec<FunctionKey> {
        self.check_key(key.builder);
        let m = self.model();
        m.b.threads[key.index]
            .functions
            .iter()
            .map(|&f| FunctionKey {
                builder: self.builder_id,
                index: f,
                serial: m.b.room(Table::Functions).serial(f),
            })
            .collect()
    }

    /// The single writer of a thread's stats, to be moved into that thread. Handed out once. Its
    /// function positions are the thread's run order at this call.
    pub fn stats_writer(&self, key: ThreadKey) -> Result<StatsWriter> {
        self.check_key(key.builder);
        let mut m = self.model();
        let t = &m.b.threads[key.index];
        if m.writer_taken[key.index] {
            return Err(HalError::StatsWriterTaken {
                thread: t.config.name.clone(),
            });
        }
        let record = m.plan.record(Table::Threads, key.index);
        let parts = StatsWriterParts {
            stats: Block::new(
                &self.mapping,
                m.plan.stats[key.index],
                stats::size(t.config.histogram.bins),
            ),
            running: Block::new(&self.mapping, record + thread::RUNNING, 8),
            functions: t
                .functions
                .iter()
                .map(|&f| {
                    Block::new(
                        &self.mapping,
                        m.plan.record(Table::Functions, f),
                        function::SIZE,
                    )
                })
                .collect(),
            period_ns: t.config.period_ns,
            bin_ns: t.config.histogram.bin_ns,
            bins: t.config.histogram.bins,
            spike_threshold_ns: t.config.effective_spike_threshold(),
        };
        m.writer_taken[key.index] = true;
        Ok(StatsWriter::new(parts))
    }

    /// The single writer of a function's timing record (execution time, calls, faults), to be moved
    /// into the thread that runs the function. Each call gives a new handle: the caller keeps one
    /// per function (the runtime does).
    pub fn function_timer(&self, key: FunctionKey) -> crate::stats::FunctionTimer {
        self.check_key(key.builder);
        let m = self.model();
        Self::check_serial(&m, Table::Functions, key.index, key.serial);
        let record = m.plan.record(Table::Functions, key.index);
        crate::stats::FunctionTimer::new(Block::new(&self.mapping, record, function::SIZE))
    }

    /// A handle on a thread's published state, for a supervisor outside the thread (the runtime's
    /// watchdog marks a thread stalled and running again through it).
    pub fn thread_state_cell(&self, key: ThreadKey) -> ThreadStateCell {
        self.check_key(key.builder);
        let record = self.model().plan.record(Table::Threads, key.index);
        ThreadStateCell {
            cell: Block::new(&self.mapping, record + thread::RUNNING, 8),
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
        HalReader::from_mapping(
            self.mapping.clone(),
            self.instance.clone(),
            self.gate.clone(),
        )
    }

    /// The structure generation now (even: consistent; it grows by 2 with every structural change).
    pub fn generation(&self) -> u64 {
        self.mapping
            .word(header::GENERATION)
            .load(Ordering::Acquire)
    }

    // ---- structural changes ------------------------------------------------------------------------

    /// Refuses adding `n` records to table `t` unless they fit: in fresh room, or — while reuse is
    /// allowed (`m.b.reuse`) — in slots of deleted records.
    fn room(m: &Model, t: Table, n: usize) -> Result<()> {
        let capacity = m.plan.capacity[t as usize];
        let r = m.b.room(t);
        let reusable = if m.b.reuse { r.reusable() } else { 0 };
        if n > capacity - r.used_ever() + reusable {
            return Err(HalError::TableFull {
                table: t.as_str(),
                capacity,
            });
        }
        Ok(())
    }

    /// Takes the writers' exclusion, waiting at most `wait` for writes in progress to end.
    fn exclusive(&self, wait: Duration) -> Option<Exclusive<'_>> {
        let start = Instant::now();
        let gate = loop {
            match self.gate.try_write() {
                Ok(g) => break g,
                Err(TryLockError::Poisoned(p)) => break p.into_inner(),
                Err(TryLockError::WouldBlock) if start.elapsed() >= wait => return None,
                Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_micros(20)),
            }
        };
        loop {
            match segment::try_writers_lock(&self.fd, true) {
                Ok(true) => {
                    return Some(Exclusive {
                        fd: &self.fd,
                        _gate: gate,
                    })
                }
                Ok(false) if start.elapsed() < wait => {
                    std::thread::sleep(Duration::from_micros(20))
                }
                _ => return None,
            }
        }
    }

    /// Runs `f`, a change that adds records to `tables`, with the model locked. When one of those
    /// tables has slots of deleted records, the change may reuse them: it then runs under the writers'
    /// exclusion, so that no writer in any process is between finding a cell and storing into it
    /// while a slot gets its new record (LAYOUT.md section 11). If the exclusion cannot be had (a
    /// writer stopped mid-write), the records go to fresh room only, and for a while later changes
    /// do not wait for it — except a change that fits only in reused slots, which waits up to
    /// [`REUSE_NEEDED_WAIT`] for the exclusion before it is refused.
    fn adding<R>(&self, tables: &[Table], mut f: impl FnMut(&mut Model) -> Result<R>) -> Result<R> {
        let mut m = self.model();
        let wanted = tables.iter().any(|&t| m.b.room(t).reusable() > 0);
        let exclusive = if wanted {
            let backing_off = m.reuse_backoff.is_some_and(|until| Instant::now() < until);
            let wait = if backing_off {
                Duration::ZERO
            } else {
                REUSE_WAIT
            };
            let ex = self.exclusive(wait);
            m.reuse_backoff = match (&ex, backing_off) {
                (Some(_), _) => None,
                (None, true) => m.reuse_backoff,
                (None, false) => Some(Instant::now() + REUSE_BACKOFF),
            };
            ex
        } else {
            None
        };
        m.b.reuse = exclusive.is_some();
        let mut r = f(&mut m);
        m.b.reuse = false;
        // Refused for room with deleted slots there to reuse, the exclusion not had: the change
        // cannot go to fresh room, so it waits longer for the exclusion (a writer stopped for good
        // still cannot hold it up for ever) and tries again. The room checks come before anything
        // is changed, so the first try left nothing behind.
        let mut exclusive = exclusive;
        if exclusive.is_none() && wanted && matches!(r, Err(HalError::TableFull { .. })) {
            exclusive = self.exclusive(REUSE_NEEDED_WAIT);
            if exclusive.is_some() {
                m.reuse_backoff = None;
                m.b.reuse = true;
                r = f(&mut m);
                m.b.reuse = false;
            }
        }
        drop(m);
        drop(exclusive);
        r
    }

    /// Writes record `i` of `t` afresh (a new slot or a reused one) and the table's count, which
    /// is the number of slots ever used (inside a change).
    fn write_new(c: &Change<'_>, m: &Model, t: Table, i: usize) {
        c.bytes(m.plan.record(t, i), &image::record(&m.b, &m.plan, t, i));
        c.u32(
            t.descriptor() + table::COUNT,
            m.b.room(t).used_ever() as u32,
        );
    }

    /// Rewrites a component record's counts (inside a change).
    fn write_component_counts(c: &Change<'_>, m: &Model, comp: usize) {
        let r = m.plan.record(Table::Components, comp);
        let x = &m.b.components[comp];
        c.u32(r + component::PINS, x.pins);
        c.u32(r + component::PARAMS, x.params);
        c.u32(r + component::FUNCTIONS, x.functions);
    }

    /// Rewrites a signal's connection fields and a pin's `signal` field (inside a change).
    fn write_links(c: &Change<'_>, m: &Model, sig: usize, pin_index: usize) {
        let r = m.plan.record(Table::Signals, sig);
        let s = &m.b.signals[sig];
        c.u32(r + signal::WRITERS, u32::from(s.writer.is_some()));
        c.u32(r + signal::READERS, s.readers);
        c.u32(r + signal::BIDIRS, s.bidirs);
        c.u64(
            r + signal::WRITER_PIN,
            s.writer.map_or(0, |p| m.plan.record(Table::Pins, p) as u64),
        );
        c.u64(
            m.plan.record(Table::Pins, pin_index) + pin::SIGNAL,
            m.b.pins[pin_index]
                .signal
                .map_or(0, |s| m.plan.record(Table::Signals, s) as u64),
        );
    }

    /// Rewrites a thread's run list: every function's thread and position, and the count.
    fn write_run_list(c: &Change<'_>, m: &Model, t: usize, removed: Option<usize>) {
        for (pos, &f) in m.b.threads[t].functions.iter().enumerate() {
            let r = m.plan.record(Table::Functions, f);
            c.u64(
                r + function::THREAD,
                m.plan.record(Table::Threads, t) as u64,
            );
            c.u32(r + function::POSITION, pos as u32);
        }
        if let Some(f) = removed {
            let r = m.plan.record(Table::Functions, f);
            c.u64(r + function::THREAD, 0);
            c.u32(r + function::POSITION, u32::MAX);
        }
        c.u32(
            m.plan.record(Table::Threads, t) + thread::FUNCTIONS,
            m.b.threads[t].functions.len() as u32,
        );
    }

    /// Loads a component at run time (`loadrt`): a new component record.
    pub fn add_component(&self, name: &str) -> Result<ComponentKey> {
        self.adding(&[Table::Components], |m| {
            Self::room(m, Table::Components, 1)?;
            let key = m.b.component(name)?;
            let c = Change::begin(&self.mapping);
            Self::write_new(&c, m, Table::Components, key.index);
            c.end();
            Ok(key)
        })
    }

    /// A whole component at run time — its record, every pin and every param — in one structural
    /// change, for a declaration that arrives complete (a user-space component's `ready()`). Checked
    /// whole first: names valid and free (and not repeated), room in each table for all of it. A
    /// refused declaration changes nothing, neither the segment nor its room; an accepted one appears
    /// to readers all at once.
    pub fn add_component_with(
        &self,
        name: &str,
        pins: &[PinDecl],
        params: &[ParamDecl],
    ) -> Result<ComponentKey> {
        let tables = [Table::Components, Table::Pins, Table::Params];
        self.adding(&tables, |m| {
            m.b.component_name_free(name)?;
            let mut seen = HashSet::new();
            for n in pins
                .iter()
                .map(|p| &p.name)
                .chain(params.iter().map(|p| &p.name))
            {
                m.b.pin_or_param_name_free(n)?;
                if !seen.insert(n.as_str()) {
                    return Err(HalError::Duplicate {
                        kind: ObjectKind::PinOrParam,
                        name: n.clone(),
                    });
                }
            }
            Self::room(m, Table::Components, 1)?;
            Self::room(m, Table::Pins, pins.len())?;
            Self::room(m, Table::Params, params.len())?;
            // Nothing below can be refused: the names and the room were checked.
            let key = m.b.component(name)?;
            let mut pin_indices = Vec::with_capacity(pins.len());
            for p in pins {
                let (i, _) =
                    m.b.pin_raw(key, &p.name, p.init.value_type(), p.dir, p.init.to_bits())?;
                let cell = m.plan.record(Table::Pins, i) + pin::VALUE;
                put(&mut m.slots, i, Arc::new(PinSlot::new(&self.mapping, cell)));
                pin_indices.push(i);
            }
            let mut param_indices = Vec::with_capacity(params.len());
            for p in params {
                let (i, _) = m.b.param_raw(
                    key,
                    &p.name,
                    p.init.value_type(),
                    p.access,
                    p.init.to_bits(),
                )?;
                param_indices.push(i);
            }
            let c = Change::begin(&self.mapping);
            Self::write_new(&c, m, Table::Components, key.index);
            for i in pin_indices {
                Self::write_new(&c, m, Table::Pins, i);
            }
            for i in param_indices {
                Self::write_new(&c, m, Table::Params, i);
            }
            c.end();
            Ok(key)
        })
    }

    /// A new pin of `component` at run time, starting at the type's zero value.
    pub fn add_pin<D: Direction, T: HalType>(
        &self,
        component: ComponentKey,
        name: &str,
    ) -> Result<PinKey<D, T>> {
        self.add_pin_with_default(component, name, T::from_bits(0))
    }

    /// A new pin of `component` at run time, starting at `init`.
    pub fn add_pin_with_default<D: Direction, T: HalType>(
        &self,
        component: ComponentKey,
        name: &str,
        init: T,
    ) -> Result<PinKey<D, T>> {
        self.check_key(component.builder);
        self.adding(&[Table::Pins], |m| {
            Self::room(m, Table::Pins, 1)?;
            let key = m.b.pin_with_default::<D, T>(component, name, init)?;
            let cell = m.plan.record(Table::Pins, key.index) + pin::VALUE;
            put(
                &mut m.slots,
                key.index,
                Arc::new(PinSlot::new(&self.mapping, cell)),
            );
            let c = Change::begin(&self.mapping);
            Self::write_new(&c, m, Table::Pins, key.index);
            Self::write_component_counts(&c, m, component.index);
            c.end();
            Ok(key)
        })
    }

    /// A new param of `component` at run time.
    pub fn add_param<T: HalType>(
        &self,
        component: ComponentKey,
        name: &str,
        access: ParamAccess,
        init: T,
    ) -> Result<ParamKey<T>> {
        self.check_key(component.builder);
        self.adding(&[Table::Params], |m| {
            Self::room(m, Table::Params, 1)?;
            let key = m.b.param(component, name, access, init)?;
            let c = Change::begin(&self.mapping);
            Self::write_new(&c, m, Table::Params, key.index);
            Self::write_component_counts(&c, m, component.index);
            c.end();
            Ok(key)
        })
    }

    /// A new function of `component` at run time (not yet in any thread: [`addf`](Self::addf)).
    pub fn add_function(&self, component: ComponentKey, name: &str) -> Result<FunctionKey> {
        self.check_key(component.builder);
        self.adding(&[Table::Functions], |m| {
            Self::room(m, Table::Functions, 1)?;
            let key = m.b.function(component, name)?;
            let c = Change::begin(&self.mapping);
            Self::write_new(&c, m, Table::Functions, key.index);
            Self::write_component_counts(&c, m, component.index);
            c.end();
            Ok(key)
        })
    }

    /// A new thread at run time (a LinuxCNC thread made while the instance runs), into the room kept
    /// by [`HalBuilder::thread_room`]: its record and a fresh stats block (no cycles yet, state
    /// stopped) appear in one structural change; its [`stats_writer`](Self::stats_writer) is then
    /// available as for a built thread. Refused, with nothing changed, when the room is used up, when
    /// its histogram has more bins than the room was reserved for, or for a name in use.
    pub fn add_thread(&self, config: crate::thread::ThreadConfig) -> Result<ThreadKey> {
        let mut m = self.model();
        if m.plan.spare_used() >= m.plan.spare_stats.len() {
            return Err(HalError::TableFull {
                table: Table::Threads.as_str(),
                capacity: m.plan.capacity[Table::Threads as usize],
            });
        }
        if config.histogram.bins > m.plan.spare_bins {
            return Err(HalError::InvalidConfig {
                what: "thread histogram",
                reason: format!(
                    "thread '{}' asks for {} bins, but this segment kept room for threads of at most {} bins (HalBuilder::thread_room)",
                    config.name, config.histogram.bins, m.plan.spare_bins
                ),
            });
        }
        let block = m.plan.spare_stats[m.plan.spare_used()];
        let (hist, threshold) = (config.histogram, config.effective_spike_threshold());
        let key = m.b.thread(config)?;
        // The block is reachable only through the record, published below: its words may be written
        // outside the change, and the change's closing release store orders them before it. A spare
        // block is all zeros but these words (LAYOUT.md section 6).
        for (off, v) in image::stats_header(hist, threshold) {
            self.mapping.word(block + off).store(v, Ordering::Relaxed);
        }
        m.plan.stats.push(block);
        m.writer_taken.push(false);
        let c = Change::begin(&self.mapping);
        Self::write_new(&c, &m, Table::Threads, key.index);
        c.end();
        Ok(key)
    }

    /// `newsig NAME TYPE` at run time: a signal with no pins, value zero.
    pub fn new_signal(&self, name: &str, ty: ValueType) -> Result<()> {
        self.adding(&[Table::Signals], |m| {
            Self::room(m, Table::Signals, 1)?;
            let i = m.b.signal_at(name, ty)?;
            let c = Change::begin(&self.mapping);
            Self::write_new(&c, m, Table::Signals, i);
            c.end();
            Ok(())
        })
    }

    /// `delsig NAME`: unlinks every pin of the signal (each keeps reading the signal's last value,
    /// as [`unlink`](Self::unlink)) and deletes it; its record stays as a tombstone until a later
    /// signal takes its slot (never, if a [`probe`](Self::probe) reads it), and its name is free.
    pub fn delete_signal(&self, name: &str) -> Result<()> {
        let mut m = self.model();
        let s = m.b.signal_index(name).ok_or_else(|| HalError::NotFound {
            kind: ObjectKind::Signal,
            name: name.to_string(),
        })?;
        let pins: Vec<usize> = (0..m.b.pins.len())
            .filter(|&p| m.b.pins[p].signal == Some(s))
            .collect();
        let c = Change::begin(&self.mapping);
        for p in pins {
            self.unlink_locked(&c, &mut m, p);
        }
        c.u32(
            m.plan.record(Table::Signals, s) + signal::FLAGS,
            flags::DELETED,
        );
        c.end();
        let reusable = !m.probed_signals.contains(&s);
        m.b.forget_signal(s, reusable);
        Ok(())
    }

    /// `unloadrt COMPONENT` at run time: removes its functions from their threads, unlinks its pins
    /// (each keeps its signal's last value, as [`unlink`](Self::unlink)), and deletes the component
    /// with its pins, params and functions, in one structural change. Their records stay as tombstones
    /// until later records take their slots, and their names are free at once.
    ///
    /// Stopping the component's code is the caller's part, and it must be done **before** this call:
    /// once it returns, a new object may be given the slot of any record deleted here. Pin handles
    /// ([`Pin`], [`Probe`](crate::Probe), a C component's pointer) are safe past that point — they
    /// are moved to a private cell holding the pin's last value — but a [`Param`] handle or a
    /// [`CellRef`](crate::CellRef) of the deleted objects must not be used again.
    pub fn delete_component(&self, name: &str) -> Result<()> {
        let mut m = self.model();
        let k =
            m.b.component_index(name)
                .ok_or_else(|| HalError::NotFound {
                    kind: ObjectKind::Component,
                    name: name.to_string(),
                })?;
        let pins = m.b.owned_by(Table::Pins, k);
        let params = m.b.owned_by(Table::Params, k);
        let functions = m.b.owned_by(Table::Functions, k);
        let c = Change::begin(&self.mapping);
        for &f in &functions {
            if let Some(t) = m.b.functions[f].thread.take() {
                m.b.threads[t].functions.retain(|&g| g != f);
                Self::write_run_list(&c, &m, t, Some(f));
            }
            c.u32(
                m.plan.record(Table::Functions, f) + function::FLAGS,
                flags::DELETED,
            );
        }
        for &p in &pins {
            self.unlink_locked(&c, &mut m, p);
            m.slots[p].retire();
            c.u32(m.plan.record(Table::Pins, p) + pin::FLAGS, flags::DELETED);
        }
        for &p in &params {
            c.u32(
                m.plan.record(Table::Params, p) + param::FLAGS,
                flags::DELETED,
            );
        }
        c.u32(
            m.plan.record(Table::Components, k) + component::FLAGS,
            flags::DELETED,
        );
        c.end();
        m.b.forget_component(k);
        Ok(())
    }

    /// `linkps PIN SIGNAL` at run time, with `net`'s rules (the signal must exist; types equal; one OUT
    /// pin; OUT and IO never mixed; a pin on one signal at a time).
    ///
    /// Values, as LinuxCNC 2.9's `hal_link`: when nothing drives the signal yet (no OUT and no IO
    /// pin), an OUT or IO pin brings its current value to the signal, and so does an IN pin if the
    /// signal has no pins at all; otherwise the pin reads the signal's value from now on. The pin's handle follows at once: its pointer slot is
    /// re-pointed atomically, so an RT thread using it never waits.
    pub fn link(&self, pin_name: &str, signal_name: &str) -> Result<()> {
        let mut m = self.model();
        let p = m.b.pin_index(pin_name).ok_or_else(|| HalError::NotFound {
            kind: ObjectKind::Pin,
            name: pin_name.to_string(),
        })?;
        let s =
            m.b.signal_index(signal_name)
                .ok_or_else(|| HalError::NotFound {
                    kind: ObjectKind::Signal,
                    name: signal_name.to_string(),
                })?;
        let (dir, ty) = (m.b.pins[p].dir, m.b.pins[p].ty);
        let sig = &m.b.signals[s];
        // LinuxCNC 2.9's hal_link: the pin's own value becomes the signal's when nothing drives the
        // signal yet — for an IN pin, only when the signal has no pins at all.
        let brings_value =
            (dir != PinDir::In || sig.readers == 0) && sig.writer.is_none() && sig.bidirs == 0;
        m.b.net(signal_name, pin_name)?;
        let own = m.plan.record(Table::Pins, p) + pin::VALUE;
        let shared = m.plan.record(Table::Signals, s) + signal::VALUE;
        let c = Change::begin(&self.mapping);
        if brings_value {
            let v = self.mapping.load_cell(own, ty);
            self.mapping.store_cell(shared, ty, v);
        }
        m.slots[p].repoint(shared);
        Self::write_links(&c, &m, s, p);
        c.end();
        Ok(())
    }

    /// `unlinkp PIN`: takes the pin off its signal (nothing to do if it is on none). Like LinuxCNC,
    /// the signal's current value is copied into the pin's own cell first, so the pin keeps reading
    /// the value it last saw rather than a stale one from before it was linked.
    pub fn unlink(&self, pin_name: &str) -> Result<()> {
        let mut m = self.model();
        let p = m.b.pin_index(pin_name).ok_or_else(|| HalError::NotFound {
            kind: ObjectKind::Pin,
            name: pin_name.to_string(),
        })?;
        if m.b.pins[p].signal.is_none() {
            return Ok(());
        }
        let c = Change::begin(&self.mapping);
        self.unlink_locked(&c, &mut m, p);
        c.end();
        Ok(())
    }

    fn unlink_locked(&self, c: &Change<'_>, m: &mut Model, p: usize) {
        let Some(s) = m.b.unnet(p) else { return };
        let ty = m.b.pins[p].ty;
        let own = m.plan.record(Table::Pins, p) + pin::VALUE;
        let shared = m.plan.record(Table::Signals, s) + signal::VALUE;
        let v = self.mapping.load_cell(shared, ty);
        self.mapping.store_cell(own, ty, v);
        m.slots[p].repoint(own);
        Self::write_links(c, m, s, p);
    }

    /// `addf FUNCTION THREAD [POSITION]` at run time (0 = first; `None` = last). The segment's run
    /// list changes at once; making the thread call the function is the runtime's part (it learns the
    /// list from [`thread_functions`](Self::thread_functions)).
    pub fn addf(&self, function: &str, thread: &str, position: Option<usize>) -> Result<()> {
        let mut m = self.model();
        m.b.addf(function, thread, position)?;
        let t = m.b.thread_index(thread).expect("addf found it");
        let c = Change::begin(&self.mapping);
        Self::write_run_list(&c, &m, t, None);
        c.end();
        Ok(())
    }

    /// `delf FUNCTION THREAD` at run time: removes the function from the thread's run list.
    pub fn delf(&self, function: &str, thread: &str) -> Result<()> {
        let mut m = self.model();
        let (f, t) = m.b.delf(function, thread)?;
        let c = Change::begin(&self.mapping);
        Self::write_run_list(&c, &m, t, Some(f));
        c.end();
        Ok(())
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
