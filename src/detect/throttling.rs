//! RT throttling: the global `sched_rt_runtime_us`/`sched_rt_period_us` budget and, with
//! CONFIG_RT_GROUP_SCHED, the budget of the cgroup this process lives in.

use super::sysroot::SysRoot;
use serde::Serialize;

/// How much CPU time SCHED_FIFO threads get before the kernel stops them. The `throttling` object of
/// `rtapi detect --json`; times in µs, `None` when the file could not be read.
#[derive(Debug, Clone, Serialize)]
pub struct Throttling {
    pub(crate) rt_runtime_us: Option<i64>,
    /// `/proc/sys/kernel/sched_rt_period_us`: the period the RT budget is counted over, µs.
    pub rt_period_us: Option<i64>,
    /// RT tasks are stopped for `period - runtime` each period when they never sleep.
    pub throttled: Option<bool>,
    /// This process's cgroup in the v1 `cpu` hierarchy, when there is one.
    pub cgroup: Option<String>,
    /// That cgroup's `cpu.rt_runtime_us`. With RT group scheduling, 0 here means SCHED_FIFO threads
    /// of this process get no CPU time at all.
    pub cgroup_rt_runtime_us: Option<i64>,
    /// Live probe: a SCHED_FIFO thread was created, slept on an absolute deadline and woke up.
    pub rt_thread_runs: Option<bool>,
}

impl Throttling {
    /// Fraction of each period RT tasks may use (0.95 for the kernel default); `None` = unlimited/unknown.
    pub fn rt_share(&self) -> Option<f64> {
        match (self.rt_runtime_us, self.rt_period_us) {
            (Some(r), Some(p)) if r >= 0 && p > 0 => Some(r as f64 / p as f64),
            _ => None,
        }
    }
}

pub(crate) fn detect(root: &SysRoot, rt_thread_runs: Option<bool>) -> Throttling {
    let rt_runtime_us = root
        .read("proc/sys/kernel/sched_rt_runtime_us")
        .parse::<i64>();
    let rt_period_us = root
        .read("proc/sys/kernel/sched_rt_period_us")
        .parse::<i64>();
    let throttled = match (rt_runtime_us, rt_period_us) {
        (Some(-1), _) => Some(false),
        (Some(r), Some(p)) => Some(r < p),
        _ => None,
    };
    let cgroup = cpu_cgroup(root);
    let cgroup_rt_runtime_us = cgroup.as_deref().and_then(|path| {
        ["cpu", "cpu,cpuacct", "cpuacct,cpu"]
            .iter()
            .find_map(|mount| {
                let rel = format!(
                    "sys/fs/cgroup/{mount}{}/cpu.rt_runtime_us",
                    path.trim_end_matches('/')
                );
                root.read(&rel).parse::<i64>()
            })
    });
    Throttling {
        rt_runtime_us,
        rt_period_us,
        throttled,
        cgroup,
        cgroup_rt_runtime_us,
        rt_thread_runs,
    }
}

/// The path of this process in the cgroup-v1 hierarchy that has the `cpu` controller
/// (`/proc/self/cgroup` lines are `id:controllers:path`). cgroup v2 has no RT budget per group.
fn cpu_cgroup(root: &SysRoot) -> Option<String> {
    let text = root.read("proc/self/cgroup");
    text.text()?.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "cpu")
            .then(|| path.to_string())
    })
}
