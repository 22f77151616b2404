//! Helpers the integration tests share, as one module tree: each test file that needs any of it says
//! `mod common;` and `use common::…;` (`tests/common/mod.rs` is not a test target of its own: Cargo
//! builds only the files directly in `tests/`).
//!
//! Here, in `mod.rs`: running the real `rtapi` binary ([`rtapi`], [`text`]), looking at segments
//! ([`segment_exists`]), root, `/proc/interrupts`. The submodules:
//!
//! - [`skipping`]: the one way a test says it cannot run here (`SKIPPED: …`, [`skip!`], [`Prereq`]),
//!   re-exported here; the hal crate's tests include the same file.
//! - [`eventually`]: waiting on an event instead of sleeping.
//! - [`alloc_count`]: the counting global allocator of the tests that check the RT path allocates
//!   nothing.
//! - [`cyclictest`]: cyclictest's histogram text, read strictly.
//! - [`pty`]: a child on a pseudo-terminal, typed at like a person.
//! - [`halrun`]: an instance owned by `rtapi halrun -f` in a child process, and `rtapi halcmd`.
//! - [`sim_axis`]: the sim-axis machine (`rtapi run config/sim-axis.toml`) in a child process.
//! - [`linuxcnc`]: the differential bench, one input sequence through LinuxCNC 2.9's component and
//!   ours; the [`linuxcnc::SessionLock`] every LinuxCNC session of these tests takes.
//! - [`lcnc_machine`]: a whole LinuxCNC machine (a sim config driven headless by `lcnc/drive.py`),
//!   stock or on rtapi's master; `lcnc/` holds the files it installs (not Rust modules).
//! - [`lcnc_root`]: a reference root of another LinuxCNC release (Debian trixie's 2.9.4, sid's 2.9.9)
//!   and this build's test binaries run inside it.
//! - [`master_ns`]: rtapi's LinuxCNC master in namespaces of a test's own, and its [`master_ns::Master`]
//!   guard.
//! - [`mesa_card`]: the simulated 7I96S of the Mesa machine (`config/mesa-7i96s/`) in a network
//!   namespace, the machine's INI pointed at it, rtapi's master with its file capabilities.

// Each test binary compiles the whole tree and uses a part of it: what one binary leaves unused is
// used by another, so unused code here is not dead.
#![allow(dead_code)]

pub(crate) mod alloc_count;
pub(crate) mod cyclictest;
pub(crate) mod eventually;
pub(crate) mod exporter;
pub(crate) mod halrun;
pub(crate) mod lcnc_machine;
pub(crate) mod lcnc_root;
pub(crate) mod linuxcnc;
pub(crate) mod master_ns;
pub(crate) mod mesa_card;
pub(crate) mod netns;
pub(crate) mod pty;
pub(crate) mod sim_axis;
pub(crate) mod sim_process;
pub(crate) mod skipping;
#[allow(unused_imports)] // not every test file skips
pub(crate) use skipping::*;

use std::process::{Command, Output};

