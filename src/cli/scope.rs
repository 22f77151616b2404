//! `rtapi scope`: a triggered capture of up to 16 pins or signals of a running instance, one sample per
//! period of a chosen thread, written as CSV, JSON and an SVG (like halscope's single shot).
//!
//! It attaches through the instance's control socket (the same halcmd commands a person would type):
//! `loadrt scope_sampler names=scope-PID cfg=… depth=…`, the channels linked to its pins (a pin's own
//! signal, or a new `scope-PID-M` signal for an unlinked pin), the thread's `<thread>.missed` and
//! `<thread>.faults` pins as two hidden last channels (so every sample gets its period number, and an
//! overrun or a function fault can trigger), and
//! `addf scope-PID THREAD` last in the thread, so it samples what the period computed. It reads the
//! FIFO, keeps the pre-trigger share (saying `rtapi scope: ready: …` on stderr once it is full: the
//! trigger can fire from then on), waits for the trigger, takes the rest, and detaches again —
//! also on Ctrl-C, on a timeout, or on an error. One scope at a time per instance.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rtapi_hal::fifo::FifoClient;
use rtapi_hal::{Access, HalReader, Trust, Value, ValueType};

use super::instance::{self, Target};
use super::Failure;
use crate::instance::control::{ControlClient, Reply};
use crate::rt::units::parse_duration;

/// The most channels a scope takes.
pub(super) const MAX_CHANNELS: usize = 16;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    target: Target,
    /// The thread whose periods are sampled.
    #[arg(long, default_value = "servo")]
    thread: String,
    /// Pins or signals to capture (up to 16), e.g. pid.0.command pid.0.error.
    #[arg(required = true, num_args = 1..=MAX_CHANNELS)]
    channels: Vec<String>,
    /// When to capture: rise:CHANNEL[:LEVEL], fall:CHANNEL[:LEVEL], above:CHANNEL:LEVEL,
    /// below:CHANNEL:LEVEL, overrun (the thread missed a deadline), fault (a function of the thread
    /// faulted), manual (when a line — Enter — comes on standard input), or now (at once).
    #[arg(long, default_value = "now")]
    trigger: String,
    /// The share of the capture before the trigger, in percent.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u8).range(0..=100))]
    pre: u8,
    /// Periods to capture in all.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
    length: u32,
    /// Give up waiting for the trigger after this long (e.g. 30s).
    #[arg(long, default_value = "60s")]
    timeout: String,
    /// Where to write PREFIX.csv, PREFIX.json and PREFIX.svg.
    #[arg(long, value_name = "PREFIX")]
    out: PathBuf,
    /// Also print a preview on the terminal: one line per channel over the capture, the trigger
    /// marked, with each channel's range.
    #[arg(long)]
    preview: bool,
}

/// What starts the capture.
#[derive(Debug, Clone, PartialEq)]
enum Trigger {
    Now,
    Manual,
    Overrun,
    Fault,
    Rise(usize, f64),
    Fall(usize, f64),
    Above(usize, f64),
    Below(usize, f64),
}

/// The values one channel took: lowest, highest, how many, how many were NaN.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Range {
    low: f64,
    high: f64,
    n: u64,
    nan: u64,
}

impl Range {
    fn add(&mut self, v: f64) {
        if v.is_nan() {
            self.nan += 1;
            return;
        }
        if self.n == self.nan {
            (self.low, self.high) = (v, v);
        } else {
            self.low = self.low.min(v);
            self.high = self.high.max(v);
        }
        self.n += 1;
    }
}

impl Trigger {
    /// The channel a level trigger watches.
    fn channel(&self) -> Option<usize> {
        match *self {
            Trigger::Rise(c, _)
            | Trigger::Fall(c, _)
            | Trigger::Above(c, _)
            | Trigger::Below(c, _) => Some(c),
            _ => None,
        }
    }

