//! `rtapi latency-test`: the commissioning run (see `crate::latency`).

use super::{exit, out, Failure};
use crate::latency::report::Report;
use crate::latency::run::{self, TestConfig};
use crate::latency::{board, histogram, load, output, plot};
use crate::rt::clock::Nanos;
use crate::rt::units::{parse_duration, parse_period, parse_period_or_off};
use crate::rt::wake::{TimerKind, WakeMode};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Base thread period (software stepping); 0 = servo thread only.
    #[arg(long, default_value = "25us", value_parser = parse_period_or_off)]
    base: Nanos,
    /// Servo thread period.
    #[arg(long, default_value = "1ms", value_parser = parse_period)]
    servo: Nanos,
    /// How long to measure (per CPU with --all-cpus; Ctrl-C ends early and still reports).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Nanos,
    /// CPU for both threads, or BASE,SERVO (default: the RT CPU detection chooses).
    #[arg(long, value_name = "LIST")]
    cpu: Option<String>,
    /// Survey every online CPU, one at a time, and recommend one for the RT threads.
    ///
    /// The same test runs pinned to each online CPU in turn, never to all at once: the RT threads
    /// will live on one CPU, and measuring every CPU together would leave nothing for the
    /// housekeeping, the load and the display, and let the measuring threads disturb each other. So
    /// --duration is per CPU. Around each run that CPU's column of /proc/interrupts and
    /// /proc/softirqs is read: the table shows the interrupts each CPU took during its own run.
    /// Recommended: the lowest worst-case latency (within max(5 µs, 10 %) of the best counts as
    /// equal), then the lowest p99.9, then the fewest interrupts per second that cannot be moved off
    /// the CPU, then the highest CPU number. Not with --cpu, --histogram or --plot; --fail-above
    /// gates the recommended CPU; Ctrl-C ends the survey and reports the CPUs measured so far.
    #[arg(long)]
    all_cpus: bool,
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
    /// Print only the final report (and errors: warnings are not logged unless RUST_LOG asks).
    #[arg(long)]
    pub(super) quiet: bool,
    /// HAL instance holding the threads' stats (`rtapi show thread --instance …` watches it).
    #[arg(long, default_value = rtapi_hal::DEFAULT_INSTANCE)]
    instance: String,
    /// Do not hold /dev/cpu_dma_latency at 0.
    #[arg(long)]
    no_dma_latency: bool,
    /// Trace the RT CPUs (tracefs, root) and name what caused every spike at or over THRESHOLD
    /// (default 50us, where software stepping ends): an IRQ, a softirq, another task, a kernel
    /// thread, a late timer, or nothing visible (hypervisor/SMI); the causes table says what to do.
    /// Without tracefs or root, the interrupt counters around each spike are shown instead.
    #[arg(long, value_name = "THRESHOLD", num_args = 0..=1, require_equals = true,
          default_missing_value = "50us", value_parser = parse_duration)]
    trace: Option<Nanos>,
    /// With --trace: leave the events of the RT threads' wake path (switches, wakeups, timer
    /// expiries) off until a spike is read, and on until HOLD (default 10s) passes without one;
    /// 0: never on. A live scheduler tracepoint costs the RT threads' wake a few per cent even
    /// when it records nothing; the first spike of a burst is then named from interrupts,
    /// softirqs, IPIs and work items alone. For a trace left on for hours.
    #[arg(long, value_name = "HOLD", num_args = 0..=1, require_equals = true,
          default_missing_value = "10s", value_parser = parse_duration, requires = "trace")]
    trace_light: Option<Nanos>,
    /// Also measure a Mesa Ethernet card (hm2_eth) at ADDR (IPv4, port 27181 unless given): each
    /// servo period the servo thread sends it one LBP16 read request the size of hm2_eth's
    /// per-period read and spins on a non-blocking recv until the reply or the budget, as hm2_eth
    /// does. ONLY READS: the card may be wired to a machine, so nothing is ever written to it (the
    /// request reads its IDROM, an address pointer and its packet counter). Replies later than the
    /// budget are late (LinuxCNC's `error finishing read`), those that never come are lost. The card
    /// must be on a network of this PC's own (no gateway); 127.0.0.1 is allowed to rehearse against
    /// `rtapi mesa-sim --listen 127.0.0.1`. Stop LinuxCNC first: one host at a time.
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_board)]
    board: Option<SocketAddrV4>,
    /// With --board: a reply later than this after its request is late (hm2_eth's
    /// packet-read-timeout; default 80 % of the servo period, hm2_eth's default).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    budget: Option<Nanos>,
}

