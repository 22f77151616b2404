//! The tracefs text format, one line per event, as `per_cpu/cpuN/trace` prints it with the `nop`
//! tracer (captured on this project's test machine, trace_clock `mono`):
//!
//! ```text
//!           <idle>-0       [001] d.h1.  6231.541665: irq_handler_entry: irq=36 name=virtio1-req.0
//!     kworker/1:0H-24      [001] .....  6231.545752: workqueue_execute_start: work struct 00000000c6607df4: function blk_mq_run_work_fn
//! ```
//!
//! `TASK-PID [CPU] FLAGS TIMESTAMP: EVENT: FIELDS`. The task name may contain spaces and dashes
//! (the pid is after the *last* dash before the `[CPU]` column); header lines start with `#`.
//! Anything that does not have this shape — `CPU:1 [LOST 42 EVENTS]`, a truncated line — is skipped
//! and counted, never an error.

/// One trace event: when, where, which task was current, and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// CLOCK_MONOTONIC time in nanoseconds (the session uses trace_clock `mono`; the text has
    /// microseconds, so the last three digits are zero).
    pub ts_ns: u64,
    /// The CPU the event happened on.
    pub cpu: usize,
    /// The task current on that CPU when it happened (`<idle>` for the idle task).
    pub comm: String,
    /// Its pid (thread id; 0 for idle).
    pub pid: u32,
    /// The event and its fields.
    pub kind: EventKind,
}

/// The events a [`TraceSession`](super::TraceSession) enables, with the fields attribution uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// `irq_handler_entry: irq=36 name=virtio1-req.0`.
    IrqEntry {
        /// The Linux IRQ number.
        irq: u32,
        /// The handler's name as in `/proc/interrupts`.
        name: String,
    },
    /// `irq_handler_exit: irq=36 ret=handled`.
    IrqExit {
        /// The Linux IRQ number.
        irq: u32,
    },
    /// `softirq_entry: vec=9 [action=RCU]`.
    SoftirqEntry {
        /// The vector's name (`RCU`, `TIMER`, `NET_RX`, `BLOCK`, …).
        vector: String,
    },
    /// `softirq_exit: vec=9 [action=RCU]`.
    SoftirqExit {
        /// The vector's name.
        vector: String,
    },
    /// `sched_switch: prev_comm=sh prev_pid=9809 prev_prio=120 prev_state=R ==> next_comm=sleep …`.
    Switch {
        /// The task leaving the CPU.
        prev: TaskRef,
        /// Its state letter(s) (`R` preempted, `S` sleeping, `D`, `I`, `Z`, …).
        prev_state: String,
        /// The task entering the CPU.
        next: TaskRef,
    },
    /// `sched_wakeup`, `sched_wakeup_new` or `sched_waking: comm=sleep pid=9811 prio=9 target_cpu=001`.
    Wakeup {
        /// The task woken.
        task: TaskRef,
        /// The CPU it will run on.
        target_cpu: usize,
        /// `sched_waking` (the wakeup starts) rather than `sched_wakeup[_new]` (it is runnable).
        waking: bool,
    },
    /// A system vector entered on this CPU: `local_timer_entry: vector=236`,
    /// `call_function[_single]_entry`, `reschedule_entry`.
    VectorEntry {
        /// `local_timer`, `call_function`, `call_function_single` or `reschedule`.
        name: String,
        /// The x86 vector number.
        vector: u32,
    },
    /// The matching `…_exit`.
    VectorExit {
        /// As in [`EventKind::VectorEntry`].
        name: String,
        /// The x86 vector number.
        vector: u32,
    },
    /// `hrtimer_expire_entry: hrtimer=00000000766… function=hrtimer_wakeup now=6262276457044`.
    HrtimerEntry {
        /// The timer's address as printed (hashed).
        timer: String,
        /// The expiry callback (`hrtimer_wakeup` wakes a sleeping task; `tick_nohz_handler` is the tick).
        function: String,
        /// The timer base's `now` in ns when it was run (same clock as `ts_ns` for monotonic timers).
        now_ns: u64,
    },
    /// `hrtimer_expire_exit: hrtimer=00000000766…`.
    HrtimerExit {
        /// The timer's address as printed.
        timer: String,
    },
    /// `workqueue_execute_start: work struct 00000000c66…: function blk_mq_run_work_fn`.
    WorkStart {
        /// The work function.
        function: String,
    },
    /// `workqueue_execute_end: work struct 00000000c66…: function blk_mq_run_work_fn`.
    WorkEnd {
        /// The work function.
        function: String,
    },
    /// Any other event, by name, with its fields unparsed.
    Other {
        /// The event name.
        name: String,
        /// The rest of the line.
        fields: String,
    },
}

