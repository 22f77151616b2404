//! `latency-test --all-cpus`: which CPU should the RT threads get? Every CPU is measured in turn with
//! the ordinary latency test pinned to it ([`run::run`], nothing of the measurement is repeated here),
//! and the interrupts that CPU took during its own run are counted around it ([`counters`]). The
//! survey ends with a table, a recommendation ([`recommend`]) and, with `--json`, a `survey` document.
//!
//! **One CPU at a time, on purpose.** The RT threads of a machine live on one CPU; that is the
//! situation to measure. With every CPU measured at once, nothing would be left for the housekeeping
//! threads, the load and the live display (on a 2-CPU machine, nothing at all), and each CPU's figures
//! would include the interference of the measuring threads on the others (IPIs, shared caches, the
//! scheduler). So `--duration` is per CPU and the survey takes about `CPUs × duration`.
//!
//! **Ctrl-C** sets the process-wide stop flag (`rt::signals`), which is never cleared: the run under way
//! ends and reports, and every later CPU is listed as not measured because of the interruption — never
//! started only to stop at once, never silently skipped.

pub(crate) mod counters;
pub(crate) mod recommend;
mod text;

use super::report::{LatencySummary, Spike, SystemSummary};
use super::run::{self, TestConfig};
use super::verdict::Rating;
use crate::detect::{Movability, SysRoot, SystemReport};
use crate::runtime::RuntimeError;
use counters::{CpuLoad, IrqKind, Snapshot};
use recommend::Candidate;
use serde::Serialize;
use std::io::Write;

/// How far one CPU's measurement got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Status {
    /// Measured for the whole duration.
    Measured,
    /// Measured until Ctrl-C/SIGTERM: its figures cover less time than the others'.
    Interrupted,
    /// Not measured; `why` says why.
    NotMeasured,
}

/// One thread of a CPU's run: the figures of the latency-test report that compare CPUs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ThreadBrief {
    pub(crate) name: String,
    pub(crate) period_ns: u64,
    /// The CPU the thread was pinned to (and verified on) for this run.
    pub(crate) cpu: Option<usize>,
    pub(crate) priority: i32,
    pub(crate) cycles: u64,
    pub(crate) overruns: u64,
    pub(crate) max_jitter_ns: u64,
    pub(crate) latency_ns: LatencySummary,
    /// The worst periods, with their causes under `--trace`.
    pub(crate) spikes: Vec<Spike>,
}

/// A CPU's verdict: the latency-test verdict of its run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VerdictBrief {
    pub(crate) rating: Rating,
    pub(crate) summary: String,
    pub(crate) evidence: bool,
    pub(crate) problems: Vec<String>,
}

/// One row of the survey.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CpuResult {
    pub(crate) cpu: usize,
    /// In the kernel's isolated set (`/sys/devices/system/cpu/isolated`).
    pub(crate) isolated: bool,
    pub(crate) status: Status,
    /// Why it was not measured (offline, refused, interrupted, …).
    pub(crate) why: Option<String>,
    /// How long its threads ran.
    pub(crate) duration_s: Option<f64>,
    /// The worse max latency of its threads.
    pub(crate) worst_latency_ns: Option<u64>,
    /// The worse p99.9 of its threads.
    pub(crate) p999_ns: Option<u64>,
    /// The worse p99 of its threads.
    pub(crate) p99_ns: Option<u64>,
    /// The worse mean latency of its threads.
    pub(crate) mean_ns: Option<f64>,
    /// Missed periods, all threads.
    pub(crate) overruns: Option<u64>,
    pub(crate) threads: Vec<ThreadBrief>,
    pub(crate) verdict: Option<VerdictBrief>,
    /// The interrupts and softirqs this CPU took from just before to just after its run.
    pub(crate) interrupts: Option<CpuLoad>,
}

impl CpuResult {
    fn not_measured(cpu: usize, isolated: bool, why: impl Into<String>) -> CpuResult {
        CpuResult {
            cpu,
            isolated,
            status: Status::NotMeasured,
            why: Some(why.into()),
            duration_s: None,
            worst_latency_ns: None,
            p999_ns: None,
            p99_ns: None,
            mean_ns: None,
            overruns: None,
            threads: Vec::new(),
            verdict: None,
            interrupts: None,
        }
    }

