//! The byte layout of a segment: every offset and size, in one place.
//!
//! Both sides use these constants — the builder to encode records, the reader to decode them — so the
//! two can never disagree. `hal/LAYOUT.md` is the prose version of this file; change both together.
//!
//! Invariants (checked by the reader, guaranteed by the builder):
//! - every record and every field is 8-byte aligned relative to the segment start (records are multiples
//!   of 8 bytes and tables start on 8-byte boundaries); 32-bit fields come in pairs inside one 8-byte word;
//! - a reference to another record is a `u64` byte offset from the segment start, `0` meaning "none"
//!   (offset 0 is the header, never a record);
//! - a name field is [`NAME_FIELD`] bytes, NUL-terminated and NUL-padded.

/// First 8 bytes of every segment.
pub const MAGIC: [u8; 8] = *b"RTAPIHAL";

/// Layout version. Readers accept any minor of their major (minor versions only append fields at the end
/// of records or of the header, and grow the stored record sizes); a new major is a breaking change.
pub const VERSION_MAJOR: u16 = 2;
pub const VERSION_MINOR: u16 = 3;

/// Stored as a native-endian u64: a reader on a host of the other byte order sees it reversed.
pub const BYTE_ORDER_MARK: u64 = 0x0102_0304_0506_0708;

/// Size of a name field (47 characters + NUL).
pub const NAME_FIELD: usize = 48;
/// Size of a short label field (flavor, timer driver): 23 characters + NUL.
pub const LABEL_FIELD: usize = 24;

/// Everything in the segment is aligned to this.
pub const ALIGN: usize = 8;

/// Segment states (header `state` word).
pub mod state {
    /// Created, records not yet written: readers must not look further.
    pub const BUILDING: u64 = 1;
    /// Structure complete and immutable; values live.
    pub const READY: u64 = 2;
    /// The owner's threads are running.
    pub const RUNNING: u64 = 3;
    /// The owner shut down cleanly (normally the name is unlinked right after).
    pub const STOPPED: u64 = 4;
}

/// The fixed header at offset 0.
pub mod header {
    pub const MAGIC: usize = 0; // [u8; 8]
    pub const VERSION: usize = 8; // u32: major << 16 | minor
    pub const HEADER_SIZE: usize = 12; // u32
    pub const TOTAL_SIZE: usize = 16; // u64
    pub const BYTE_ORDER: usize = 24; // u64
    pub const OWNER_PID: usize = 32; // u32 (+ u32 reserved)
    pub const STATE: usize = 40; // u64, atomic, see `state`
    pub const START_TIME_NS: usize = 48; // u64 CLOCK_REALTIME at creation
    pub const INSTANCE: usize = 56; // name field
    pub const TABLES: usize = 104; // TABLE_COUNT descriptors
    pub const CAPACITIES: usize = 200; // 2.0: TABLE_COUNT u32 capacities (records each table has room for)
    pub const GENERATION: usize = 224; // 2.0: u64 structure generation (odd while the owner changes it)
    pub const SIZE: usize = 256;
}

/// A table descriptor: where an array of same-sized records is.
pub mod table {
    pub const OFFSET: usize = 0; // u64
    pub const COUNT: usize = 8; // u32
    pub const RECORD_SIZE: usize = 12; // u32
    pub const SIZE: usize = 16;
}

/// Record flags (2.0), in a record's u32 `flags` field.
pub mod flags {
    /// The record was deleted: readers skip it; nothing live refers to it; its name may be reused.
    pub const DELETED: u32 = 1;
}

/// The tables, in header order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Components = 0,
    Pins = 1,
    Params = 2,
    Signals = 3,
    Functions = 4,
    Threads = 5,
}

impl Table {
    pub const ALL: [Table; 6] = [
        Table::Components,
        Table::Pins,
        Table::Params,
        Table::Signals,
        Table::Functions,
        Table::Threads,
    ];

