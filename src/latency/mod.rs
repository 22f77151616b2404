//! `latency-test`: the commissioning mode. Runs the real runtime with empty base and servo threads,
//! optionally loads the machine, and ends with a report, a histogram, a plot and a verdict.

pub(crate) mod board;
pub(crate) mod compare;
pub(crate) mod cpu_clock;
pub(crate) mod explain;
pub mod histogram;
pub(crate) mod load;
pub(crate) mod monitor;
pub(crate) mod output;
pub(crate) mod plot;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod survey;
pub(crate) mod verdict;

use crate::runtime::RuntimeError;
use std::fmt;

/// Why a latency-test or compare-timers run could not produce its report.
#[derive(Debug)]
pub(crate) enum Error {
    /// The runtime could not be configured or started.
    Runtime(RuntimeError),
    /// The load cannot run (bad `stress-ng` arguments, no private directory for `io`): said before
    /// measuring.
    Load(load::LoadError),
    /// A system call the run needs before any thread exists failed.
    Setup(crate::rt::SysError),
    /// The segment could not be read back.
    Segment(rtapi_hal::HalError),
    /// The RT threads ended on their own (a timer failure, logged above).
    ThreadsEnded,
    /// A measured thread recorded no statistics.
    NoStatistics(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Runtime(e) => e.fmt(f),
            Error::Load(e) => e.fmt(f),
            Error::Setup(e) => e.fmt(f),
            Error::Segment(e) => e.fmt(f),
            Error::ThreadsEnded => {
                f.write_str("the RT threads stopped on their own (see the log above)")
            }
            Error::NoStatistics(what) => write!(f, "{what}: no statistics were recorded"),
        }
    }
}

impl std::error::Error for Error {}

impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Self {
        Error::Runtime(e)
    }
}