    /// Why a trigger that timed out never fired, and what to try: for a level trigger, the range
    /// its channel stayed in.
    fn why_not(&self, channels: &[String], r: &Range, thread: &str) -> String {
        let fmt = crate::render::float_text;
        let try_ = "give another --trigger, or a longer --timeout";
        let Some(c) = self.channel() else {
            return match self {
                Trigger::Overrun => {
                    format!("thread {thread} missed no deadline meanwhile; {try_}")
                }
                Trigger::Fault => {
                    format!("no function of thread {thread} faulted meanwhile; {try_}")
                }
                Trigger::Manual => format!("no line came on standard input (press Enter); {try_}"),
                Trigger::Now
                | Trigger::Rise(..)
                | Trigger::Fall(..)
                | Trigger::Above(..)
                | Trigger::Below(..) => try_.to_string(),
            };
        };
        let name = channels.get(c).map_or("?", String::as_str);
        let nan = if r.nan > 0 {
            format!(" ({} of the samples were NaN)", r.nan)
        } else {
            String::new()
        };
        let seen = r.n - r.nan;
        if seen == 0 {
            return format!("{name} had no number in {} samples{nan}; {try_}", r.n);
        }
        let level = match *self {
            Trigger::Rise(_, l)
            | Trigger::Fall(_, l)
            | Trigger::Above(_, l)
            | Trigger::Below(_, l) => l,
            _ => f64::NAN,
        };
        let stayed = if r.low == r.high {
            format!("{name} stayed at {} over {seen} samples{nan}", fmt(r.low))
        } else {
            format!(
                "{name} stayed between {} and {} over {seen} samples{nan}",
                fmt(r.low),
                fmt(r.high)
            )
        };
        let level_hint = if level < r.low || level > r.high {
            format!(
                "; the level {} is outside that: give a level inside it, or ",
                fmt(level)
            )
        } else {
            "; ".to_string()
        };
        format!("{stayed}{level_hint}{try_}")
    }

    fn parse(text: &str, channels: &[String]) -> Result<Trigger, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let chan = |name: &str| {
            channels.iter().position(|c| c == name).ok_or_else(|| {
                format!(
                    "--trigger {text}: {name} is not one of the channels ({})",
                    channels.join(", ")
                )
            })
        };
        let level = |s: Option<&&str>, default: Option<f64>| -> Result<f64, String> {
            match s {
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| format!("--trigger {text}: level {v} is not a finite number")),
                None => default.ok_or_else(|| {
                    format!("--trigger {text}: give a level, e.g. above:pid.0.error:0.5")
                }),
            }
        };
        Ok(match parts.as_slice() {
            ["now"] => Trigger::Now,
            ["manual"] => Trigger::Manual,
            ["overrun"] => Trigger::Overrun,
            ["fault"] => Trigger::Fault,
            ["rise", c, rest @ ..] => Trigger::Rise(chan(c)?, level(rest.first(), Some(0.5))?),
            ["fall", c, rest @ ..] => Trigger::Fall(chan(c)?, level(rest.first(), Some(0.5))?),
            ["above", c, l] => Trigger::Above(chan(c)?, level(Some(l), None)?),
            ["below", c, l] => Trigger::Below(chan(c)?, level(Some(l), None)?),
            _ => {
                return Err(format!(
                    "--trigger {text}: use rise:CHANNEL[:LEVEL], fall:CHANNEL[:LEVEL], above:CHANNEL:LEVEL, \
                     below:CHANNEL:LEVEL, overrun, fault, manual or now"
                ))
            }
        })
    }

    /// Whether sample `cur` (after `prev`) fires it; `ev` says what happened to the thread since the
    /// previous sample.
    fn fires(&self, prev: Option<&[f64]>, cur: &[f64], ev: Events) -> bool {
        match *self {
            Trigger::Now => true,
            Trigger::Manual => ev.asked,
            Trigger::Overrun => ev.missed > 0,
            Trigger::Fault => ev.faults > 0,
            Trigger::Rise(c, l) => prev.is_some_and(|p| p[c] < l) && cur[c] >= l,
            Trigger::Fall(c, l) => prev.is_some_and(|p| p[c] > l) && cur[c] <= l,
            Trigger::Above(c, l) => cur[c] > l,
            Trigger::Below(c, l) => cur[c] < l,
        }
    }
}

/// What happened to the thread between two samples, for the triggers that are not on a channel.
#[derive(Debug, Clone, Copy, Default)]
struct Events {
    /// Periods missed.
    missed: u64,
    /// Function faults.
    faults: u64,
    /// Whether a manual trigger was given.
    asked: bool,
}

