//! The interrupt load one CPU saw during its run: `/proc/interrupts` and `/proc/softirqs` read just
//! before and just after the run, and the difference of that CPU's column turned into rates.
//!
//! Both files count since boot, per CPU. A since-boot count says where interrupts went last week; the
//! difference says where they went while the RT threads were measured, which is what explains the
//! numbers of that run.

pub(crate) use crate::detect::{parse_interrupts, parse_softirqs, IrqLine, SoftirqLine};
use serde::Serialize;
use std::time::Instant;

/// Whether an interrupt source can be kept off a CPU, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum IrqKind {
    /// A device IRQ whose affinity may be written at run time (`/proc/irq/N/smp_affinity_list`).
    Movable,
    /// A kernel-managed device IRQ (debugfs says so): only `isolcpus=managed_irq,…` at boot keeps it
    /// off a CPU.
    Managed,
    /// Managed by its name (a virtio request queue, an NVMe I/O queue); debugfs was not there to say.
    ProbablyManaged,
    /// A per-CPU interrupt of the architecture (`LOC` local timer, `RES`/`CAL`/`TLB` IPIs, …): it has no
    /// affinity; `nohz_full` and isolation make it rarer.
    PerCpu,
}

impl IrqKind {
    /// The short word of the text table.
    pub(crate) fn word(self) -> &'static str {
        match self {
            IrqKind::Movable => "movable",
            IrqKind::Managed => "managed",
            IrqKind::ProbablyManaged => "managed?",
            IrqKind::PerCpu => "per-cpu",
        }
    }

    /// Whether moving its affinity keeps it off a CPU at run time.
    pub(crate) fn movable(self) -> bool {
        self == IrqKind::Movable
    }
}

/// Both files at one moment; `None` for a file that could not be read.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub(crate) at: Instant,
    pub(crate) interrupts: Option<Vec<IrqLine>>,
    pub(crate) softirqs: Option<Vec<SoftirqLine>>,
}

impl Snapshot {
    /// Reads `/proc/interrupts` and `/proc/softirqs` now.
    pub(crate) fn take() -> Snapshot {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        Snapshot {
            at: Instant::now(),
            interrupts: read("/proc/interrupts").map(|t| parse_interrupts(&t)),
            softirqs: read("/proc/softirqs").map(|t| parse_softirqs(&t)),
        }
    }
}

/// One interrupt source's count on one CPU during a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct IrqDelta {
    /// `/proc/interrupts`' label: the IRQ number, or `LOC`, `RES`, `CAL`, …
    pub(crate) source: String,
    /// The IRQ number of a device IRQ (`/proc/irq/N`).
    pub(crate) irq: Option<u32>,
    pub(crate) name: String,
    pub(crate) kind: IrqKind,
    /// Interrupts on this CPU during the run.
    pub(crate) count: u64,
    /// `count` per second of the run.
    pub(crate) per_s: f64,
}

/// One softirq type's count on one CPU during a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SoftirqDelta {
    pub(crate) name: String,
    pub(crate) count: u64,
    pub(crate) per_s: f64,
}

/// The interrupt load of one CPU during its run. Sources are listed when they fired at least once,
/// busiest first; `total` is the sum of their counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Load<T> {
    pub(crate) total: u64,
    pub(crate) per_s: f64,
    pub(crate) sources: Vec<T>,
}

/// What one CPU saw between two snapshots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CpuLoad {
    /// Seconds between the two snapshots (the rates' denominator).
    pub(crate) seconds: f64,
    /// `None` when `/proc/interrupts` could not be read.
    pub(crate) irqs: Option<Load<IrqDelta>>,
    /// `None` when `/proc/softirqs` could not be read.
    pub(crate) softirqs: Option<Load<SoftirqDelta>>,
}

impl CpuLoad {
    /// Interrupts per second that no affinity change keeps off the CPU (managed, probably managed
    /// and per-CPU ones); `None` without `/proc/interrupts`.
    pub(crate) fn fixed_irqs_per_s(&self) -> Option<f64> {
        self.irqs.as_ref().map(|l| {
            l.sources
                .iter()
                .filter(|s| !s.kind.movable())
                .map(|s| s.per_s)
                .sum()
        })
    }
}

/// The count of `cpu` in `counts`.
fn count_of(counts: &[(usize, u64)], cpu: usize) -> Option<u64> {
    counts.iter().find(|(c, _)| *c == cpu).map(|(_, n)| *n)
}

