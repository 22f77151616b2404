//! Findings: what in the report limits real-time behaviour, how badly, and the exact fix.

use super::kernel::Preemption;
use super::probe::Limit;
use super::tuning::{format_hex_mask, Movability};
use super::SystemReport;
use serde::Serialize;

/// How much a [`Finding`] matters; ordered `Info < Warn < Bad`. Serialised lowercase (`info`,
/// `warn`, `bad`) in the `advice` array of `rtapi detect --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing to fix.
    Info,
    /// Costs latency or margin; fixable.
    Warn,
    /// Stops real-time operation (or makes its numbers meaningless) until fixed.
    Bad,
}

impl Severity {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Bad => "BAD",
        }
    }
}

/// One thing in the report that limits real-time behaviour: how badly, what it is and how to fix it.
/// An element of the `advice` array of `rtapi detect --json`, with these field names as keys.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// A stable short name (`not-preempt-rt`, `no-isolated-cpu`, …) for scripts and tests.
    pub id: &'static str,
    /// What was found, in one or two sentences for the user (with the numbers that prove it).
    pub message: String,
    /// The exact thing to do, when there is one.
    pub fix: Option<String>,
}

fn finding(severity: Severity, id: &'static str, message: String, fix: Option<String>) -> Finding {
    Finding {
        severity,
        id,
        message,
        fix,
    }
}

