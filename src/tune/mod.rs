//! `rtapi tune`: apply the run-time part of detect's tuning checklist to the RT CPUs, and undo it.
//!
//! [`plan`] turns a [`SystemReport`] (and a few more reads through the same [`SysRoot`]) into a [`Plan`]:
//! the files to write, each with its value now and the value wanted ([`Change`]); the boot parameters
//! for what only a reboot changes (managed IRQs, isolation, `preempt=`); and what tune leaves to the user
//! (irqbalance). Nothing is written while planning. [`apply`] writes a plan, recording every old value
//! in a revert file *before* the write it belongs to; [`revert`] puts the old values back, last first,
//! and leaves alone any file someone else has changed since.
//!
//! Paths in a plan are the system's (`/proc/irq/42/smp_affinity_list`); the writes go to the same path
//! under the root the plan was made for, so tests work on a temporary tree. Sysctls are written as their
//! `/proc/sys` files: `sysctl -w` is only how a command is printed.

mod apply;
mod nic;
pub mod persist;

pub use apply::{
    apply, load, revert, ApplyError, ApplyOutcome, Failed, RevertEntry, RevertError, RevertFile,
    RevertOutcome, Skipped,
};
pub use nic::{plan_board, NicChange, NicEntry, NicSetting, Only};

use crate::detect::{SysRoot, SystemReport};
use crate::rt::cpulist;
use serde::{Deserialize, Serialize};

/// Where `rtapi tune` records the old values by default: `/run` is emptied at boot, as the kernel
/// forgets the settings themselves.
pub const DEFAULT_REVERT_FILE: &str = "/run/rtapi/tune-revert.json";

/// How a file's value is read and compared: the kernel may print a value differently from how it
/// was written (`0-1` read back for `0,1`; `always [madvise] never` for `madvise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// A CPU list (`smp_affinity_list`).
    CpuList,
    /// A hex CPU mask, 32-bit groups separated by commas (`workqueue/cpumask`, `default_smp_affinity`).
    HexMask,
    /// A sysfs choice list where the selected word is bracketed (`transparent_hugepage/enabled`).
    Choice,
    /// Anything else, compared as trimmed text (`0`, `performance`).
    Plain,
}

impl Format {
    /// The comparable form of a value read from (or written to) a file; `None` when it does not parse.
    pub fn normalize(self, text: &str) -> Option<String> {
        let t = text.trim();
        match self {
            Format::CpuList => cpulist::parse(t).map(|c| cpulist::format(&c)),
            Format::HexMask => {
                crate::detect::parse_hex_mask(t).map(|c| crate::detect::format_hex_mask(&c))
            }
            Format::Choice => Some(
                t.split_whitespace()
                    .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
                    .unwrap_or(t)
                    .to_string(),
            ),
            Format::Plain => Some(t.to_string()),
        }
    }

    /// What to write to put back a value read as `text`: the selected word of a choice list, else
    /// the text as read.
    pub fn restore_form(self, text: &str) -> String {
        match self {
            Format::Choice => self.normalize(text).unwrap_or_default(),
            _ => text.trim().to_string(),
        }
    }

    /// Whether two values mean the same (unparsable values only equal themselves).
    pub fn same(self, a: &str, b: &str) -> bool {
        match (self.normalize(a), self.normalize(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a.trim() == b.trim(),
        }
    }
}

/// One file to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The system path, e.g. `/proc/irq/42/smp_affinity_list`.
    pub path: String,
    /// How the file's value is compared.
    pub format: Format,
    /// The value now (as read, trimmed).
    pub current: String,
    /// The value to write.
    pub value: String,
    /// Why, for the user (`IRQ 42 virtio3-tx, 16720 interrupts on the RT CPUs`).
    pub why: String,
    /// What is given up, when something is (the watchdogs).
    pub cost: Option<String>,
}

impl Change {
    /// The shell command that makes this change: `sysctl -w kernel.X=V` for `/proc/sys/kernel/X`,
    /// else `echo V > PATH`.
    pub fn command(&self) -> String {
        match self.path.strip_prefix("/proc/sys/") {
            Some(key) => format!("sysctl -w {}={}", key.replace('/', "."), self.value),
            None => format!("echo {} > {}", self.value, self.path),
        }
    }
}

