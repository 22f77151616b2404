//! CPUs: which are online, isolated from the scheduler, tickless, SMT siblings, their governors, and
//! the CPU the runtime would put its RT threads on.

use super::sysroot::SysRoot;
use crate::rt::cpulist;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct CpuInfo {
    pub(crate) id: usize,
    /// cpufreq scaling governor (`performance`, `powersave`, …); `None` without cpufreq (common in VMs).
    pub(crate) governor: Option<String>,
    /// The CPUs sharing this core (itself included), from `topology/thread_siblings_list`.
    pub(crate) siblings: Vec<usize>,
}

/// The CPUs of this machine as the scheduler sees them, and the CPU chosen for RT threads. CPU
/// numbers are the kernel's logical ids; lists are sorted. The `cpus` object of `rtapi detect --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Cpus {
    /// `None` when `/sys/devices/system/cpu/online` could not be read.
    pub online: Option<Vec<usize>>,
    /// CPUs present but offline (`/sys/devices/system/cpu/offline`); empty when none or unreadable.
    pub offline: Vec<usize>,
    /// CPUs this process may run on (`Cpus_allowed_list`), when known.
    pub allowed: Option<Vec<usize>>,
    /// CPUs isolated from the general scheduler (`/sys/devices/system/cpu/isolated`).
    pub isolated: Vec<usize>,
    /// The boot arguments, as given on `/proc/cmdline` (CPU lists only; flags such as `domain` dropped).
    pub isolcpus: Option<Vec<usize>>,
    /// `nohz_full=` from `/proc/cmdline`: CPUs whose tick stops when one task runs; `None` when not given.
    pub nohz_full: Option<Vec<usize>>,
    pub(crate) rcu_nocbs: Option<Vec<usize>>,
    /// SMT (hyper-threading) active, from `/sys/devices/system/cpu/smt/active`.
    pub(crate) smt_active: Option<bool>,
    pub(crate) per_cpu: Vec<CpuInfo>,
    /// Where RT threads go by default: the highest online isolated CPU, else the highest online CPU,
    /// never an offline one (and never one this process may not use).
    pub rt_cpu: Option<usize>,
    /// Why `rt_cpu` is that CPU (or `None`), in words for the report, e.g. `highest isolated online CPU`.
    pub rt_cpu_reason: String,
}

impl Cpus {
    pub(crate) fn info(&self, cpu: usize) -> Option<&CpuInfo> {
        self.per_cpu.iter().find(|c| c.id == cpu)
    }

