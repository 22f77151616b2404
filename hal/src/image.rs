//! Laying out a builder's structure in segment bytes.
//!
//! The image is composed in private memory and copied into the fresh segment with atomic stores; only
//! then is the header's state set to READY (release). A reader that sees READY (acquire) therefore sees
//! every byte of the structure, and no reader ever observes a partial write of it.

use crate::builder::HalBuilder;
use crate::error::{HalError, Result};
use crate::layout::{
    self, component as c, function as f, header as h, param as pa, pin as pi, signal as sg,
    stats as st, table, thread as th, Table, LABEL_FIELD, NAME_FIELD,
};
use crate::stats::HistogramConfig;

/// Where everything goes.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    tables: [usize; 6],
    /// Records each table has room for (2.0): the built ones plus spare room for run-time additions.
    pub capacity: [usize; 6],
    pub stats: Vec<usize>,
    /// Stats blocks reserved for threads added while the segment runs, in the order they are used,
    /// each of `spare_bins` bins.
    pub spare_stats: Vec<usize>,
    pub spare_bins: usize,
    /// Threads in the built image (the first `built_threads` entries of `stats`).
    pub built_threads: usize,
    pub total: usize,
}

/// Room for threads added while the segment runs (see
/// [`HalBuilder::thread_room`](crate::HalBuilder::thread_room)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadRoom {
    /// Thread records (and stats blocks) kept free.
    pub threads: usize,
    /// The most histogram bins a thread added later may have (its stats block is reserved now).
    pub max_bins: usize,
}

/// How much room the segment keeps for objects added while it runs (see
/// [`HalBuilder::capacity`](crate::HalBuilder::capacity)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Each table (but threads, which are fixed) gets room for `factor` × the built records…
    pub factor: usize,
    /// …and at least `floor` records more than built.
    pub floor: usize,
}

impl Default for Capacity {
    /// 4 × the built structure, at least 64 spare records per table.
    fn default() -> Self {
        Capacity {
            factor: 4,
            floor: 64,
        }
    }
}

impl Capacity {
    fn of(self, table: Table, n: usize) -> Option<usize> {
        if table == Table::Threads {
            // Threads have their own spare room (ThreadRoom): each needs a stats block too.
            return Some(n);
        }
        let scaled = n.checked_mul(self.factor.max(1))?;
        Some(scaled.max(n.checked_add(self.floor)?))
    }
}

impl Plan {
    /// How many of the spare stats blocks threads added at run time took.
    pub(crate) fn spare_used(&self) -> usize {
        self.stats.len().saturating_sub(self.built_threads)
    }

    /// Offset of record `index` of `table`.
    pub(crate) fn record(&self, table: Table, index: usize) -> usize {
        self.tables[table as usize] + index * table.record_size()
    }

    /// Lays out the builder's objects: header, the six tables (each with its spare capacity) in header
    /// order, then the stats blocks.
    pub(crate) fn new(b: &HalBuilder) -> Result<Plan> {
        let counts = counts(b);
        let too_big = || HalError::SegmentFull {
            needed: u64::MAX,
            cap: b.max_size as u64,
        };
        let mut tables = [0; 6];
        let mut capacity = [0; 6];
        let mut off = h::SIZE;
        for t in Table::ALL {
            let mut cap = b.capacity.of(t, counts[t as usize]);
            if t == Table::Threads {
                cap = cap.and_then(|c| c.checked_add(b.thread_room.threads));
            }
            let cap = cap
                .filter(|&c| u32::try_from(c).is_ok())
                .ok_or_else(too_big)?;
            tables[t as usize] = off;
            capacity[t as usize] = cap;
            off = cap
                .checked_mul(t.record_size())
                .and_then(|n| off.checked_add(n))
                .ok_or_else(too_big)?;
        }
        let mut stats = Vec::with_capacity(b.threads.len());
        for t in &b.threads {
            stats.push(off);
            off = off
                .checked_add(st::size(t.config.histogram.bins))
                .ok_or_else(too_big)?;
        }
        let room = b.thread_room;
        let spare_bins = if room.threads == 0 { 0 } else { room.max_bins };
        if room.threads > 0 && !(1..=crate::stats::MAX_BINS).contains(&spare_bins) {
            return Err(HalError::InvalidConfig {
                what: "thread room",
                reason: format!(
                    "max_bins must be 1..={} for threads added later (got {spare_bins})",
                    crate::stats::MAX_BINS
                ),
            });
        }
        let mut spare_stats = Vec::with_capacity(room.threads);
        for _ in 0..room.threads {
            spare_stats.push(off);
            off = off.checked_add(st::size(spare_bins)).ok_or_else(too_big)?;
        }
        if off > b.max_size {
            return Err(HalError::SegmentFull {
                needed: off as u64,
                cap: b.max_size as u64,
            });
        }
        Ok(Plan {
            tables,
            capacity,
            stats,
            spare_stats,
            spare_bins,
            built_threads: b.threads.len(),
            total: off,
        })
    }
}

