//! Spike attribution: given one CPU's events around a late wake, what held the CPU between the
//! deadline and the wake, and for how long.
//!
//! The window is `[window_start_ns, wake_ns]` (normally the deadline and the observed wake). Pass
//! the CPU's events from a little *before* the window too (a few ms): the task that was already
//! running at the deadline, or an interrupt already entered, is only known from earlier events.
//! Read on past the wake too (a millisecond will do): the first event after the window tells who
//! was running at its end when no switch was logged. Every duration is clipped to the window. Causes may overlap in time (a late timer is usually late
//! *because of* something else in the list); within the CPU's own time, hard interrupts are not
//! counted again in the softirq or task they interrupted, and neither is counted in a task's time.
//!
//! A session that skips the RT threads' own wakes (`TraceSession::skip_own_wakes`) records the RT
//! thread's expiry, wakeup and timer interrupt only when another task was current: without them, the window's time
//! that no recorded interrupt, softirq or task accounts for is named outside the kernel, as the late
//! expiry would have shown it.

use std::collections::BTreeMap;
use std::fmt;

use super::parse::{Event, EventKind, TaskRef};

/// One reason for lost time in a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// What it was.
    pub kind: CauseKind,
    /// Time it took inside the window, ns (for [`CauseKind::TimerLate`], how late the expiry ran).
    pub dur_ns: u64,
    /// How many separate intervals (interrupts, runs) were summed into `dur_ns`.
    pub count: u32,
}

/// The kinds of cause [`attribute`] names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum CauseKind {
    /// A device interrupt handler (`irq_handler_entry/exit`).
    Irq {
        /// The Linux IRQ number.
        irq: u32,
        /// Its handler name.
        name: String,
    },
    /// A system vector: `local_timer`, `call_function[_single]`, `reschedule`.
    Vector {
        /// The vector's name.
        name: String,
    },
    /// A softirq run (`softirq_entry/exit`).
    Softirq {
        /// `TIMER`, `NET_RX`, `RCU`, `SCHED`, `BLOCK`, ….
        vector: String,
    },
    /// A user task running on the CPU between the RT thread's timer expiry and its wake (before it
    /// was switched in, or preempting it before it read its clock).
    Task {
        /// The task.
        task: TaskRef,
    },
    /// A kernel thread (kworker, ksoftirqd, rcu…, irq/…, migration…) running on the CPU.
    KernelThread {
        /// The thread.
        task: TaskRef,
        /// Work functions it ran in the window (for a kworker).
        work: Vec<String>,
    },
    /// The hrtimer that woke the RT thread expired late against the deadline.
    TimerLate {
        /// Its callback (`hrtimer_wakeup` for a sleeping task).
        function: String,
    },
    /// Nothing was visible in this kernel during the window: the time went outside it (a
    /// hypervisor, an SMI, firmware).
    Outside,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.dur_ns as f64 / 1000.0;
        match &self.kind {
            CauseKind::Irq { irq, name } => write!(f, "IRQ {irq} ({name})")?,
            CauseKind::Vector { name } => write!(f, "{name} interrupt")?,
            CauseKind::Softirq { vector } => write!(f, "softirq {vector}")?,
            CauseKind::Task { task } => write!(
                f,
                "task {} (pid {}, {})",
                task.comm,
                task.pid,
                task.policy()
            )?,
            CauseKind::KernelThread { task, work } => {
                write!(
                    f,
                    "kernel thread {} (pid {}, {})",
                    task.comm,
                    task.pid,
                    task.policy()
                )?;
                if !work.is_empty() {
                    write!(f, " running {}", work.join(", "))?;
                }
            }
            CauseKind::TimerLate { function } => {
                return write!(f, "timer {function} expired {us:.1} µs after the deadline")
            }
            CauseKind::Outside => {
                return write!(
                f,
                "nothing visible in this kernel for {us:.1} µs → outside (hypervisor/SMI/firmware)"
            )
            }
        }
        write!(f, ": {us:.1} µs")?;
        if self.count > 1 {
            write!(f, " ({}×)", self.count)?;
        }
        Ok(())
    }
}

/// A timer this much late, with nothing in the guest to show for it, is time taken from outside.
const OUTSIDE_MIN_NS: u64 = 50_000;

