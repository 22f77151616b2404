//! Which CPU to give the RT threads, from the survey's numbers, and what to do to that CPU.
//!
//! **The rule** (the same in `--help`, the README and the survey's JSON `recommendation.rule`):
//!
//! 1. The lowest worst-case latency (the larger max of the CPU's base and servo threads). CPUs whose
//!    worst case is within [`TIE_NS`] or [`TIE_FRACTION`] of the best (whichever is larger) count as
//!    equal: one run's single worst sample is noisy, and a few µs between two CPUs is not a reason.
//! 2. Among those, the lowest p99.9 (the larger of the two threads'; 1 µs histogram bins, compared
//!    exactly).
//! 3. Then the fewest interrupts per second that cannot be moved off the CPU at run time (managed,
//!    probably managed and per-CPU ones: the load that stays after the movable IRQs are moved away).
//! 4. Then the highest CPU number (CPU 0 keeps boot-time and timekeeping work on most machines).
//!
//! Only CPUs measured for the whole duration, with at least one cycle, are candidates.

/// Worst cases closer than this to the best one are equal (rule 1).
pub(crate) const TIE_NS: u64 = 5_000;
/// Worst cases within this fraction of the best one are equal (rule 1).
pub(crate) const TIE_FRACTION: f64 = 0.10;

/// The rule in one sentence, for the JSON and the text.
pub(crate) const RULE: &str = "lowest worst-case latency (within max(5 µs, 10 %) of the best counts as equal), then lowest p99.9, then fewest interrupts per second that cannot be moved off the CPU (managed and per-CPU), then the highest CPU number";

/// A measured CPU's figures the rule looks at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidate {
    pub(crate) cpu: usize,
    /// Worst latency of the CPU's threads, ns.
    pub(crate) worst_ns: u64,
    /// Worst p99.9 of the CPU's threads, ns.
    pub(crate) p999_ns: u64,
    /// Interrupts per second no affinity change removes; unknown counts as none.
    pub(crate) fixed_irqs_per_s: f64,
}

/// The largest worst case that still ties with `best` (rule 1).
pub(crate) fn tie_limit(best_ns: u64) -> u64 {
    let fraction = (best_ns as f64 * TIE_FRACTION) as u64;
    best_ns.saturating_add(TIE_NS.max(fraction))
}

/// The CPU the rule picks, and which rule decided (`1`…`4`); `None` without candidates.
pub(crate) fn choose(candidates: &[Candidate]) -> Option<(usize, u8)> {
    let best = candidates.iter().map(|c| c.worst_ns).min()?;
    let limit = tie_limit(best);
    let tied: Vec<&Candidate> = candidates.iter().filter(|c| c.worst_ns <= limit).collect();
    if let [only] = tied[..] {
        return Some((only.cpu, 1));
    }
    let best_p999 = tied.iter().map(|c| c.p999_ns).min()?;
    let tied: Vec<&Candidate> = tied
        .into_iter()
        .filter(|c| c.p999_ns == best_p999)
        .collect();
    if let [only] = tied[..] {
        return Some((only.cpu, 2));
    }
    let fewest = tied
        .iter()
        .map(|c| c.fixed_irqs_per_s)
        .fold(f64::INFINITY, f64::min);
    let tied: Vec<&Candidate> = tied
        .into_iter()
        .filter(|c| c.fixed_irqs_per_s <= fewest)
        .collect();
    if let [only] = tied[..] {
        return Some((only.cpu, 3));
    }
    tied.iter().map(|c| c.cpu).max().map(|cpu| (cpu, 4))
}

/// Boot parameters that keep everything but the RT threads off `cpus` (kernel command line).
pub(crate) fn boot_parameters(cpus: &[usize]) -> String {
    let list = crate::rt::cpulist::format(cpus);
    format!("isolcpus=managed_irq,domain,{list} nohz_full={list} rcu_nocbs={list}")
}

/// The command that moves IRQ `irq` to `to` now (root; lasts until reboot or irqbalance).
pub(crate) fn move_command(irq: u32, to: &[usize]) -> String {
    format!(
        "echo {} > /proc/irq/{irq}/smp_affinity_list",
        crate::rt::cpulist::format(to)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(cpu: usize, worst_us: u64, p999_us: u64, fixed: f64) -> Candidate {
        Candidate {
            cpu,
            worst_ns: worst_us * 1000,
            p999_ns: p999_us * 1000,
            fixed_irqs_per_s: fixed,
        }
    }

    #[test]
    fn lowest_worst_case_wins_when_clearly_lower() {
        let got = choose(&[c(0, 800, 20, 10.0), c(1, 300, 50, 900.0), c(2, 500, 5, 0.0)]);
        assert_eq!(got, Some((1, 1)));
    }

    #[test]
    fn close_worst_cases_are_decided_by_p999() {
        // 300 vs 320 µs: within 10 % of 300 µs, so p99.9 decides.
        let got = choose(&[c(0, 320, 12, 500.0), c(1, 300, 30, 0.0), c(2, 900, 1, 0.0)]);
        assert_eq!(got, Some((0, 2)));
        // 40 vs 44 µs: 10 % is 4 µs, but 5 µs is the least tolerance.
        let got = choose(&[c(0, 44, 10, 0.0), c(1, 40, 11, 0.0)]);
        assert_eq!(got, Some((0, 2)));
        // 40 vs 46 µs: not equal.
        let got = choose(&[c(0, 46, 10, 0.0), c(1, 40, 11, 0.0)]);
        assert_eq!(got, Some((1, 1)));
    }

    #[test]
    fn then_fewest_fixed_interrupts_then_highest_cpu() {
        let got = choose(&[
            c(0, 100, 10, 900.0),
            c(1, 101, 10, 250.0),
            c(2, 102, 10, 1000.0),
        ]);
        assert_eq!(got, Some((1, 3)));
        let got = choose(&[
            c(0, 100, 10, 250.0),
            c(3, 101, 10, 250.0),
            c(2, 102, 10, 250.0),
        ]);
        assert_eq!(got, Some((3, 4)));
        assert_eq!(choose(&[]), None);
        assert_eq!(choose(&[c(5, 1, 1, 0.0)]), Some((5, 1)));
    }

    #[test]
    fn tie_limit_is_the_larger_tolerance() {
        assert_eq!(tie_limit(0), 5_000);
        assert_eq!(tie_limit(40_000), 45_000);
        assert_eq!(tie_limit(1_000_000), 1_100_000);
        assert_eq!(tie_limit(u64::MAX), u64::MAX);
    }

    #[test]
    fn commands_for_the_machine_builder() {
        assert_eq!(
            boot_parameters(&[2, 3]),
            "isolcpus=managed_irq,domain,2-3 nohz_full=2-3 rcu_nocbs=2-3"
        );
        assert_eq!(
            move_command(41, &[0, 2, 3]),
            "echo 0,2-3 > /proc/irq/41/smp_affinity_list"
        );
    }
}