fn as_f64(v: Value) -> f64 {
    match v {
        Value::Bit(b) => f64::from(u8::from(b)),
        Value::Float(f) => f,
        Value::S32(i) => f64::from(i),
        Value::U32(u) => f64::from(u),
        #[allow(unreachable_patterns)]
        other => other.to_string().parse().unwrap_or(f64::NAN),
    }
}

/// One captured period.
#[derive(Debug, Clone)]
struct Sample {
    period: u64,
    values: Vec<Value>,
}

/// The halcmd commands that attach the scope, and those that detach it again (in order).
struct Attachment {
    attach: Vec<String>,
    detach: Vec<String>,
    cfg: String,
}

fn letter(ty: ValueType) -> Result<char, String> {
    rtapi_hal::fifo::type_letter(ty)
        .map(char::from)
        .ok_or_else(|| format!("a {ty} cannot be sampled"))
}

fn plan(
    reader: &HalReader,
    fifo: &str,
    thread: &str,
    channels: &[String],
    depth: usize,
) -> Result<Attachment, String> {
    let mut cfg = String::new();
    let mut links = Vec::new();
    let mut detach_pins = Vec::new();
    let mut made = Vec::new();
    let hidden = [format!("{thread}.missed"), format!("{thread}.faults")];
    for (m, name) in channels.iter().chain(&hidden).enumerate() {
        let pin = format!("{fifo}.pin.{m}");
        detach_pins.push(pin.clone());
        if let Ok(s) = reader.signal_named(name) {
            cfg.push(letter(s.ty)?);
            links.push(format!("linksp {name} {pin}"));
        } else if let Ok(p) = reader.pin_named(name) {
            cfg.push(letter(p.ty)?);
            match p.signal {
                Some(sig) => links.push(format!("linksp {sig} {pin}")),
                None => {
                    let sig = format!("{fifo}-{m}");
                    links.push(format!("net {sig} {name} {pin}"));
                    made.push((sig, name.clone()));
                }
            }
        } else if let Ok(p) = reader.param_named(name) {
            return Err(format!(
                "{} is a param; a scope captures pins and signals",
                p.name
            ));
        } else {
            return Err(format!(
                "no pin or signal named {name} in the instance (`rtapi show pin` lists them)"
            ));
        }
    }
    let mut attach = vec![format!(
        "loadrt scope_sampler names={fifo} cfg={cfg} depth={depth}"
    )];
    attach.extend(links);
    attach.push(format!("addf {fifo} {thread}"));
    let mut detach = vec![format!("delf {fifo} {thread}")];
    detach.extend(detach_pins.iter().map(|p| format!("unlinkp {p}")));
    for (sig, pin) in &made {
        detach.push(format!("unlinkp {pin}"));
        detach.push(format!("delsig {sig}"));
    }
    detach.push("unloadrt scope_sampler".to_string());
    Ok(Attachment {
        attach,
        detach,
        cfg,
    })
}

