//! # rtapi — a real-time thread runtime for CNC motion control on Linux
//!
//! LinuxCNC's user-space RTAPI and HAL idea, with cyclictest's measurement rigour: periodic threads
//! on an absolute timeline under SCHED_FIFO, a shared-memory HAL of components, pins, params,
//! signals, functions and threads that other processes read safely, and per-period latency
//! statistics that say whether a PC can step motors in software — and why not.
//!
//! Start here:
//!
//! - [`runtime`]: declare threads and functions, [`start`](runtime::Runtime::start), wait, stop. The
//!   cycle loop, the watchdog and the stop path live here.
//! - [`rtapi_hal`] (the `hal/` crate): the segment, typed pins, the reader other processes use.
//! - [`detect`] and [`flavor`]: what this machine is (PREEMPT_RT with its evidence, privileges,
//!   throttling, isolated CPUs) and which flavor follows: `rt-preempt`, `posix` or `sim`.
//! - [`components`] and [`config`]: LinuxCNC-style components and machine configs (TOML + `.hal`).
//! - [`latency`]: the commissioning run behind `rtapi latency-test`.
//! - [`instance`]: a running instance — its owner's session over the started runtime
//!   ([`instance::LiveSession`]: halcmd commands change it live), the one start sequence, opening a
//!   segment under the trust rule, and the control socket other programs talk to it through.
//! - [`trace`]: spike attribution from the kernel's trace (a tracefs instance, the event parser,
//!   what held the CPU in a window); not yet used by latency-test.
//! - [`tune`]: `rtapi tune`, which applies detect's run-time fixes to the RT CPUs with a revert file,
//!   and prints the boot parameters for the rest.
//! - [`mesa`]: a simulated Mesa HostMot2 Ethernet card (`rtapi mesa-sim`) that LinuxCNC's own
//!   `hm2_eth` drives: rehearse a Mesa configuration before the card arrives.
//! - [`rt`]: the OS primitives underneath (clock, timer drivers, scheduling, hardening, signals).
//!
//! The design — layers, the hot path, data flow, where each rule lives — is in
//! `docs/ARCHITECTURE.md`.
//!
//! ## Example
//!
//! A 1 ms thread counting its periods into a HAL pin, for a tenth of a second. It runs anywhere: the
//! `sim` flavor needs no privileges (with them, leave `flavor` out and detection picks SCHED_FIFO).
//!
//! ```
//! use rtapi::rt::clock::Nanos;
//! use rtapi::runtime::function::Cycle;
//! use rtapi::runtime::{Runtime, RuntimeOptions, ThreadSpec};
//! use rtapi_hal::Out;
//!
//! let mut rt = Runtime::configure(RuntimeOptions {
//!     instance: format!("doc-{}", std::process::id()),
//!     flavor: Some("sim".into()),
//!     lock_memory: false,
//!     dma_latency: false,
//!     ..RuntimeOptions::default()
//! })?;
//! rt.thread(ThreadSpec::new("servo", Nanos::from_millis(1)))?;
//! let comp = rt.hal().component("counter")?;
//! let count = rt.hal().pin::<Out, u64>(comp, "counter.count")?;
//! rt.function(comp, "counter.update", Box::new(move |hal: &rtapi_hal::Hal| {
//!     let count = hal.pin(count);
//!     // Runs every period on the RT thread: a pin read and write, nothing else.
//!     Box::new(move |_: &Cycle| count.set(count.get() + 1))
//! }))?;
//! rt.addf("counter.update", "servo", None)?;
//!
//! let running = rt.start()?;
//! running.wait(Some(std::time::Duration::from_millis(100)));
//! let counted = running.hal().reader()?.get("counter.count")?;
//! let summary = running.stop();
//! let stats = summary.threads[0].stats.unwrap();
//! assert!(stats.cycles > 0);
//! println!("{counted} counted; {summary}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod cli;
pub mod components;
pub mod config;
pub mod detect;
pub mod flavor;
pub mod instance;
pub mod latency;
pub mod master;
pub mod mesa;
pub(crate) mod plot;
pub mod render;
pub mod rt;
pub mod runtime;
pub(crate) mod suggest;
pub mod trace;
pub mod tune;

/// What the benches measure below the public API (the hot path's parts, the HAL health
/// declarations). Not an API: it changes with the code it measures.
#[doc(hidden)]
pub mod bench_internals {
    pub use crate::rt::msg::{channel as msg_channel, RtEvent};
    pub use crate::runtime::health::{declare_function, declare_thread, owner as health_owner};
    pub use crate::runtime::runlist::RunListCell;
    pub use crate::runtime::slots::{FunctionSlot, Slots};
    pub use crate::runtime::thread::Cycler;
}