/// How many events happened between a count `before` (absent: the source did not exist yet) and a
/// count `after`. A counter that went down was freed and registered again during the run: all of its
/// new count happened during the run.
pub(crate) fn events(before: Option<u64>, after: u64) -> u64 {
    match before {
        Some(b) if b <= after => after - b,
        _ => after,
    }
}

/// A rate per second; zero for an empty interval.
pub(crate) fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Sorted busiest first, ties by name, and summed.
fn load<T>(
    mut sources: Vec<T>,
    seconds: f64,
    count: impl Fn(&T) -> u64,
    name: impl Fn(&T) -> &str,
) -> Load<T> {
    sources.sort_by(|a, b| count(b).cmp(&count(a)).then_with(|| name(a).cmp(name(b))));
    let total = sources.iter().map(&count).sum();
    Load {
        total,
        per_s: rate(total, seconds),
        sources,
    }
}

/// `cpu`'s interrupt load between `before` and `after`. `kind` classifies a numbered IRQ (named lines
/// are always [`IrqKind::PerCpu`]); it is asked only for IRQs that fired on `cpu`.
pub(crate) fn cpu_load(
    before: &Snapshot,
    after: &Snapshot,
    cpu: usize,
    kind: impl Fn(u32, &str) -> IrqKind,
) -> CpuLoad {
    let seconds = after.at.saturating_duration_since(before.at).as_secs_f64();
    let irqs = before
        .interrupts
        .as_ref()
        .zip(after.interrupts.as_ref())
        .map(|(b, a)| {
            let deltas = a
                .iter()
                .filter_map(|line| {
                    let now = count_of(&line.counts, cpu)?;
                    let then = b
                        .iter()
                        .find(|l| l.key == line.key)
                        .and_then(|l| count_of(&l.counts, cpu));
                    let count = events(then, now);
                    (count > 0).then(|| IrqDelta {
                        source: line.key.clone(),
                        irq: line.irq,
                        name: line.name.clone(),
                        kind: line.irq.map_or(IrqKind::PerCpu, |n| kind(n, &line.name)),
                        count,
                        per_s: rate(count, seconds),
                    })
                })
                .collect();
            load(deltas, seconds, |d: &IrqDelta| d.count, |d| &d.source)
        });
    let softirqs = before
        .softirqs
        .as_ref()
        .zip(after.softirqs.as_ref())
        .map(|(b, a)| {
            let deltas = a
                .iter()
                .filter_map(|(name, counts)| {
                    let now = count_of(counts, cpu)?;
                    let then = b
                        .iter()
                        .find(|(n, _)| n == name)
                        .and_then(|(_, c)| count_of(c, cpu));
                    let count = events(then, now);
                    (count > 0).then(|| SoftirqDelta {
                        name: name.clone(),
                        count,
                        per_s: rate(count, seconds),
                    })
                })
                .collect();
            load(deltas, seconds, |d: &SoftirqDelta| d.count, |d| &d.name)
        });
    CpuLoad {
        seconds,
        irqs,
        softirqs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const BEFORE: &str = "           CPU0       CPU1\n\
  24:          1          0  IO-APIC   5-edge      ACPI:Ged\n\
  36:          0     672053 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n\
  41:       5499          0 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx\n\
 LOC:    2553713   60890360   Local timer interrupts\n\
 ERR:          0\n\
 MIS:          0\n";

    const AFTER: &str = "           CPU0       CPU1\n\
  24:          1          0  IO-APIC   5-edge      ACPI:Ged\n\
  36:          0     673053 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n\
  41:       5509         30 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx\n\
  50:          0          7 PCI-MSIX-0000:00:06.0   0-edge      new-device\n\
 LOC:    2555713   60894360   Local timer interrupts\n\
 ERR:          0\n\
 MIS:          0\n";

    const SOFT_BEFORE: &str = "                    CPU0       CPU1\n\
          HI:          0          0\n\
       TIMER:     238138     246944\n\
       BLOCK:          0     672006\n";

    const SOFT_AFTER: &str = "                    CPU0       CPU1\n\
          HI:          0          0\n\
       TIMER:     238148     247344\n\
       BLOCK:          0     672806\n";

    fn snapshots(seconds: u64) -> (Snapshot, Snapshot) {
        let t0 = Instant::now();
        (
            Snapshot {
                at: t0,
                interrupts: Some(parse_interrupts(BEFORE)),
                softirqs: Some(parse_softirqs(SOFT_BEFORE)),
            },
            Snapshot {
                at: t0 + Duration::from_secs(seconds),
                interrupts: Some(parse_interrupts(AFTER)),
                softirqs: Some(parse_softirqs(SOFT_AFTER)),
            },
        )
    }

    fn guess(_: u32, name: &str) -> IrqKind {
        if name.contains("-req") {
            IrqKind::ProbablyManaged
        } else {
            IrqKind::Movable
        }
    }

    #[test]
    fn parses_numbered_and_named_lines_but_not_system_wide_counts() {
        let l = parse_interrupts(BEFORE);
        let keys: Vec<&str> = l.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["24", "36", "41", "LOC"]);
        assert_eq!(l[1].irq, Some(36));
        assert_eq!(l[1].name, "virtio1-req.0");
        assert_eq!(l[1].counts, [(0, 0), (1, 672053)]);
        assert_eq!(l[3].irq, None);
        assert_eq!(l[3].name, "Local timer interrupts");
        assert_eq!(l[3].counts, [(0, 2553713), (1, 60890360)]);
        assert!(parse_interrupts("").is_empty());
        let s = parse_softirqs(SOFT_BEFORE);
        assert_eq!(s[1], ("TIMER".to_string(), vec![(0, 238138), (1, 246944)]));
    }

    #[test]
    fn a_cpu_sees_its_own_column_as_rates_over_the_run() {
        let (b, a) = snapshots(4);
        let l = cpu_load(&b, &a, 1, guess);
        assert_eq!(l.seconds, 4.0);
        let irqs = l.irqs.as_ref().unwrap();
        // Busiest first; sources that did not fire on CPU 1 are left out.
        let got: Vec<(&str, u64, IrqKind)> = irqs
            .sources
            .iter()
            .map(|s| (s.source.as_str(), s.count, s.kind))
            .collect();
        assert_eq!(
            got,
            [
                ("LOC", 4000, IrqKind::PerCpu),
                ("36", 1000, IrqKind::ProbablyManaged),
                ("41", 30, IrqKind::Movable),
                ("50", 7, IrqKind::Movable),
            ]
        );
        assert_eq!(irqs.total, 5037);
        assert_eq!(irqs.per_s, 5037.0 / 4.0);
        assert_eq!(irqs.sources[1].per_s, 250.0);
        // Managed and per-CPU interrupts cannot be moved away.
        assert_eq!(l.fixed_irqs_per_s(), Some(1250.0));
        let soft = l.softirqs.as_ref().unwrap();
        assert_eq!(soft.total, 1200);
        assert_eq!(soft.sources[0].name, "BLOCK");
        assert_eq!(soft.sources[1].per_s, 100.0);

        let l0 = cpu_load(&b, &a, 0, guess);
        let irqs0 = l0.irqs.unwrap();
        assert_eq!(irqs0.total, 2010);
        assert_eq!(irqs0.sources.len(), 2, "{:?}", irqs0.sources);
        assert_eq!(l0.softirqs.unwrap().total, 10);
    }

    #[test]
    fn counters_that_restart_or_appear_count_from_zero() {
        assert_eq!(events(Some(10), 15), 5);
        assert_eq!(events(None, 7), 7);
        assert_eq!(events(Some(100), 3), 3);
        assert_eq!(rate(10, 0.0), 0.0);
        assert_eq!(rate(10, 4.0), 2.5);
    }

    #[test]
    fn unreadable_files_and_unknown_cpus_give_nothing() {
        let (mut b, a) = snapshots(1);
        b.interrupts = None;
        let l = cpu_load(&b, &a, 1, guess);
        assert!(l.irqs.is_none() && l.fixed_irqs_per_s().is_none());
        assert!(l.softirqs.is_some());
        let (b, a) = snapshots(1);
        let l = cpu_load(&b, &a, 7, guess);
        assert_eq!(l.irqs.unwrap().total, 0);
        assert_eq!(l.softirqs.unwrap().total, 0);
        // A zero-length interval has no rates rather than infinite ones.
        let (b, _) = snapshots(0);
        let l = cpu_load(&b, &b, 1, guess);
        assert_eq!(l.irqs.unwrap().per_s, 0.0);
    }
}