    /// Byte offset of this table's descriptor in the header.
    pub const fn descriptor(self) -> usize {
        header::TABLES + self as usize * table::SIZE
    }

    /// Record size written by this version (readers accept larger ones from newer minors).
    pub const fn record_size(self) -> usize {
        match self {
            Table::Components => component::SIZE,
            Table::Pins => pin::SIZE,
            Table::Params => param::SIZE,
            Table::Signals => signal::SIZE,
            Table::Functions => function::SIZE,
            Table::Threads => thread::SIZE,
        }
    }

    /// Offset of the u32 flags word of this table's records (2.0), if they can be deleted.
    pub const fn flags(self) -> Option<usize> {
        match self {
            Table::Components => Some(component::FLAGS),
            Table::Pins => Some(pin::FLAGS),
            Table::Params => Some(param::FLAGS),
            Table::Signals => Some(signal::FLAGS),
            Table::Functions => Some(function::FLAGS),
            Table::Threads => None,
        }
    }

    /// Byte offset of this table's capacity (u32) in the header (2.0).
    pub const fn capacity_field(self) -> usize {
        header::CAPACITIES + self as usize * 4
    }

    /// Offset of the value cell slot in this table's records, if they have one.
    pub const fn cell(self) -> Option<usize> {
        match self {
            Table::Pins => Some(pin::VALUE),
            Table::Params => Some(param::VALUE),
            Table::Signals => Some(signal::VALUE),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Table::Components => "component",
            Table::Pins => "pin",
            Table::Params => "param",
            Table::Signals => "signal",
            Table::Functions => "function",
            Table::Threads => "thread",
        }
    }
}

pub mod component {
    pub const NAME: usize = 0;
    pub const PINS: usize = 48; // u32 number of pins
    pub const PARAMS: usize = 52; // u32
    pub const FUNCTIONS: usize = 56; // u32
    pub const FLAGS: usize = 60; // u32 (2.0) record flags
    pub const SIZE: usize = 64;
}

pub mod pin {
    pub const NAME: usize = 0;
    pub const TYPE: usize = 48; // u32 ValueType code
    pub const DIR: usize = 52; // u32 1 in, 2 out, 3 io
    pub const COMPONENT: usize = 56; // u64 offset
    pub const SIGNAL: usize = 64; // u64 offset or 0
    pub const VALUE: usize = 72; // cell slot: the pin's own value while not on a signal
    pub const FLAGS: usize = 80; // u32 (2.0) record flags + u32 reserved
    pub const SIZE: usize = 88;
}

pub mod param {
    pub const NAME: usize = 0;
    pub const TYPE: usize = 48; // u32
    pub const ACCESS: usize = 52; // u32 1 ro, 2 rw
    pub const COMPONENT: usize = 56; // u64 offset
    pub const VALUE: usize = 64; // cell slot
    pub const FLAGS: usize = 72; // u32 (2.0) record flags + u32 reserved
    pub const SIZE: usize = 80;
}

pub mod signal {
    pub const NAME: usize = 0;
    pub const TYPE: usize = 48; // u32
    pub const WRITERS: usize = 52; // u32 OUT pins (0 or 1)
    pub const READERS: usize = 56; // u32 IN pins
    pub const BIDIRS: usize = 60; // u32 IO pins
    pub const WRITER_PIN: usize = 64; // u64 offset of the OUT pin, or 0
    pub const VALUE: usize = 72; // cell slot shared by every pin on the signal
    pub const FLAGS: usize = 80; // u32 (2.0) record flags + u32 reserved
    pub const SIZE: usize = 88;
}

