//! `rtapi watch NAME... [--interval 100ms] [--count N] [--instance NAME]`: live values, like halmeter.
//!
//! On a terminal one line is redrawn in place; otherwise (a pipe, a test) each sample is a line:
//! `t=0.300s pid.0.error=0.0012 pid.0.output=-3.5`. A NAME that is a thread's (and no pin's, param's
//! or signal's) watches the thread's own figures: `servo-thread.cycles=… .overruns=…
//! .latency.max_us=…`, and for a thread that runs I/O functions (a Mesa card's hm2 read/write)
//! `.io.last_us=… .io.max_us=… .io.errors=…` (see [`thread_figures`]).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use rtapi_hal::{Access, HalError};

use super::{instance, Failure};
use crate::rt::clock::Nanos;
use crate::rt::units::parse_duration;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Pins, params or signals to watch.
    #[arg(required = true)]
    names: Vec<String>,
    /// Time between samples.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    interval: Nanos,
    /// Stop after this many samples (default: until Ctrl-C or the instance stops).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    #[command(flatten)]
    target: instance::Target,
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    if args.interval.as_nanos() <= 0 {
        return Err(Failure::usage("--interval must be positive, e.g. 100ms"));
    }
    if args.count == Some(0) {
        return Err(Failure::usage(
            "--count must be at least 1; omit it to watch until Ctrl-C",
        ));
    }
    let reader = instance::open(&args.target, Access::ReadOnly)?;
    if !reader.owner_alive() {
        return Err(Failure::runtime(format!(
            "instance '{}' is {}: nothing to watch",
            args.target.instance,
            instance::dead_state(reader.header().owner_pid)
        )));
    }
    // Unknown names are a usage error before the first sample, not a line of errors.
    let mut threads = Vec::new();
    for n in &args.names {
        match reader.get(n) {
            Ok(_) => threads.push(false),
            Err(_) if reader.thread_stats(n).is_ok() => threads.push(true),
            Err(e) => return Err(instance::failure_in(&reader, e)),
        }
    }
    let interval = Duration::from_nanos(args.interval.as_nanos() as u64);
    let tty = std::io::stdout().is_terminal();
    let start = Instant::now();
    let mut out = std::io::stdout().lock();
    let mut n = 0u64;
    loop {
        let mut line = format!("t={:.3}s", start.elapsed().as_secs_f64());
        for (name, &thread) in args.names.iter().zip(&threads) {
            if thread {
                let s = reader
                    .thread_stats(name)
                    .map_err(|e: HalError| Failure::runtime(e.to_string()))?;
                line.push_str(&thread_figures(name, &s));
                continue;
            }
            let v = reader
                .get(name)
                .map_err(|e: HalError| Failure::runtime(e.to_string()))?;
            line.push_str(&format!(" {name}={}", crate::render::value_text(v)));
        }
        let written = if tty {
            write!(out, "\r\x1b[K{line}").and_then(|_| out.flush())
        } else {
            writeln!(out, "{line}")
        };
        match written {
            Ok(()) => {}
            // The reader went away (a closed pipe): nothing left to do.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(Failure::runtime(format!("writing to standard output: {e}"))),
        }
        n += 1;
        if args.count.is_some_and(|c| n >= c) {
            break;
        }
        if !reader.owner_alive() {
            if tty {
                let _ = writeln!(out);
            }
            return Err(Failure::runtime(format!(
                "instance '{}' stopped (owner pid {} gone): the last values are above; why it \
                 ended is in its owner's output (the run's summary, or a crash report); watch it \
                 again once it runs",
                args.target.instance,
                reader.header().owner_pid
            )));
        }
        std::thread::sleep(interval);
    }
    if tty {
        let _ = writeln!(out);
    }
    Ok(())
}

/// A thread's figures as `name=value` pairs, each after a space: cycles, overruns, the largest
/// wake latency (µs); and, once the thread ran I/O functions, the last and largest I/O time of a
/// period (µs) and the errors the drivers counted (hm2_eth's packet errors: replies late or lost,
/// writes unconfirmed; absent from a segment older than layout 2.3).
fn thread_figures(name: &str, s: &rtapi_hal::ThreadStatsSnapshot) -> String {
    use crate::rt::units::us;
    let mut line = format!(
        " {name}.cycles={} {name}.overruns={} {name}.latency.max_us={}",
        s.cycles,
        s.overruns,
        s.latency_max()
            .map_or_else(|| "-".into(), |ns| us(ns as f64))
    );
    if let Some(io) = s.io.filter(|io| io.periods > 0) {
        line.push_str(&format!(
            " {name}.io.last_us={} {name}.io.max_us={}",
            us(io.last_ns as f64),
            us(io.max_ns as f64)
        ));
        if let Some(e) = io.errors {
            line.push_str(&format!(" {name}.io.errors={}", e.count));
        }
    }
    line
}