/// Kernel-thread names, by prefix (the trace does not say which tasks are kernel threads; these
/// are the `PF_KTHREAD` tasks of current kernels, by name).
const KTHREADS: &[&str] = &[
    "kworker/",
    "ksoftirqd/",
    "rcu",
    "migration/",
    "irq/",
    "ktimers/",
    "kthreadd",
    "watchdog",
    "cpuhp/",
    "kswapd",
    "kcompactd",
    "khugepaged",
    "idle_inject/",
    "kauditd",
    "jbd2/",
    "writeback",
    "kdamond",
    "oom_reaper",
    "khungtaskd",
    "kdevtmpfs",
    "hwrng",
    "ksmd",
    "kthrotld",
    "kblockd",
    "pool_workqueue_",
    "psimon",
    "napi/",
    "scsi_eh_",
    "xfsaild/",
    "pr/",
];

/// Whether `comm` names a kernel thread (by the usual names; the trace does not say).
pub fn is_kernel_thread(comm: &str) -> bool {
    KTHREADS.iter().any(|p| comm.starts_with(p))
}

/// Clip `[a, b)` to `[lo, hi)`.
fn clip(a: u64, b: u64, lo: u64, hi: u64) -> Option<(u64, u64)> {
    let (a, b) = (a.max(lo), b.min(hi));
    (a < b).then_some((a, b))
}

/// Total overlap of `[a, b)` with a set of intervals.
fn overlap(a: u64, b: u64, with: &[(u64, u64)]) -> u64 {
    with.iter()
        .filter_map(|&(x, y)| clip(x, y, a, b))
        .map(|(x, y)| y - x)
        .sum()
}

/// Total length of the union of `iv` (sorted in place).
fn union_len(iv: &mut [(u64, u64)]) -> u64 {
    iv.sort_unstable();
    let mut total = 0;
    let mut end = 0;
    for &(a, b) in iv.iter() {
        let a = a.max(end);
        if b > a {
            total += b - a;
            end = b;
        }
    }
    total
}

#[derive(Default)]
struct Acc {
    by: BTreeMap<CauseKind, (u64, u32)>,
}

impl Acc {
    fn add(&mut self, kind: CauseKind, dur: u64) {
        let e = self.by.entry(kind).or_default();
        e.0 += dur;
        e.1 += 1;
    }
}

