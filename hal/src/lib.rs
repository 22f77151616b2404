//! # rtapi-hal: the shared-memory HAL of rtapi
//!
//! Everything a running machine knows — pin values, params, how the threads are wired, and each real-time
//! thread's latency statistics — lives in one POSIX shared-memory segment, `/rtapi-<instance>`
//! (`/dev/shm/rtapi-<instance>`), so that other processes (`rtapi show`, a GUI, a logger) can watch and
//! tune it without ever slowing the machine down. One process owns the segment and runs the real-time
//! threads; any number of others read it.
//!
//! - **The segment** ([`HalBuilder`] → [`Hal`]): the structure is registered first, then written in one
//!   go into a segment with spare room in every table ([`Capacity`]), so nothing in it ever moves and
//!   readers never see a half-built structure. The owner holds an `flock` on it that dies with the process: a stale segment
//!   is reclaimed, a live one is a clear error naming its pid. Dropping the [`Hal`] unlinks it.
//! - **The object model**: components own pins, params and functions; signals connect pins (one OUT
//!   pin, or any number of IO pins, and any number of IN pins, all of one [`ValueType`]); functions are
//!   added to periodic threads in run order. Every reference inside the segment is a byte offset; the
//!   byte layout is the contract in `hal/LAYOUT.md`, for readers in any language.
//! - **Typed handles** ([`Pin<In, f64>`](Pin), [`Param`]): resolved at build, so `get`/`set` on the
//!   real-time path is two dependent loads (a pin's pointer slot, then its cell) or a load and a store
//!   — no lookup, no lock, no allocation. The direction is in the type: a component cannot write its
//!   own input. Cells hold exactly LinuxCNC's C widths (bit 1 byte, s32/u32 4, float 8).
//! - **A live structure** (layout 2.0): while it runs, the owner adds components, pins, params,
//!   functions and signals, deletes signals and components, links and unlinks pins, and edits threads' run lists
//!   ([`Hal::link`], [`Hal::unlink`], [`Hal::new_signal`], [`Hal::delete_signal`], [`Hal::add_pin`],
//!   [`Hal::addf`], [`Hal::delf`], …) under a structure generation readers retry around; a link
//!   re-points the pin's slot, so RT threads never wait. A deleted record's room goes to the next
//!   record of its table (layout 2.1), so objects can join and leave for ever; writers in other
//!   processes hold a lock the owner takes exclusively when it reuses a slot, so no store meant for
//!   the old object reaches the new one. [`HalReader::tables`] says how much room is in use.
//! - **Thread stats** ([`StatsWriter`]): each thread's latency, jitter, execution times, overruns and its
//!   [`SPIKES_KEPT`] worst spikes, written once per period under a single-writer seqlock the RT thread
//!   never waits on (readers retry); latency sums in 128 bits; a histogram with percentiles.
//! - **Readers** ([`HalReader`]), in other processes or in the owner ([`Hal::reader`]): every offset is
//!   validated before it is followed, so corrupt, truncated, foreign or newer segments give a
//!   [`HalError`], never a crash; `setp`/`sets` follow HAL's rules (no writing an OUT pin, a connected
//!   pin, an RO param or a driven signal; no NaN without force).
//! - **The trust rule** ([`Trust`]): anyone can create a file in `/dev/shm`, so a segment is believed only
//!   if it is a regular file (never followed through a symlink), owned by root or the effective user (or
//!   an owner the reader names), with no mode bits beyond `0640`. Anything else is refused with
//!   [`HalError::Untrusted`] before a byte of it is read. The owner's liveness comes from its lock, so a
//!   dead owner's segment reads as dead and is never written.
//!
//! ```
//! use rtapi_hal::{
//!     Access, HalBuilder, HalReader, In, Out, PeriodSample, ThreadConfig, ThreadRusage, Value,
//! };
//!
//! // The owning process registers its structure, then builds the segment.
//! # let instance = format!("doc-crate-{}", std::process::id());
//! # /*
//! let instance = "demo";
//! # */
//! let mut b = HalBuilder::new(&instance)?;
//! let comp = b.component("scale.0")?;
//! let input = b.pin::<In, f64>(comp, "scale.0.in")?;
//! let output = b.pin::<Out, f64>(comp, "scale.0.out")?;
//! b.net("feed", "scale.0.in")?; // a signal the IN pin reads
//! b.set_signal("feed", Value::Float(1.5))?; // its value at start
//! b.net("scaled", "scale.0.out")?;
//! b.function(comp, "scale.0.update")?;
//! let servo = b.thread(ThreadConfig::new("servo", 1_000_000))?; // 1 ms period
//! b.addf("scale.0.update", "servo", None)?;
//! let hal = b.build()?;
//!
//! // The RT thread: typed pins and the stats writer, no lookups, no allocation.
//! let (input, output) = (hal.pin(input), hal.pin(output));
//! let stats = hal.stats_writer(servo)?;
//! output.set(2.0 * input.get());
//! stats.record(&PeriodSample {
//!     now_ns: 5_000_000,
//!     latency_ns: 600_000, // late by 0.6 ms: a spike (the default threshold is half the period)
//!     interval_ns: 1_000_100,
//!     exec_ns: 800,
//!     rusage: Some(ThreadRusage { involuntary_ctx_switches: 1, page_faults: 0 }),
//!     ..Default::default()
//! });
//!
//! // Any other process (here the same one, through the same API):
//! let reader = HalReader::open(&instance, Access::ReadWrite)?;
//! assert_eq!(reader.get("scaled")?, Value::Float(3.0));
//! let s = reader.thread_stats("servo")?;
//! assert_eq!((s.cycles, s.latency_max()), (1, Some(600_000)));
//! let worst = s.worst_spikes().next().unwrap();
//! assert_eq!((worst.cycle, worst.involuntary_ctx_switches), (1, 1));
//! reader.sets("feed", "2.0")?; // the component sees it at its next period
//! assert_eq!(input.get(), 2.0);
//! # Ok::<(), rtapi_hal::HalError>(())
//! ```

