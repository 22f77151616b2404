//! The tuning checklist beyond kernel and CPUs: interrupts that fire on the RT CPUs (and whether they
//! can be moved), irqbalance, timer migration, the watchdogs, the workqueue CPU mask, the idle states
//! of the RT CPUs and the `isolcpus=` flags. Everything is
//! read through the [`SysRoot`], never written: whether an IRQ is kernel-managed is read from debugfs
//! when it is mounted, else guessed from the IRQ's name (and said to be a guess).

use super::interrupts::{parse_interrupts, IrqLine};
use super::sysroot::SysRoot;
use crate::rt::cpulist;
use serde::Serialize;

/// Whether an IRQ's affinity may be changed at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Movability {
    /// debugfs (`/sys/kernel/debug/irq/irqs/N`) shows `IRQD_AFFINITY_MANAGED`: only `isolcpus=managed_irq`
    /// at boot keeps it off the RT CPUs.
    Managed,
    /// No debugfs; the name is a virtio `-req` or an NVMe I/O queue, which the kernel manages.
    ProbablyManaged,
    /// debugfs shows it is not managed, or (without debugfs) nothing suggests it is.
    Movable,
}

/// One line of `/proc/interrupts` that fires on an RT CPU, with its affinity. An element of
/// `tuning.irqs_on_rt_cpus` in `rtapi detect --json`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Irq {
    /// The IRQ number (`/proc/irq/N`).
    pub(crate) irq: u32,
    /// The interrupt chip (`IO-APIC`, `PCI-MSIX-0000:00:02.0`, …).
    pub(crate) chip: String,
    /// Hardware IRQ and trigger (`1-edge`).
    pub(crate) hwirq: String,
    /// The handlers' names (`virtio1-req.0`).
    pub(crate) name: String,
    /// Interrupts since boot on the RT CPUs together.
    pub(crate) count_on_rt: u64,
    /// `[cpu, count]` for every CPU column of `/proc/interrupts`.
    pub(crate) counts: Vec<(usize, u64)>,
    /// `smp_affinity_list`, when readable.
    pub(crate) affinity: Option<Vec<usize>>,
    /// `effective_affinity_list`, when readable.
    pub(crate) effective_affinity: Option<Vec<usize>>,
    /// Whether it can be moved at run time.
    pub(crate) managed: Movability,
}

/// The `tuning` object of `rtapi detect --json`; `None` where a file could not be read.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Tuning {
    /// The CPUs kept free for RT work: the RT CPU and the isolated CPUs.
    pub(crate) rt_cpus: Vec<usize>,
    /// IRQs that fired on an RT CPU and whose affinity still includes one; `None` without
    /// `/proc/interrupts`.
    pub(crate) irqs_on_rt_cpus: Option<Vec<Irq>>,
    /// What their `count_on_rt` counts: `None`, since boot; else the stretch they were counted
    /// over again ([`Tuning::recount_irqs`], e.g. "during the 60 s run").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) irq_counts_over: Option<String>,
    /// The PID of a running irqbalance (it moves IRQs back onto the RT CPUs).
    pub(crate) irqbalance_pid: Option<u32>,
    /// `kernel.timer_migration`.
    pub(crate) timer_migration: Option<bool>,
    /// `kernel.watchdog` (soft lockup detector and its per-CPU timers).
    pub(crate) watchdog: Option<bool>,
    /// `kernel.nmi_watchdog` (periodic NMIs on every CPU).
    pub(crate) nmi_watchdog: Option<bool>,
    /// CPUs unbound workqueues may run on (`/sys/devices/virtual/workqueue/cpumask`).
    pub(crate) workqueue_cpumask: Option<Vec<usize>>,
    /// `isolcpus=` on `/proc/cmdline` has the `managed_irq` flag: the kernel already keeps managed IRQs
    /// off the isolated CPUs where it can.
    pub(crate) managed_irq_isolation: bool,
    /// The flags of `isolcpus=` (`domain`, `managed_irq`, `nohz`); `None` when `isolcpus=` is not given,
    /// empty when it is given as a bare CPU list (which means `domain`).
    pub(crate) isolcpus_flags: Option<Vec<String>>,
    /// The cpuidle states of the RT CPUs (`/sys/devices/system/cpu/cpuN/cpuidle/stateK`); `None` when no
    /// RT CPU has a cpuidle directory (no cpuidle driver, or a fixture without one).
    pub(crate) idle_states: Option<Vec<IdleState>>,
}

