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

    if let Some(nic) = &r.board_nic {
        out.extend(nic.findings());
    }
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
    if let (Some(false), Some(e)) = (p.port_io, &p.port_io_error) {
        out.push(finding(
            Severity::Info,
            "no-port-io",
            format!(
                "no port I/O for programs: a parallel port (hal_parport) cannot be driven ({e})"
            ),
            None,
        ));
    }
    if p.dma_latency == Some(false) {
        out.push(finding(
            Severity::Info,
            "no-dma-latency",
            "/dev/cpu_dma_latency is not writable: CPUs may enter deep idle states with slow exits"
                .into(),
            Some(
                "let your group open it with rtapi's udev rule (packaging/udev/60-rtapi.rules, \
                 docs/guide/commission-pc.md, \"Idle states\"), run as root, or boot with \
                 processor.max_cstate=1 \
                 intel_idle.max_cstate=0"
                    .into(),
            ),
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
            Some(match c.rt_cpu {
                Some(cpu) => format!(
                    "add `{}` to the kernel command line and reboot{}",
                    isolation_params(&[cpu], r.kernel.no_hz_full).join(" "),
                    if r.kernel.no_hz_full == Some(false) {
                        " (no nohz_full=: this kernel lacks CONFIG_NO_HZ_FULL)"
                    } else {
                        ""
                    }
                ),
                None => format!(
                    "add `isolcpus=managed_irq,domain,{cpu_text} nohz_full={cpu_text} rcu_nocbs={cpu_text}` to the kernel command line and reboot"
                ),
            }),
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
    // Every RT CPU (the RT CPU and the isolated ones) may carry an RT thread.
    let mut rt_cpus = r.tuning.rt_cpus.clone();
    rt_cpus.push(cpu);
    rt_cpus.sort_unstable();
    rt_cpus.dedup();
    for rt in rt_cpus {
        let Some(g) = c
            .info(rt)
            .and_then(|i| i.governor.as_deref())
            .filter(|g| *g != "performance")
        else {
            continue;
        };
        out.push(finding(
            Severity::Warn,
            "governor",
            format!("CPU {rt} runs the '{g}' governor: frequency changes add wake-up latency"),
            Some(format!(
                "echo performance > /sys/devices/system/cpu/cpu{rt}/cpufreq/scaling_governor (or cpupower frequency-set -g performance; rtapi tune does it)"
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
    isolation_consistency(r, out);
    if c.nohz_full.is_some() && r.kernel.no_hz_full == Some(false) {
        out.push(finding(
            Severity::Info,
            "nohz-full-ignored",
            "nohz_full= is on the command line but the kernel lacks CONFIG_NO_HZ_FULL: it has no effect".into(),
            None,
        ));
    }
}

/// The boot parameters that isolate `cpus` for RT work: out of the scheduler's balancing and away from
/// managed IRQs, tickless, RCU callbacks elsewhere. `nohz_full` is left out when the kernel is known to
/// lack CONFIG_NO_HZ_FULL (it would do nothing).
pub(crate) fn isolation_params(cpus: &[usize], no_hz_full: Option<bool>) -> Vec<String> {
    let l = crate::rt::cpulist::format(cpus);
    let mut p = vec![format!("isolcpus=managed_irq,domain,{l}")];
    if no_hz_full != Some(false) {
        p.push(format!("nohz_full={l}"));
    }
    p.push(format!("rcu_nocbs={l}"));
    p
}

fn minus(a: &[usize], b: &[usize]) -> Vec<usize> {
    a.iter().copied().filter(|c| !b.contains(c)).collect()
}

fn union(a: &[usize], b: &[usize]) -> Vec<usize> {
    let mut u: Vec<usize> = a.iter().chain(b).copied().collect();
    u.sort_unstable();
    u.dedup();
    u
}

/// `isolcpus=`, `nohz_full=` and `rcu_nocbs=` on `/proc/cmdline` that do not agree with each other or
/// with the RT CPU. Each is only useful together: isolation without nohz_full keeps the tick, nohz_full
/// without isolation rarely stops it, and RCU callbacks left on an isolated CPU run there.
fn isolation_consistency(r: &SystemReport, out: &mut Vec<Finding>) {
    let c = &r.cpus;
    let fmt = crate::rt::cpulist::format;
    let no_hz_full = r.kernel.no_hz_full;
    let iso_cmd = c.isolcpus.clone().unwrap_or_default();
    let flags = r.tuning.isolcpus_flags.clone().unwrap_or_default();
    // A bare list means `domain`; a list with flags isolates from the scheduler only with `domain`.
    let domain = flags.is_empty() || flags.iter().any(|f| f == "domain");
    if !iso_cmd.is_empty() && !domain {
        out.push(finding(
            Severity::Warn,
            "isolcpus-without-domain",
            format!(
                "isolcpus={},{} has no `domain` flag: CPU {} stay in the scheduler's load balancing, so other tasks still run there",
                flags.join(","),
                fmt(&iso_cmd),
                fmt(&iso_cmd)
            ),
            Some(format!(
                "boot with isolcpus=managed_irq,domain,{} instead",
                fmt(&iso_cmd)
            )),
        ));
    }
    if let Some(rt) = c.rt_cpu {
        if !iso_cmd.is_empty() && !iso_cmd.contains(&rt) && c.isolated.is_empty() {
            out.push(finding(
                Severity::Warn,
                "rt-cpu-not-in-isolcpus",
                format!(
                    "isolcpus= names CPU {} but the RT CPU is {rt} (no CPU is isolated for the scheduler)",
                    fmt(&iso_cmd)
                ),
                Some(format!(
                    "boot with {} (or pin the RT threads to an isolated CPU)",
                    isolation_params(&[rt], no_hz_full).join(" ")
                )),
            ));
        }
    }
    // CPUs really isolated from the scheduler: sysfs, else the boot list when it has `domain`.
    let isolated: Vec<usize> = if !c.isolated.is_empty() {
        c.isolated.clone()
    } else if domain {
        iso_cmd.clone()
    } else {
        Vec::new()
    };
    let nohz = c.nohz_full.clone().unwrap_or_default();
    if no_hz_full != Some(false) {
        let not_isolated = minus(&nohz, &isolated);
        if !not_isolated.is_empty() {
            out.push(finding(
                Severity::Warn,
                "nohz-full-not-isolated",
                format!(
                    "nohz_full CPU {} {} not isolated: the scheduler still puts other tasks there, and the tick stops only while a single task runs",
                    fmt(&not_isolated),
                    if not_isolated.len() == 1 { "is" } else { "are" }
                ),
                Some(format!(
                    "boot with isolcpus=managed_irq,domain,{}",
                    fmt(&union(&isolated, &not_isolated))
                )),
            ));
        }
        let ticking = minus(&isolated, &nohz);
        if !ticking.is_empty() {
            out.push(finding(
                Severity::Info,
                "isolated-without-nohz-full",
                format!(
                    "isolated CPU {} {} not in nohz_full=: the scheduler tick{} still interrupts {}",
                    fmt(&ticking),
                    if ticking.len() == 1 { "is" } else { "are" },
                    r.kernel.hz.map(|hz| format!(" ({hz} per second)")).unwrap_or_default(),
                    if ticking.len() == 1 { "it" } else { "them" }
                ),
                Some(format!(
                    "boot with nohz_full={}{}",
                    fmt(&union(&nohz, &ticking)),
                    if no_hz_full.is_none() {
                        " (needs a kernel with CONFIG_NO_HZ_FULL=y; the kernel config was not readable)"
                    } else {
                        ""
                    }
                )),
            ));
        }
    }
    let nocbs = c.rcu_nocbs.clone().unwrap_or_default();
    // nohz_full implies rcu_nocbs for its CPUs (CONFIG_RCU_NOCB_CPU), so only CPUs in neither list
    // run their own RCU callbacks.
    let implied = if no_hz_full == Some(false) {
        Vec::new()
    } else {
        nohz.clone()
    };
    let callbacks_here = minus(&minus(&isolated, &nocbs), &implied);
    if !callbacks_here.is_empty() {
        out.push(finding(
            Severity::Info,
            "isolated-without-rcu-nocbs",
            format!(
                "isolated CPU {} {} not in rcu_nocbs=: RCU callbacks run there in softirq context",
                fmt(&callbacks_here),
                if callbacks_here.len() == 1 {
                    "is"
                } else {
                    "are"
                }
            ),
            Some(format!(
                "boot with rcu_nocbs={}",
                fmt(&union(&nocbs, &callbacks_here))
            )),
        ));
    }
    if c.rcu_nocbs.is_some() && no_hz_full != Some(false) {
        let left_out = minus(&nohz, &nocbs);
        if !left_out.is_empty() {
            out.push(finding(
                Severity::Info,
                "rcu-nocbs-without-nohz-full-cpus",
                format!(
                    "rcu_nocbs= leaves out nohz_full CPU {}: the kernel offloads their callbacks anyway (nohz_full implies it), but the command line says otherwise",
                    fmt(&left_out)
                ),
                Some(format!(
                    "boot with rcu_nocbs={}",
                    fmt(&union(&nocbs, &left_out))
                )),
            ));
        }
    }
}

/// Enabled idle states of the RT CPUs whose exit latency is above the limit.
fn idle_states(r: &SystemReport, out: &mut Vec<Finding>) {
    let slow: Vec<&super::tuning::IdleState> = r
        .tuning
        .idle_states
        .iter()
        .flatten()
        .filter(|s| s.is_slow_and_enabled())
        .collect();
    if slow.is_empty() {
        return;
    }
    let mut cpus: Vec<usize> = slow.iter().map(|s| s.cpu).collect();
    cpus.dedup();
    let list = slow
        .iter()
        .map(|s| format!("cpu{} {} ({} µs)", s.cpu, s.name, s.latency_us.unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(", ");
    let held = r.privileges.dma_latency == Some(true);
    let (severity, guard) = if held {
        (
            Severity::Info,
            "latency-test and run hold /dev/cpu_dma_latency at 0 while they run (unless --no-dma-latency), which keeps the CPUs out of them then; other programs and the time between runs are not covered",
        )
    } else {
        (
            Severity::Warn,
            "/dev/cpu_dma_latency is not writable here, so latency-test and run cannot keep the CPUs out of them",
        )
    };
    let commands = slow
        .iter()
        .map(|s| {
            format!(
                "echo 1 > /sys/devices/system/cpu/cpu{}/cpuidle/state{}/disable",
                s.cpu, s.state
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    out.push(finding(
        severity,
        "deep-idle-states",
        format!(
            "RT CPU {} may enter idle states with exit latency above {} µs: {list}; a wake-up from them is late by that much. {guard}",
            crate::rt::cpulist::format(&cpus),
            super::tuning::IDLE_EXIT_LATENCY_LIMIT_US
        ),
        Some(format!(
            "at run time (rtapi tune does it): {commands}; at boot: processor.max_cstate=1 intel_idle.max_cstate=0 (or idle=poll: no idle at all, the CPU spins at full power and heat and slows its SMT sibling)"
        )),
    ));
}

fn tuning(r: &SystemReport, out: &mut Vec<Finding>) {
    idle_states(r, out);
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
            "IRQ {} ({}, {}) fired {} time{} on {which} {}; affinity {}, effective {}",
            irq.irq,
            irq.name,
            irq.chip,
            irq.count_on_rt,
            if irq.count_on_rt == 1 { "" } else { "s" },
            t.irq_counts_over.as_deref().unwrap_or("since boot"),
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
