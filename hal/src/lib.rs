//! # rtapi-hal: the shared-memory HAL of rtapi
//!
//! Everything a running machine knows — pin values, params, how the threads are wired, and each real-time
//! thread's latency statistics — lives in one POSIX shared-memory segment, `/rtapi-<instance>`, so that
//! other processes (`rtapi show`, a GUI, a logger) can watch and tune it without ever slowing it down.
//!
//! - **Segment lifecycle** ([`HalBuilder::build`], [`Hal`]): created at exactly the registered size, owned
//!   under an `flock` that dies with the owner (a stale segment is reclaimed, a live one is a clear
//!   error naming its pid), unlinked on clean shutdown.
//! - **Object model**: components, pins, params, signals, functions and threads; every reference inside
//!   the segment is an offset, documented in `hal/LAYOUT.md`.
//! - **Typed handles** ([`Pin<In, f64>`](Pin), [`Param`]): `get`/`set` is one atomic instruction.
//! - **Thread stats** ([`StatsWriter`]): a single-writer seqlock the RT thread never waits on; latency
//!   sums in 128 bits; histogram with percentiles; a ring of the latest spikes.
//! - **Readers** ([`HalReader`]): validate every offset before following it; corrupt, truncated, foreign
//!   or newer segments give errors, never crashes; `setp`/`sets` follow HAL's rules. Only trusted files
//!   are opened ([`Trust`]: regular, owned by root or yourself, mode within 0640, never via a symlink),
//!   and the owner's liveness comes from its lock, so a dead owner's segment reads as dead.
//!
//! ```no_run
//! use rtapi_hal::{Access, HalBuilder, HalReader, In, Out, PeriodSample, ThreadConfig};
//!
//! // The owning process registers its structure, then builds the segment.
//! let mut b = HalBuilder::new("demo")?;
//! let comp = b.component("scale.0")?;
//! let input = b.pin::<In, f64>(comp, "scale.0.in")?;
//! let output = b.pin::<Out, f64>(comp, "scale.0.out")?;
//! b.function(comp, "scale.0.update")?;
//! let servo = b.thread(ThreadConfig::new("servo", 1_000_000))?;
//! b.addf("scale.0.update", "servo", None)?;
//! let hal = b.build()?;
//!
//! // The RT thread: typed pins and the stats writer, no lookups, no allocation.
//! let (input, output, stats) = (hal.pin(input), hal.pin(output), hal.stats_writer(servo)?);
//! output.set(2.0 * input.get());
//! stats.record(&PeriodSample { latency_ns: 3_000, interval_ns: 1_000_100, exec_ns: 800, ..Default::default() });
//!
//! // Any other process:
//! let reader = HalReader::open("demo", Access::ReadWrite)?;
//! reader.setp("scale.0.in", "1.5")?;
//! println!("{:?}", reader.thread_stats("servo")?.latency_max());
//! # Ok::<(), rtapi_hal::HalError>(())
//! ```

#![warn(missing_docs)]

mod builder;
mod error;
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
mod segment;
mod seqlock;
mod signal;
mod stats;
mod thread;
mod value;

pub use builder::{HalBuilder, DEFAULT_MAX_SIZE};
pub use error::{HalError, ObjectKind, Result, WriteRefusal};
pub use hal::{Hal, ThreadStateCell};
pub use keys::{ComponentKey, FunctionKey, ParamKey, PinKey, ThreadKey};
pub use name::{Instance, DEFAULT_INSTANCE, MAX_NAME_LEN};
pub use pin::{Direction, In, Io, Out, Param, ParamAccess, Pin, PinDir, Writable};
pub use reader::{
    Access, ComponentInfo, FunctionInfo, HalReader, HalSnapshot, HeaderInfo, ParamInfo, PinInfo,
    SegmentState, SignalInfo, ThreadInfo, WriteOptions,
};
pub use segment::{Permissions, Trust, TRUSTED_MODE_BITS};
pub use stats::{
    FunctionTiming, HistogramConfig, HistogramSnapshot, Percentile, Percentiles, PeriodSample,
    Spike, StatsWriter, ThreadRusage, ThreadStatsSnapshot, MAX_BINS, SPIKES_KEPT,
};
pub use thread::{ThreadConfig, ThreadState};
pub use value::{HalType, Value, ValueType};