/// A task as `sched_switch`/`sched_wakeup` name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskRef {
    /// The task's name (`comm`, at most 15 bytes).
    pub comm: String,
    /// Its pid (thread id).
    pub pid: u32,
    /// The kernel's prio: 0..=98 real-time (99 − the SCHED_FIFO priority − 1), 100..=139 normal
    /// (120 = nice 0); −1 when the trace did not say (the task was running before the first
    /// `sched_switch` read).
    pub prio: i32,
}

impl TaskRef {
    /// The kernel prio as a scheduling class and priority: `SCHED_FIFO/RR 99` for prio 0,
    /// `normal, nice 0` for 120 (the trace does not tell FIFO from RR, nor deadline tasks).
    pub fn policy(&self) -> String {
        match self.prio {
            0..=98 => format!("SCHED_FIFO/RR {}", 99 - self.prio),
            100..=139 => format!("normal, nice {}", self.prio - 120),
            -1 => "priority unknown".into(),
            p => format!("kernel prio {p}"),
        }
    }
}

/// What [`parse_text`] found: the events, and how many non-header lines it could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The events, in the order of the text.
    pub events: Vec<Event>,
    /// Lines that were neither a header (`#…`, blank) nor an event.
    pub skipped: usize,
}

/// Parses a whole trace text; see [`parse_line`].
pub fn parse_text(text: &str) -> Parsed {
    let mut out = Parsed::default();
    for line in text.lines() {
        match parse_line(line) {
            Line::Event(e) => out.events.push(e),
            Line::Header => {}
            Line::Garbage => out.skipped += 1,
        }
    }
    out
}

/// One line of trace text, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// An event.
    Event(Event),
    /// A comment/header line (`#…`) or a blank line.
    Header,
    /// Anything else (a lost-events marker, a cut line, …).
    Garbage,
}

/// Parses one line of the text format.
pub fn parse_line(line: &str) -> Line {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return Line::Header;
    }
    parse_event(line).map_or(Line::Garbage, Line::Event)
}

fn parse_event(line: &str) -> Option<Event> {
    // The CPU column: the first " [ddd] " — a task name could contain '[' but not this pattern
    // followed by the flags and a timestamp, so take the first candidate that parses.
    let mut search = 0;
    while let Some(off) = line[search..].find(" [") {
        let open = search + off;
        search = open + 2;
        let Some(close_off) = line[open + 2..].find(']') else {
            break;
        };
        let close = open + 2 + close_off;
        let Ok(cpu) = line[open + 2..close].parse::<usize>() else {
            continue;
        };
        if let Some(e) = parse_after_cpu(&line[..open], cpu, &line[close + 1..]) {
            return Some(e);
        }
    }
    None
}

fn parse_after_cpu(task: &str, cpu: usize, rest: &str) -> Option<Event> {
    let task = task.trim_start();
    let dash = task.rfind('-')?;
    let comm = &task[..dash];
    let pid: u32 = task[dash + 1..].trim_end().parse().ok()?;
    if comm.is_empty() {
        return None;
    }
    // " d.h1.  6231.541665: irq_handler_entry: irq=…"; the flags column is optional (old kernels,
    // the `irq-info` option off).
    let mut words = rest.trim_start();
    let first_end = words.find(' ')?;
    if !words[..first_end].ends_with(':') {
        words = words[first_end..].trim_start(); // flags
    }
    let ts_end = words.find(": ")?;
    let ts_ns = parse_timestamp(&words[..ts_end])?;
    let words = &words[ts_end + 2..];
    let (name, fields) = match words.find(": ") {
        Some(i) => (&words[..i], &words[i + 2..]),
        None => (words.strip_suffix(':').unwrap_or(words), ""),
    };
    if name.is_empty() || name.contains(' ') {
        return None;
    }
    let kind = parse_kind(name, fields)?;
    Some(Event {
        ts_ns,
        cpu,
        comm: comm.to_string(),
        pid,
        kind,
    })
}

/// `6231.541665` (any number of fraction digits up to 9) → ns.
fn parse_timestamp(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.')?;
    if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let mut f: u64 = frac.parse().ok()?;
    for _ in frac.len()..9 {
        f *= 10;
    }
    secs.checked_mul(1_000_000_000)?.checked_add(f)
}

/// The value of `key=` in `fields`, up to the next space (or the end).
fn field<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(i) = fields[from..].find(key) {
        let at = from + i;
        let starts_word = at == 0 || fields.as_bytes()[at - 1] == b' ';
        let after = at + key.len();
        if starts_word && fields[after..].starts_with('=') {
            let v = &fields[after + 1..];
            return Some(v.split(' ').next().unwrap_or(v));
        }
        from = after;
    }
    None
}

