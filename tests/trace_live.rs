//! The trace module on the real kernel: a tracefs instance on CPU 1, a SCHED_FIFO 99 thread named
//! `spinner` spinning ~0.5 ms there, and the attribution of that window must name it. Needs root,
//! tracefs and a CPU 1; otherwise it says `SKIPPED: <test>: <why>` on stderr
//! (and fails under CI when it is not root).

mod common;

use common::Prereq;
use std::path::Path;
use std::time::Duration;

use rtapi::rt::clock::{now, Nanos};
use rtapi::rt::sched::{online_cpus, pin_current_thread, set_current_policy, Policy};
use rtapi::trace::{attribute, CauseKind, TraceSession};

const CPU: usize = 1;

/// The tests of this file trace and load the same CPU: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Why the test cannot run here (and whether `.ci/run` provides what is missing), or `None`.
fn skip_reason() -> Option<(Prereq, String)> {
    if !nix::unistd::geteuid().is_root() {
        return Some((Prereq::Ci, "tracing needs root".into()));
    }
    if !Path::new("/sys/kernel/tracing/instances").is_dir() {
        return Some((
            Prereq::Machine,
            "tracefs is not mounted at /sys/kernel/tracing (mount -t tracefs nodev /sys/kernel/tracing)"
                .into(),
        ));
    }
    if !online_cpus().is_ok_and(|c| c.contains(&CPU)) {
        return Some((Prereq::Machine, format!("no CPU {CPU}")));
    }
    None
}

