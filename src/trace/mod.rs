//! Spike attribution from the kernel's own trace (issue 11, part 1): what held an RT CPU between a
//! deadline and a late wake.
//!
//! - [`TraceSession`]: a tracefs instance of our own (`instances/rtapi-<pid>`, removed on drop;
//!   the global buffer is never touched), trace_clock `mono` so timestamps compare with
//!   [`crate::rt::clock::now`], tracing only the RT CPUs into an overwriting ring, with the
//!   scheduler, IRQ, softirq, system-vector, hrtimer and workqueue events, the wake path's in a
//!   second instance (`-wake`); once the RT threads' tids are known, their own periodic wakes are
//!   dropped in the kernel ([`TraceSession::skip_own_wakes`]).
//! - [`parse`]: the text format of `per_cpu/cpuN/trace` into typed [`Event`]s; garbage lines are
//!   skipped and counted.
//! - [`attribute()`]: the events of one window → [`Cause`]s with durations, longest first: IRQ n
//!   (name), softirq (vector), a system vector, another task or a kernel thread running before the RT
//!   thread was switched in, the wakeup timer expiring late, or nothing visible → outside the kernel
//!   (hypervisor, SMI, firmware).
//!
//! - [`network`]: a reply's network path — device interrupts, the `NET_RX`/`NET_TX` softirqs and
//!   `ksoftirqd` on every CPU, from a second, filtered session
//!   ([`TraceSession::start_network`]) — summed per CPU over a window, the busiest named.
//!
//! Setup and reading do file I/O and allocate: this is for after a run (or between spikes), never
//! on the RT path.

pub mod attribute;
pub mod network;
pub mod parse;
pub mod raw;
pub mod session;

pub use attribute::{attribute, Cause, CauseKind};
pub use parse::{parse_text, Event, EventKind, TaskRef};
pub use raw::{Formats, RawReader};
pub use session::{
    tracefs_root, Coverage, CpuReader, MergedReader, PipeReader, Stretches, TraceError,
    TraceSession, Window,
};