    /// Its figures for the rule, when it is a candidate: measured to the end, with cycles.
    pub(crate) fn candidate(&self) -> Option<Candidate> {
        let ran = self.threads.iter().all(|t| t.cycles > 0) && !self.threads.is_empty();
        (self.status == Status::Measured && ran).then(|| Candidate {
            cpu: self.cpu,
            worst_ns: self.worst_latency_ns.unwrap_or(u64::MAX),
            p999_ns: self.p999_ns.unwrap_or(u64::MAX),
            fixed_irqs_per_s: self
                .interrupts
                .as_ref()
                .and_then(CpuLoad::fixed_irqs_per_s)
                .unwrap_or(0.0),
        })
    }
}

/// A movable IRQ that fired on the recommended CPU, and the command that moves it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MoveIrq {
    pub(crate) irq: u32,
    pub(crate) name: String,
    pub(crate) per_s: f64,
    pub(crate) command: String,
}

/// An interrupt on the recommended CPU that an affinity write cannot move.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FixedIrq {
    pub(crate) source: String,
    pub(crate) name: String,
    pub(crate) kind: IrqKind,
    pub(crate) per_s: f64,
}

/// What to do with the result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Recommendation {
    /// The rule, in words.
    pub(crate) rule: &'static str,
    /// Which step of the rule decided (1 worst case, 2 p99.9, 3 fixed interrupts, 4 CPU number).
    pub(crate) decided_by: Option<u8>,
    /// Why this CPU, with the numbers; or why there is no recommendation.
    pub(crate) reason: String,
    /// Kernel command line parameters that isolate the recommended CPU.
    pub(crate) boot_parameters: Option<String>,
    /// Movable IRQs seen on it during its run, with the command that moves each away.
    pub(crate) move_irqs: Vec<MoveIrq>,
    /// Managed IRQs seen on it: only `isolcpus=managed_irq,…` at boot keeps them off.
    pub(crate) managed_irqs: Vec<FixedIrq>,
    /// The per-CPU interrupts it took (timer tick, IPIs): `nohz_full` and isolation reduce them.
    pub(crate) per_cpu_irqs: Vec<FixedIrq>,
    /// How to use it: the latency-test to confirm and the config key.
    pub(crate) use_it: Vec<String>,
    /// Caveats (partial survey, not real-time evidence, CPU 0, a single CPU).
    pub(crate) notes: Vec<String>,
}

/// The survey's settings.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SurveySettings {
    /// Always `one-cpu-at-a-time` (see the module docs).
    pub(crate) mode: &'static str,
    pub(crate) duration_per_cpu_s: f64,
    /// Base thread period; 0 = servo thread only.
    pub(crate) base_ns: u64,
    pub(crate) servo_ns: u64,
    pub(crate) timer: String,
    pub(crate) wake: String,
    pub(crate) load: Vec<String>,
    /// Ctrl-C/SIGTERM ended the survey early.
    pub(crate) interrupted: bool,
}

/// The `survey` document of `latency-test --all-cpus --json`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Survey {
    pub(crate) tool: &'static str,
    pub(crate) version: &'static str,
    pub(crate) system: SystemSummary,
    pub(crate) settings: SurveySettings,
    /// Every CPU the kernel knows (online and offline), in order.
    pub(crate) cpus: Vec<CpuResult>,
    /// The CPU(s) for the RT threads (empty when none could be recommended).
    pub(crate) recommended: Vec<usize>,
    pub(crate) recommendation: Recommendation,
}

impl Survey {
    /// The JSON document.
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the survey holds only plain data")
    }

    /// The text table and the recommendation.
    pub(crate) fn render_text(&self) -> String {
        text::render(self)
    }

    /// The recommended CPU's row.
    pub(crate) fn recommended_row(&self) -> Option<&CpuResult> {
        let cpu = *self.recommended.first()?;
        self.cpus.iter().find(|c| c.cpu == cpu)
    }
}