pub mod function {
    pub const NAME: usize = 0;
    pub const COMPONENT: usize = 48; // u64 offset
    pub const THREAD: usize = 56; // u64 offset or 0 (not added)
    pub const POSITION: usize = 64; // u32 index in the thread (u32::MAX if not added)
    pub const FLAGS: usize = 68; // u32 (2.0) record flags
                                 // Timing, written by the thread's RT loop under its own seqlock:
    pub const SEQ: usize = 72;
    pub const LAST_NS: usize = 80;
    pub const MAX_NS: usize = 88;
    pub const SUM_NS: usize = 96;
    pub const CALLS: usize = 104;
    pub const FAULTS: usize = 112; // calls that reported a fault
    pub const FAULT_CODE: usize = 120; // code of the last call, 0 = ok
    pub const SIZE: usize = 128;
}

pub mod thread {
    pub const NAME: usize = 0;
    pub const PERIOD_NS: usize = 48; // u64
    pub const CPU: usize = 56; // i32, -1 = not pinned
    pub const PRIORITY: usize = 60; // i32
    pub const FLAVOR: usize = 64; // label field
    pub const TIMER: usize = 88; // label field
    pub const RUNNING: usize = 112; // u64 0/1, atomic, outside the seqlock
    pub const STATS: usize = 120; // u64 offset of the stats block
    pub const FUNCTIONS: usize = 128; // u32 number of functions added + u32 reserved
    pub const SIZE: usize = 136;
}

/// A thread's stats block: fixed part, then `BIN_COUNT` histogram bins.
pub mod stats {
    // Fixed at build time:
    pub const BIN_NS: usize = 0; // u64 histogram bin width
    pub const BIN_COUNT: usize = 8; // u64 number of bins
    pub const SPIKE_THRESHOLD_NS: usize = 16; // i64 latency at or above which a period is a spike
    pub const SPIKE_RING_LEN: usize = 24; // u64 entries in the spike ring
                                          // Independent atomic counters, outside the seqlock (like the bins):
    pub const UNDERFLOW: usize = 32; // latencies < 0
    pub const OVERFLOW: usize = 40; // latencies >= BIN_NS * BIN_COUNT
                                    // The seqlock and what it protects:
    pub const SEQ: usize = 48;
    pub const CYCLES: usize = 56;
    pub const OVERRUNS: usize = 64;
    pub const LATENCY_MIN: usize = 72; // i64 (i64::MAX before the first cycle)
    pub const LATENCY_MAX: usize = 80; // i64 (i64::MIN before the first cycle)
    pub const LATENCY_SUM_LO: usize = 88; // i128 = HI << 64 | LO
    pub const LATENCY_SUM_HI: usize = 96;
    pub const LATENCY_SQ_LO: usize = 104; // u128 = HI << 64 | LO
    pub const LATENCY_SQ_HI: usize = 112;
    pub const JITTER_MAX: usize = 120; // u64 max |interval - period|
    pub const EXEC_LAST: usize = 128;
    pub const EXEC_MAX: usize = 136;
    pub const EXEC_SUM: usize = 144;
    pub const DRIFT: usize = 152; // i64, last reported
    pub const LAST_WAKE_NS: usize = 160; // u64 CLOCK_MONOTONIC
    pub const SPIKES_TOTAL: usize = 168; // u64 spikes ever; the ring holds min(SPIKES_TOTAL, SPIKE_RING)
    pub const SPIKES: usize = 176; // the worst SPIKE_RING spikes by latency, unordered (1.2)
    pub const BINS: usize = SPIKES + SPIKE_RING * spike::SIZE; // 496
    /// Spike ring entries written by this version.
    pub const SPIKE_RING: usize = 8;

    pub mod spike {
        pub const CYCLE: usize = 0;
        pub const TIME_NS: usize = 8;
        pub const LATENCY_NS: usize = 16; // i64
        pub const INVOLUNTARY_CTX_SWITCHES: usize = 24;
        pub const PAGE_FAULTS: usize = 32;
        pub const SIZE: usize = 40;
    }

    /// Entries in the ring of the latest spikes (1.3), after the bins.
    pub const RECENT_RING: usize = 256;