fn send(client: &mut ControlClient, line: &str) -> Result<Reply, String> {
    let r = client.execute(line).map_err(|e| e.to_string())?;
    if r.ok {
        Ok(r)
    } else {
        Err(format!("`{line}`: {}", r.error.unwrap_or_default()))
    }
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let timeout = parse_duration(&args.timeout)
        .ok()
        .filter(|d| d.is_positive())
        .ok_or_else(|| {
            Failure::usage("--timeout: give a positive duration with its unit, e.g. 30s")
        })?;
    let timeout = Duration::from_nanos(timeout.as_nanos() as u64);
    let trigger = Trigger::parse(&args.trigger, &args.channels).map_err(Failure::usage)?;
    let reader = instance::open(&args.target, Access::ReadOnly)?;
    let thread = reader.thread_named(&args.thread).map_err(|_| {
        let names: Vec<String> = reader
            .threads()
            .map(|ts| ts.into_iter().map(|t| t.name).collect())
            .unwrap_or_default();
        Failure::usage(format!(
            "no thread named {} in instance '{}'; {}",
            args.thread,
            args.target.instance,
            crate::suggest::did_you_mean(&args.thread, names.iter().map(String::as_str))
                .unwrap_or_else(|| format!("its threads: {}", names.join(", ")))
        ))
    })?;
    if reader
        .components()
        .map_err(|e| Failure::runtime(e.to_string()))?
        .iter()
        .any(|c| c.name.starts_with("scope-"))
    {
        return Err(Failure::runtime(
            "another rtapi scope is attached to this instance; one at a time".to_string(),
        ));
    }
    // Output files checked before anything is attached.
    for ext in ["csv", "json", "svg"] {
        let p = args.out.with_extension(ext);
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(Failure::usage(format!(
                "--out: directory {} does not exist; create it, or give --out a path in one \
                 that does",
                dir.display()
            )));
        }
    }
    let fifo = format!("scope-{}", std::process::id());
    // Room for 200 ms of samples between two reads, at least 1024.
    let per_read = (200_000_000 / thread.period_ns.max(1)) as usize;
    let depth = per_read.clamp(1024, 65_536);
    let plan = plan(&reader, &fifo, &args.thread, &args.channels, depth).map_err(Failure::usage)?;
    let mut client = ControlClient::connect(&args.target.instance, reader.header().owner_pid)
        .map_err(|e| Failure::runtime(e.to_string()))?;
    let mut attached = 0;
    let mut outcome = Ok(Vec::new());
    for line in &plan.attach {
        if let Err(e) = send(&mut client, line) {
            outcome = Err(Failure::runtime(format!("attaching the scope: {e}")));
            break;
        }
        attached += 1;
    }
    if outcome.is_ok() {
        outcome = capture(&args, &fifo, &plan.cfg, &trigger, timeout);
    }
    // Detach whatever was attached, whatever happened.
    if attached > 0 {
        for line in &plan.detach {
            if let Err(e) = send(&mut client, line) {
                log::warn!("detaching the scope: {e}");
            }
        }
    }
    let (samples, trigger_at) = match outcome {
        Ok(s) if s.is_empty() => {
            return Err(Failure::runtime(
                "stopped before the capture was complete; nothing written".to_string(),
            ))
        }
        Ok(s) => {
            // The trigger row: the capture fires only once the pre-trigger share is full.
            let at = (args.length as usize * usize::from(args.pre) / 100).min(s.len() - 1);
            (s, at)
        }
        Err(e) => return Err(e),
    };
    write(&args, &thread, &samples, trigger_at)
}