/// Errors that would be the same on every CPU (a load that cannot start, no such flavor, a bad or
/// busy instance name, a hardening step the flavor requires) end the survey instead of filling every
/// row; a CPU refused or a thread that cannot set itself up there is that CPU's row.
fn same_for_every_cpu(e: &super::Error) -> bool {
    matches!(
        e,
        super::Error::Load(_)
            | super::Error::Runtime(
                RuntimeError::Flavor(_)
                    | RuntimeError::Hal(_)
                    | RuntimeError::Segment(_)
                    | RuntimeError::Harden { .. }
            )
    )
}

/// A line between the runs (the live display's stream), unless `--quiet`.
fn say(cfg: &TestConfig, line: &str) {
    if cfg.quiet {
        return;
    }
    let line = format!("{line}\n");
    // A closed stream only ends the printing, as for the live lines.
    let _ = if cfg.live_to_stderr {
        std::io::stderr().lock().write_all(line.as_bytes())
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(line.as_bytes()).and_then(|()| out.flush())
    };
}

/// Seconds as the survey's header says them (`10 s`, `2 min 30 s`).
fn seconds_text(s: f64) -> String {
    let s = s.round() as u64;
    match (s / 60, s % 60) {
        (0, s) => format!("{s} s"),
        (m, 0) => format!("{m} min"),
        (m, s) => format!("{m} min {s} s"),
    }
}

/// Measures every online CPU in turn with `cfg` (its `cpus` is ignored) and recommends one.
pub(crate) fn survey(cfg: &TestConfig) -> Result<Survey, super::Error> {
    // Said once, before any CPU, rather than once per CPU.
    super::load::preflight(&cfg.load).map_err(super::Error::Load)?;
    let system = SystemReport::detect_live();
    let online = system
        .cpus
        .online
        .clone()
        .or_else(|| crate::rt::sched::online_cpus().ok())
        .unwrap_or_default();
    let offline = system.cpus.offline.clone();
    let mut all: Vec<usize> = online.iter().chain(&offline).copied().collect();
    all.sort_unstable();
    all.dedup();
    // Each run moves this thread off its RT CPU and detection reads this thread's affinity as the
    // process's allowed CPUs: it is put back after every run, or the next CPU would be refused.
    let affinity = crate::rt::sched::allowed_cpus().ok();
    let per_cpu = cfg.duration.as_secs_f64();
    let allowed = |cpu: &usize| system.cpus.allowed.as_ref().is_none_or(|a| a.contains(cpu));
    let to_measure: Vec<usize> = online.iter().copied().filter(allowed).collect();
    say(
        cfg,
        &format!(
            "rtapi latency-test --all-cpus: {} CPU(s) to measure ({}), one at a time, {} each: about {} in all. Ctrl-C ends the survey and reports the CPUs measured so far.",
            to_measure.len(),
            crate::rt::cpulist::format(&to_measure),
            seconds_text(per_cpu),
            seconds_text(per_cpu * to_measure.len() as f64)
        ),
    );
    let root = SysRoot::default();
    let kind = |irq: u32, name: &str| match crate::detect::movability(&root, irq, name) {
        Movability::Managed => IrqKind::Managed,
        Movability::ProbablyManaged => IrqKind::ProbablyManaged,
        Movability::Movable => IrqKind::Movable,
    };
    let mut rows = Vec::new();
    let mut summary: Option<SystemSummary> = None;
    let mut interrupted = false;
    for &cpu in &all {
        let isolated = system.cpus.isolated.contains(&cpu);
        if !online.contains(&cpu) {
            rows.push(CpuResult::not_measured(cpu, isolated, "offline"));
            continue;
        }
        if !allowed(&cpu) {
            rows.push(CpuResult::not_measured(
                cpu,
                isolated,
                "not allowed for this process (taskset or a cgroup cpuset): survey without that restriction to measure it",
            ));
            continue;
        }
        if interrupted || crate::rt::signals::shutdown_requested() {
            interrupted = true;
            rows.push(CpuResult::not_measured(
                cpu,
                isolated,
                "the survey was interrupted (Ctrl-C) before this CPU",
            ));
            continue;
        }
        say(
            cfg,
            &format!(
                "\nCPU {cpu} ({} of {}): measuring for {}",
                to_measure.iter().position(|&c| c == cpu).unwrap_or(0) + 1,
                to_measure.len(),
                seconds_text(per_cpu)
            ),
        );
        let before = Snapshot::take();
        let result = run::run(
            &TestConfig {
                cpus: vec![cpu],
                ..cfg.clone()
            },
            None,
        );
        let after = Snapshot::take();
        if let Some(a) = &affinity {
            if let Err(e) = crate::rt::sched::set_current_affinity(a) {
                log::warn!("cannot restore the main thread's CPUs after CPU {cpu}: {e}");
            }
        }
        match result {
            Ok(report) => {
                let load = counters::cpu_load(&before, &after, cpu, kind);
                interrupted |= report.settings.interrupted;
                summary.get_or_insert_with(|| report.system.clone());
                rows.push(row(cpu, isolated, &report, load));
            }
            Err(e) if same_for_every_cpu(&e) => return Err(e),
            Err(e) => rows.push(CpuResult::not_measured(cpu, isolated, e.to_string())),
        }
    }
    let recommendation = recommend(&rows, &online, interrupted);
    Ok(Survey {
        tool: "rtapi latency-test --all-cpus",
        version: env!("CARGO_PKG_VERSION"),
        system: summary.unwrap_or_else(|| SystemSummary::new(&system, "unknown")),
        settings: SurveySettings {
            mode: "one-cpu-at-a-time",
            duration_per_cpu_s: per_cpu,
            base_ns: cfg.base.as_nanos().max(0) as u64,
            servo_ns: cfg.servo.as_nanos().max(0) as u64,
            timer: cfg.timer.to_string(),
            wake: cfg.wake.to_string(),
            load: cfg.load.iter().map(ToString::to_string).collect(),
            interrupted,
        },
        recommended: recommendation.0.into_iter().collect(),
        recommendation: recommendation.1,
        cpus: rows,
    })
}