/// What `rtapi tune` would do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The CPUs kept clear for RT work.
    pub rt_cpus: Vec<usize>,
    /// The online CPUs that are not RT CPUs: where IRQs and kernel work go.
    pub housekeeping: Vec<usize>,
    /// The files to write, in order.
    pub changes: Vec<Change>,
    /// Boot parameters to add to the kernel command line (never written by tune).
    pub boot_params: Vec<String>,
    /// Why each boot parameter is there.
    pub boot_reasons: Vec<String>,
    /// What tune reports but does not do, with the command to do it.
    pub notes: Vec<String>,
    /// Settings of the NIC to a Mesa card (`--board`), made with the ethtool ioctl after the files.
    pub nic: Vec<NicChange>,
    /// The board part of the plan, when there is one: `(card address, interface)`.
    pub board: Option<(std::net::Ipv4Addr, String)>,
    /// Only the board part: nothing machine-wide is planned (`--only nic`).
    pub only_board: bool,
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// The RT CPU list is unusable (`--cpu` names an offline CPU, or leaves no housekeeping CPU).
    Cpus(String),
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::Cpus(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PlanError {}

/// Checks an RT CPU list given by the user against the online CPUs.
fn check_cpus(cpus: &[usize], online: Option<&[usize]>) -> Result<(), PlanError> {
    if cpus.is_empty() {
        return Err(PlanError::Cpus(
            "--cpu: the list is empty; give the RT CPUs, e.g. --cpu 3 or --cpu 2-3".into(),
        ));
    }
    let Some(online) = online else {
        return Err(PlanError::Cpus(
            "the online CPUs are unknown (/sys/devices/system/cpu/online unreadable): cannot tell which CPUs may take the IRQs".into(),
        ));
    };
    let offline: Vec<usize> = cpus
        .iter()
        .copied()
        .filter(|c| !online.contains(c))
        .collect();
    if !offline.is_empty() {
        return Err(PlanError::Cpus(format!(
            "--cpu {}: CPU {} {} not online (online: {})",
            cpulist::format(cpus),
            cpulist::format(&offline),
            if offline.len() == 1 { "is" } else { "are" },
            cpulist::format(online)
        )));
    }
    if online.iter().all(|c| cpus.contains(c)) {
        return Err(PlanError::Cpus(format!(
            "--cpu {}: that is every online CPU; leave at least one for IRQs and the kernel's housekeeping",
            cpulist::format(cpus)
        )));
    }
    Ok(())
}

fn minus(a: &[usize], b: &[usize]) -> Vec<usize> {
    a.iter().copied().filter(|c| !b.contains(c)).collect()
}

/// The RT CPUs (from `rt_cpus`, else detect's) and the housekeeping CPUs, in a plan with nothing in it.
fn empty_plan(report: &SystemReport, rt_cpus: Option<&[usize]>) -> Result<Plan, PlanError> {
    let online = report.cpus.online.as_deref();
    let rt: Vec<usize> = match rt_cpus {
        Some(c) => {
            let mut c = c.to_vec();
            c.sort_unstable();
            c.dedup();
            check_cpus(&c, online)?;
            c
        }
        None => {
            let c = report.tuning.rt_cpus.clone();
            if c.is_empty() {
                return Err(PlanError::Cpus(
                    "detect found no RT CPU (online CPUs unknown?): name them with --cpu".into(),
                ));
            }
            check_cpus(&c, online).map_err(|e| {
                PlanError::Cpus(format!(
                    "{e} (these are detect's RT CPUs; choose with --cpu)"
                ))
            })?;
            c
        }
    };
    let housekeeping = minus(online.unwrap_or(&[]), &rt);
    Ok(Plan {
        rt_cpus: rt,
        housekeeping,
        changes: Vec::new(),
        boot_params: Vec::new(),
        boot_reasons: Vec::new(),
        notes: Vec::new(),
        nic: Vec::new(),
        board: None,
        only_board: false,
    })
}

/// Plans the tuning of `rt_cpus` (default: detect's `tuning.rt_cpus`, the RT CPU and the isolated
/// CPUs) from `report`, reading the rest through `root`. Writes nothing.
pub fn plan(
    report: &SystemReport,
    root: &SysRoot,
    rt_cpus: Option<&[usize]>,
) -> Result<Plan, PlanError> {
    let mut p = empty_plan(report, rt_cpus)?;
    let rt = p.rt_cpus.clone();
    let housekeeping = p.housekeeping.clone();
    let rt_text = cpulist::format(&rt);
    let off_rt = |cpus: &[usize]| {
        let kept = minus(cpus, &rt);
        if kept.is_empty() {
            housekeeping.clone()
        } else {
            kept
        }
    };
    irqs(report, root, &rt, &off_rt, &mut p);

    let mut push = |rel: &str,
                    format: Format,
                    want: &dyn Fn(&str) -> Option<String>,
                    why: &str,
                    cost: Option<&str>| {
        let Some(current) = root.read_text(rel) else {
            return;
        };
        let Some(value) = want(&current) else { return };
        if format.same(&current, &value) {
            return;
        }
        p.changes.push(Change {
            path: format!("/{rel}"),
            format,
            current,
            value,
            why: why.to_string(),
            cost: cost.map(str::to_string),
        });
    };
    push(
        "proc/irq/default_smp_affinity",
        Format::HexMask,
        &|cur| {
            let cpus = crate::detect::parse_hex_mask(cur)?;
            cpus.iter()
                .any(|c| rt.contains(c))
                .then(|| crate::detect::format_hex_mask(&off_rt(&cpus)))
        },
        "IRQs requested from now on start off the RT CPUs",
        None,
    );
    push(
        "sys/devices/virtual/workqueue/cpumask",
        Format::HexMask,
        &|cur| {
            let cpus = crate::detect::parse_hex_mask(cur)?;
            cpus.iter()
                .any(|c| rt.contains(c))
                .then(|| crate::detect::format_hex_mask(&off_rt(&cpus)))
        },
        "unbound kernel workqueues run off the RT CPUs",
        None,
    );
    let zero = |cur: &str| (cur.trim() == "1").then(|| "0".to_string());
    push(
        "proc/sys/kernel/timer_migration",
        Format::Plain,
        &zero,
        "timers armed elsewhere are not moved onto the RT CPUs",
        None,
    );
    push(
        "proc/sys/kernel/nmi_watchdog",
        Format::Plain,
        &zero,
        "no periodic NMI on the RT CPUs",
        Some("hard-lockup detection: a CPU stuck with interrupts off is no longer reported"),
    );
    push(
        "proc/sys/kernel/watchdog",
        Format::Plain,
        &zero,
        "no lockup-detector timer and thread on the RT CPUs",
        Some("soft- and hard-lockup detection: a CPU stuck in the kernel is no longer reported"),
    );
    for &cpu in &rt {
        let dir = format!("sys/devices/system/cpu/cpu{cpu}/cpufreq");
        let available = root.read_text(&format!("{dir}/scaling_available_governors"));
        if available
            .as_deref()
            .is_some_and(|a| !a.split_whitespace().any(|g| g == "performance"))
        {
            p.notes.push(format!(
                "CPU {cpu}: cpufreq has no 'performance' governor (available: {}); left as it is",
                available.unwrap_or_default()
            ));
            continue;
        }
        push(
            &format!("{dir}/scaling_governor"),
            Format::Plain,
            &|cur| (cur.trim() != "performance").then(|| "performance".to_string()),
            &format!("CPU {cpu} stays at full speed: no frequency change on a wake-up"),
            Some("power: the CPU does not clock down when idle"),
        );
    }
    let states = crate::detect::idle_states_of(root, &rt).unwrap_or_default();
    for s in states.iter().filter(|s| s.is_slow_and_enabled()) {
        push(
            &format!(
                "sys/devices/system/cpu/cpu{}/cpuidle/state{}/disable",
                s.cpu, s.state
            ),
            Format::Plain,
            &|_| Some("1".to_string()),
            &format!(
                "CPU {} never enters idle state {} ({} µs exit latency)",
                s.cpu,
                s.name,
                s.latency_us.unwrap_or(0)
            ),
            Some("power: the CPU idles in a shallower state"),
        );
    }
    push(
        "sys/kernel/mm/transparent_hugepage/enabled",
        Format::Choice,
        &|cur| {
            (Format::Choice.normalize(cur).as_deref() == Some("always"))
                .then(|| "madvise".to_string())
        },
        "khugepaged and compaction only for memory that asks for huge pages",
        None,
    );

    let managed_irqs = !p.boot_reasons.is_empty();
    boot(report, &rt, managed_irqs, &mut p);

    if let Some(pid) = report.tuning.irqbalance_pid {
        p.notes.push(format!(
            "irqbalance is running (PID {pid}) and will move IRQs back onto CPU {rt_text}; tune does not stop services: `systemctl disable --now irqbalance`, or IRQBALANCE_BANNED_CPULIST={rt_text} in /etc/default/irqbalance and restart it"
        ));
    }
    if report.environment.swap_devices.is_some_and(|n| n > 0) {
        p.notes.push(
            "swap is active: tune leaves it; `swapoff -a` and remove it from /etc/fstab if the machine has the memory"
                .into(),
        );
    }
    Ok(p)
}

/// Every IRQ with a handler (a line of `/proc/interrupts`) whose affinity includes an RT CPU: movable
/// ones are changed, managed ones become a boot reason.
fn irqs(
    report: &SystemReport,
    root: &SysRoot,
    rt: &[usize],
    off_rt: &dyn Fn(&[usize]) -> Vec<usize>,
    p: &mut Plan,
) {
    let Some(text) = root.read_text("proc/interrupts") else {
        p.notes
            .push("/proc/interrupts is unreadable: IRQ affinities left as they are".into());
        return;
    };
    let fired = |irq: u32| -> u64 {
        report
            .tuning
            .irqs_on_rt_cpus
            .iter()
            .flatten()
            .find(|i| i.irq == irq)
            .map_or(0, |i| i.count_on_rt)
    };
    for line in crate::detect::parse_interrupts(&text) {
        let (Some(irq), counts, name) = (line.irq, line.counts, line.name) else {
            continue; // LOC, RES, …: per CPU, no affinity to write
        };
        let rel = format!("proc/irq/{irq}/smp_affinity_list");
        let Some(current) = root.read_text(&rel) else {
            continue;
        };
        let Some(affinity) = cpulist::parse(&current) else {
            continue;
        };
        if !affinity.iter().any(|c| rt.contains(c)) {
            continue;
        }
        let on_rt: u64 = counts
            .iter()
            .filter(|(c, _)| rt.contains(c))
            .map(|(_, n)| n)
            .sum::<u64>()
            .max(fired(irq));
        let seen = if on_rt > 0 {
            format!(
                "{on_rt} interrupt{} on the RT CPUs so far",
                if on_rt == 1 { "" } else { "s" }
            )
        } else {
            "may fire on the RT CPUs".to_string()
        };
        if let Some(why) = pinned_by_kernel(root, irq, &name) {
            p.notes.push(format!(
                "IRQ {irq} {name} ({seen}) {why}: the kernel refuses to move it; left as it is"
            ));
            continue;
        }
        match crate::detect::movability(root, irq, &name) {
            crate::detect::Movability::Movable => {
                let value = cpulist::format(&off_rt(&affinity));
                p.changes.push(Change {
                    path: format!("/{rel}"),
                    format: Format::CpuList,
                    current,
                    value,
                    why: format!("IRQ {irq} {name}: {seen}"),
                    cost: None,
                });
            }
            m => p.boot_reasons.push(format!(
                "IRQ {irq} {name} is {}kernel-managed ({seen}): its affinity cannot be written at run time; isolcpus=managed_irq keeps it off the RT CPUs",
                if m == crate::detect::Movability::Managed {
                    ""
                } else {
                    "probably "
                }
            )),
        }
    }
}

/// Why the kernel will not move IRQ `irq` at all (not even at boot with `managed_irq`): debugfs
/// shows it per-CPU or not balanceable; without debugfs, the legacy `timer` and `cascade` IRQs, which
/// the kernel requests that way. `None` when nothing says so.
fn pinned_by_kernel(root: &SysRoot, irq: u32, name: &str) -> Option<&'static str> {
    match root.read_text(&format!("sys/kernel/debug/irq/irqs/{irq}")) {
        Some(t) if t.contains("IRQD_PER_CPU") => Some("is per-CPU"),
        Some(t) if t.contains("IRQD_NO_BALANCING") => Some("is marked not balanceable"),
        Some(_) => None,
        None if matches!(name, "timer" | "cascade") => {
            Some("is the legacy timer or cascade, which is not balanceable")
        }
        None => None,
    }
}