/// Reads the FIFO until the capture is complete; empty on Ctrl-C.
fn capture(
    args: &Args,
    fifo: &str,
    cfg: &str,
    trigger: &Trigger,
    timeout: Duration,
) -> Result<Vec<Sample>, Failure> {
    let trust = Trust::new();
    let client = FifoClient::sampler(&args.target.instance, fifo, &trust)
        .map_err(|e| Failure::runtime(format!("opening the scope's FIFO: {e}")))?;
    let total = args.length as usize;
    let pre = total * usize::from(args.pre) / 100;
    let nchan = cfg.len() - 2; // the last two channels are <thread>.missed and <thread>.faults
    let mut before: VecDeque<Sample> = VecDeque::with_capacity(pre + 1);
    let mut after: Vec<Sample> = Vec::new();
    let mut fired = false;
    let (mut prev, mut first): (Option<Vec<f64>>, Option<(u64, u64)>) = (None, None);
    let (mut last_missed, mut last_faults) = (None, None);
    // What the trigger's channel did while the trigger waited (for the message if it never fires).
    let mut range = Range::default();
    let stop = crate::rt::signals::shutdown_flag();
    let started = Instant::now();
    // A manual trigger: a line on standard input.
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if *trigger == Trigger::Manual {
        let asked = asked.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            if std::io::stdin().read_line(&mut line).is_ok() {
                asked.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
    }
    super::out::eprintln(&format!(
        "rtapi scope: armed on {} ({} channels, trigger {})",
        args.thread, nchan, args.trigger
    ));
    // The trigger can fire once the pre-trigger share is full; this line says it can from now on
    // (what a script — or a test — waits for before making the event).
    let ready = || {
        super::out::eprintln(&format!(
            "rtapi scope: ready: {pre} periods before the trigger kept, waiting for the trigger"
        ))
    };
    let mut said_ready = pre == 0;
    if said_ready {
        ready();
    }
    loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(Vec::new());
        }
        let mut got = false;
        for row in client.rows() {
            let row = row.map_err(|e| Failure::runtime(e.to_string()))?;
            got = true;
            let counter = |v: Value| match v {
                Value::U32(m) => u64::from(m),
                v => as_f64(v) as u64,
            };
            let (missed, faults) = (counter(row.values[nchan]), counter(row.values[nchan + 1]));
            // Period number: samples since the first, plus the periods missed meanwhile.
            let (n0, m0) = *first.get_or_insert((row.number, missed));
            let period = row.number.wrapping_sub(n0) + missed.saturating_sub(m0);
            let new_misses = last_missed.map_or(0, |l| missed.saturating_sub(l));
            last_missed = Some(missed);
            let ev = Events {
                missed: new_misses,
                faults: last_faults.map_or(0, |l| faults.saturating_sub(l)),
                asked: asked.load(std::sync::atomic::Ordering::Relaxed),
            };
            last_faults = Some(faults);
            let sample = Sample {
                period,
                values: row.values[..nchan].to_vec(),
            };
            let cur: Vec<f64> = sample.values.iter().map(|v| as_f64(*v)).collect();
            if let Some(c) = trigger.channel().and_then(|c| cur.get(c)) {
                range.add(*c);
            }
            if fired {
                after.push(sample);
                if after.len() >= total - pre {
                    let mut all: Vec<Sample> = before.into_iter().collect();
                    all.extend(after);
                    return Ok(all);
                }
            } else if before.len() >= pre && trigger.fires(prev.as_deref(), &cur, ev) {
                fired = true;
                after.push(sample);
                if after.len() >= total - pre {
                    let mut all: Vec<Sample> = before.into_iter().collect();
                    all.extend(after);
                    return Ok(all);
                }
            } else {
                before.push_back(sample);
                if before.len() > pre {
                    before.pop_front();
                }
                if !said_ready && before.len() >= pre {
                    said_ready = true;
                    ready();
                }
            }
            prev = Some(cur);
        }
        if !fired && started.elapsed() >= timeout {
            return Err(Failure::runtime(format!(
                "the trigger {} did not fire within {timeout:?}: {}",
                args.trigger,
                trigger.why_not(&args.channels, &range, &args.thread)
            )));
        }
        if !got {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn write(
    args: &Args,
    thread: &rtapi_hal::ThreadInfo,
    samples: &[Sample],
    at: usize,
) -> Result<(), Failure> {
    let period_ms = thread.period_ns as f64 / 1e6;
    let t0 = samples[at].period as f64;
    let time = |s: &Sample| (s.period as f64 - t0) * period_ms;
    let mut csv = format!("period,time_ms,{}\n", args.channels.join(","));
    for s in samples {
        let values: Vec<String> = s
            .values
            .iter()
            .map(|v| rtapi_hal::fifo::format_value(*v))
            .collect();
        csv.push_str(&format!("{},{},{}\n", s.period, time(s), values.join(",")));
    }
    let gaps = samples
        .windows(2)
        .filter(|w| w[1].period != w[0].period + 1)
        .count();
    let json = serde_json::json!({
        "instance": args.target.instance,
        "thread": args.thread,
        "period_ns": thread.period_ns,
        "channels": args.channels,
        "trigger": {"spec": args.trigger, "row": at, "period": samples[at].period},
        "pre_percent": args.pre,
        "rows": samples.len(),
        "gaps": gaps,
        "csv": args.out.with_extension("csv"),
        "svg": args.out.with_extension("svg"),
    });
    let svg = draw(args, samples, at, period_ms)
        .map_err(|e| Failure::runtime(format!("drawing the SVG: {e}")))?;
    for (ext, text) in [
        ("csv", csv),
        (
            "json",
            serde_json::to_string_pretty(&json).unwrap_or_default() + "\n",
        ),
        ("svg", svg),
    ] {
        let path = args.out.with_extension(ext);
        crate::latency::output::write_text("--out", &path, &text).map_err(Failure::runtime)?;
    }
    if args.preview {
        super::out::print(&preview(&args.channels, samples, at, 64))?;
    }
    super::out::eprintln(&format!(
        "rtapi scope: {} periods ({} before the trigger) → {}.{{csv,json,svg}}",
        samples.len(),
        at,
        args.out.display()
    ));
    Ok(())
}

/// A terminal preview: per channel, `width` columns of block characters (each column the mean of its
/// share of the rows, scaled to the channel's own range), a `|` line under the trigger's column, and
/// the range. A column whose rows are all NaN/inf is `?`.
fn preview(channels: &[String], samples: &[Sample], at: usize, width: usize) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let width = width.min(samples.len()).max(1);
    let col = |r: usize| r * width / samples.len();
    let name_w = channels.iter().map(|c| c.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (c, name) in channels.iter().enumerate() {
        let mut sums = vec![(0.0f64, 0usize); width];
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (r, s) in samples.iter().enumerate() {
            let v = as_f64(s.values[c]);
            if v.is_finite() {
                let e = &mut sums[col(r)];
                e.0 += v;
                e.1 += 1;
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
        let line: String = sums
            .iter()
            .map(|&(sum, n)| {
                if n == 0 {
                    return '?';
                }
                let x = if hi > lo {
                    (sum / n as f64 - lo) / (hi - lo)
                } else {
                    0.5
                };
                BLOCKS[((x * 7.0).round() as usize).min(7)]
            })
            .collect();
        let range = if lo.is_finite() {
            format!(
                "{} … {}",
                crate::render::float_text(lo),
                crate::render::float_text(hi)
            )
        } else {
            "no finite value".to_string()
        };
        out.push_str(&format!("{name:>name_w$} {line}  {range}\n"));
    }
    out.push_str(&format!(
        "{:>name_w$} {}^ trigger\n",
        "",
        " ".repeat(col(at.min(samples.len() - 1)))
    ));
    out
}

fn draw(
    args: &Args,
    samples: &[Sample],
    at: usize,
    period_ms: f64,
) -> Result<String, Box<dyn std::error::Error>> {
    use crate::plot;
    use plotters::prelude::*;
    const COLORS: [RGBColor; 6] = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x8c, 0x56, 0x4b),
    ];
    let t0 = samples[at].period as f64;
    let xs: Vec<f64> = samples
        .iter()
        .map(|s| (s.period as f64 - t0) * period_ms)
        .collect();
    let x = (
        xs[0],
        xs.last().copied().unwrap_or(1.0).max(xs[0] + period_ms),
    );
    let channels: Vec<plot::Channel> = args
        .channels
        .iter()
        .enumerate()
        .map(|(c, name)| plot::Channel {
            name,
            points: samples
                .iter()
                .zip(&xs)
                .map(|(s, x)| (*x, as_f64(s.values[c])))
                .collect(),
        })
        .collect();
    let mut svg = String::new();
    {
        let height = 60 + 170 * channels.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (1000, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(
            &format!(
                "rtapi scope: {} on {}, trigger {} (red); each channel on its own scale",
                args.target.instance, args.thread, args.trigger
            ),
            ("sans-serif", 16),
        )?;
        let areas = root.split_evenly((channels.len(), 1));
        plot::channel_panels(
            &areas,
            x,
            "time from the trigger (ms)",
            &channels,
            |c| COLORS[c % COLORS.len()],
            Some(0.0),
        )?;
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(values: &[(f64, bool)]) -> Vec<Sample> {
        values
            .iter()
            .enumerate()
            .map(|(i, &(f, b))| Sample {
                period: i as u64,
                values: vec![Value::Float(f), Value::Bit(b)],
            })
            .collect()
    }

    #[test]
    fn the_preview_shows_a_step_at_the_trigger_column_and_each_range() {
        // 0 for 25 rows, then 2; a bit that goes TRUE with it; 50 rows in 10 columns.
        let rows: Vec<(f64, bool)> = (0..50)
            .map(|i| if i < 25 { (0.0, false) } else { (2.0, true) })
            .collect();
        let chans = ["cmd".to_string(), "en".to_string()];
        let p = preview(&chans, &samples(&rows), 25, 10);
        let lines: Vec<&str> = p.lines().collect();
        assert_eq!(lines.len(), 3, "{p}");
        assert_eq!(lines[0], "cmd ▁▁▁▁▁█████  0 … 2");
        assert_eq!(lines[1], " en ▁▁▁▁▁█████  0 … 1");
        // The trigger row 25 is column 5.
        assert_eq!(lines[2], format!("    {}^ trigger", " ".repeat(5)));
    }

    #[test]
    fn the_preview_marks_columns_without_a_finite_value() {
        let rows = [
            (f64::NAN, false),
            (f64::NAN, false),
            (1.0, true),
            (3.0, true),
        ];
        let p = preview(&["x".to_string(), "b".to_string()], &samples(&rows), 0, 4);
        assert!(
            p.lines().next().unwrap().starts_with("x ??▁█  1 … 3"),
            "{p}"
        );
    }
}
