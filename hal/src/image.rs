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
    pub stats: Vec<usize>,
    pub total: usize,
}

impl Plan {
    /// Offset of record `index` of `table`.
    pub fn record(&self, table: Table, index: usize) -> usize {
        self.tables[table as usize] + index * table.record_size()
    }

    /// Lays out the builder's objects: header, the six tables in header order, then the stats blocks.
    pub fn new(b: &HalBuilder) -> Result<Plan> {
        let counts = [
            b.components.len(),
            b.pins.len(),
            b.params.len(),
            b.signals.len(),
            b.functions.len(),
            b.threads.len(),
        ];
        let too_big = || HalError::SegmentFull {
            needed: u64::MAX,
            cap: b.max_size as u64,
        };
        if counts.iter().any(|&n| u32::try_from(n).is_err()) {
            return Err(too_big());
        }
        let mut tables = [0; 6];
        let mut off = h::SIZE;
        for t in Table::ALL {
            tables[t as usize] = off;
            off = counts[t as usize]
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
        if off > b.max_size {
            return Err(HalError::SegmentFull {
                needed: off as u64,
                cap: b.max_size as u64,
            });
        }
        Ok(Plan {
            tables,
            stats,
            total: off,
        })
    }
}

/// A byte image with typed field writers.
struct Image(Vec<u8>);

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
    let counts = [
        b.components.len(),
        b.pins.len(),
        b.params.len(),
        b.signals.len(),
        b.functions.len(),
        b.threads.len(),
    ];
    for t in Table::ALL {
        let d = t.descriptor();
        im.u64(d + table::OFFSET, plan.tables[t as usize] as u64);
        im.u32(d + table::COUNT, counts[t as usize] as u32);
        im.u32(d + table::RECORD_SIZE, t.record_size() as u32);
    }

    let comp = |i: usize| plan.record(Table::Components, i) as u64;
    for (i, x) in b.components.iter().enumerate() {
        let r = plan.record(Table::Components, i);
        im.text(r + c::NAME, NAME_FIELD, &x.name);
        im.u32(r + c::PINS, x.pins);
        im.u32(r + c::PARAMS, x.params);
        im.u32(r + c::FUNCTIONS, x.functions);
    }
    for (i, x) in b.pins.iter().enumerate() {
        let r = plan.record(Table::Pins, i);
        im.text(r + pi::NAME, NAME_FIELD, &x.name);
        im.u32(r + pi::TYPE, x.ty.code());
        im.u32(r + pi::DIR, x.dir as u32);
        im.u64(r + pi::COMPONENT, comp(x.component));
        im.u64(
            r + pi::SIGNAL,
            x.signal
                .map_or(0, |s| plan.record(Table::Signals, s) as u64),
        );
        im.cell(r + pi::VALUE, x.ty, x.init);
    }
    for (i, x) in b.params.iter().enumerate() {
        let r = plan.record(Table::Params, i);
        im.text(r + pa::NAME, NAME_FIELD, &x.name);
        im.u32(r + pa::TYPE, x.ty.code());
        im.u32(r + pa::ACCESS, x.access as u32);
        im.u64(r + pa::COMPONENT, comp(x.component));
        im.cell(r + pa::VALUE, x.ty, x.init);
    }
    for (i, x) in b.signals.iter().enumerate() {
        let r = plan.record(Table::Signals, i);
        im.text(r + sg::NAME, NAME_FIELD, &x.name);
        im.u32(r + sg::TYPE, x.ty.code());
        im.u32(r + sg::WRITERS, u32::from(x.writer.is_some()));
        im.u32(r + sg::READERS, x.readers);
        im.u32(r + sg::BIDIRS, x.bidirs);
        im.u64(
            r + sg::WRITER_PIN,
            x.writer.map_or(0, |p| plan.record(Table::Pins, p) as u64),
        );
        im.cell(r + sg::VALUE, x.ty, b.signal_init[i]);
    }
    for (i, x) in b.functions.iter().enumerate() {
        let r = plan.record(Table::Functions, i);
        im.text(r + f::NAME, NAME_FIELD, &x.name);
        im.u64(r + f::COMPONENT, comp(x.component));
        let (thread, position) = match x.thread {
            Some(t) => {
                let pos = b.threads[t]
                    .functions
                    .iter()
                    .position(|&g| g == i)
                    .expect("addf keeps both sides");
                (plan.record(Table::Threads, t) as u64, pos as u32)
            }
            None => (0, u32::MAX),
        };
        im.u64(r + f::THREAD, thread);
        im.u32(r + f::POSITION, position);
    }
    for (i, x) in b.threads.iter().enumerate() {
        let r = plan.record(Table::Threads, i);
        let cfg = &x.config;
        im.text(r + th::NAME, NAME_FIELD, &cfg.name);
        im.u64(r + th::PERIOD_NS, cfg.period_ns);
        im.u32(r + th::CPU, cfg.cpu.map_or(-1, |c| c as i32) as u32);
        im.u32(r + th::PRIORITY, cfg.priority as u32);
        im.text(r + th::FLAVOR, LABEL_FIELD, &cfg.flavor);
        im.text(r + th::TIMER, LABEL_FIELD, &cfg.timer);
        im.u64(r + th::STATS, plan.stats[i] as u64);
        im.u32(r + th::FUNCTIONS, x.functions.len() as u32);
        encode_stats(
            &mut im,
            plan.stats[i],
            cfg.histogram,
            cfg.effective_spike_threshold(),
        );
    }
    im.0
}

fn encode_stats(im: &mut Image, base: usize, hist: HistogramConfig, spike_threshold_ns: i64) {
    im.u64(base + st::BIN_NS, hist.bin_ns);
    im.u64(base + st::BIN_COUNT, hist.bins as u64);
    im.u64(base + st::SPIKE_THRESHOLD_NS, spike_threshold_ns as u64);
    im.u64(base + st::SPIKE_RING_LEN, st::SPIKE_RING as u64);
    // Sentinels so the first sample becomes both min and max.
    im.u64(base + st::LATENCY_MIN, i64::MAX as u64);
    im.u64(base + st::LATENCY_MAX, i64::MIN as u64);
}