/// The boot parameters for what only a reboot changes: isolation (with `managed_irq` when managed IRQs
/// touch the RT CPUs), tickless RT CPUs, RCU callbacks elsewhere, full preemption on a dynamic kernel.
/// A parameter already on `/proc/cmdline` (as detect read it) with the RT CPUs is not repeated; one
/// that lacks them is given with the union of its CPUs and the RT CPUs.
fn boot(report: &SystemReport, rt: &[usize], managed_irqs: bool, p: &mut Plan) {
    // detect's reading of /proc/cmdline: CPU lists without flags, and the isolcpus flags.
    let c = &report.cpus;
    let covers =
        |v: &Option<Vec<usize>>| v.as_ref().is_some_and(|l| rt.iter().all(|c| l.contains(c)));
    let with_rt = |v: &Option<Vec<usize>>| {
        let mut l = v.clone().unwrap_or_default();
        l.extend_from_slice(rt);
        l.sort_unstable();
        l.dedup();
        cpulist::format(&l)
    };
    let no_hz_full = report.kernel.no_hz_full;

    let iso = &c.isolcpus;
    let iso_flags = report.tuning.isolcpus_flags.clone().unwrap_or_default();
    let has_managed = iso_flags.iter().any(|f| f == "managed_irq");
    // A bare list means `domain`; with flags, only an explicit `domain` isolates from the scheduler.
    let has_domain =
        iso.is_some() && (iso_flags.is_empty() || iso_flags.iter().any(|f| f == "domain"));
    if !covers(iso) || !has_domain || (managed_irqs && !has_managed) {
        p.boot_params
            .push(format!("isolcpus=managed_irq,domain,{}", with_rt(iso)));
        p.boot_reasons.push(format!(
            "CPU {} {}: isolcpus=managed_irq,domain takes {} out of the scheduler's load balancing and away from managed IRQs",
            cpulist::format(rt),
            match (iso.is_none(), rt.len() == 1) {
                (true, true) => "is not isolated",
                (true, false) => "are not isolated",
                (false, true) => "is not isolated with domain and managed_irq",
                (false, false) => "are not all isolated with domain and managed_irq",
            },
            if rt.len() == 1 { "it" } else { "them" }
        ));
    } else if managed_irqs {
        p.notes.push(
            "isolcpus=managed_irq is already given, yet managed IRQs still have an RT CPU in their affinity: their queues have no CPU outside the RT CPUs (give the device fewer queues than CPUs)"
                .into(),
        );
    }
    let nohz = &c.nohz_full;
    if no_hz_full != Some(false) && !covers(nohz) {
        p.boot_params.push(format!("nohz_full={}", with_rt(nohz)));
        p.boot_reasons.push(format!(
            "nohz_full: the scheduler tick stops on CPU {} while one task runs there",
            cpulist::format(rt)
        ));
    } else if no_hz_full == Some(false) {
        p.notes.push(
            "this kernel lacks CONFIG_NO_HZ_FULL: no nohz_full= (the tick stays on the RT CPUs; a PREEMPT_RT distribution kernel usually has it)"
                .into(),
        );
    }
    let nocbs = &c.rcu_nocbs;
    if !covers(nocbs) {
        p.boot_params.push(format!("rcu_nocbs={}", with_rt(nocbs)));
        let implied = p.boot_params.iter().any(|b| b.starts_with("nohz_full="))
            || (no_hz_full != Some(false) && covers(nohz));
        p.boot_reasons.push(format!(
            "rcu_nocbs: RCU callbacks of CPU {} run in kernel threads on the housekeeping CPUs{}",
            cpulist::format(rt),
            if implied {
                " (nohz_full implies it; written out so the line says so)"
            } else {
                ""
            }
        ));
    }
    use crate::detect::Preemption;
    let k = &report.kernel;
    if k.preempt_rt != Some(true)
        && k.preempt_dynamic
        && matches!(k.preemption, Some(Preemption::None | Preemption::Voluntary))
    {
        p.boot_params.push("preempt=full".into());
        p.boot_reasons.push(format!(
            "preempt=full: this PREEMPT_DYNAMIC kernel runs '{}' preemption, where a kernel path may hold the CPU for milliseconds",
            k.preemption.map_or("unknown", Preemption::name)
        ));
    }
}