/// One cpuidle state of an RT CPU. An element of `tuning.idle_states` in `rtapi detect --json`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct IdleState {
    /// The CPU.
    pub(crate) cpu: usize,
    /// K of `stateK`.
    pub(crate) state: usize,
    /// `name` (`POLL`, `C1`, `C1E`, `C6`, …).
    pub(crate) name: String,
    /// `latency`: the exit latency the driver declares, µs; `None` when unreadable.
    pub(crate) latency_us: Option<u64>,
    /// `disable` is 1: the governor never picks this state.
    pub(crate) disabled: Option<bool>,
}

/// Idle states whose exit latency is above this many µs are worth disabling on the RT CPUs: a wake-up
/// from them arrives that much late. C1 (1–2 µs) stays; C1E (~10 µs) and deeper are reported.
pub(crate) const IDLE_EXIT_LATENCY_LIMIT_US: u64 = 2;

impl IdleState {
    /// Enabled, with an exit latency above [`IDLE_EXIT_LATENCY_LIMIT_US`].
    pub(crate) fn is_slow_and_enabled(&self) -> bool {
        self.disabled == Some(false)
            && self
                .latency_us
                .is_some_and(|l| l > IDLE_EXIT_LATENCY_LIMIT_US)
    }
}

fn flag(root: &SysRoot, rel: &str) -> Option<bool> {
    match root.read(rel).parse::<u8>()? {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

pub(crate) fn detect(root: &SysRoot, rt_cpu: Option<usize>, isolated: &[usize]) -> Tuning {
    let mut rt_cpus: Vec<usize> = isolated.iter().copied().chain(rt_cpu).collect();
    rt_cpus.sort_unstable();
    rt_cpus.dedup();
    let irqs_on_rt_cpus = root
        .read("proc/interrupts")
        .text()
        .map(|t| irqs_on(root, &parse_interrupts(t), &rt_cpus));
    Tuning {
        irqs_on_rt_cpus,
        irq_counts_over: None,
        irqbalance_pid: find_process(root, "irqbalance"),
        timer_migration: flag(root, "proc/sys/kernel/timer_migration"),
        watchdog: flag(root, "proc/sys/kernel/watchdog"),
        nmi_watchdog: flag(root, "proc/sys/kernel/nmi_watchdog"),
        workqueue_cpumask: root
            .read("sys/devices/virtual/workqueue/cpumask")
            .text()
            .and_then(parse_hex_mask),
        managed_irq_isolation: root.read("proc/cmdline").text().is_some_and(|c| {
            c.split_whitespace()
                .filter_map(|w| w.strip_prefix("isolcpus="))
                .any(|v| v.split(',').any(|f| f == "managed_irq"))
        }),
        isolcpus_flags: root.read("proc/cmdline").text().and_then(isolcpus_flags),
        idle_states: idle_states(root, &rt_cpus),
        rt_cpus,
    }
}

/// The non-numeric words of the first `isolcpus=` on the command line (the one `cpus.isolcpus` reads).
pub(crate) fn isolcpus_flags(cmdline: &str) -> Option<Vec<String>> {
    let value = cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("isolcpus="))?;
    Some(
        value
            .split(',')
            .filter(|p| !p.is_empty() && !p.starts_with(|c: char| c.is_ascii_digit()))
            .map(str::to_string)
            .collect(),
    )
}

/// The cpuidle states of `cpus`, in state order per CPU; `None` when none of them has any.
pub(crate) fn idle_states(root: &SysRoot, cpus: &[usize]) -> Option<Vec<IdleState>> {
    let mut out = Vec::new();
    for &cpu in cpus {
        let dir = format!("sys/devices/system/cpu/cpu{cpu}/cpuidle");
        let mut states: Vec<usize> = root
            .list_dir(&dir)
            .iter()
            .filter_map(|n| n.strip_prefix("state")?.parse().ok())
            .collect();
        states.sort_unstable();
        for k in states {
            let file = |f: &str| root.read(&format!("{dir}/state{k}/{f}"));
            out.push(IdleState {
                cpu,
                state: k,
                name: file("name").text().unwrap_or("?").to_string(),
                latency_us: file("latency").parse(),
                disabled: file("disable").parse::<u8>().map(|d| d != 0),
            });
        }
    }
    (!out.is_empty()).then_some(out)
}

impl Tuning {
    /// Counts the listed IRQs again as the difference between `now` (a later `/proc/interrupts`)
    /// and what was read at detection, over the stretch `over` names: an IRQ that did not fire on
    /// the RT CPUs meanwhile is no longer listed.
    pub(crate) fn recount_irqs(&mut self, now: &[IrqLine], over: &str) {
        let Some(irqs) = self.irqs_on_rt_cpus.as_mut() else {
            return;
        };
        let rt = &self.rt_cpus;
        irqs.retain_mut(|i| {
            let Some(line) = now.iter().find(|l| l.irq == Some(i.irq)) else {
                return false;
            };
            let on_rt: u64 = line
                .counts
                .iter()
                .filter(|(cpu, _)| rt.contains(cpu))
                .map(|(_, n)| n)
                .sum();
            i.count_on_rt = on_rt.saturating_sub(i.count_on_rt);
            i.counts = line.counts.clone();
            i.count_on_rt > 0
        });
        irqs.sort_by_key(|i| std::cmp::Reverse(i.count_on_rt));
        self.irq_counts_over = Some(over.to_string());
    }
}

fn irqs_on(root: &SysRoot, lines: &[IrqLine], rt_cpus: &[usize]) -> Vec<Irq> {
    let list = |rel: String| root.read(&rel).text().and_then(cpulist::parse);
    let mut out = Vec::new();
    for IrqLine {
        irq,
        name,
        counts,
        chip,
        hwirq,
        ..
    } in lines
    {
        let Some(irq) = irq else {
            continue; // LOC, RES, …: per CPU, no affinity
        };
        let count_on_rt: u64 = counts
            .iter()
            .filter(|(cpu, _)| rt_cpus.contains(cpu))
            .map(|(_, n)| n)
            .sum();
        if count_on_rt == 0 {
            continue;
        }
        let affinity = list(format!("proc/irq/{irq}/smp_affinity_list"));
        let effective_affinity = list(format!("proc/irq/{irq}/effective_affinity_list"));
        // Counts are since boot: an IRQ already moved off the RT CPUs is not listed again. Moved
        // means either list without an RT CPU: on x86 the effective affinity of a moved IRQ follows
        // only at its next interrupt, so a fresh `smp_affinity_list` write shows there first.
        let includes_rt = |a: &Option<Vec<usize>>| {
            a.as_ref()
                .is_none_or(|a| a.iter().any(|c| rt_cpus.contains(c)))
        };
        let still_there = includes_rt(&effective_affinity) && includes_rt(&affinity);
        if !still_there {
            continue;
        }
        let managed = movability(root, *irq, name);
        out.push(Irq {
            irq: *irq,
            chip: chip.clone(),
            hwirq: hwirq.clone(),
            name: name.clone(),
            count_on_rt,
            counts: counts.clone(),
            affinity,
            effective_affinity,
            managed,
        });
    }
    out.sort_by_key(|i| std::cmp::Reverse(i.count_on_rt));
    out
}

/// Whether IRQ `irq` (named `name` in `/proc/interrupts`) can be moved at run time: debugfs when it
/// is mounted, else the name.
pub(crate) fn movability(root: &SysRoot, irq: u32, name: &str) -> Movability {
    match root
        .read(&format!("sys/kernel/debug/irq/irqs/{irq}"))
        .text()
    {
        Some(t) if t.contains("IRQD_AFFINITY_MANAGED") => Movability::Managed,
        Some(_) => Movability::Movable,
        None if probably_managed(name) => Movability::ProbablyManaged,
        None => Movability::Movable,
    }
}

/// Queue IRQs the kernel spreads over CPUs itself: virtio-blk/scsi request queues (`virtio1-req.0`,
/// `virtio0-request`) and NVMe I/O queues (`nvme0q1`; `nvme0q0` is the admin queue, not managed).
fn probably_managed(name: &str) -> bool {
    name.split([' ', ',']).any(|n| {
        let virtio_req = n.starts_with("virtio") && n.contains("-req");
        let nvme_io = n
            .strip_prefix("nvme")
            .and_then(|r| r.split_once('q'))
            .is_some_and(|(ctrl, q)| {
                !ctrl.is_empty()
                    && ctrl.bytes().all(|b| b.is_ascii_digit())
                    && q.parse::<u32>().is_ok_and(|q| q > 0)
            });
        virtio_req || nvme_io
    })
}

/// The lowest PID whose `/proc/PID/comm` is `comm`.
fn find_process(root: &SysRoot, comm: &str) -> Option<u32> {
    let mut pids: Vec<u32> = root
        .list_dir("proc")
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter()
        .find(|pid| root.read(&format!("proc/{pid}/comm")).text() == Some(comm))
}

/// A kernel CPU mask in hex, 32-bit groups separated by commas (`ff,ffffffff`), to a CPU list.
pub(crate) fn parse_hex_mask(text: &str) -> Option<Vec<usize>> {
    let digits: String = text.trim().chars().filter(|&c| c != ',').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut cpus = Vec::new();
    for (i, c) in digits.chars().rev().enumerate() {
        let v = c.to_digit(16)? as usize;
        for bit in 0..4 {
            if v & (1 << bit) != 0 {
                cpus.push(i * 4 + bit);
            }
        }
    }
    Some(cpus)
}

/// A CPU list as a kernel hex mask, 32-bit groups separated by commas.
pub(crate) fn format_hex_mask(cpus: &[usize]) -> String {
    let words = cpus.iter().max().map_or(1, |&m| m / 32 + 1);
    let mut groups = vec![0u32; words];
    for &c in cpus {
        groups[c / 32] |= 1 << (c % 32);
    }
    let mut s = format!("{:x}", groups[words - 1]);
    for g in groups[..words - 1].iter().rev() {
        s.push_str(&format!(",{g:08x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verdict said "IRQ 36 fired 212952 times on CPU 1": since boot, not during the run. The
    /// advice now says which; a recount over a run gives the run's own count, and drops an IRQ that
    /// did not fire on the RT CPU meanwhile.
    #[test]
    fn irq_counts_say_what_they_count() {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        let interrupts = |a: u64, b: u64| {
            format!(
                "           CPU0       CPU1\n 36:        10     {a}  PCI-MSIX-0000:00:04.0 1-edge      eth0\n 37:         0     {b}  PCI-MSIX-0000:00:05.0 2-edge      eth1\n"
            )
        };
        write("proc/interrupts", &interrupts(212952, 5));
        for irq in [36, 37] {
            write(&format!("proc/irq/{irq}/smp_affinity_list"), "0-1\n");
            write(&format!("proc/irq/{irq}/effective_affinity_list"), "1\n");
        }
        let mut t = detect(&SysRoot::new(dir.path()), Some(1), &[]);
        let counts = |t: &Tuning| -> Vec<(u32, u64)> {
            t.irqs_on_rt_cpus
                .iter()
                .flatten()
                .map(|i| (i.irq, i.count_on_rt))
                .collect()
        };
        assert_eq!(counts(&t), [(36, 212952), (37, 5)]);
        t.recount_irqs(
            &parse_interrupts(&interrupts(213052, 5)),
            "during the 10 s run",
        );
        assert_eq!(counts(&t), [(36, 100)], "eth1 did not fire during the run");
        assert_eq!(t.irq_counts_over.as_deref(), Some("during the 10 s run"));
    }

    #[test]
    fn managed_guess() {
        assert!(probably_managed("virtio1-req.0"));
        assert!(probably_managed("nvme0q3"));
        assert!(!probably_managed("nvme0q0"));
        assert!(!probably_managed("virtio2-input.0"));
    }

    #[test]
    fn isolcpus_flags_of_the_first_argument() {
        assert_eq!(isolcpus_flags("quiet"), None);
        assert_eq!(isolcpus_flags("isolcpus=2-3"), Some(vec![]));
        assert_eq!(
            isolcpus_flags("isolcpus=managed_irq,domain,2-3 isolcpus=1"),
            Some(vec!["managed_irq".to_string(), "domain".to_string()])
        );
    }

    #[test]
    fn hex_masks() {
        assert_eq!(parse_hex_mask("3"), Some(vec![0, 1]));
        assert_eq!(parse_hex_mask("1,00000001"), Some(vec![0, 32]));
        assert_eq!(parse_hex_mask("zz"), None);
        assert_eq!(format_hex_mask(&[0]), "1");
        assert_eq!(format_hex_mask(&[0, 32]), "1,00000001");
        assert_eq!(format_hex_mask(&[]), "0");
    }
}
