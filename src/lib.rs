//! # rtapi — a real-time thread runtime for CNC motion control on Linux
//!
//! - **Detection** of the kernel and machine ([`detect`]): PREEMPT_RT with its evidence (mainline 6.12+
//!   included), the privileges this process really has, RT throttling and cgroup budgets, isolated CPUs.
//! - **Flavors** ([`flavor`]): `rt-preempt`, `posix` (SCHED_FIFO on a vanilla kernel) or `sim`, chosen
//!   from the detection or forced with `--flavor` / `RTAPI_FLAVOR`.
//!
//! ```no_run
//! use rtapi::detect::SystemReport;
//! use rtapi::flavor;
//!
//! let report = SystemReport::detect_live();
//! let chosen = flavor::select(&report, None, std::env::var("RTAPI_FLAVOR").ok().as_deref())?;
//! println!("flavor {} (RT CPU {:?})", chosen.flavor, report.cpus.rt_cpu);
//! # Ok::<(), rtapi::flavor::FlavorError>(())
//! ```

pub mod cli;
pub mod components;
pub mod config;
pub mod detect;
pub mod flavor;
pub mod latency;
pub mod render;
pub mod rt;
pub mod units;
