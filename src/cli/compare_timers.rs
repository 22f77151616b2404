//! `rtapi compare-timers [--period 1ms] [--duration 5s] [--cpu-clock-periods 100us,1ms,10ms]
//! [--cpu-clock-duration 1s] [--json FILE|-]`

use super::{out, Failure};
use crate::latency::{compare, output};
use crate::rt::clock::Nanos;
use crate::rt::units::{parse_duration, parse_period};
use std::time::Duration;

#[derive(clap::Args)]
pub(super) struct Args {
    /// The period every mechanism is asked for.
    #[arg(long, default_value = "1ms", value_parser = parse_period)]
    period: Nanos,
    /// How long each mechanism runs.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Nanos,
    /// The periods of the CPU-clock timers (ITIMER_PROF, ITIMER_VIRTUAL, timer_create on the CPU
    /// clocks), each counted for a spinning thread: they count CPU time, never wall time.
    #[arg(
        long,
        value_name = "P,P,…",
        default_value = "100us,1ms,10ms",
        value_delimiter = ',',
        value_parser = parse_period
    )]
    cpu_clock_periods: Vec<Nanos>,
    /// How long the thread spins at each CPU-clock period (every timer armed at once); 0 leaves the
    /// CPU-clock timers out.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    cpu_clock_duration: Nanos,
    /// Write the results as JSON to FILE (`-` = standard output).
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,
    /// Force a flavor (rt-preempt, posix, sim).
    #[arg(long, value_name = "F")]
    flavor: Option<String>,
    /// HAL instance used while measuring.
    #[arg(long, default_value = "compare-timers")]
    instance: String,
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    if !args.period.is_positive() {
        return Err(Failure::usage("--period must be positive, e.g. 1ms"));
    }
    let duration = Duration::try_from(args.duration)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Failure::usage("--duration must be positive, e.g. 5s"))?;
    if args.cpu_clock_duration.as_nanos() < 0 {
        return Err(Failure::usage(
            "--cpu-clock-duration must be positive, e.g. 1s, or 0 to leave the CPU-clock timers out",
        ));
    }
    if let Some(p) = args
        .cpu_clock_periods
        .iter()
        .find(|p| args.cpu_clock_duration.is_positive() && **p > args.cpu_clock_duration)
    {
        return Err(Failure::usage(format!(
            "--cpu-clock-periods: {p} is longer than --cpu-clock-duration {}: not one period would be counted",
            args.cpu_clock_duration
        )));
    }
    let cpu_clock = Duration::try_from(args.cpu_clock_duration)
        .ok()
        .filter(|d| !d.is_zero() && !args.cpu_clock_periods.is_empty())
        .map(|duration| compare::CpuClockPlan {
            periods: args.cpu_clock_periods.clone(),
            duration,
        });
    // The output file must be writable before anything runs; it is written atomically at the end.
    let json_file = args
        .json
        .as_deref()
        .filter(|j| *j != "-")
        .map(std::path::PathBuf::from);
    if let Some(path) = &json_file {
        output::check_writable("--json", path).map_err(Failure::usage)?;
    }
    let result = compare::run(
        args.period,
        duration,
        cpu_clock.as_ref(),
        args.flavor,
        &args.instance,
    )
    .map_err(Failure::from)?;
    let json =
        serde_json::to_string_pretty(&result).map_err(|e| Failure::runtime(e.to_string()))?;
    if args.json.as_deref() == Some("-") {
        // The measurement is over and its segment gone: a closed pipe only ends the printing.
        out::println(&json)?;
        out::eprint(&result.render_text());
        return Ok(());
    }
    // The table is printed even when the file cannot be written.
    let written = json_file
        .as_deref()
        .map(|path| output::write_text("--json", path, &json));
    let printed = out::print(&result.render_text());
    match written {
        Some(Err(e)) => Err(Failure::runtime(format!(
            "the measurement is complete but its output could not be written: {e}"
        ))),
        _ => printed,
    }
}