fn counts(b: &HalBuilder) -> [usize; 6] {
    [
        b.components.len(),
        b.pins.len(),
        b.params.len(),
        b.signals.len(),
        b.functions.len(),
        b.threads.len(),
    ]
}

/// A byte image with typed field writers.
pub(crate) struct Image(pub Vec<u8>);

impl Image {
    fn u32(&mut self, off: usize, v: u32) {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn u64(&mut self, off: usize, v: u64) {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }
    /// A cell slot holding `bits` of type `ty` (only the type's bytes; the rest 0).
    fn cell(&mut self, off: usize, ty: crate::value::ValueType, bits: u64) {
        self.0[off..off + 8].copy_from_slice(&crate::value::cell::image(ty, bits));
    }
    /// A NUL-padded text field of `field` bytes; `text` was validated to be shorter.
    fn text(&mut self, off: usize, field: usize, text: &str) {
        assert!(text.len() < field, "validated names fit their field");
        self.0[off..off + text.len()].copy_from_slice(text.as_bytes());
    }
}

/// The whole segment image, state BUILDING.
pub(crate) fn encode(b: &HalBuilder, plan: &Plan, pid: u32, start_time_ns: u64) -> Vec<u8> {
    let mut im = Image(vec![0; plan.total]);
    im.0[h::MAGIC..h::MAGIC + 8].copy_from_slice(&layout::MAGIC);
    im.u32(
        h::VERSION,
        (layout::VERSION_MAJOR as u32) << 16 | layout::VERSION_MINOR as u32,
    );
    im.u32(h::HEADER_SIZE, h::SIZE as u32);
    im.u64(h::TOTAL_SIZE, plan.total as u64);
    im.u64(h::BYTE_ORDER, layout::BYTE_ORDER_MARK);
    im.u32(h::OWNER_PID, pid);
    im.u64(h::STATE, layout::state::BUILDING);
    im.u64(h::START_TIME_NS, start_time_ns);
    im.text(h::INSTANCE, NAME_FIELD, b.instance.as_str());
    let counts = counts(b);
    for t in Table::ALL {
        let d = t.descriptor();
        im.u64(d + table::OFFSET, plan.tables[t as usize] as u64);
        im.u32(d + table::COUNT, counts[t as usize] as u32);
        im.u32(d + table::RECORD_SIZE, t.record_size() as u32);
        im.u32(t.capacity_field(), plan.capacity[t as usize] as u32);
    }
    for t in Table::ALL {
        for i in 0..counts[t as usize] {
            let r = plan.record(t, i);
            let rec = record(b, plan, t, i);
            im.0[r..r + rec.len()].copy_from_slice(&rec);
        }
    }
    for (i, x) in b.threads.iter().enumerate() {
        encode_stats(
            &mut im,
            plan.stats[i],
            x.config.histogram,
            x.config.effective_spike_threshold(),
        );
    }
    im.0
}

/// The bytes of record `i` of table `t` as the builder's model describes it now (flags 0: live).
pub(crate) fn record(b: &HalBuilder, plan: &Plan, t: Table, i: usize) -> Vec<u8> {
    let mut im = Image(vec![0; t.record_size()]);
    let comp = |i: usize| plan.record(Table::Components, i) as u64;
    match t {
        Table::Components => {
            let x = &b.components[i];
            im.text(c::NAME, NAME_FIELD, &x.name);
            im.u32(c::PINS, x.pins);
            im.u32(c::PARAMS, x.params);
            im.u32(c::FUNCTIONS, x.functions);
        }
        Table::Pins => {
            let x = &b.pins[i];
            im.text(pi::NAME, NAME_FIELD, &x.name);
            im.u32(pi::TYPE, x.ty.code());
            im.u32(pi::DIR, x.dir as u32);
            im.u64(pi::COMPONENT, comp(x.component));
            im.u64(
                pi::SIGNAL,
                x.signal
                    .map_or(0, |s| plan.record(Table::Signals, s) as u64),
            );
            im.cell(pi::VALUE, x.ty, x.init);
        }
        Table::Params => {
            let x = &b.params[i];
            im.text(pa::NAME, NAME_FIELD, &x.name);
            im.u32(pa::TYPE, x.ty.code());
            im.u32(pa::ACCESS, x.access as u32);
            im.u64(pa::COMPONENT, comp(x.component));
            im.cell(pa::VALUE, x.ty, x.init);
        }
        Table::Signals => {
            let x = &b.signals[i];
            im.text(sg::NAME, NAME_FIELD, &x.name);
            im.u32(sg::TYPE, x.ty.code());
            im.u32(sg::WRITERS, u32::from(x.writer.is_some()));
            im.u32(sg::READERS, x.readers);
            im.u32(sg::BIDIRS, x.bidirs);
            im.u64(
                sg::WRITER_PIN,
                x.writer.map_or(0, |p| plan.record(Table::Pins, p) as u64),
            );
            im.cell(sg::VALUE, x.ty, b.signal_init[i]);
        }
        Table::Functions => {
            let x = &b.functions[i];
            im.text(f::NAME, NAME_FIELD, &x.name);
            im.u64(f::COMPONENT, comp(x.component));
            let (thread, position) = function_place(b, plan, i);
            im.u64(f::THREAD, thread);
            im.u32(f::POSITION, position);
        }
        Table::Threads => {
            let x = &b.threads[i];
            let cfg = &x.config;
            im.text(th::NAME, NAME_FIELD, &cfg.name);
            im.u64(th::PERIOD_NS, cfg.period_ns);
            im.u32(th::CPU, cfg.cpu.map_or(-1, |c| c as i32) as u32);
            im.u32(th::PRIORITY, cfg.priority as u32);
            im.text(th::FLAVOR, LABEL_FIELD, &cfg.flavor);
            im.text(th::TIMER, LABEL_FIELD, &cfg.timer);
            im.u64(th::STATS, plan.stats[i] as u64);
            im.u32(th::FUNCTIONS, x.functions.len() as u32);
        }
    }
    im.0
}

/// A function's `(thread record, position)` fields: `(0, u32::MAX)` when not added.
pub(crate) fn function_place(b: &HalBuilder, plan: &Plan, i: usize) -> (u64, u32) {
    match b.functions[i].thread {
        Some(t) => {
            let pos = b.threads[t]
                .functions
                .iter()
                .position(|&g| g == i)
                .expect("addf keeps both sides");
            (plan.record(Table::Threads, t) as u64, pos as u32)
        }
        None => (0, u32::MAX),
    }
}

/// The creation-time words of a stats block (LAYOUT.md section 6) as `(offset in the block, value)`,
/// for a block that is written into the live segment (a thread added while it runs); every other
/// word of a fresh block is 0.
pub(crate) fn stats_header(hist: HistogramConfig, spike_threshold_ns: i64) -> [(usize, u64); 6] {
    [
        (st::BIN_NS, hist.bin_ns),
        (st::BIN_COUNT, hist.bins as u64),
        (st::SPIKE_THRESHOLD_NS, spike_threshold_ns as u64),
        (st::SPIKE_RING_LEN, st::SPIKE_RING as u64),
        (st::LATENCY_MIN, i64::MAX as u64),
        (st::LATENCY_MAX, i64::MIN as u64),
    ]
}

fn encode_stats(im: &mut Image, base: usize, hist: HistogramConfig, spike_threshold_ns: i64) {
    // Latency min/max start as sentinels so the first sample becomes both.
    for (off, v) in stats_header(hist, spike_threshold_ns) {
        im.u64(base + off, v);
    }
}