/// Names what held the CPU in `[window_start_ns, wake_ns]`, longest first (see the module docs).
/// `events` are one CPU's events in time order; `rt_pid` is the RT thread's tid (its own running
/// time, and idle, are not causes).
pub fn attribute(events: &[Event], window_start_ns: u64, wake_ns: u64, rt_pid: u32) -> Vec<Cause> {
    let (lo, hi) = (window_start_ns, wake_ns);
    if hi <= lo {
        return Vec::new();
    }
    let first_ts = events.first().map_or(lo, |e| e.ts_ns.min(lo));

    // Hard interrupts (device IRQs and system vectors), then softirqs: [from, to) with their kind.
    let mut hard: Vec<(u64, u64, CauseKind)> = Vec::new();
    let mut soft: Vec<(u64, u64, CauseKind)> = Vec::new();
    let mut open_irq: BTreeMap<u32, (u64, String)> = BTreeMap::new();
    let mut open_vec: BTreeMap<String, u64> = BTreeMap::new();
    let mut open_soft: BTreeMap<String, u64> = BTreeMap::new();
    // Who ran: [from, to) per task.
    let mut runs: Vec<(u64, u64, TaskRef)> = Vec::new();
    let mut current: Option<(u64, TaskRef)> = None;
    let mut work: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut last_wakeup_timer: Option<(String, u64)> = None;
    let mut timer_late: Option<(String, u64)> = None;
    // Whether the RT thread's wakeup is in the window: a session that skips its own wakes
    // (`TraceSession::skip_own_wakes`) records it only when another task was current.
    let mut own_wakeup_seen = false;
    let mut prev_ts = first_ts;
    // Priorities as switches and wakeups report them, for runs whose start was not logged.
    let mut prios: BTreeMap<u32, i32> = BTreeMap::new();

    for e in events {
        if current.is_none() {
            // The line header names the task current at this event; prio is unknown until a switch.
            current = Some((
                first_ts,
                TaskRef {
                    comm: e.comm.clone(),
                    pid: e.pid,
                    prio: -1,
                },
            ));
        }
        // The line header names the current task (for a sched_switch, the task leaving). A change
        // without a `sched_switch` line is a switch somewhere since the previous event, counted
        // from there. It happens: on this project's test VM, switches *out of idle* on CPU 1 are
        // never logged (on CPU 0 they are).
        if let Some((from, task)) = current.take_if(|(_, t)| t.pid != e.pid) {
            let at = prev_ts.max(from);
            runs.push((from, at, task));
            current = Some((
                at,
                TaskRef {
                    comm: e.comm.clone(),
                    pid: e.pid,
                    prio: -1,
                },
            ));
        }
        if e.ts_ns > hi {
            // One event past the window, read only for who was running at its end.
            if let (EventKind::Switch { prev, .. }, Some((_, task))) = (&e.kind, current.as_mut()) {
                if task.pid == prev.pid {
                    task.prio = prev.prio;
                }
            }
            break;
        }
        match &e.kind {
            EventKind::Switch { prev, next, .. } => {
                prios.insert(prev.pid, prev.prio);
                prios.insert(next.pid, next.prio);
            }
            EventKind::Wakeup { task, .. } => {
                prios.insert(task.pid, task.prio);
            }
            _ => {}
        }
        match &e.kind {
            EventKind::IrqEntry { irq, name } => {
                open_irq.insert(*irq, (e.ts_ns, name.clone()));
            }
            EventKind::IrqExit { irq } => {
                let (from, name) = open_irq.remove(irq).unwrap_or((first_ts, String::new()));
                hard.push((from, e.ts_ns, CauseKind::Irq { irq: *irq, name }));
            }
            EventKind::VectorEntry { name, .. } => {
                open_vec.insert(name.clone(), e.ts_ns);
            }
            EventKind::VectorExit { name, .. } => {
                let from = open_vec.remove(name).unwrap_or(first_ts);
                hard.push((from, e.ts_ns, CauseKind::Vector { name: name.clone() }));
            }
            EventKind::SoftirqEntry { vector } => {
                open_soft.insert(vector.clone(), e.ts_ns);
            }
            EventKind::SoftirqExit { vector } => {
                let from = open_soft.remove(vector).unwrap_or(first_ts);
                soft.push((
                    from,
                    e.ts_ns,
                    CauseKind::Softirq {
                        vector: vector.clone(),
                    },
                ));
            }
            EventKind::Switch { prev, next, .. } => {
                if let Some((from, mut task)) = current.take() {
                    if task.pid == prev.pid {
                        task.prio = prev.prio;
                        task.comm.clone_from(&prev.comm);
                    }
                    runs.push((from, e.ts_ns, task));
                }
                current = Some((e.ts_ns, next.clone()));
            }
            EventKind::HrtimerEntry {
                function, now_ns, ..
            } if function == "hrtimer_wakeup" => {
                last_wakeup_timer = Some((function.clone(), *now_ns));
            }
            EventKind::HrtimerExit { .. } => {}
            EventKind::Wakeup {
                task,
                target_cpu,
                waking: false,
            } => {
                if task.pid == rt_pid {
                    own_wakeup_seen |= e.ts_ns >= lo;
                    if let Some((function, now)) = last_wakeup_timer.take() {
                        if now > lo && now <= hi {
                            timer_late = Some((function, now - lo));
                        }
                    }
                }
                // An idle CPU runs the first task woken onto it at once — and the switch out of
                // idle may not be logged (above): take it as switched in now.
                if *target_cpu == e.cpu && current.as_ref().is_some_and(|(_, t)| t.pid == 0) {
                    if let Some((from, idle)) = current.take() {
                        runs.push((from, e.ts_ns, idle));
                    }
                    current = Some((e.ts_ns, task.clone()));
                }
            }
            EventKind::WorkStart { function } if e.ts_ns >= lo => {
                let w = work.entry(e.pid).or_default();
                if !w.contains(function) {
                    w.push(function.clone());
                }
            }
            _ => {}
        }
        prev_ts = e.ts_ns;
    }
    if let Some((from, task)) = current {
        runs.push((from, hi, task));
    }
    for (irq, (from, name)) in open_irq {
        hard.push((from, hi, CauseKind::Irq { irq, name }));
    }
    for (name, from) in open_vec {
        hard.push((from, hi, CauseKind::Vector { name }));
    }
    for (vector, from) in open_soft {
        soft.push((from, hi, CauseKind::Softirq { vector }));
    }

    let hard_iv: Vec<(u64, u64)> = hard
        .iter()
        .filter_map(|(a, b, _)| clip(*a, *b, lo, hi))
        .collect();
    let mut acc = Acc::default();
    for (a, b, kind) in hard {
        if let Some((a, b)) = clip(a, b, lo, hi) {
            acc.add(kind, b - a);
        }
    }
    let mut soft_iv = Vec::new();
    for (a, b, kind) in soft {
        if let Some((a, b)) = clip(a, b, lo, hi) {
            soft_iv.push((a, b));
            acc.add(kind, (b - a).saturating_sub(overlap(a, b, &hard_iv)));
        }
    }
    // When the RT thread's own timer expired (the deadline itself if no late expiry was seen).
    let expiry = lo + timer_late.as_ref().map_or(0, |(_, late)| *late);
    let mut task_iv: Vec<(u64, u64)> = Vec::new();
    for (a, b, mut task) in runs {
        if task.pid == 0 || task.pid == rt_pid {
            continue;
        }
        if task.prio < 0 {
            task.prio = prios.get(&task.pid).copied().unwrap_or(-1);
        }
        // Until its timer expired the RT thread was not runnable: a task that was current then did
        // not delay it (the expiry is a hard interrupt, which any task yields to). Tasks count from
        // the expiry to the wake — not only to the RT thread's first switch-in: a higher-priority
        // task that preempts it after that, before it has read its clock, delays the wake just as
        // much (the RT thread's own runs are skipped above).
        let Some((a, b)) = clip(a, b, expiry, hi) else {
            continue;
        };
        task_iv.push((a, b));
        let dur = (b - a)
            .saturating_sub(overlap(a, b, &hard_iv))
            .saturating_sub(overlap(a, b, &soft_iv));
        if dur == 0 {
            continue;
        }
        let kind = if is_kernel_thread(&task.comm) {
            CauseKind::KernelThread {
                work: work.get(&task.pid).cloned().unwrap_or_default(),
                task,
            }
        } else {
            CauseKind::Task { task }
        };
        acc.add(kind, dur);
    }
    if let Some((function, late)) = timer_late {
        acc.add(CauseKind::TimerLate { function }, late);
    }
    let mut causes: Vec<Cause> = acc
        .by
        .into_iter()
        .filter(|(_, (dur, _))| *dur > 0)
        .map(|(kind, (dur_ns, count))| Cause {
            kind,
            dur_ns,
            count,
        })
        .collect();
    // The signature of time taken from outside this kernel: the RT thread's own timer fired late by
    // most of the window while nothing in the guest accounts for that time (a timer that fires on
    // time proves the CPU was in the guest, so then nothing is claimed beyond what events show).
    // Only interrupts (IRQs off) can hold a timer expiry back inside the guest.
    let late = expiry - lo;
    let stolen = late.saturating_sub(overlap(lo, expiry, &hard_iv));
    // Without the RT thread's wakeup (not recorded while the CPU was idle or running an RT thread)
    // the expiry is not known: the time nothing in the guest accounts for — no interrupt, softirq
    // or other task — is what the expiry's lateness would have shown.
    let unaccounted = if own_wakeup_seen {
        0
    } else {
        let mut busy: Vec<(u64, u64)> = hard_iv.iter().chain(&soft_iv).copied().collect();
        busy.extend(task_iv.iter().copied());
        (hi - lo).saturating_sub(union_len(&mut busy))
    };
    if causes.is_empty() {
        causes.push(Cause {
            kind: CauseKind::Outside,
            dur_ns: hi - lo,
            count: 1,
        });
    } else if stolen * 2 > hi - lo && stolen >= OUTSIDE_MIN_NS {
        causes.push(Cause {
            kind: CauseKind::Outside,
            dur_ns: stolen,
            count: 1,
        });
    } else if unaccounted * 2 > hi - lo && unaccounted >= OUTSIDE_MIN_NS {
        causes.push(Cause {
            kind: CauseKind::Outside,
            dur_ns: unaccounted,
            count: 1,
        });
    }
    // Longest first; a late timer is a symptom, listed after the causes.
    let symptom = |c: &Cause| matches!(c.kind, CauseKind::TimerLate { .. });
    causes.sort_by(|a, b| {
        symptom(a)
            .cmp(&symptom(b))
            .then(b.dur_ns.cmp(&a.dur_ns))
            .then(a.kind.cmp(&b.kind))
    });
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse::parse_text;

    const IRQ: &str = include_str!("fixtures/cpu1_irq.txt");
    const SLEEP: &str = include_str!("fixtures/cpu1_sleep.txt");
    const SPINNER_FROM_IDLE: &str = include_str!("fixtures/cpu1_spinner_from_idle.txt");
    const RT_PREEMPTED: &str = include_str!("fixtures/cpu1_rt_preempted.txt");
    const US: u64 = 1000;

    #[test]
    fn a_preempted_task_and_the_wakeup_timer() {
        // `sleep` (SCHED_FIFO 90, pid 9811) slept 10 ms from 6262.266455 while `sh` spun; its
        // hrtimer ran at 6262.276457044, it was switched in at .276469.
        let ev = parse_text(SLEEP).events;
        let deadline = 6_262_276_455_000;
        let wake = 6_262_276_469_000;
        let causes = attribute(&ev, deadline, wake, 9811);
        let text: Vec<String> = causes.iter().map(|c| c.to_string()).collect();
        // The local timer interrupt 6262.276457 → .276467 (the wakeup runs inside it).
        assert_eq!(
            causes[0].kind,
            CauseKind::Vector {
                name: "local_timer".into()
            },
            "{text:?}"
        );
        assert_eq!(causes[0].dur_ns, 10 * US);
        // sh: from the timer's expiry (.276457; before it `sleep` was not runnable, so sh did not
        // hold it up) to the switch (.276469), 12 µs, minus the 10 µs of interrupt.
        let sh = causes
            .iter()
            .find(|c| matches!(&c.kind, CauseKind::Task { task } if task.comm == "sh"))
            .expect("sh named");
        assert_eq!(sh.dur_ns, 2 * US);
        let CauseKind::Task { task } = &sh.kind else {
            unreachable!()
        };
        assert_eq!((task.pid, task.prio), (9809, 120));
        let late = causes
            .iter()
            .find(|c| matches!(c.kind, CauseKind::TimerLate { .. }))
            .expect("timer named");
        assert_eq!(late.dur_ns, 2_044);
        // Causes longest first; the late timer, a symptom, last.
        let (symptoms, others): (Vec<&Cause>, Vec<&Cause>) = causes
            .iter()
            .partition(|c| matches!(c.kind, CauseKind::TimerLate { .. }));
        assert!(others.windows(2).all(|w| w[0].dur_ns >= w[1].dur_ns));
        assert_eq!(causes.last(), symptoms.last().copied());
    }

    #[test]
    fn irqs_softirqs_and_a_kworker() {
        let ev = parse_text(IRQ).events;
        // 6231.545727 irq 36 … kworker/1:0H runs blk_mq_run_work_fn at .545752.
        let causes = attribute(&ev, 6_231_545_700_000, 6_231_545_790_000, 4_000_000);
        let text: Vec<String> = causes.iter().map(|c| c.to_string()).collect();
        assert!(
            causes.iter().any(|c| matches!(&c.kind,
                CauseKind::Irq { irq: 36, name } if name == "virtio1-req.0")),
            "{text:?}"
        );
        assert!(
            causes.iter().any(|c| matches!(&c.kind,
                CauseKind::KernelThread { task, work } if task.comm == "kworker/1:0H"
                    && task.prio == 100 && work == &["blk_mq_run_work_fn".to_string()])
                && c.dur_ns == 28 * US), // .545745 (no switch logged from idle) → .545773
            "{text:?}"
        );
        assert!(
            causes
                .iter()
                .any(|c| matches!(&c.kind, CauseKind::Softirq { vector } if vector == "BLOCK")),
            "{text:?}"
        );
    }

    #[test]
    fn an_empty_window_is_outside_the_kernel() {
        let ev = parse_text(SLEEP).events;
        // 6262.272019 → .276009: `sh` ran; with sh as the "RT thread", nothing else is visible.
        let causes = attribute(&ev, 6_262_272_100_000, 6_262_275_900_000, 9809);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].kind, CauseKind::Outside);
        assert_eq!(causes[0].dur_ns, 3_800 * US);
        assert!(causes[0].to_string().contains("outside"));
    }

    #[test]
    fn a_switch_out_of_idle_that_was_not_logged() {
        // As the live test sees it on CPU 1 (trimmed from a capture): the spinner is woken from
        // idle, no switch to it is logged, the next line is its switch out.
        let text = "\
          <idle>-0       [001] d.h1.  7000.000000: local_timer_entry: vector=236
          <idle>-0       [001] d.h1.  7000.000001: hrtimer_expire_entry: hrtimer=00000000a1b2c3d4 function=hrtimer_wakeup now=7000000000500
          <idle>-0       [001] dNh2.  7000.000002: sched_wakeup: comm=spinner pid=4242 prio=0 target_cpu=001
          <idle>-0       [001] dNh1.  7000.000003: hrtimer_expire_exit: hrtimer=00000000a1b2c3d4
          <idle>-0       [001] dNh1.  7000.000010: local_timer_exit: vector=236
         spinner-4242    [001] d..2.  7000.000700: sched_switch: prev_comm=spinner prev_pid=4242 prev_prio=0 prev_state=X ==> next_comm=swapper/1 next_pid=0 next_prio=120
";
        let ev = parse_text(text).events;
        let causes = attribute(&ev, 7_000_000_050_000, 7_000_000_550_000, 1);
        assert_eq!(causes.len(), 1, "{causes:?}");
        let CauseKind::Task { task } = &causes[0].kind else {
            panic!("{causes:?}")
        };
        assert_eq!(
            (task.comm.as_str(), task.pid, task.prio),
            ("spinner", 4242, 0)
        );
        assert_eq!(causes[0].dur_ns, 500 * US);
    }

    #[test]
    fn a_spinner_woken_from_idle_in_a_real_capture() {
        // trace_inject on CPU 1: the switch from idle to the spinner (pid 24239) is not logged;
        // the next line is the servo's (pid 24229) timer interrupt with the spinner current. The
        // spinner held the CPU from that expiry (now=…324334963) to its switch at .324740, less the
        // interrupt's 7 µs after the expiry.
        let ev = parse_text(SPINNER_FROM_IDLE).events;
        let causes = attribute(&ev, 10_387_324_334_000, 10_387_324_750_000, 24229);
        let CauseKind::Task { task } = &causes[0].kind else {
            panic!("{causes:?}")
        };
        assert_eq!(
            (task.comm.as_str(), task.pid, task.prio),
            ("spinner", 24239, 0)
        );
        assert_eq!(causes[0].dur_ns, 405_037 - 7_037);
        // The earlier periods, the idle task and the servo's own runs are not causes.
        assert!(
            causes.iter().all(|c| !matches!(&c.kind,
                CauseKind::Task { task } if task.pid == 0 || task.pid == 24229)),
            "{causes:?}"
        );
    }

    #[test]
    fn a_task_that_preempts_the_rt_thread_before_its_wake_is_named() {
        // The servo (pid 8641) was switched in 10 µs after its expiry, then preempted by a
        // SCHED_FIFO 99 spinner (pid 8661) for 614 µs before it read its clock. Counting tasks only
        // up to the servo's first switch-in named nothing but interrupts for a 654 µs spike.
        let ev = parse_text(RT_PREEMPTED).events;
        let (deadline, wake) = (11_410_215_761_230, 11_410_216_415_360);
        let causes = attribute(&ev, deadline, wake, 8641);
        let text: Vec<String> = causes.iter().map(ToString::to_string).collect();
        let CauseKind::Task { task } = &causes[0].kind else {
            panic!("{text:?}")
        };
        assert_eq!(
            (task.comm.as_str(), task.pid, task.prio),
            ("spinner", 8661, 0)
        );
        // .215799 → .216413, less two local timer interrupts (9 + 8 µs) and the TIMER and SCHED
        // softirqs (6 + 6 µs) that ran on top of it.
        assert_eq!(causes[0].dur_ns, 614 * US - 17 * US - 12 * US);
        // lto (SCHED_OTHER) was current at the expiry (now=…215768210) until the servo's switch
        // at .215780, less the interrupt until .215778.
        let lto = causes
            .iter()
            .find(|c| matches!(&c.kind, CauseKind::Task { task } if task.pid == 8613))
            .expect("lto named");
        assert_eq!(lto.dur_ns, 215_780_000 - 215_778_000);
        // The servo's own runs are never a cause.
        assert!(
            causes.iter().all(|c| !matches!(&c.kind,
                CauseKind::Task { task } if task.pid == 8641)),
            "{text:?}"
        );
    }

    #[test]
    fn a_timer_that_fires_late_with_nothing_running_is_outside() {
        // The RT thread (pid 77) sleeps; its hrtimer should fire at 8000.000000 but the guest shows
        // nothing until it expires 6 ms later: the vCPU was not running.
        let text = "\
          <idle>-0       [001] d.h1.  8000.006000: local_timer_entry: vector=236
          <idle>-0       [001] d.h1.  8000.006001: hrtimer_expire_entry: hrtimer=00000000a1b2c3d4 function=hrtimer_wakeup now=8000006001000
          <idle>-0       [001] dNh2.  8000.006002: sched_wakeup: comm=rtapi-servo pid=77 prio=1 target_cpu=001
          <idle>-0       [001] dNh1.  8000.006003: hrtimer_expire_exit: hrtimer=00000000a1b2c3d4
          <idle>-0       [001] dNh1.  8000.006010: local_timer_exit: vector=236
          <idle>-0       [001] d..2.  8000.006012: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rtapi-servo next_pid=77 next_prio=1
";
        let ev = parse_text(text).events;
        let causes = attribute(&ev, 8_000_000_000_000, 8_000_006_015_000, 77);
        assert_eq!(causes[0].kind, CauseKind::Outside, "{causes:?}");
        assert!(causes[0].dur_ns > 5_900 * US, "{causes:?}");
        assert!(
            causes
                .iter()
                .any(|c| matches!(c.kind, CauseKind::TimerLate { .. })),
            "the late expiry is still named: {causes:?}"
        );
    }

    #[test]
    fn without_the_rt_threads_own_wake_unaccounted_time_is_outside() {
        // As a session that skips the RT thread's own wakes (pid 77) records an idle CPU: an IRQ of
        // 100 µs, then nothing for 5.9 ms — the timer interrupt, its expiry and the wakeup were idle
        // context, not recorded.
        let text = "\
          <idle>-0       [001] d.h1.  8000.000010: irq_handler_entry: irq=36 name=virtio1-req.0
          <idle>-0       [001] d.h1.  8000.000110: irq_handler_exit: irq=36 ret=handled
";
        let ev = parse_text(text).events;
        let causes = attribute(&ev, 8_000_000_000_000, 8_000_006_015_000, 77);
        let text: Vec<String> = causes.iter().map(ToString::to_string).collect();
        assert!(
            matches!(&causes[0].kind, CauseKind::Outside) && causes[0].dur_ns == 5_915 * US,
            "{text:?}"
        );
        assert!(
            causes
                .iter()
                .any(|c| matches!(c.kind, CauseKind::Irq { irq: 36, .. }) && c.dur_ns == 100 * US),
            "{text:?}"
        );
        // With the wakeup recorded on time, the timer proves the CPU was in the guest: nothing more
        // is claimed than the events show.
        let on_time = format!(
            "{text0}\
          <idle>-0       [001] dNh2.  8000.000001: sched_wakeup: comm=rtapi-servo pid=77 prio=1 target_cpu=001
",
            text0 = "          <idle>-0       [001] d.h1.  8000.000000: hrtimer_expire_entry: hrtimer=00000000a1b2c3d4 function=hrtimer_wakeup now=8000000000000\n"
        );
        let mut ev2 = parse_text(&on_time).events;
        ev2.extend(ev);
        let causes = attribute(&ev2, 8_000_000_000_000, 8_000_006_015_000, 77);
        assert!(
            causes.iter().all(|c| c.kind != CauseKind::Outside),
            "{causes:?}"
        );
    }

    #[test]
    fn union_of_intervals() {
        assert_eq!(union_len(&mut [(5, 10), (0, 3), (2, 6), (20, 21)]), 11);
        assert_eq!(union_len(&mut [(0, 10), (2, 4)]), 10);
        assert_eq!(union_len(&mut []), 0);
    }

    #[test]
    fn kernel_thread_names() {
        assert!(is_kernel_thread("kworker/1:0H"));
        assert!(is_kernel_thread("ksoftirqd/1"));
        assert!(is_kernel_thread("irq/36-virtio1-req.0"));
        // Seen holding CPU 1 for 208 µs in a quiet run, named "task" before.
        assert!(is_kernel_thread("kdamond.0"));
        assert!(is_kernel_thread("oom_reaper"));
        assert!(is_kernel_thread("watchdogd"));
        assert!(!is_kernel_thread("stress-ng"));
        assert!(!is_kernel_thread("rtapi-servo"));
    }
}