#![warn(missing_docs)]

mod builder;
mod error;
pub mod fifo;
mod hal;
mod image;
mod keys;
// Public only for this crate's corruption tests and for tools that decode segments byte by byte; the
// contract is `hal/LAYOUT.md`, these constants are its machine-readable copy. Not part of the API.
#[doc(hidden)]
pub mod layout;
pub mod name;
mod pin;
mod reader;
mod room;
mod segment;
mod seqlock;
mod signal;
mod stats;
mod thread;
mod value;

pub use builder::{HalBuilder, DEFAULT_MAX_SIZE};
pub use error::{HalError, ObjectKind, Result, WriteRefusal};
pub use fifo::{FifoClient, FifoError, FifoKind, OwnedFifo};
pub use hal::{Hal, ParamDecl, PinDecl, ThreadStateCell};
pub use image::{Capacity, ThreadRoom};
pub use keys::{ComponentKey, FunctionKey, ParamKey, PinKey, ThreadKey};
pub use name::{Instance, DEFAULT_INSTANCE, MAX_NAME_LEN};
pub use pin::{CellRef, Direction, In, Io, Out, Param, ParamAccess, Pin, PinDir, Probe, Writable};
pub use reader::{
    Access, ComponentInfo, FunctionInfo, HalReader, HalSnapshot, HeaderInfo, Located, ParamInfo,
    PinInfo, SegmentState, SignalInfo, TableUse, ThreadInfo, WriteOptions,
};
pub use segment::{instance_names, remove_stale, Permissions, Trust, TRUSTED_MODE_BITS};
pub use stats::{
    FunctionTimer, FunctionTiming, HistogramConfig, HistogramSnapshot, IoErrors, IoStats,
    Percentile, Percentiles, PeriodSample, RecentSpikes, Spike, StatsWriter, ThreadRusage,
    ThreadStatsSnapshot, MAX_BINS, RECENT_SPIKES, SPIKES_KEPT,
};
pub use thread::{ThreadConfig, ThreadState};
pub use value::{HalType, Value, ValueType};