/// `ADDR` or `ADDR:PORT`, IPv4 only.
fn parse_board(text: &str) -> Result<SocketAddrV4, String> {
    if let Ok(ip) = text.parse::<Ipv4Addr>() {
        return Ok(SocketAddrV4::new(ip, crate::mesa::lbp16::UDP_PORT));
    }
    if let Ok(sa) = text.parse::<SocketAddrV4>() {
        if sa.port() == 0 {
            return Err("port 0 is no card's port: give ADDR (port 27181) or ADDR:PORT".into());
        }
        return Ok(sa);
    }
    let why = if text.parse::<std::net::SocketAddr>().is_ok() || text.contains("::") {
        "an IPv6 address: Mesa cards and hm2_eth speak IPv4 only"
    } else {
        "not an IPv4 address (names are not looked up)"
    };
    Err(format!(
        "{why}; give the card's ADDR or ADDR:PORT, e.g. --board 192.168.1.121 or --board 10.10.10.10:27181"
    ))
}

/// `--board`: the address checked against the routing table (refused: exit 2), then the card
/// probed (no card: exit 1); before anything runs.
fn find_board(args: &Args, quiet: bool) -> Result<Option<run::BoardRun>, Failure> {
    let Some(addr) = args.board else {
        if args.budget.is_some() {
            return Err(Failure::usage(
                "--budget is the round-trip budget of --board: give --board ADDR too",
            ));
        }
        return Ok(None);
    };
    if args.all_cpus {
        return Err(Failure::usage(
            "--board measures one CPU's servo thread: not with --all-cpus (survey the CPUs first, then run --board with --cpu)",
        ));
    }
    // hm2_eth's default packet-read-timeout: 80 % of the period.
    let budget = args
        .budget
        .unwrap_or(Nanos::from_nanos(args.servo.as_nanos() / 5 * 4));
    if !budget.is_positive() || budget >= args.servo {
        return Err(Failure::usage(format!(
            "--budget {budget}: the reply must come within the servo period ({}): give less, e.g. hm2_eth's packet-read-timeout",
            args.servo
        )));
    }
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let route =
        board::route(*addr.ip(), &routes).map_err(|r| Failure::usage(r.message(*addr.ip())))?;
    let (found, sock) = board::probe(addr, route).map_err(|e| Failure::runtime(e.message(addr)))?;
    if !quiet {
        out::eprint(&format!(
            "rtapi latency-test: a {} answers at {addr}{}\n",
            found.name,
            match &found.route {
                board::Route::Direct { iface } => format!(" (on {iface})"),
                board::Route::Loopback =>
                    " (loopback: a simulator on this PC; no NIC is measured)".into(),
            }
        ));
    }
    Ok(Some(run::BoardRun {
        addr,
        found,
        sock,
        budget,
    }))
}

fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    crate::rt::cpulist::parse(s)
        .filter(|c| !c.is_empty() && c.len() <= 2)
        .ok_or_else(|| {
            format!("invalid --cpu '{s}': give one CPU (e.g. 1) or BASE,SERVO (e.g. 2,3)")
        })
}

/// The output files of a run, checked before it starts.
struct Outputs {
    json: Option<PathBuf>,
    json_to_stdout: bool,
    histogram: Option<PathBuf>,
    plot: Option<PathBuf>,
}