/// All findings for a report, worst first.
pub(crate) fn findings(r: &SystemReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let k = &r.kernel;
    let rt_cpu = r.cpus.rt_cpu;
    let cpu_text = rt_cpu.map_or("N".to_string(), |c| c.to_string());

    if let Some(co) = k.co_kernel {
        out.push(finding(
            Severity::Info,
            "co-kernel",
            format!("{co:?} co-kernel detected: it is not supported; rtapi runs on the Linux scheduler only"),
            None,
        ));
    }
    match k.preempt_rt {
        Some(false) => out.push(finding(
            Severity::Warn,
            "not-preempt-rt",
            "kernel is not PREEMPT_RT: expect worst-case latencies of tens to hundreds of µs under load"
                .into(),
            Some("install a PREEMPT_RT kernel (Debian: linux-image-rt-amd64; mainline 6.12+: CONFIG_PREEMPT_RT=y)".into()),
        )),
        None => out.push(finding(
            Severity::Warn,
            "preempt-rt-unknown",
            "cannot tell whether the kernel is PREEMPT_RT (version string and config unreadable)".into(),
            None,
        )),
        Some(true) => {}
    }
    if k.preempt_rt != Some(true)
        && k.preempt_dynamic
        && matches!(k.preemption, Some(Preemption::None | Preemption::Voluntary))
    {
        out.push(finding(
            Severity::Warn,
            "preemption-model",
            format!(
                "preemption model is '{}': a kernel path may run for milliseconds before an RT thread gets the CPU",
                k.preemption.map_or("unknown", Preemption::name)
            ),
            Some("boot with preempt=full (this PREEMPT_DYNAMIC kernel supports it)".into()),
        ));
    }
    if k.high_res_timers == Some(false) {
        out.push(finding(
            Severity::Bad,
            "no-hrtimers",
            format!(
                "high-resolution timers are not active (CLOCK_MONOTONIC resolution {} ns): periods are rounded to the tick",
                k.clock_resolution_ns.unwrap_or(0)
            ),
            Some("use a kernel with CONFIG_HIGH_RES_TIMERS=y and do not boot with highres=off".into()),
        ));
    }
    if let Some(cs) = k
        .clocksource
        .as_deref()
        .filter(|cs| matches!(*cs, "hpet" | "acpi_pm" | "jiffies"))
    {
        out.push(finding(
            Severity::Warn,
            "slow-clocksource",
            format!("clocksource is '{cs}': every clock read is slow and coarse"),
            k.clocksources_available
                .iter()
                .any(|c| c == "tsc")
                .then(|| {
                    "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource"
                        .into()
                }),
        ));
    }

    privileges(r, &mut out);

    match r.throttling.rt_thread_runs {
        Some(false) => out.push(finding(
            Severity::Bad,
            "rt-thread-starved",
            "a SCHED_FIFO probe thread was accepted but never ran: this cgroup has no RT budget".into(),
            Some(format!(
                "give the cgroup RT time: echo 950000 > /sys/fs/cgroup/cpu{}/cpu.rt_runtime_us (or run outside it)",
                r.throttling.cgroup.as_deref().unwrap_or("/<group>")
            )),
        )),
        _ if r.throttling.cgroup_rt_runtime_us == Some(0) && k.rt_group_sched == Some(true) => {
            out.push(finding(
                Severity::Bad,
                "cgroup-no-rt-budget",
                format!(
                    "RT group scheduling is on and cgroup {} has cpu.rt_runtime_us = 0: SCHED_FIFO threads cannot run",
                    r.throttling.cgroup.as_deref().unwrap_or("?")
                ),
                Some("set cpu.rt_runtime_us of that cgroup, or start rtapi from the root cgroup".into()),
            ))
        }
        _ => {}
    }
    if r.throttling.throttled == Some(true) {
        let share = r.throttling.rt_share().unwrap_or(0.0);
        let stop_ms = r.throttling.rt_period_us.unwrap_or(0) as f64 / 1000.0 * (1.0 - share);
        out.push(finding(
            Severity::Info,
            "rt-throttling",
            format!(
                "RT throttling is on ({} of {} µs): a SCHED_FIFO thread that never sleeps is stopped for {stop_ms:.0} ms each period; harmless for sleeping threads, fatal for --wake spin",
                r.throttling.rt_runtime_us.unwrap_or(0),
                r.throttling.rt_period_us.unwrap_or(0)
            ),
            Some("sysctl -w kernel.sched_rt_runtime_us=-1 only on a machine whose RT threads are known to sleep".into()),
        ));
    }

    cpus(r, &cpu_text, &mut out);

    if r.virtualized == Some(true) {
        out.push(finding(
            Severity::Warn,
            "virtualized",
            format!(
                "running in a virtual machine{}: latency is bounded by the host's scheduler, not this kernel",
                r.environment.hypervisor.as_deref().map(|h| format!(" ({h})")).unwrap_or_default()
            ),
            Some("commission on the bare-metal machine that will drive the axes".into()),
        ));
    }
    if r.environment.transparent_hugepages.as_deref() == Some("always") {
        out.push(finding(
            Severity::Warn,
            "thp-always",
            "transparent hugepages = always: khugepaged and compaction can stall page faults and add latency spikes".into(),
            Some("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (or never; at boot: transparent_hugepage=madvise)".into()),
        ));
    }
    if let Some(n) = r.environment.swap_devices.filter(|&n| n > 0) {
        out.push(finding(
            Severity::Info,
            "swap-active",
            format!(
                "{n} swap area(s) active ({} KiB): mlockall keeps rtapi in memory, but the GUI and other processes of the machine can be swapped out and stall",
                r.environment.swap_total_kib.map_or("unknown".to_string(), |k| k.to_string())
            ),
            Some("swapoff -a, and remove the swap entries from /etc/fstab".into()),
        ));
    }

    tuning(r, &mut out);

    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

fn privileges(r: &SystemReport, out: &mut Vec<Finding>) {
    let p = &r.privileges;
    if p.sched_fifo == Some(false) {
        let why = p.sched_fifo_error.as_deref().unwrap_or("refused");
        let rtprio = match p.rlimit_rtprio {
            Some(Limit::Value(v)) => format!(" (RLIMIT_RTPRIO = {v})"),
            _ => String::new(),
        };
        out.push(finding(
            Severity::Bad,
            "no-sched-fifo",
            format!("this process may not use SCHED_FIFO: {why}{rtprio}; threads would run as SCHED_OTHER"),
            Some(
                "run as root, or `sudo setcap cap_sys_nice,cap_ipc_lock=ep <path to rtapi>`, or add `@<group> - rtprio 99` to /etc/security/limits.conf and log in again"
                    .into(),
            ),
        ));
    }
    if p.mlock == Some(false) {
        out.push(finding(
            Severity::Warn,
            "no-mlock",
            format!(
                "memory cannot be locked (RLIMIT_MEMLOCK = {}, no CAP_IPC_LOCK): page faults can stall RT threads",
                p.rlimit_memlock.map_or("unknown".to_string(), |l| l.to_string())
            ),
            Some("add `@<group> - memlock unlimited` to /etc/security/limits.conf, or setcap cap_ipc_lock=ep".into()),
        ));
    }
    if p.dma_latency == Some(false) {
        out.push(finding(
            Severity::Info,
            "no-dma-latency",
            "/dev/cpu_dma_latency is not writable: CPUs may enter deep idle states with slow exits"
                .into(),
            Some("run as root, or boot with processor.max_cstate=1 intel_idle.max_cstate=0".into()),
        ));
    }
}

fn cpus(r: &SystemReport, cpu_text: &str, out: &mut Vec<Finding>) {
    let c = &r.cpus;
    if c.isolated.is_empty() && c.online.as_ref().is_some_and(|o| o.len() > 1) {
        out.push(finding(
            Severity::Warn,
            "no-isolated-cpu",
            "no CPU is isolated: RT threads share their CPU with everything else".into(),
            Some(format!(
                "add `isolcpus={cpu_text} nohz_full={cpu_text} rcu_nocbs={cpu_text}` to the kernel command line and reboot"
            )),
        ));
    } else if !c.isolated.is_empty() && c.rt_cpu.is_some_and(|cpu| !c.isolated.contains(&cpu)) {
        out.push(finding(
            Severity::Warn,
            "isolated-cpu-unusable",
            format!(
                "isolated CPUs {} are offline or not allowed for this process",
                crate::rt::cpulist::format(&c.isolated)
            ),
            Some("bring them online (echo 1 > /sys/devices/system/cpu/cpuN/online) or isolate an online CPU".into()),
        ));
    }
    let Some(cpu) = c.rt_cpu else { return };
    if let Some(g) = c
        .info(cpu)
        .and_then(|i| i.governor.as_deref())
        .filter(|g| *g != "performance")
    {
        out.push(finding(
            Severity::Warn,
            "governor",
            format!("CPU {cpu} runs the '{g}' governor: frequency changes add wake-up latency"),
            Some(format!(
                "echo performance > /sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor (or cpupower frequency-set -g performance)"
            )),
        ));
    }
    let siblings = c.online_siblings_of(cpu);
    if !siblings.is_empty() {
        out.push(finding(
            Severity::Warn,
            "smt-sibling",
            format!(
                "CPU {cpu} shares its core with CPU {}: work there slows the RT thread",
                crate::rt::cpulist::format(&siblings)
            ),
            Some(format!(
                "isolate the siblings too, take them offline (echo 0 > /sys/devices/system/cpu/cpu{}/online), or boot with nosmt",
                siblings[0]
            )),
        ));
    }
    if c.nohz_full.is_some() && r.kernel.no_hz_full == Some(false) {
        out.push(finding(
            Severity::Info,
            "nohz-full-ignored",
            "nohz_full= is on the command line but the kernel lacks CONFIG_NO_HZ_FULL: it has no effect".into(),
            None,
        ));
    }
}

fn tuning(r: &SystemReport, out: &mut Vec<Finding>) {
    let t = &r.tuning;
    let rt = &t.rt_cpus;
    let rt_text = crate::rt::cpulist::format(rt);
    let online = r.cpus.online.as_deref().unwrap_or(&[]);
    let housekeeping: Vec<usize> = online.iter().copied().filter(|c| !rt.contains(c)).collect();
    let which = if rt.len() == 1 {
        format!("CPU {rt_text} (the RT CPU)")
    } else {
        format!("RT CPUs {rt_text}")
    };
    for irq in t.irqs_on_rt_cpus.iter().flatten() {
        let affinity = |a: &Option<Vec<usize>>| {
            a.as_deref()
                .map_or("unknown".to_string(), crate::rt::cpulist::format)
        };
        let seen = format!(
            "IRQ {} ({}, {}) fired {} time{} on {which}; affinity {}, effective {}",
            irq.irq,
            irq.name,
            irq.chip,
            irq.count_on_rt,
            if irq.count_on_rt == 1 { "" } else { "s" },
            affinity(&irq.affinity),
            affinity(&irq.effective_affinity)
        );
        let boot_fix = format!(
            "boot with isolcpus=managed_irq,domain,{rt_text} (managed IRQs cannot be moved at run time)"
        );
        match irq.managed {
            Movability::Movable => out.push(finding(
                Severity::Warn,
                "irq-on-rt-cpu",
                format!("{seen}: each one interrupts the RT thread"),
                (!housekeeping.is_empty()).then(|| {
                    format!(
                        "echo {} > /proc/irq/{}/smp_affinity_list",
                        crate::rt::cpulist::format(&housekeeping),
                        irq.irq
                    )
                }),
            )),
            Movability::Managed | Movability::ProbablyManaged if t.managed_irq_isolation => {
                out.push(finding(
                    Severity::Warn,
                    "managed-irq-on-rt-cpu",
                    format!(
                        "{seen}: it is {}kernel-managed and isolcpus=managed_irq is already given, so its queue has no CPU outside the RT CPUs (managed_irq is best effort)",
                        if irq.managed == Movability::Managed { "" } else { "probably " }
                    ),
                    Some("no run-time fix: give the device fewer queues than CPUs (e.g. a VM's virtio-blk num-queues=1) so each queue has a CPU outside the RT CPUs, or keep the device idle while machining".into()),
                ))
            }
            Movability::Managed | Movability::ProbablyManaged => out.push(finding(
                Severity::Warn,
                "managed-irq-on-rt-cpu",
                format!(
                    "{seen}: {}, so writing its affinity fails (EIO/EPERM)",
                    if irq.managed == Movability::Managed {
                        "it is kernel-managed (debugfs: IRQD_AFFINITY_MANAGED)"
                    } else {
                        "it is probably kernel-managed (a virtio/NVMe queue; /sys/kernel/debug/irq is not readable to be sure)"
                    }
                ),
                Some(boot_fix),
            )),
        }
    }
    if let Some(pid) = t.irqbalance_pid {
        out.push(finding(
            Severity::Warn,
            "irqbalance",
            format!("irqbalance is running (PID {pid}): it moves IRQs back onto {which}"),
            Some(format!(
                "systemctl disable --now irqbalance, or set IRQBALANCE_BANNED_CPULIST={rt_text} in /etc/default/irqbalance and restart it"
            )),
        ));
    }
    if t.timer_migration == Some(true) && !rt.is_empty() {
        out.push(finding(
            Severity::Info,
            "timer-migration",
            "kernel.timer_migration = 1: timers armed elsewhere can be moved onto a busy RT CPU"
                .into(),
            Some("sysctl -w kernel.timer_migration=0".into()),
        ));
    }
    if t.nmi_watchdog == Some(true) {
        out.push(finding(
            Severity::Warn,
            "nmi-watchdog",
            "kernel.nmi_watchdog = 1: a periodic non-maskable interrupt hits every CPU, the RT CPU included".into(),
            Some("sysctl -w kernel.nmi_watchdog=0 (at boot: nmi_watchdog=0)".into()),
        ));
    }
    if t.watchdog == Some(true) {
        out.push(finding(
            Severity::Info,
            "soft-watchdog",
            "kernel.watchdog = 1: the lockup detector runs a timer and a kernel thread on every CPU, the RT CPU included".into(),
            Some("sysctl -w kernel.watchdog=0 (at boot: nowatchdog)".into()),
        ));
    }
    if let Some(mask) = &t.workqueue_cpumask {
        let on_rt: Vec<usize> = mask.iter().copied().filter(|c| rt.contains(c)).collect();
        if !on_rt.is_empty() {
            out.push(finding(
                Severity::Info,
                "workqueue-cpumask",
                format!(
                    "unbound workqueues may run on CPU {} (workqueue cpumask {}): kernel workers compete with the RT thread",
                    crate::rt::cpulist::format(&on_rt),
                    crate::rt::cpulist::format(mask)
                ),
                (!housekeeping.is_empty()).then(|| {
                    format!(
                        "echo {} > /sys/devices/virtual/workqueue/cpumask",
                        format_hex_mask(&housekeeping)
                    )
                }),
            ));
        }
    }
}