#[test]
fn a_spinning_fifo_thread_is_named_with_its_time() {
    if let Some((prereq, why)) = skip_reason() {
        return common::skip(test_name!(), &why, prereq);
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let session = TraceSession::start(&[CPU], &TraceSession::default_name()).unwrap();
    let dir = session.dir().to_path_buf();
    assert!(dir.is_dir());
    let wake_dir = session
        .wake()
        .expect("this kernel has per-instance pid lists")
        .dir()
        .to_path_buf();
    assert!(wake_dir.is_dir());
    eprintln!(
        "trace instance {} (missing events: {:?})",
        dir.display(),
        session.missing()
    );

    let spinner = std::thread::Builder::new()
        .name("spinner".into())
        .spawn(|| {
            // Policy first, then the pin: the switch onto CPU 1 then logs the RT prio.
            set_current_policy(Policy::Fifo { priority: 99 }).expect("SCHED_FIFO 99");
            pin_current_thread(CPU).expect("pin to CPU 1");
            std::thread::sleep(Duration::from_millis(2));
            let t0 = now();
            while now() - t0 < Nanos::from_micros(500) {
                std::hint::spin_loop();
            }
            let t1 = now();
            (nix::unistd::gettid().as_raw() as u32, t0, t1)
        })
        .unwrap();
    let (tid, t0, t1) = spinner.join().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    session.stop().unwrap();

    let (t0, t1) = (t0.as_nanos() as u64, t1.as_nanos() as u64);
    let w = session
        .read_window(CPU, t0 - 50_000_000, t1 + 1_000_000)
        .unwrap();
    assert!(!w.events.is_empty(), "events on CPU {CPU}");
    // The "RT thread" whose wake is late is this (main) thread: the spinner held CPU 1 for the
    // whole window [t0, t1].
    let me = nix::unistd::gettid().as_raw() as u32;
    let causes = attribute(&w.events, t0, t1, me);
    eprintln!(
        "window {:.1} µs, {} events read, {} skipped; causes:",
        (t1 - t0) as f64 / 1e3,
        w.events.len(),
        w.skipped
    );
    for c in &causes {
        eprintln!("  {c}");
    }
    let spin = causes
        .iter()
        .find(|c| matches!(&c.kind, CauseKind::Task { task } if task.comm == "spinner"))
        .expect("the spinner is named");
    let CauseKind::Task { task } = &spin.kind else {
        unreachable!()
    };
    assert_eq!(task.pid, tid);
    assert_eq!(task.prio, 0, "SCHED_FIFO 99 is kernel prio 0");
    // The spinner held the CPU for the whole window (its length is the wall clock's: a host that
    // steals the vCPU mid-spin makes it longer, 1.5 ms was seen): most of it is the spinner's.
    let window = t1 - t0;
    assert!(
        spin.dur_ns * 10 >= window * 6 && spin.dur_ns <= window,
        "spinner for most of the {window} ns window: {spin}"
    );
    assert_eq!(causes[0], *spin, "the spinner is the largest cause");

    drop(session);
    assert!(!dir.exists(), "{} removed on drop", dir.display());
    assert!(!wake_dir.exists(), "{} removed on drop", wake_dir.display());
}

/// Issue 46: with the RT thread's own wakes skipped in the kernel (`skip_own_wakes`), a periodic
/// SCHED_FIFO thread on CPU 1 leaves none of its wakes from idle in the ring — no wakeup, no
/// switch between it and the idle task, no timer expiry in idle context — while a SCHED_FIFO 99
/// spinner that delays it is still recorded and named.
#[test]
fn an_rt_threads_own_wakes_are_not_recorded_but_what_delays_it_is() {
    use rtapi::trace::EventKind;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    if let Some((prereq, why)) = skip_reason() {
        return common::skip(test_name!(), &why, prereq);
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!("rtapi-own-{}", std::process::id());
    let mut session = TraceSession::start(&[CPU], &name).unwrap();

    // The "RT thread": 200 µs periods for 400 ms once told to start.
    let (tid_tx, tid_rx) = mpsc::channel();
    let go = Arc::new(AtomicBool::new(false));
    let g = go.clone();
    let periodic = std::thread::Builder::new()
        .name("periodic".into())
        .spawn(move || {
            set_current_policy(Policy::Fifo { priority: 90 }).expect("SCHED_FIFO 90");
            pin_current_thread(CPU).expect("pin to CPU 1");
            tid_tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            while !g.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let start = now();
            let mut wakes = 0u32;
            while now() - start < Nanos::from_millis(400) {
                std::thread::sleep(Duration::from_micros(200));
                wakes += 1;
            }
            (start.as_nanos() as u64, now().as_nanos() as u64, wakes)
        })
        .unwrap();
    let rt = tid_rx.recv().unwrap();
    session.skip_own_wakes(&[rt], &[]).unwrap();
    assert_eq!(session.own_threads(), [rt]);
    go.store(true, Ordering::Release);

    std::thread::sleep(Duration::from_millis(150));
    let spinner = std::thread::Builder::new()
        .name("spinner".into())
        .spawn(|| {
            set_current_policy(Policy::Fifo { priority: 99 }).expect("SCHED_FIFO 99");
            pin_current_thread(CPU).expect("pin to CPU 1");
            std::thread::sleep(Duration::from_millis(2));
            let t0 = now();
            while now() - t0 < Nanos::from_micros(500) {
                std::hint::spin_loop();
            }
            let t1 = now();
            // Four more bursts: a host stall may swallow one whole, timer expiry included.
            for _ in 0..4 {
                std::thread::sleep(Duration::from_millis(3));
                let b = now();
                while now() - b < Nanos::from_micros(500) {
                    std::hint::spin_loop();
                }
            }
            (
                nix::unistd::gettid().as_raw() as u32,
                t0.as_nanos() as u64,
                t1.as_nanos() as u64,
            )
        })
        .unwrap();
    let (spin_tid, t0, t1) = spinner.join().unwrap();
    let (from, to, wakes) = periodic.join().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    session.stop().unwrap();

    let w = session.read_window(CPU, from, to).unwrap();
    let own_ctx = |pid: u32| pid == 0 || pid == rt;
    let mut own_wakeups = 0;
    let mut idle_switches = 0;
    let mut own_expiries = 0;
    let mut own_timer_irqs = 0;
    for e in &w.events {
        match &e.kind {
            EventKind::Wakeup { task, .. } if task.pid == rt && own_ctx(e.pid) => own_wakeups += 1,
            EventKind::Switch { prev, next, .. }
                if (prev.pid == 0 && next.pid == rt) || (prev.pid == rt && next.pid == 0) =>
            {
                idle_switches += 1
            }
            EventKind::HrtimerEntry { .. } if own_ctx(e.pid) => own_expiries += 1,
            EventKind::VectorEntry { name, .. } if name == "local_timer" && own_ctx(e.pid) => {
                own_timer_irqs += 1
            }
            _ => {}
        }
    }
    eprintln!(
        "{wakes} periods, {} events in the ring: own wakeups {own_wakeups}, idle switches \
         {idle_switches}, expiries in idle/own context {own_expiries}, timer interrupts there \
         {own_timer_irqs}",
        w.events.len()
    );
    assert!(wakes > 100, "the periodic thread ran: {wakes}");
    assert_eq!(
        (own_wakeups, idle_switches, own_expiries, own_timer_irqs),
        (0, 0, 0, 0),
        "the RT thread's own wakes are not recorded"
    );
    // Under the spinner they are (the wake instance's pid list drops only idle and own context):
    // the periodic thread's timer expired while the spinner held the CPU, and its wakeup followed
    // (in one of its five bursts, each 2.5 periods long).
    let under_spinner =
        |k: &dyn Fn(&EventKind) -> bool| w.events.iter().any(|e| e.pid == spin_tid && k(&e.kind));
    assert!(
        under_spinner(&|k| matches!(k, EventKind::HrtimerEntry { .. })),
        "the RT thread's timer expiring under the spinner is recorded"
    );
    assert!(
        under_spinner(&|k| matches!(k, EventKind::Wakeup { task, .. } if task.pid == rt)),
        "the RT thread's wakeup under the spinner is recorded"
    );
    // What delayed it is: the spinner's switches, and the attribution of its window.
    assert!(
        w.events.iter().any(|e| matches!(&e.kind,
            EventKind::Switch { prev, .. } if prev.pid == spin_tid)),
        "the spinner's switch out is recorded"
    );
    let causes = attribute(&w.events, t0, t1, rt);
    let text: Vec<String> = causes.iter().map(ToString::to_string).collect();
    eprintln!("causes of [{t0}, {t1}]: {text:?}");
    assert!(
        matches!(&causes[0].kind, CauseKind::Task { task } if task.pid == spin_tid
            && task.comm == "spinner"),
        "the spinner is the largest cause: {text:?}"
    );
}

/// `--trace-light`'s session: the events of the RT wake path (the scheduler's, and the timer
/// events) stay off until `set_sched_events(true)` and go off again with `false`, in every instance
/// (the switch instance's too), with no pid list left while off (the kernel runs a list's probes on
/// every switch and wakeup); `sched_covers` says which windows had them. A thread pinned to the CPU
/// sleeping 1 ms at a time switches there twice a sleep and has its timer expire once: while the
/// events are off, none of that is recorded; while they are on, it is; device interrupts, softirqs,
/// IPIs and work items are recorded throughout.
#[test]
fn a_light_session_records_the_scheduler_only_while_its_events_are_on() {
    use rtapi::trace::EventKind;
    if let Some((prereq, why)) = skip_reason() {
        return common::skip(test_name!(), &why, prereq);
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut session = TraceSession::start_light(&[CPU], &TraceSession::default_name()).unwrap();
    assert!(session.is_light());
    assert!(!session.sched_events_on());
    let parts: Vec<std::path::PathBuf> = session
        .parts()
        .iter()
        .map(|p| p.dir().to_path_buf())
        .collect();
    assert_eq!(parts.len(), 3, "main, wake and switch instances: {parts:?}");
    let enabled = |part: usize, ev: &str| {
        std::fs::read_to_string(parts[part].join(format!("events/{ev}/enable")))
            .unwrap()
            .trim()
            .to_string()
    };
    let sched = [
        (0, "sched/sched_wakeup_new"),
        (1, "sched/sched_switch"),
        (1, "sched/sched_wakeup"),
        (1, "irq_vectors/local_timer_entry"),
        (1, "timer/hrtimer_expire_entry"),
        (2, "sched/sched_switch"),
    ];
    let others = [
        (0, "irq/irq_handler_entry"),
        (0, "irq/softirq_entry"),
        (0, "irq_vectors/reschedule_entry"),
        (0, "workqueue/workqueue_execute_start"),
    ];
    let states = |list: &[(usize, &str)]| -> Vec<String> {
        list.iter().map(|&(p, ev)| enabled(p, ev)).collect()
    };
    // The sleeper: SCHED_OTHER on the CPU, told when to sleep by a channel, saying when it did.
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<(u64, u64)>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel::<u32>();
    let sleeper = std::thread::Builder::new()
        .name("sleeper".into())
        .spawn(move || {
            pin_current_thread(CPU).expect("pin");
            tid_tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            while go_rx.recv().is_ok() {
                let a = now().as_nanos() as u64;
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                done_tx.send((a, now().as_nanos() as u64)).unwrap();
            }
        })
        .unwrap();
    let sleeper_tid = tid_rx.recv().unwrap();
    // Watched: its switches would go to the switch instance, once the events are on.
    session.skip_own_wakes(&[], &[sleeper_tid]).unwrap();
    let pid_list = |part: usize, file: &str| -> Vec<u32> {
        std::fs::read_to_string(parts[part].join(file))
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse::<u32>().unwrap())
            .collect()
    };
    // The switch instance's pid list: its probes run on every switch even with the event off.
    let pids = || pid_list(2, "set_event_pid");
    // The wake instance's notrace list: the idle task and the RT threads while on, nothing while
    // off (its probes, too, run on every switch).
    let notrace = || pid_list(1, "set_event_notrace_pid");
    assert_eq!(states(&sched), ["0"; 6], "held back at the start");
    assert_eq!(states(&others), ["1"; 4]);
    assert_eq!(pids(), [0u32; 0], "no pid list while off");
    assert_eq!(notrace(), [0u32; 0], "no notrace list while off");
    let burst = || {
        go_tx.send(()).unwrap();
        done_rx.recv().unwrap()
    };
    let off = burst();
    session.set_sched_events(true).unwrap();
    assert!(session.sched_events_on());
    assert_eq!(states(&sched), ["1"; 6], "all on");
    assert_eq!(pids(), [sleeper_tid]);
    assert_eq!(notrace(), [0], "the idle task (no RT thread given)");
    let on = burst();
    session.set_sched_events(false).unwrap();
    assert_eq!(states(&sched), ["0"; 6], "all off again");
    assert_eq!(pids(), [0u32; 0], "no pid list while off");
    assert_eq!(notrace(), [0u32; 0], "no notrace list while off");
    assert_eq!(states(&others), ["1"; 4]);
    let off_again = burst();
    drop(go_tx);
    sleeper.join().unwrap();
    session.stop().unwrap();

    assert!(!session.sched_covers(off.0, off.1));
    assert!(session.sched_covers(on.0, on.1));
    assert!(!session.sched_covers(off_again.0, off_again.1));
    assert!(
        !session.sched_covers(off.0, on.1),
        "a window reaching back before the switch-on"
    );
    let (turned_on, on_ns) = session.sched_time(now().as_nanos() as u64);
    assert_eq!(turned_on, 1);
    assert!(on_ns >= on.1 - on.0, "{on_ns} ns on");

    let sched_events = |(a, b): (u64, u64)| {
        let w = session.read_window(CPU, a, b).unwrap();
        let n = w
            .events
            .iter()
            .filter(|e| match &e.kind {
                EventKind::Switch { prev, next, .. } => {
                    prev.pid == sleeper_tid || next.pid == sleeper_tid
                }
                EventKind::Wakeup { task, .. } => task.pid == sleeper_tid,
                _ => false,
            })
            .count();
        // The wake path's timer events (the sleeper's own timer expires every 1 ms): none while
        // off; while on, those under a task other than the idle one and the RT threads.
        let timers = w
            .events
            .iter()
            .filter(|e| match &e.kind {
                EventKind::HrtimerEntry { .. } => true,
                EventKind::VectorEntry { name, .. } => name == "local_timer",
                _ => false,
            })
            .count();
        (n + timers, w.events.len())
    };
    let (n_off, all_off) = sched_events(off);
    let (n_on, all_on) = sched_events(on);
    let (n_off_again, _) = sched_events(off_again);
    eprintln!(
        "sleeper's switches and wakeups, and timer events: off {n_off} (of {all_off} events), on \
         {n_on} (of {all_on}), off again {n_off_again}"
    );
    assert_eq!(
        (n_off, n_off_again),
        (0, 0),
        "nothing of the scheduler while off"
    );
    assert!(n_on >= 20, "20 sleeps switch at least 20 times: {n_on}");

    drop(session);
    for d in &parts {
        assert!(!d.exists(), "{} removed on drop", d.display());
    }
}

/// Run again as user `nobody` by [`without_root_the_refusal_says_what_is_missing`].
#[test]
fn child_entry() {
    if std::env::var_os("RTAPI_TRACE_CHILD").is_none() {
        return;
    }
    match TraceSession::start(&[CPU], "rtapi-trace-nobody") {
        Ok(_) => println!("STARTED"),
        Err(e) => println!("REFUSED: {e}"),
    }
}

#[test]
fn without_root_the_refusal_says_what_is_missing() {
    use std::os::unix::process::CommandExt;
    if !nix::unistd::geteuid().is_root() {
        // As a normal user, this process itself is the unprivileged case.
        let e = TraceSession::start(&[0], "rtapi-trace-user").unwrap_err();
        eprintln!("refused: {e}");
        assert!(e.to_string().contains("root"), "{e}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("RTAPI_TRACE_CHILD", "1")
        .uid(65534)
        .gid(65534)
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        other => {
            return skip!(
                Machine,
                "the test binary could not run as user nobody ({other:?})"
            );
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The libtest harness may print "test child_entry ... " before the child's own words.
    let at = ["REFUSED", "STARTED"]
        .iter()
        .find_map(|w| stdout.find(w))
        .unwrap_or_else(|| panic!("child said nothing: {stdout}"));
    let line = stdout[at..].lines().next().unwrap_or_default();
    eprintln!("as nobody: {line}");
    assert!(line.starts_with("REFUSED"), "{line}");
    assert!(line.contains("root"), "{line}");
    assert!(!Path::new("/sys/kernel/tracing/instances/rtapi-trace-nobody").exists());
}