/// `comm=NAME pid=…` where NAME may contain spaces: everything from `comm=` up to ` pid=`.
fn comm_until<'a>(fields: &'a str, comm_key: &str, next_key: &str) -> Option<&'a str> {
    let start = fields.find(comm_key)? + comm_key.len() + 1;
    let end = start + fields[start..].find(&format!(" {next_key}="))?;
    Some(&fields[start..end])
}

fn task_ref(fields: &str, prefix: &str) -> Option<TaskRef> {
    let comm = comm_until(fields, &format!("{prefix}comm"), &format!("{prefix}pid"))?;
    let after = &fields[fields.find(&format!(" {prefix}pid="))?..];
    Some(TaskRef {
        comm: comm.to_string(),
        pid: field(after, &format!("{prefix}pid"))?.parse().ok()?,
        prio: field(after, &format!("{prefix}prio"))?.parse().ok()?,
    })
}

/// `[action=RCU]` → `RCU`; without the brackets, the vector number.
fn softirq_name(fields: &str) -> Option<String> {
    if let Some(i) = fields.find("[action=") {
        let v = &fields[i + "[action=".len()..];
        return Some(v.trim_end_matches(']').to_string());
    }
    field(fields, "vec").map(|v| format!("vec {v}"))
}

fn work_function(fields: &str) -> Option<String> {
    let i = fields.rfind("function ")?;
    Some(fields[i + "function ".len()..].trim().to_string())
}

