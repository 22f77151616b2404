//! The survey as text: a row per CPU, then the recommendation worded for a machine builder.

use super::counters::{IrqDelta, Load, SoftirqDelta};
use super::{CpuResult, Status, Survey};
use crate::render::{Align, Table};
use crate::rt::clock::Nanos;
use crate::rt::units::us;
use std::fmt::Write;

/// Sources shown per CPU in the table.
const TOP: usize = 3;

/// A rate per second: whole numbers, one decimal below 10 (a rare IRQ is not `0`).
pub(super) fn per_s(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// `LOC 1000 per-cpu, 36 virtio1-req.0 250 managed?, …` (rates per second).
fn top_irqs(l: &Load<IrqDelta>) -> String {
    let mut parts: Vec<String> = l
        .sources
        .iter()
        .take(TOP)
        .map(|s| {
            let label = if s.irq.is_some() {
                format!("{} {}", s.source, s.name)
            } else {
                s.source.clone()
            };
            format!("{label} {} {}", per_s(s.per_s), s.kind.word())
        })
        .collect();
    if parts.is_empty() {
        parts.push("none".into());
    }
    parts.join(", ")
}

fn top_softirqs(l: &Load<SoftirqDelta>) -> String {
    let parts: Vec<String> = l
        .sources
        .iter()
        .take(TOP)
        .map(|s| format!("{} {}", s.name, per_s(s.per_s)))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn opt_us(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| us(n as f64))
}

fn cells(c: &CpuResult) -> Vec<String> {
    let irqs = c.interrupts.as_ref().and_then(|l| l.irqs.as_ref());
    let soft = c.interrupts.as_ref().and_then(|l| l.softirqs.as_ref());
    let measured = c.status != Status::NotMeasured;
    let dash = || "-".to_string();
    vec![
        c.cpu.to_string(),
        if c.isolated { "yes" } else { "no" }.into(),
        opt_us(c.worst_latency_ns),
        opt_us(c.p999_ns),
        c.mean_ns.map_or_else(dash, us),
        c.overruns.map_or_else(dash, |o| o.to_string()),
        match (&c.verdict, c.status) {
            (Some(v), Status::Interrupted) => format!("{} (partial)", v.rating.name()),
            (Some(v), _) => v.rating.name().to_string(),
            (None, _) => "not measured".into(),
        },
        irqs.map_or_else(
            || if measured { "unknown".into() } else { dash() },
            |l| per_s(l.per_s),
        ),
        irqs.map_or_else(dash, top_irqs),
        soft.map_or_else(
            || if measured { "unknown".into() } else { dash() },
            |l| per_s(l.per_s),
        ),
        soft.map_or_else(dash, top_softirqs),
    ]
}

pub(super) fn render(s: &Survey) -> String {
    let mut out = String::new();
    let set = &s.settings;
    let sys = &s.system;
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "rtapi latency-test --all-cpus: one CPU at a time, {:.0} s each, base {}, servo {}, timer {}, wake {}, load {}{}",
        set.duration_per_cpu_s,
        if set.base_ns == 0 {
            "off".to_string()
        } else {
            Nanos::from_nanos(set.base_ns as i64).to_string()
        },
        Nanos::from_nanos(set.servo_ns as i64),
        set.timer,
        set.wake,
        if set.load.is_empty() {
            "none".to_string()
        } else {
            set.load.join(",")
        },
        if set.interrupted { " (interrupted)" } else { "" }
    );
    let _ = writeln!(
        out,
        "system: kernel {} ({}), PREEMPT_RT {}, flavor {}{}",
        sys.kernel,
        sys.preemption.unwrap_or("preemption unknown"),
        match sys.preempt_rt {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        },
        sys.flavor,
        if sys.virtualized == Some(true) {
            ", virtual machine"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "\nlatencies in µs (the worse of the CPU's threads); interrupts per second on that CPU during its own run"
    );
    let mut table = Table::new([
        ("CPU", Align::Right),
        ("isolated", Align::Left),
        ("max", Align::Right),
        ("p99.9", Align::Right),
        ("mean", Align::Right),
        ("overruns", Align::Right),
        ("verdict", Align::Left),
        ("IRQ/s", Align::Right),
        ("top IRQs /s", Align::Left),
        ("softirq/s", Align::Right),
        ("top softirqs /s", Align::Left),
    ]);
    for c in &s.cpus {
        table.row(cells(c));
        if c.status == Status::NotMeasured {
            if let Some(why) = &c.why {
                table.note(format!("      CPU {}: not measured: {why}", c.cpu));
            }
        }
    }
    let _ = write!(out, "{table}");
    // The test's own timer wake-ups arrive as local timer interrupts on the CPU under test.
    let own: f64 = 1e9 / s.settings.servo_ns.max(1) as f64
        + if s.settings.base_ns > 0 {
            1e9 / s.settings.base_ns as f64
        } else {
            0.0
        };
    let has_loc = s.cpus.iter().any(|c| {
        c.interrupts
            .as_ref()
            .and_then(|l| l.irqs.as_ref())
            .is_some_and(|l| l.sources.iter().any(|x| x.source == "LOC"))
    });
    if has_loc {
        let _ = writeln!(
        out,
        "(LOC, the local timer, includes the test threads' own wake-ups: up to {}/s with these periods)",
        per_s(own)
    );
    }

    let r = &s.recommendation;
    let Some(&cpu) = s.recommended.first() else {
        let _ = writeln!(out, "\nRECOMMENDATION: none — {}", r.reason);
        return out;
    };
    let _ = writeln!(
        out,
        "\nRECOMMENDATION{}: give the RT threads CPU {cpu}.",
        if set.interrupted {
            " (of the CPUs measured to the end only)"
        } else {
            ""
        }
    );
    let _ = writeln!(out, "  Why: {}.", r.reason);
    let _ = writeln!(out, "  Rule: {}.", r.rule);
    let mut step = 0;
    let mut next = || {
        step += 1;
        step
    };
    if let Some(p) = &r.boot_parameters {
        let _ = writeln!(
            out,
            "  {}. Isolate CPU {cpu}: add to the kernel command line (e.g. GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot):\n       {p}",
            next()
        );
    }
    if !r.move_irqs.is_empty() {
        let _ = writeln!(
            out,
            "  {}. Move the movable IRQs that hit CPU {cpu} during its run (as root; lasts until reboot — put it in a boot script, and stop irqbalance, which moves them back):",
            next()
        );
        for m in &r.move_irqs {
            let _ = writeln!(
                out,
                "       {}   # {}, {}/s",
                m.command,
                m.name,
                per_s(m.per_s)
            );
        }
    }
    if !r.managed_irqs.is_empty() {
        let _ = writeln!(
            out,
            "  {}. Kernel-managed IRQs hit CPU {cpu} (writing their affinity fails); `managed_irq` in isolcpus= above keeps them off at boot:",
            next()
        );
        for m in &r.managed_irqs {
            let _ = writeln!(
                out,
                "       IRQ {} {} ({}), {}/s",
                m.source,
                m.name,
                if m.kind == super::IrqKind::Managed {
                    "managed"
                } else {
                    "probably managed: by its name; mount debugfs to be sure"
                },
                per_s(m.per_s)
            );
        }
    }
    if !r.per_cpu_irqs.is_empty() {
        let list: Vec<String> = r
            .per_cpu_irqs
            .iter()
            .take(5)
            .map(|m| format!("{} {}/s", m.source, per_s(m.per_s)))
            .collect();
        let _ = writeln!(
            out,
            "  {}. Per-CPU interrupts (timer tick, IPIs: {}) cannot be moved; nohz_full= and isolation make them rarer.",
            next(),
            list.join(", ")
        );
    }
    for u in &r.use_it {
        let _ = writeln!(out, "  {}. {}{}.", next(), u[..1].to_uppercase(), &u[1..]);
    }
    for n in &r.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}