/// A CPU's row from its run's report.
fn row(cpu: usize, isolated: bool, report: &super::report::Report, load: CpuLoad) -> CpuResult {
    let threads: Vec<ThreadBrief> = report
        .threads
        .iter()
        .map(|t| ThreadBrief {
            name: t.name.clone(),
            period_ns: t.period_ns,
            cpu: t.cpu,
            priority: t.priority,
            cycles: t.cycles,
            overruns: t.overruns,
            max_jitter_ns: t.max_jitter_ns,
            latency_ns: t.latency_ns,
            spikes: t.spikes.clone(),
        })
        .collect();
    let ran: Vec<&ThreadBrief> = threads.iter().filter(|t| t.cycles > 0).collect();
    let worst = |f: fn(&LatencySummary) -> u64| ran.iter().map(|t| f(&t.latency_ns)).max();
    CpuResult {
        cpu,
        isolated,
        status: if report.settings.interrupted {
            Status::Interrupted
        } else {
            Status::Measured
        },
        why: report
            .settings
            .interrupted
            .then(|| "interrupted (Ctrl-C): measured for less than the duration".to_string()),
        duration_s: Some(report.settings.duration_s),
        worst_latency_ns: worst(|l| l.max),
        p999_ns: worst(|l| l.p999),
        p99_ns: worst(|l| l.p99),
        mean_ns: ran
            .iter()
            .map(|t| t.latency_ns.mean)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
        overruns: Some(threads.iter().map(|t| t.overruns).sum()),
        verdict: Some(VerdictBrief {
            rating: report.verdict.rating,
            summary: report.verdict.summary.clone(),
            evidence: report.verdict.evidence,
            problems: report.verdict.problems.clone(),
        }),
        threads,
        interrupts: Some(load),
    }
}

/// `x µs` for the reason text.
fn us(ns: u64) -> String {
    format!("{} µs", crate::rt::units::us(ns as f64))
}

