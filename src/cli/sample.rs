//! `rtapi sample` and `rtapi stream`: the user-space ends of a `sampler` or `streamer` FIFO (LinuxCNC's
//! halsampler and halstreamer). Text format: one line per sample, values separated by spaces, in pin
//! order; bits `0`/`1`, integers in decimal, floats in the shortest form that reads back exactly
//! (`rtapi_hal::fifo::{format_value, parse_line}`).

use std::io::{BufRead, Write};
use std::time::Duration;

use rtapi_hal::fifo::{format_value, parse_line, FifoClient, FifoError, FifoKind};
use rtapi_hal::Trust;

use super::instance::Target;
use super::Failure;

/// How long a side waits before looking again at an empty (sample) or full (stream) ring.
const POLL: Duration = Duration::from_millis(2);

#[derive(clap::Args)]
pub(super) struct SampleArgs {
    /// Read FIFO CHAN (sampler.CHAN).
    #[arg(
        short = 'c',
        long = "channel",
        value_name = "CHAN",
        default_value_t = 0
    )]
    channel: u32,
    /// Stop after COUNT samples (default: until Ctrl-C or the instance ends).
    #[arg(short = 'n', long = "count", value_name = "COUNT")]
    count: Option<u64>,
    /// Print the sample number first on each line.
    #[arg(short = 't', long = "tag")]
    tag: bool,
    /// CSV with a header line of pin names (gaps show only in the sample numbers of -t).
    #[arg(long)]
    csv: bool,
    /// Write to FILE instead of standard output.
    file: Option<std::path::PathBuf>,
    #[command(flatten)]
    target: Target,
}

#[derive(clap::Args)]
pub(super) struct StreamArgs {
    /// Feed FIFO CHAN (streamer.CHAN).
    #[arg(
        short = 'c',
        long = "channel",
        value_name = "CHAN",
        default_value_t = 0
    )]
    channel: u32,
    /// Read FILE instead of standard input.
    file: Option<std::path::PathBuf>,
    #[command(flatten)]
    target: Target,
}

fn trust(target: &Target) -> Result<Trust, Failure> {
    let mut trust = Trust::new();
    for user in &target.trust_owner {
        trust = trust
            .also_user(user)
            .map_err(|e| Failure::usage(format!("--trust-owner: {e}")))?;
    }
    Ok(trust)
}

fn open(target: &Target, kind: FifoKind, channel: u32) -> Result<FifoClient, Failure> {
    let (comp, other) = match kind {
        FifoKind::Sampler => ("sampler", "loadrt sampler cfg=… depth=…"),
        FifoKind::Streamer => ("streamer", "loadrt streamer cfg=… depth=…"),
    };
    let fifo = format!("{comp}.{channel}");
    let instance = &target.instance;
    FifoClient::open(instance, &fifo, kind, &trust(target)?).map_err(|e| match e {
        FifoError::Missing { path } => Failure::runtime(format!(
            "no {fifo} in instance '{instance}' ({path} does not exist): is the instance running, \
             with `{other}` loaded and started?"
        )),
        FifoError::Hal(rtapi_hal::HalError::InvalidName { .. }) => {
            Failure::usage(format!("--instance: {e}"))
        }
        other => Failure::runtime(other.to_string()),
    })
}

fn stopped() -> bool {
    crate::rt::signals::shutdown_requested()
}

/// `rtapi sample`.
pub(super) fn sample(args: SampleArgs) -> Result<(), Failure> {
    let client = open(&args.target, FifoKind::Sampler, args.channel)?;
    let mut out: Box<dyn Write> = match &args.file {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| Failure::runtime(format!("{}: {e}", path.display())))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let write_err = |e: std::io::Error| Failure::runtime(format!("writing the samples: {e}"));
    let sep = if args.csv { "," } else { " " };
    if args.csv {
        let mut head: Vec<String> = Vec::new();
        if args.tag {
            head.push("sample".into());
        }
        head.extend((0..client.types().len()).map(|m| format!("sampler.{}.pin.{m}", args.channel)));
        match writeln!(out, "{}", head.join(",")) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            r => r.map_err(write_err)?,
        }
    }
    let mut done = 0u64;
    let mut last: Option<u64> = None;
    let mut line = String::new();
    loop {
        if args.count.is_some_and(|n| done >= n) {
            break;
        }
        let row = client.pop().map_err(|e| Failure::runtime(e.to_string()))?;
        let Some((number, values)) = row else {
            match out.flush() {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                r => r.map_err(write_err)?,
            }
            if stopped() {
                return match args.count {
                    Some(n) => Err(Failure::runtime(format!(
                        "interrupted after {done} of {n} samples"
                    ))),
                    None => Ok(()),
                };
            }
            if !client.owner_alive() {
                return match args.count {
                    Some(n) => Err(Failure::runtime(format!(
                        "instance '{}' ended after {done} of {n} samples",
                        args.target.instance
                    ))),
                    None => Ok(()),
                };
            }
            std::thread::sleep(POLL);
            continue;
        };
        line.clear();
        // A gap in the numbers: the sampler dropped samples while the ring was full.
        if !args.csv && last.is_some_and(|l| (l + 1) & 0xffff_ffff != number) {
            line.push_str("overrun\n");
        }
        last = Some(number);
        if args.tag {
            line.push_str(&(number as u32 as i32).to_string());
            line.push_str(sep);
        }
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                line.push_str(sep);
            }
            line.push_str(&format_value(v));
        }
        line.push('\n');
        match out.write_all(line.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            r => r.map_err(write_err)?,
        }
        done += 1;
    }
    match out.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(write_err),
    }
}

/// `rtapi stream`. Ctrl-C and SIGTERM keep their default action here: the process holds nothing to
/// clean up (the FIFO belongs to the instance; the kernel drops our lock), and a read blocked on a
/// quiet pipe ends at once. Lines already queued are still played.
pub(super) fn stream(args: StreamArgs) -> Result<(), Failure> {
    let client = open(&args.target, FifoKind::Streamer, args.channel)?;
    let (input, what): (Box<dyn BufRead>, String) = match &args.file {
        Some(path) => (
            Box::new(std::io::BufReader::new(std::fs::File::open(path).map_err(
                |e| Failure::runtime(format!("{}: {e}", path.display())),
            )?)),
            path.display().to_string(),
        ),
        None => (Box::new(std::io::stdin().lock()), "<stdin>".to_string()),
    };
    for (i, line) in input.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| Failure::runtime(format!("{what}:{n}: {e}")))?;
        let values = match parse_line(client.types(), &line) {
            Ok(Some(v)) => v,
            Ok(None) => continue,
            Err(e) => {
                return Err(Failure::usage(format!(
                    "{what}:{n}: {e}: '{}'",
                    crate::rt::units::clip(&line)
                )))
            }
        };
        loop {
            if client
                .push(&values)
                .map_err(|e| Failure::runtime(e.to_string()))?
            {
                break;
            }
            if !client.owner_alive() {
                return Err(Failure::runtime(format!(
                    "instance '{}' ended before {what}:{n} was queued",
                    args.target.instance
                )));
            }
            std::thread::sleep(POLL);
        }
    }
    Ok(())
}
