//! The human-readable `rtapi detect` report.

use super::{Finding, SystemReport};
use crate::rt::cpulist;
use std::fmt::Write;

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".to_string(), |v| v.to_string())
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

fn cpus(v: &[usize]) -> String {
    if v.is_empty() {
        "none".to_string()
    } else {
        cpulist::format(v)
    }
}

pub(crate) fn text(r: &SystemReport, flavor: &str, advice: &[Finding]) -> String {
    let mut s = String::new();
    let k = &r.kernel;
    // Writing to a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(s, "Kernel");
    let _ = writeln!(s, "  release        {}", opt(k.release.as_deref()));
    let _ = writeln!(s, "  version        {}", opt(k.version.as_deref()));
    let _ = writeln!(s, "  PREEMPT_RT     {}", yes_no(k.preempt_rt));
    for e in &k.preempt_rt_evidence {
        let _ = writeln!(s, "                 - {e}");
    }
    let _ = writeln!(
        s,
        "  preemption     {}{}  ({})",
        opt(k.preemption.map(|p| p.name())),
        if k.preempt_dynamic { ", dynamic" } else { "" },
        k.preemption_source
    );
    let _ = writeln!(
        s,
        "  HZ             {}   NO_HZ_FULL {}",
        opt(k.hz),
        yes_no(k.no_hz_full)
    );
    let _ = writeln!(
        s,
        "  hrtimers       {} (CLOCK_MONOTONIC resolution {} ns)",
        yes_no(k.high_res_timers),
        opt(k.clock_resolution_ns)
    );
    let _ = writeln!(
        s,
        "  clocksource    {} (available: {})",
        opt(k.clocksource.as_deref()),
        if k.clocksources_available.is_empty() {
            "unknown".into()
        } else {
            k.clocksources_available.join(" ")
        }
    );
    if let Some(co) = k.co_kernel {
        let _ = writeln!(s, "  co-kernel      {co:?} (detected, not supported)");
    }

    let p = &r.privileges;
    let _ = writeln!(s, "\nPrivileges");
    let _ = writeln!(
        s,
        "  SCHED_FIFO     {}{}",
        yes_no(p.sched_fifo),
        match (p.max_priority, &p.sched_fifo_error) {
            (Some(max), _) => format!(" (max priority {max})"),
            (None, Some(e)) => format!(" ({e})"),
            _ => String::new(),
        }
    );
    let _ = writeln!(
        s,
        "  RLIMIT_RTPRIO  {}   CAP_SYS_NICE {}",
        opt(p.rlimit_rtprio),
        yes_no(p.cap_sys_nice)
    );
    let _ = writeln!(
        s,
        "  mlockall       {} (RLIMIT_MEMLOCK {}, CAP_IPC_LOCK {})",
        yes_no(p.mlock),
        opt(p.rlimit_memlock),
        yes_no(p.cap_ipc_lock)
    );
    let _ = writeln!(s, "  dma latency    {}", yes_no(p.dma_latency));
    let _ = writeln!(
        s,
        "  port I/O       {}{}",
        yes_no(p.port_io),
        p.port_io_error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default()
    );

    let t = &r.throttling;
    let _ = writeln!(s, "\nThrottling");
    let _ = writeln!(
        s,
        "  RT budget      {} / {} µs (throttled: {})",
        opt(t.rt_runtime_us),
        opt(t.rt_period_us),
        yes_no(t.throttled)
    );
    let _ = writeln!(
        s,
        "  RT group sched {}   cgroup {} rt_runtime_us {}",
        yes_no(k.rt_group_sched),
        opt(t.cgroup.as_deref()),
        opt(t.cgroup_rt_runtime_us)
    );
    let _ = writeln!(s, "  RT thread runs {}", yes_no(t.rt_thread_runs));

    let c = &r.cpus;
    let _ = writeln!(s, "\nCPUs");
    let _ = writeln!(
        s,
        "  online {}   offline {}   allowed {}",
        c.online.as_deref().map_or("unknown".into(), cpus),
        cpus(&c.offline),
        c.allowed.as_deref().map_or("unknown".into(), cpus)
    );
    let _ = writeln!(
        s,
        "  isolated {}   isolcpus= {}   nohz_full= {}   rcu_nocbs= {}",
        cpus(&c.isolated),
        c.isolcpus.as_deref().map_or("-".into(), cpus),
        c.nohz_full.as_deref().map_or("-".into(), cpus),
        c.rcu_nocbs.as_deref().map_or("-".into(), cpus)
    );
    let _ = writeln!(s, "  SMT active {}", yes_no(c.smt_active));
    for info in &c.per_cpu {
        let _ = writeln!(
            s,
            "  cpu{:<3} governor {:<12} siblings {}",
            info.id,
            info.governor.as_deref().unwrap_or("-"),
            cpus(&info.siblings)
        );
    }
    let _ = writeln!(s, "  RT CPU {} ({})", opt(c.rt_cpu), c.rt_cpu_reason);

    let e = &r.environment;
    let _ = writeln!(s, "\nEnvironment");
    let _ = writeln!(
        s,
        "  virtualized    {}{}",
        yes_no(e.virtualized),
        e.hypervisor
            .as_deref()
            .map(|h| format!(" ({h})"))
            .unwrap_or_default()
    );
    for ev in &e.virtualization_evidence {
        let _ = writeln!(s, "                 - {ev}");
    }
    let _ = writeln!(
        s,
        "  THP            {}",
        opt(e.transparent_hugepages.as_deref())
    );
    let _ = writeln!(
        s,
        "  swap           {} area(s), {} KiB",
        opt(e.swap_devices),
        opt(e.swap_total_kib)
    );

    let t = &r.tuning;
    let _ = writeln!(s, "\nTuning");
    match &t.irqs_on_rt_cpus {
        None => {
            let _ = writeln!(s, "  IRQs on RT CPUs {} unknown", cpus(&t.rt_cpus));
        }
        Some(irqs) => {
            let _ = writeln!(
                s,
                "  IRQs firing on RT CPUs {}:{}",
                cpus(&t.rt_cpus),
                if irqs.is_empty() { " none" } else { "" }
            );
            for i in irqs {
                let _ = writeln!(
                    s,
                    "    IRQ {:>4} {:<20} {:>10} on RT   effective {:<6} {}",
                    i.irq,
                    i.name,
                    i.count_on_rt,
                    i.effective_affinity.as_deref().map_or("?".into(), cpus),
                    match i.managed {
                        super::tuning::Movability::Managed => "managed",
                        super::tuning::Movability::ProbablyManaged => "probably managed",
                        super::tuning::Movability::Movable => "movable",
                    }
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "  irqbalance     {}",
        t.irqbalance_pid
            .map_or("not running".into(), |p| format!("running (PID {p})"))
    );
    let _ = writeln!(
        s,
        "  timer_migration {}   watchdog {}   nmi_watchdog {}",
        yes_no(t.timer_migration),
        yes_no(t.watchdog),
        yes_no(t.nmi_watchdog)
    );
    let _ = writeln!(
        s,
        "  workqueue cpumask {}",
        t.workqueue_cpumask
            .as_deref()
            .map_or("unknown".into(), cpus)
    );

    match &t.idle_states {
        None => {
            let _ = writeln!(
                s,
                "  idle states    no cpuidle on RT CPUs {}",
                cpus(&t.rt_cpus)
            );
        }
        Some(states) => {
            let _ = writeln!(
                s,
                "  idle states of RT CPUs {} (exit latency, µs):",
                cpus(&t.rt_cpus)
            );
            for st in states {
                let _ = writeln!(
                    s,
                    "    cpu{:<3} state{:<2} {:<14} {:>6}  {}{}",
                    st.cpu,
                    st.state,
                    st.name,
                    opt(st.latency_us),
                    match st.disabled {
                        Some(true) => "disabled",
                        Some(false) => "enabled",
                        None => "unknown",
                    },
                    if st.is_slow_and_enabled() {
                        "  (slow)"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    if let Some(nic) = &r.board_nic {
        s.push_str(&nic.render());
    }
    if let Some(l) = &r.linuxcnc {
        let _ = writeln!(s, "\nLinuxCNC");
        let _ = writeln!(
            s,
            "  installed      {} ({})",
            l.version
                .as_ref()
                .map_or("a version rtapi cannot read", |v| v.text.as_str()),
            match l.support {
                super::linuxcnc::Support::Verified => "verified with rtapi linuxcnc",
                super::linuxcnc::Support::SameLayout =>
                    "the verified releases' structures; rtapi linuxcnc checks them at start",
                super::linuxcnc::Support::Protocol210 =>
                    "2.10's master protocol: rtapi linuxcnc refuses it",
                super::linuxcnc::Support::Unknown => "unknown to rtapi: rtapi linuxcnc refuses it",
            }
        );
        let _ = writeln!(
            s,
            "  its rtapi_app  {}: {}",
            if l.stock_realtime {
                "realtime"
            } else {
                "NOT realtime"
            },
            l.stock_reason
        );
        let _ = writeln!(
            s,
            "  rtapi linuxcnc {}",
            if flavor == "sim" {
                "cannot run LinuxCNC's threads realtime here either (flavor sim: see Privileges)"
                    .to_string()
            } else {
                format!("runs LinuxCNC's threads SCHED_FIFO here (flavor {flavor})")
            }
        );
    }
    let _ = writeln!(s, "\nFlavor: {flavor}");
    let _ = writeln!(s, "\nAdvice");
    if advice.is_empty() {
        let _ = writeln!(s, "  nothing to fix");
    }
    for f in advice {
        let _ = writeln!(s, "  [{}] {}", f.severity.label(), f.message);
        if let Some(fix) = &f.fix {
            let _ = writeln!(s, "         fix: {fix}");
        }
    }
    s
}