/// Runs `rtapi ARGS` to completion with errors-only logging.
pub(crate) fn rtapi(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

/// `rtapi ARGS` as a command to adjust before running it, with errors-only logging.
pub(crate) fn rtapi_command(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.args(args).env("RUST_LOG", "error");
    c
}

/// Runs `c` to completion: its exit code (-1 for a signal), standard output and error as text.
pub(crate) fn run(c: &mut Command) -> (i32, String, String) {
    let o = c.output().expect("run the command");
    let (out, err) = text(&o);
    (o.status.code().unwrap_or(-1), out, err)
}

/// Standard output and standard error as text.
pub(crate) fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Whether the segment of `instance` exists.
pub(crate) fn segment_exists(instance: &str) -> bool {
    std::path::Path::new(&format!("/dev/shm/rtapi-{instance}")).exists()
}

/// One numbered line of `/proc/interrupts`, read by the tests themselves (not the crate's parser).
#[derive(Debug, Clone)]
pub(crate) struct InterruptLine {
    /// The IRQ number: `/proc/irq/N`.
    pub irq: u32,
    /// `(cpu, count)` for each CPU column of the header.
    pub counts: Vec<(usize, u64)>,
    /// The words after the counts: chip, hardware IRQ, handler names.
    pub rest: String,
    /// The last word of the line (a handler's name).
    pub last_word: String,
}

impl InterruptLine {
    /// Interrupts since boot on the CPUs in `cpus`.
    pub(crate) fn count_on(&self, cpus: &[usize]) -> u64 {
        self.counts
            .iter()
            .filter(|(c, _)| cpus.contains(c))
            .map(|(_, n)| n)
            .sum()
    }
}

/// The numbered lines of `/proc/interrupts` (LOC, RES, … have no affinity and are left out); `None`
/// when it cannot be read.
pub(crate) fn proc_interrupts() -> Option<Vec<InterruptLine>> {
    let text = std::fs::read_to_string("/proc/interrupts").ok()?;
    let mut lines = text.lines();
    let cpus: Vec<usize> = lines
        .next()?
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("CPU")?.parse().ok())
        .collect();
    Some(
        lines
            .filter_map(|l| {
                let (num, after) = l.split_once(':')?;
                let irq = num.trim().parse().ok()?;
                let mut words = after.split_whitespace().peekable();
                let mut counts = Vec::new();
                for &cpu in &cpus {
                    let Some(n) = words.peek().and_then(|w| w.parse().ok()) else {
                        break;
                    };
                    counts.push((cpu, n));
                    words.next();
                }
                let rest: Vec<&str> = words.collect();
                Some(InterruptLine {
                    irq,
                    counts,
                    last_word: rest.last().copied().unwrap_or_default().to_string(),
                    rest: rest.join(" "),
                })
            })
            .collect(),
    )
}

/// A kernel CPU list (`0-3,5`).
pub(crate) fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().ok()?..=b.parse().ok()?),
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// `/proc/irq/N/FILE` (`smp_affinity_list`, `effective_affinity_list`) as CPUs; `None` if unreadable.
pub(crate) fn irq_cpus(irq: u32, file: &str) -> Option<Vec<usize>> {
    parse_cpu_list(&std::fs::read_to_string(format!("/proc/irq/{irq}/{file}")).ok()?)
}

/// Whether the kernel refuses to change IRQ `irq`'s affinity (a kernel-managed queue IRQ, a per-CPU or
/// not balanceable one), found by trying: its current `smp_affinity_list` is written back unchanged —
/// for a movable IRQ a write of the value it has, for the others refused whatever the value. Needs
/// root; `None` when the file cannot be read.
pub(crate) fn affinity_write_refused(irq: u32) -> Option<bool> {
    let path = format!("/proc/irq/{irq}/smp_affinity_list");
    let current = std::fs::read_to_string(&path).ok()?;
    Some(std::fs::write(&path, current.trim()).is_err())
}

/// Whether we run as root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether process `pid` has ended: gone, or a zombie (its `/proc/PID/stat` state `Z`).
pub(crate) fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name, which is in parentheses and may hold anything.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// The processes whose command line is exactly `argv` (NUL-separated in `/proc/PID/cmdline`) and
/// that have not ended.
pub(crate) fn processes_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|&pid| !ended(pid))
        .collect()
}

/// `rtapi ARGS --help`'s text (it must succeed).
pub(crate) fn help_text(args: &[&str]) -> String {
    help_text_if(args).unwrap_or_else(|| panic!("rtapi {args:?} --help failed"))
}

/// `rtapi ARGS --help`'s text, or `None` when the binary refuses it (no such subcommand): how a
/// subcommand that `rtapi --help` does not list (`generate-docs`) is told from a misspelt one.
pub(crate) fn help_text_if(args: &[&str]) -> Option<String> {
    let out = rtapi_command(args).arg("--help").output().unwrap();
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap())
}

/// The subcommands a help text lists (clap: "Commands:", then two spaces, the name, the summary).
pub(crate) fn commands_of(help_text: &str) -> Vec<String> {
    let Some(list) = help_text.split("Commands:").nth(1) else {
        return Vec::new();
    };
    list.lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.strip_prefix("  ")?.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect()
}

/// The long options a help text defines: the `--name`s on its option lines (`  -q, --quiet`,
/// `      --duration <DURATION>`), not those its prose mentions.
pub(crate) fn long_options_of(help_text: &str) -> Vec<String> {
    help_text
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| {
            l.split(|c: char| c.is_whitespace() || ",=[".contains(c))
                .filter(|w| !w.is_empty())
                .take_while(|w| w.starts_with('-') || w.starts_with('<'))
                .filter(|w| w.starts_with("--"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}