impl Outputs {
    /// Every output path must be writable before anything runs (exit 2 otherwise); two flags may not
    /// name the same file.
    fn check(args: &Args) -> Result<Outputs, Failure> {
        let outputs = Outputs {
            json: args
                .json
                .as_deref()
                .filter(|j| *j != "-")
                .map(PathBuf::from),
            json_to_stdout: args.json.as_deref() == Some("-"),
            histogram: args.histogram.clone(),
            plot: args.plot.clone(),
        };
        let files = outputs.files();
        for (i, (flag, path)) in files.iter().enumerate() {
            output::check_writable(flag, path).map_err(Failure::usage)?;
            if let Some((other, _)) = files[..i].iter().find(|(_, p)| p == path) {
                return Err(Failure::usage(format!(
                    "{flag} {}: the same file as {other}",
                    path.display()
                )));
            }
        }
        Ok(outputs)
    }

    fn files(&self) -> Vec<(&'static str, &PathBuf)> {
        [
            ("--json", self.json.as_ref()),
            ("--histogram", self.histogram.as_ref()),
            ("--plot", self.plot.as_ref()),
        ]
        .into_iter()
        .filter_map(|(f, p)| p.map(|p| (f, p)))
        .collect()
    }

    /// Writes every file (each atomically); returns the errors of those that failed.
    fn write(&self, report: &Report) -> Vec<String> {
        let mut errors = Vec::new();
        if let Some(path) = &self.json {
            errors.extend(output::write_text("--json", path, &report.to_json()).err());
        }
        if let Some(path) = &self.histogram {
            errors.extend(
                output::write_text("--histogram", path, &histogram::render(&with_board(report)))
                    .err(),
            );
        }
        if let Some(path) = &self.plot {
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
            errors.extend(plot::write_svg(path, &title, &with_board(report)).err());
        }
        errors
    }
}

/// The threads, and with `--board` the round trips as one more column (`board-rtt`).
fn with_board(report: &Report) -> Vec<crate::latency::report::ThreadResult> {
    let mut t = report.threads.clone();
    t.extend(report.board.as_ref().map(|b| b.as_thread()));
    t
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
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
    if args.trace.is_some_and(|t| !t.is_positive()) {
        return Err(Failure::usage(
            "--trace=THRESHOLD must be positive (every period would be a spike), e.g. --trace=50us",
        ));
    }
    let duration = Duration::try_from(args.duration)
        .map_err(|_| Failure::usage("--duration must be positive"))?;
    if args.all_cpus {
        super::latency_survey::check_args(
            args.cpu.is_some(),
            args.histogram.is_some(),
            args.plot.is_some(),
        )?;
    }
    let outputs = Outputs::check(&args)?;
    let board = find_board(&args, args.quiet)?;
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
            .map_err(|e| Failure::usage(e.to_string()))?
            .unwrap_or_default(),
        instance: args.instance,
        dma_latency: !args.no_dma_latency,
        quiet: args.quiet,
        trace: args.trace,
        trace_light: args.trace_light,
        live_to_stderr: outputs.json_to_stdout,
        ..TestConfig::default()
    };
    if args.all_cpus {
        return super::latency_survey::run(
            &cfg,
            outputs.json.as_deref(),
            outputs.json_to_stdout,
            args.fail_above,
        );
    }
    let report = run::run(&cfg, board).map_err(Failure::from)?;

    // Everything is written and the report printed whatever fails; the exit code says what did.
    let errors = outputs.write(&report);
    // The run is over and cleaned up; a closed standard output only ends the printing.
    let printed = if outputs.json_to_stdout {
        let p = out::println(&report.to_json());
        out::eprint(&report.render_text());
        p
    } else {
        out::print(&report.render_text())
    };

    // Precedence: an output that could not be written (1) over --fail-above (3): exit 3 promises a
    // complete record of a run that failed the gate.
    if !errors.is_empty() {
        return Err(Failure::runtime(format!(
            "the measurement is complete but {} output(s) could not be written:\n  {}",
            errors.len(),
            errors.join("\n  ")
        )));
    }
    printed?;
    if let Some(limit) = args.fail_above {
        if !report.verdict.evidence {
            return Err(Failure {
                code: exit::FAIL_ABOVE,
                message: format!(
                    "--fail-above {limit} cannot pass without evidence: {}",
                    report.verdict.problems.join("; ")
                ),
            });
        }
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