    /// The other online hyper-threads of `cpu`'s core.
    pub(crate) fn online_siblings_of(&self, cpu: usize) -> Vec<usize> {
        let online = self.online.as_deref().unwrap_or(&[]);
        self.info(cpu)
            .map(|c| {
                c.siblings
                    .iter()
                    .copied()
                    .filter(|&s| s != cpu && online.contains(&s))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn list(root: &SysRoot, rel: &str) -> Option<Vec<usize>> {
    root.read(rel).text().and_then(cpulist::parse)
}

/// The CPU list of a boot argument such as `isolcpus=domain,managed_irq,2-3`: flags are skipped.
fn cmdline_list(cmdline: &str, key: &str) -> Option<Vec<usize>> {
    let value = cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))?;
    let cpus: Vec<&str> = value
        .split(',')
        .filter(|p| p.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    cpulist::parse(&cpus.join(","))
}

pub(crate) fn detect(root: &SysRoot) -> Cpus {
    let online = list(root, "sys/devices/system/cpu/online");
    let offline = list(root, "sys/devices/system/cpu/offline").unwrap_or_default();
    let isolated = list(root, "sys/devices/system/cpu/isolated").unwrap_or_default();
    let allowed = root.read("proc/self/status").text().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .and_then(cpulist::parse)
    });
    let cmdline = root
        .read("proc/cmdline")
        .text()
        .unwrap_or_default()
        .to_string();

    let known: Vec<usize> = {
        let mut all: Vec<usize> = online.clone().unwrap_or_default();
        all.extend(&offline);
        all.extend(list(root, "sys/devices/system/cpu/present").unwrap_or_default());
        all.sort_unstable();
        all.dedup();
        all
    };
    let per_cpu = known
        .iter()
        .map(|&id| CpuInfo {
            id,
            governor: root
                .read(&format!(
                    "sys/devices/system/cpu/cpu{id}/cpufreq/scaling_governor"
                ))
                .text()
                .filter(|g| !g.is_empty())
                .map(str::to_string),
            siblings: list(
                root,
                &format!("sys/devices/system/cpu/cpu{id}/topology/thread_siblings_list"),
            )
            .unwrap_or_default(),
        })
        .collect();

    let (rt_cpu, rt_cpu_reason) = choose_rt_cpu(online.as_deref(), &isolated, allowed.as_deref());
    Cpus {
        smt_active: root
            .read("sys/devices/system/cpu/smt/active")
            .parse::<u8>()
            .map(|v| v == 1),
        isolcpus: cmdline_list(&cmdline, "isolcpus"),
        nohz_full: cmdline_list(&cmdline, "nohz_full"),
        rcu_nocbs: cmdline_list(&cmdline, "rcu_nocbs"),
        online,
        offline,
        allowed,
        isolated,
        per_cpu,
        rt_cpu,
        rt_cpu_reason,
    }
}

/// The highest isolated CPU that is online and allowed; else the highest online, allowed CPU.
/// Highest, because CPU 0 takes most housekeeping (timers, unbound IRQs) on a typical system.
pub(crate) fn choose_rt_cpu(
    online: Option<&[usize]>,
    isolated: &[usize],
    allowed: Option<&[usize]>,
) -> (Option<usize>, String) {
    let Some(online) = online else {
        return (None, "online CPUs unknown".to_string());
    };
    let usable = |c: &usize| online.contains(c) && allowed.is_none_or(|a| a.contains(c));
    if let Some(&cpu) = isolated.iter().filter(|c| usable(c)).max() {
        return (Some(cpu), "highest isolated online CPU".to_string());
    }
    let reason = if isolated.is_empty() {
        "no isolated CPU; highest online CPU"
    } else {
        "isolated CPUs are offline or not allowed; highest online CPU"
    };
    match online.iter().filter(|c| usable(c)).max() {
        Some(&cpu) => (Some(cpu), reason.to_string()),
        None => (
            None,
            "no online CPU is allowed for this process".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_highest_isolated_online() {
        assert_eq!(choose_rt_cpu(Some(&[0, 1, 2, 3]), &[2, 3], None).0, Some(3));
    }

    #[test]
    fn skips_offline_isolated_cpu() {
        assert_eq!(choose_rt_cpu(Some(&[0, 1, 2]), &[2, 3], None).0, Some(2));
        let (cpu, why) = choose_rt_cpu(Some(&[0, 1]), &[3], None);
        assert_eq!(cpu, Some(1));
        assert!(why.contains("offline"));
    }

    #[test]
    fn respects_affinity_mask() {
        assert_eq!(
            choose_rt_cpu(Some(&[0, 1, 2, 3]), &[], Some(&[0, 1])).0,
            Some(1)
        );
        assert_eq!(choose_rt_cpu(Some(&[0, 1]), &[], Some(&[5])).0, None);
        assert_eq!(choose_rt_cpu(None, &[1], None).0, None);
    }

    #[test]
    fn cmdline_lists_drop_flags() {
        let c = "quiet isolcpus=domain,managed_irq,2-3 nohz_full=2-3 rcu_nocbs=3";
        assert_eq!(cmdline_list(c, "isolcpus"), Some(vec![2, 3]));
        assert_eq!(cmdline_list(c, "nohz_full"), Some(vec![2, 3]));
        assert_eq!(cmdline_list(c, "rcu_nocbs"), Some(vec![3]));
        assert_eq!(cmdline_list(c, "irqaffinity"), None);
    }
}