impl Plan {
    /// The dry-run text: the commands, the boot line, the notes. `revert_file` is named in the
    /// closing hint.
    pub fn render(&self, revert_file: &str) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# rtapi tune for RT CPU {} (housekeeping CPU {})",
            cpulist::format(&self.rt_cpus),
            if self.housekeeping.is_empty() {
                "none".to_string()
            } else {
                cpulist::format(&self.housekeeping)
            }
        );
        if let Some((addr, ifc)) = &self.board {
            let _ = writeln!(
                s,
                "# the NIC to the card at {addr}: {ifc}{}",
                if self.only_board {
                    " (--only nic: nothing machine-wide)"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            s,
            "\n# Run-time settings (the kernel forgets them at reboot):"
        );
        if self.changes.is_empty() && self.nic.is_empty() {
            let _ = writeln!(
                s,
                "# nothing to change: every run-time setting is already right"
            );
        }
        let width = self
            .changes
            .iter()
            .map(|c| c.command().chars().count())
            .max()
            .unwrap_or(0)
            .min(60);
        for c in &self.changes {
            let _ = writeln!(
                s,
                "{:<width$}  # was {}; {}{}",
                c.command(),
                c.format
                    .normalize(&c.current)
                    .unwrap_or_else(|| c.current.clone()),
                c.why,
                c.cost
                    .as_deref()
                    .map(|l| format!("; loses {l}"))
                    .unwrap_or_default()
            );
        }
        s.push_str(&self.render_nic());
        s.push_str(&self.render_rest());
        if !self.changes.is_empty() || !self.nic.is_empty() {
            let _ = writeln!(
                s,
                "\n# `rtapi tune` applies the run-time settings and records the old values in {revert_file};\n# `rtapi tune --revert` puts them back."
            );
        }
        s
    }
}

