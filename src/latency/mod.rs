//! `latency-test`: the commissioning mode. Runs the real runtime with empty base and servo threads,
//! optionally loads the machine, and ends with a report, a histogram, a plot and a verdict.

pub mod compare;
pub mod histogram;
pub mod load;
pub mod monitor;
pub mod output;
pub mod plot;
pub mod report;
pub mod run;
pub mod verdict;
