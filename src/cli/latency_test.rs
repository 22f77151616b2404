//! `rtapi latency-test`: the commissioning run (see `crate::latency`).

use super::{exit, Failure};
use crate::latency::run::{self, TestConfig};
use crate::latency::{histogram, load, plot};
use crate::rt::clock::Nanos;
use crate::rt::wake::{TimerKind, WakeMode};
use crate::units::{parse_duration, parse_period, parse_period_or_off};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Base thread period (software stepping); 0 = servo thread only.
    #[arg(long, default_value = "25us", value_parser = parse_period_or_off)]
    base: Nanos,
    /// Servo thread period.
    #[arg(long, default_value = "1ms", value_parser = parse_period)]
    servo: Nanos,
    /// How long to measure (Ctrl-C ends early and still reports).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Nanos,
    /// CPU for both threads, or BASE,SERVO (default: the RT CPU detection chooses).
    #[arg(long, value_name = "LIST")]
    cpu: Option<String>,
    /// Timer driver: nanosleep, posix-timer, timerfd.
    #[arg(long, default_value = "nanosleep")]
    timer: TimerKind,
    /// Wake mode: sleep, hybrid[:MARGIN], spin.
    #[arg(long, default_value = "sleep")]
    wake: WakeMode,
    /// Force a flavor (rt-preempt, posix, sim); overrides RTAPI_FLAVOR.
    #[arg(long, value_name = "F")]
    flavor: Option<String>,
    /// Load the machine after warm-up: any of cpu,mem,io, or stress-ng:ARGS.
    #[arg(long, value_name = "SPEC")]
    load: Option<String>,
    /// Write the JSON report to FILE (`-` = standard output).
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,
    /// Write the latency histogram in cyclictest's -h format.
    #[arg(long, value_name = "FILE")]
    histogram: Option<PathBuf>,
    /// Write an SVG plot (histogram per thread, max latency per second).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Exit with code 3 when any thread's max latency exceeds this.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    fail_above: Option<Nanos>,
    /// Print only the final report.
    #[arg(long)]
    quiet: bool,
    /// HAL instance holding the threads' stats (`rtapi show thread --instance …` watches it).
    #[arg(long, default_value = rtapi_hal::DEFAULT_INSTANCE)]
    instance: String,
    /// Do not hold /dev/cpu_dma_latency at 0.
    #[arg(long)]
    no_dma_latency: bool,
}

fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    crate::detect::cpulist::parse(s)
        .filter(|c| !c.is_empty() && c.len() <= 2)
        .ok_or_else(|| {
            format!("invalid --cpu '{s}': give one CPU (e.g. 1) or BASE,SERVO (e.g. 2,3)")
        })
}

pub fn run(args: Args) -> Result<(), Failure> {
    if !args.servo.is_positive() {
        return Err(Failure::usage(
            "--servo must be a positive period, e.g. 1ms",
        ));
    }
    if args.timer.is_comparison_only() {
        return Err(Failure::usage(format!(
            "--timer {}: use rtapi compare-timers to see this mechanism; latency-test takes nanosleep, posix-timer or timerfd",
            args.timer
        )));
    }
    let duration = Duration::try_from(args.duration)
        .map_err(|_| Failure::usage("--duration must be positive"))?;
    let cfg = TestConfig {
        base: args.base,
        servo: args.servo,
        duration,
        cpus: args
            .cpu
            .as_deref()
            .map(parse_cpus)
            .transpose()
            .map_err(Failure::usage)?
            .unwrap_or_default(),
        timer: args.timer,
        wake: args.wake,
        flavor: args.flavor,
        load: args
            .load
            .as_deref()
            .map(load::parse)
            .transpose()
            .map_err(Failure::usage)?
            .unwrap_or_default(),
        instance: args.instance,
        dma_latency: !args.no_dma_latency,
        quiet: args.quiet,
        ..TestConfig::default()
    };
    let report = run::run(&cfg).map_err(|e| Failure {
        code: e.exit_code(),
        message: e.to_string(),
    })?;

    let write = |path: &std::path::Path, text: &str| {
        std::fs::write(path, text)
            .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))
    };
    let json_to_stdout = args.json.as_deref() == Some("-");
    match args.json.as_deref() {
        Some("-") => println!("{}", report.to_json()),
        Some(file) => write(file.as_ref(), &report.to_json())?,
        None => {}
    }
    if let Some(path) = &args.histogram {
        write(path, &histogram::render(&report.threads))?;
    }
    if let Some(path) = &args.plot {
        let title = format!(
            "rtapi latency-test — {} ({}), flavor {}, load {}",
            report.system.kernel,
            report.system.preemption.unwrap_or("?"),
            report.system.flavor,
            if report.settings.load.is_empty() {
                "none".to_string()
            } else {
                report.settings.load.join(",")
            }
        );
        plot::write_svg(path, &title, &report.threads).map_err(Failure::runtime)?;
    }
    if json_to_stdout {
        eprint!("{}", report.render_text());
    } else {
        print!("{}", report.render_text());
    }

    if let Some(limit) = args.fail_above {
        let worst = report
            .threads
            .iter()
            .map(|t| t.latency_ns.max)
            .max()
            .unwrap_or(0);
        if worst as i64 > limit.as_nanos() {
            return Err(Failure {
                code: exit::FAIL_ABOVE,
                message: format!(
                    "max latency {:.1} µs exceeds --fail-above {limit}",
                    worst as f64 / 1000.0
                ),
            });
        }
    }
    Ok(())
}