impl Plan {
    /// The NIC settings of the dry run: the equivalent `ethtool` commands (tune uses the ioctl).
    pub fn render_nic(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        if self.nic.is_empty() {
            return s;
        }
        let _ = writeln!(
            s,
            "# NIC settings (made with the ethtool ioctl; the ethtool commands do the same):"
        );
        for c in &self.nic {
            let _ = writeln!(s, "{}  # was {}; {}", c.command(), c.was(), c.why);
        }
        s
    }

    /// The boot parameters with their reasons, and the notes: what tune prints but never does.
    pub fn render_rest(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\n# Boot parameters (need a reboot; rtapi tune never writes them):"
        );
        if self.only_board && self.boot_params.is_empty() {
            let _ = writeln!(s, "# not planned (--only nic)");
        } else if self.boot_params.is_empty() {
            let _ = writeln!(s, "# none needed");
        } else {
            let _ = writeln!(
                s,
                "# add to GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub (or grub2-mkconfig) and reboot:"
            );
            let _ = writeln!(s, "{}", self.boot_params.join(" "));
        }
        for r in &self.boot_reasons {
            let _ = writeln!(s, "#   {r}");
        }
        if !self.notes.is_empty() {
            let _ = writeln!(s, "\n# Not done by tune:");
            for n in &self.notes {
                let _ = writeln!(s, "#   {n}");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests;