    /// Offset of the ring of the latest spikes (1.3) in a block with `bins` histogram bins: right
    /// after the bins. Entry `i` holds spike number `n` (0-based, counted by `SPIKES_TOTAL`) where
    /// `n mod RECENT_RING == i`; written under the seqlock like the worst-spike ring.
    pub const fn recent(bins: usize) -> usize {
        BINS + bins * 8
    }

    /// Offset of the I/O section (2.2) in a block with `bins` histogram bins: right after the ring
    /// of the latest spikes (where a 2.1 block ends).
    pub const fn io(bins: usize) -> usize {
        recent(bins) + RECENT_RING * spike::SIZE
    }

    /// The I/O section (2.2): the time a thread's I/O functions (a Mesa card's `hm2_….read`,
    /// `.write`, `.read-request`) took per period, in periods where any ran. Offsets from
    /// [`io`](super::stats::io)`(bins)`. `COUNT`..`SUM` are written under the block's seqlock
    /// (`SEQ`); `OVERFLOW` and the bins are independent counters like the latency ones.
    pub mod io {
        pub const COUNT: usize = 0; // u64 periods with I/O recorded
        pub const LAST: usize = 8; // u64 ns, the last such period
        pub const MIN: usize = 16; // u64 ns, meaningful when COUNT > 0 (0 as created)
        pub const MAX: usize = 24; // u64 ns
        pub const SUM: usize = 32; // u64 ns, saturating
        pub const CALLS: usize = 40; // u64 I/O function calls in all (several per period)
        pub const OVERFLOW: usize = 48; // u64 counter: I/O times >= bin_ns * bin_count
        pub const BINS: usize = 56; // u64 x bin_count, the thread's bin width
        /// Section size for `bins` bins.
        pub const fn size(bins: usize) -> usize {
            BINS + bins * 8
        }
    }

    /// Offset of the I/O errors (2.3) in a block with `bins` histogram bins: right after the I/O
    /// section (where a 2.2 block ends).
    pub const fn io_errors(bins: usize) -> usize {
        io(bins) + io::size(bins)
    }

    /// The I/O errors (2.3): what the thread's I/O drivers counted as errors during its I/O calls
    /// (hm2_eth's `packet-error-total`: a reply not there at the read deadline — late or lost —
    /// or a write the card did not confirm). Offsets from [`io_errors`]`(bins)`; written under the
    /// block's seqlock with the I/O section.
    pub mod io_errors {
        pub const COUNT: usize = 0; // u64 errors counted in all
        pub const PERIODS: usize = 8; // u64 periods with at least one
        pub const SIZE: usize = 16;
    }

    /// Whole block size for `bins` histogram bins, as this version writes it (with the ring of the
    /// latest spikes, the I/O section and the I/O errors).
    pub const fn size(bins: usize) -> usize {
        io_errors(bins) + io_errors::SIZE
    }

    /// Block size as a segment of layout minor `minor` (of major 2) wrote it: without the I/O
    /// section before 2.2, without the I/O errors before 2.3.
    pub const fn size_for(bins: usize, minor: u16) -> usize {
        if minor >= 3 {
            size(bins)
        } else if minor == 2 {
            io_errors(bins)
        } else {
            io(bins)
        }
    }
}

// Compile-time checks of the invariants above.
const _: () = {
    let mut i = 0;
    while i < Table::ALL.len() {
        assert!(Table::ALL[i].record_size() % ALIGN == 0);
        i += 1;
    }
    assert!(header::TABLES + Table::ALL.len() * table::SIZE <= header::CAPACITIES);
    assert!(header::CAPACITIES + Table::ALL.len() * 4 <= header::GENERATION);
    assert!(header::GENERATION + 8 <= header::SIZE);
    assert!(header::INSTANCE + NAME_FIELD <= header::TABLES);
    assert!(thread::TIMER + LABEL_FIELD <= thread::RUNNING);
    assert!(stats::BINS == 496 && stats::BINS % ALIGN == 0);
};