/// The recommended CPU (if any) and what to do with it.
fn recommend(
    rows: &[CpuResult],
    online: &[usize],
    interrupted: bool,
) -> (Option<usize>, Recommendation) {
    let candidates: Vec<Candidate> = rows.iter().filter_map(CpuResult::candidate).collect();
    let mut rec = Recommendation {
        rule: recommend::RULE,
        decided_by: None,
        reason: String::new(),
        boot_parameters: None,
        move_irqs: Vec::new(),
        managed_irqs: Vec::new(),
        per_cpu_irqs: Vec::new(),
        use_it: Vec::new(),
        notes: Vec::new(),
    };
    let Some((cpu, step)) = recommend::choose(&candidates) else {
        rec.reason = if interrupted {
            "no CPU was measured to the end before the survey was interrupted: run it again".into()
        } else {
            "no CPU could be measured (see each CPU's reason)".into()
        };
        return (None, rec);
    };
    let me = candidates
        .iter()
        .find(|c| c.cpu == cpu)
        .expect("chosen among them");
    let mut others: Vec<&Candidate> = candidates.iter().filter(|c| c.cpu != cpu).collect();
    others.sort_by_key(|c| (c.worst_ns, c.cpu));
    rec.decided_by = Some(step);
    let best = candidates.iter().map(|c| c.worst_ns).min().unwrap_or(0);
    let tied_list = || {
        let tied: Vec<usize> = candidates
            .iter()
            .filter(|c| c.worst_ns <= recommend::tie_limit(best))
            .map(|c| c.cpu)
            .collect();
        crate::rt::cpulist::format(&tied)
    };
    rec.reason = match step {
        _ if others.is_empty() => format!(
            "CPU {cpu} is the only CPU measured to the end (worst case {}, p99.9 {})",
            us(me.worst_ns),
            us(me.p999_ns)
        ),
        1 => format!(
            "CPU {cpu} has the lowest worst-case latency: {} (then {})",
            us(me.worst_ns),
            others
                .iter()
                .map(|c| format!("CPU {} {}", c.cpu, us(c.worst_ns)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        2 => format!(
            "worst cases up to {} count as equal (CPUs {}); of those, CPU {cpu} has the lowest p99.9: {} (worst case {})",
            us(recommend::tie_limit(best)),
            tied_list(),
            us(me.p999_ns),
            us(me.worst_ns)
        ),
        3 => format!(
            "worst case within the tolerance and the same p99.9 as another CPU ({}, {}); CPU {cpu} took the fewest interrupts that cannot be moved: {}/s",
            us(me.worst_ns),
            us(me.p999_ns),
            text::per_s(me.fixed_irqs_per_s)
        ),
        _ => format!(
            "equal on every measured figure; CPU {cpu} is the highest-numbered of them"
        ),
    };
    let rest: Vec<usize> = online.iter().copied().filter(|&c| c != cpu).collect();
    let row = rows
        .iter()
        .find(|r| r.cpu == cpu)
        .expect("a candidate is a row");
    let irqs = row
        .interrupts
        .as_ref()
        .and_then(|l| l.irqs.as_ref())
        .map(|l| l.sources.as_slice())
        .unwrap_or_default();
    if rest.is_empty() {
        rec.notes.push(
            "this machine has one online CPU: nothing can be isolated for the RT threads; a second CPU would let the rest of the system run elsewhere".into(),
        );
    } else {
        rec.boot_parameters = Some(recommend::boot_parameters(&[cpu]));
        rec.move_irqs = irqs
            .iter()
            .filter(|s| s.kind == IrqKind::Movable)
            .filter_map(|s| {
                Some(MoveIrq {
                    irq: s.irq?,
                    name: s.name.clone(),
                    per_s: s.per_s,
                    command: recommend::move_command(s.irq?, &rest),
                })
            })
            .collect();
    }
    let fixed = |k: &[IrqKind]| -> Vec<FixedIrq> {
        irqs.iter()
            .filter(|s| k.contains(&s.kind))
            .map(|s| FixedIrq {
                source: s.source.clone(),
                name: s.name.clone(),
                kind: s.kind,
                per_s: s.per_s,
            })
            .collect()
    };
    rec.managed_irqs = fixed(&[IrqKind::Managed, IrqKind::ProbablyManaged]);
    rec.per_cpu_irqs = fixed(&[IrqKind::PerCpu]);
    rec.use_it = vec![
        format!("confirm after the changes, for an hour under load: rtapi latency-test --cpu {cpu} --duration 1h --load cpu,mem,io"),
        format!("then give the machine's threads this CPU: `cpu = {cpu}` in each [[thread]] of the machine config"),
    ];
    if cpu == 0 && !rest.is_empty() {
        rec.notes.push("CPU 0 is the boot CPU: it keeps timekeeping and boot-time work, and many kernels leave it out of nohz_full=; prefer another CPU if its numbers are close".into());
    }
    if interrupted {
        rec.notes.push(
            "the survey was interrupted: only the CPUs measured to the end were compared".into(),
        );
    }
    if let Some(v) = row.verdict.as_ref().filter(|v| !v.evidence) {
        rec.notes.push(format!(
            "CPU {cpu}'s run is not evidence ({}): compare the CPUs, do not judge the machine by it",
            v.problems.join("; ")
        ));
    }
    if !row.isolated && !rest.is_empty() {
        rec.notes.push(format!(
            "CPU {cpu} was not isolated during the survey: after isolating it, measure again"
        ));
    }
    (Some(cpu), rec)
}

#[cfg(test)]
mod tests {
    use super::counters::{IrqDelta, Load};
    use super::*;

    fn irq(source: &str, irq: Option<u32>, kind: IrqKind, count: u64) -> IrqDelta {
        IrqDelta {
            source: source.into(),
            irq,
            name: format!("dev{source}"),
            kind,
            count,
            per_s: count as f64 / 2.0,
        }
    }

    /// A CPU measured for 2 s with one servo thread.
    fn measured(cpu: usize, worst_us: u64, p999_us: u64, irqs: Vec<IrqDelta>) -> CpuResult {
        let latency = LatencySummary {
            max: worst_us * 1000,
            p999: p999_us * 1000,
            ..LatencySummary::default()
        };
        CpuResult {
            status: Status::Measured,
            why: None,
            duration_s: Some(2.0),
            worst_latency_ns: Some(latency.max),
            p999_ns: Some(latency.p999),
            p99_ns: Some(0),
            mean_ns: Some(0.0),
            overruns: Some(0),
            threads: vec![ThreadBrief {
                name: "servo".into(),
                period_ns: 1_000_000,
                cpu: Some(cpu),
                priority: 98,
                cycles: 2000,
                overruns: 0,
                max_jitter_ns: 0,
                latency_ns: latency,
                spikes: vec![],
            }],
            verdict: Some(VerdictBrief {
                rating: Rating::ServoOnly,
                summary: String::new(),
                evidence: true,
                problems: vec![],
            }),
            interrupts: Some(CpuLoad {
                seconds: 2.0,
                irqs: Some(Load {
                    total: irqs.iter().map(|i| i.count).sum(),
                    per_s: irqs.iter().map(|i| i.per_s).sum(),
                    sources: irqs,
                }),
                softirqs: None,
            }),
            ..CpuResult::not_measured(cpu, false, "")
        }
    }

    #[test]
    fn recommends_the_best_complete_cpu_with_what_to_do() {
        let rows = vec![
            measured(0, 300, 40, vec![]),
            measured(
                1,
                90,
                30,
                vec![
                    irq("LOC", None, IrqKind::PerCpu, 2000),
                    irq("36", Some(36), IrqKind::ProbablyManaged, 500),
                    irq("41", Some(41), IrqKind::Movable, 20),
                ],
            ),
            // Better numbers, but cut short: not compared.
            CpuResult {
                status: Status::Interrupted,
                ..measured(2, 10, 5, vec![])
            },
            CpuResult::not_measured(3, false, "offline"),
        ];
        let (cpu, rec) = recommend(&rows, &[0, 1, 2], true);
        assert_eq!(cpu, Some(1));
        assert_eq!(rec.decided_by, Some(1));
        assert!(
            rec.reason
                .contains("lowest worst-case latency: 90.0 µs (then CPU 0 300.0 µs)"),
            "{}",
            rec.reason
        );
        assert_eq!(
            rec.boot_parameters.as_deref(),
            Some("isolcpus=managed_irq,domain,1 nohz_full=1 rcu_nocbs=1")
        );
        assert_eq!(rec.move_irqs.len(), 1);
        assert_eq!(
            rec.move_irqs[0].command,
            "echo 0,2 > /proc/irq/41/smp_affinity_list"
        );
        assert_eq!(rec.managed_irqs.len(), 1);
        assert_eq!(rec.managed_irqs[0].source, "36");
        assert_eq!(rec.per_cpu_irqs[0].source, "LOC");
        assert!(rec.use_it[0].contains("--cpu 1") && rec.use_it[1].contains("cpu = 1"));
        assert!(rec.notes.iter().any(|n| n.contains("interrupted")));
    }

    #[test]
    fn no_candidate_no_recommendation() {
        let rows = vec![
            CpuResult::not_measured(0, false, "refused"),
            CpuResult {
                status: Status::Interrupted,
                ..measured(1, 10, 5, vec![])
            },
        ];
        let (cpu, rec) = recommend(&rows, &[0, 1], true);
        assert_eq!(cpu, None);
        assert!(rec.reason.contains("interrupted"), "{}", rec.reason);
        assert!(rec.boot_parameters.is_none());
        // A run without cycles is no candidate either.
        let mut empty = measured(0, 1, 1, vec![]);
        empty.threads[0].cycles = 0;
        assert!(empty.candidate().is_none());
    }

    #[test]
    fn one_cpu_gets_no_isolation_advice() {
        let rows = vec![measured(
            0,
            50,
            10,
            vec![irq("41", Some(41), IrqKind::Movable, 20)],
        )];
        let (cpu, rec) = recommend(&rows, &[0], false);
        assert_eq!(cpu, Some(0));
        assert!(rec.boot_parameters.is_none() && rec.move_irqs.is_empty());
        assert!(rec.notes.iter().any(|n| n.contains("one online CPU")));
    }

    #[test]
    fn the_text_names_every_cpu_and_why_one_was_not_measured() {
        let rows = vec![
            measured(0, 300, 40, vec![irq("LOC", None, IrqKind::PerCpu, 2000)]),
            measured(1, 90, 30, vec![]),
            CpuResult::not_measured(2, false, "offline"),
        ];
        let (cpu, recommendation) = recommend(&rows, &[0, 1], false);
        let survey = Survey {
            tool: "t",
            version: "t",
            system: SystemSummary {
                kernel: "k".into(),
                kernel_version: "v".into(),
                preempt_rt: Some(false),
                preemption: None,
                flavor: "posix".into(),
                virtualized: Some(true),
                rt_cpu: Some(1),
                isolated_cpus: vec![],
                rt_throttled: None,
            },
            settings: SurveySettings {
                mode: "one-cpu-at-a-time",
                duration_per_cpu_s: 2.0,
                base_ns: 0,
                servo_ns: 1_000_000,
                timer: "nanosleep".into(),
                wake: "sleep".into(),
                load: vec![],
                interrupted: false,
            },
            cpus: rows,
            recommended: cpu.into_iter().collect(),
            recommendation,
        };
        let text = survey.render_text();
        let firsts: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("CPU"))
            .skip(1)
            .take(3)
            .map(|l| l.split_whitespace().next().unwrap_or(""))
            .collect();
        assert_eq!(firsts, ["0", "1", "2"], "{text}");
        assert!(text.contains("CPU 2: not measured: offline"), "{text}");
        assert!(text.contains("LOC 1000 per-cpu"), "{text}");
        assert!(text.contains("give the RT threads CPU 1."), "{text}");
        assert!(text.contains("up to 1000/s"), "{text}");
    }
}