fn parse_kind(name: &str, fields: &str) -> Option<EventKind> {
    const VECTORS: [&str; 4] = [
        "local_timer",
        "call_function_single",
        "call_function",
        "reschedule",
    ];
    Some(match name {
        "irq_handler_entry" => EventKind::IrqEntry {
            irq: field(fields, "irq")?.parse().ok()?,
            name: fields
                .find("name=")
                .map(|i| fields[i + 5..].to_string())
                .unwrap_or_default(),
        },
        "irq_handler_exit" => EventKind::IrqExit {
            irq: field(fields, "irq")?.parse().ok()?,
        },
        "softirq_entry" => EventKind::SoftirqEntry {
            vector: softirq_name(fields)?,
        },
        "softirq_exit" => EventKind::SoftirqExit {
            vector: softirq_name(fields)?,
        },
        "sched_switch" => {
            let (prev, next) = fields.split_once(" ==> ")?;
            EventKind::Switch {
                prev: task_ref(prev, "prev_")?,
                prev_state: field(prev, "prev_state")?.to_string(),
                next: task_ref(next, "next_")?,
            }
        }
        "sched_wakeup" | "sched_wakeup_new" | "sched_waking" => EventKind::Wakeup {
            task: task_ref(fields, "")?,
            target_cpu: field(fields, "target_cpu")?.parse().ok()?,
            waking: name == "sched_waking",
        },
        "hrtimer_expire_entry" => EventKind::HrtimerEntry {
            timer: field(fields, "hrtimer")?.to_string(),
            function: field(fields, "function")?.to_string(),
            now_ns: field(fields, "now")?.parse().ok()?,
        },
        "hrtimer_expire_exit" => EventKind::HrtimerExit {
            timer: field(fields, "hrtimer")?.to_string(),
        },
        "workqueue_execute_start" => EventKind::WorkStart {
            function: work_function(fields)?,
        },
        "workqueue_execute_end" => EventKind::WorkEnd {
            function: work_function(fields)?,
        },
        _ => {
            let vector = VECTORS.iter().find_map(|v| {
                let rest = name.strip_prefix(v)?;
                let entry = match rest {
                    "_entry" => true,
                    "_exit" => false,
                    _ => return None,
                };
                Some((*v, entry))
            });
            match vector {
                Some((v, entry)) => {
                    let vector = field(fields, "vector")?.parse().ok()?;
                    let name = v.to_string();
                    if entry {
                        EventKind::VectorEntry { name, vector }
                    } else {
                        EventKind::VectorExit { name, vector }
                    }
                }
                None => EventKind::Other {
                    name: name.to_string(),
                    fields: fields.to_string(),
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const IRQ: &str = include_str!("fixtures/cpu1_irq.txt");
    const SLEEP: &str = include_str!("fixtures/cpu1_sleep.txt");
    const SPINNER_FROM_IDLE: &str = include_str!("fixtures/cpu1_spinner_from_idle.txt");
    const RT_PREEMPTED: &str = include_str!("fixtures/cpu1_rt_preempted.txt");

    fn one(line: &str) -> Event {
        match parse_line(line) {
            Line::Event(e) => e,
            other => panic!("{line:?} → {other:?}"),
        }
    }

    #[test]
    fn every_line_of_the_recorded_fixtures_parses() {
        for text in [IRQ, SLEEP, SPINNER_FROM_IDLE, RT_PREEMPTED] {
            let p = parse_text(text);
            assert_eq!(p.skipped, 0);
            assert!(p.events.len() > 30);
            assert!(p.events.iter().all(|e| e.cpu == 1));
            assert!(p.events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
            assert!(
                !p.events
                    .iter()
                    .any(|e| matches!(e.kind, EventKind::Other { .. })),
                "all kinds known"
            );
        }
    }

    #[test]
    fn irq_lines() {
        let e = one(
            "          <idle>-0       [001] d.h1.  6231.541665: irq_handler_entry: irq=36 name=virtio1-req.0",
        );
        assert_eq!(
            (e.ts_ns, e.cpu, e.comm.as_str(), e.pid),
            (6_231_541_665_000, 1, "<idle>", 0)
        );
        assert_eq!(
            e.kind,
            EventKind::IrqEntry {
                irq: 36,
                name: "virtio1-req.0".into()
            }
        );
        let e = one("          <idle>-0       [001] d.h1.  6231.541670: irq_handler_exit: irq=36 ret=handled");
        assert_eq!(e.kind, EventKind::IrqExit { irq: 36 });
    }

    #[test]
    fn softirq_vector_and_workqueue_lines() {
        let e = one(
            "              sh-9809    [001] ..s..  6262.268038: softirq_entry: vec=9 [action=RCU]",
        );
        assert_eq!(
            e.kind,
            EventKind::SoftirqEntry {
                vector: "RCU".into()
            }
        );
        let e =
            one("              sh-9809    [001] d.h..  6262.276009: local_timer_entry: vector=236");
        assert_eq!(
            e.kind,
            EventKind::VectorEntry {
                name: "local_timer".into(),
                vector: 236
            }
        );
        let e = one("          <idle>-0       [001] d.h1.  6231.540654: call_function_single_exit: vector=251");
        assert_eq!(
            e.kind,
            EventKind::VectorExit {
                name: "call_function_single".into(),
                vector: 251
            }
        );
        let e = one("    kworker/1:0H-24      [001] .....  6231.545752: workqueue_execute_start: work struct 00000000c6607df4: function blk_mq_run_work_fn");
        assert_eq!((e.comm.as_str(), e.pid), ("kworker/1:0H", 24));
        assert_eq!(
            e.kind,
            EventKind::WorkStart {
                function: "blk_mq_run_work_fn".into()
            }
        );
    }

    #[test]
    fn sched_and_hrtimer_lines() {
        let e = one("              sh-9809    [001] d..2.  6262.276469: sched_switch: prev_comm=sh prev_pid=9809 prev_prio=120 prev_state=R ==> next_comm=sleep next_pid=9811 next_prio=9");
        assert_eq!(
            e.kind,
            EventKind::Switch {
                prev: TaskRef {
                    comm: "sh".into(),
                    pid: 9809,
                    prio: 120
                },
                prev_state: "R".into(),
                next: TaskRef {
                    comm: "sleep".into(),
                    pid: 9811,
                    prio: 9
                },
            }
        );
        let e = one("              sh-9809    [001] dNh3.  6262.276461: sched_wakeup: comm=sleep pid=9811 prio=9 target_cpu=001");
        assert_eq!(
            e.kind,
            EventKind::Wakeup {
                task: TaskRef {
                    comm: "sleep".into(),
                    pid: 9811,
                    prio: 9
                },
                target_cpu: 1,
                waking: false
            }
        );
        let e = one("              sh-9809    [001] d.h..  6262.276457: hrtimer_expire_entry: hrtimer=0000000076671183 function=hrtimer_wakeup now=6262276457044");
        assert_eq!(
            e.kind,
            EventKind::HrtimerEntry {
                timer: "0000000076671183".into(),
                function: "hrtimer_wakeup".into(),
                now_ns: 6_262_276_457_044
            }
        );
    }

    #[test]
    fn names_with_spaces_and_dashes() {
        let e = one("     Web Content-4242    [001] d..2.  100.000001: sched_switch: prev_comm=Web Content prev_pid=4242 prev_prio=120 prev_state=S ==> next_comm=rtapi-servo-x next_pid=77 next_prio=0");
        assert_eq!((e.comm.as_str(), e.pid), ("Web Content", 4242));
        let EventKind::Switch { prev, next, .. } = e.kind else {
            panic!()
        };
        assert_eq!(prev.comm, "Web Content");
        assert_eq!(
            (next.comm.as_str(), next.pid, next.prio),
            ("rtapi-servo-x", 77, 0)
        );
    }

    #[test]
    fn garbage_is_skipped_and_counted() {
        let text = "# tracer: nop\n\nCPU:1 [LOST 42 EVENTS]\n   sh-1 [001] d..2.  12.5x: sched_switch: x\n   cut-off-li\n          <idle>-0       [001] d.h1.  6231.541670: irq_handler_exit: irq=36 ret=handled\n";
        let p = parse_text(text);
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.skipped, 3);
    }
}
