//! Real separate processes: the test binary re-executes itself (`--exact child`) with an environment
//! variable choosing the child's role, so writer, reader and `setp` each run in their own process.

mod common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{shm_path, unique_instance, Cleanup};
use rtapi_hal::*;

const ROLE: &str = "RTAPI_HAL_TEST_ROLE";
const INSTANCE: &str = "RTAPI_HAL_TEST_INSTANCE";
const TIMEOUT: Duration = Duration::from_secs(20);

fn spawn(role: &str, instance: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture"])
        .env(ROLE, role)
        .env(INSTANCE, instance)
        // Captured so the children's own test-harness lines don't mix with ours; shown on failure.
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child that must succeed; its output is in the panic message if it does not.
fn wait_success(child: &mut Child, what: &str) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            assert!(status.success(), "{what} process failed ({status}):\n{out}");
            return;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!("{what} did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls until `f` gives Some, failing if `owner` exits first or it takes too long.
fn poll<T>(owner: &mut Child, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        if let Some(status) = owner.try_wait().unwrap() {
            panic!("owner exited ({status}) while waiting for {what}");
        }
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn open_when_ready(owner: &mut Child, instance: &str, access: Access) -> HalReader {
    poll(owner, "the segment", || {
        HalReader::open(instance, access).ok()
    })
}

/// The entry point of every child process; a no-op in a normal test run.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let instance = std::env::var(INSTANCE).unwrap();
    match role.as_str() {
        "writer" => writer(&instance),
        "reader" => reader(&instance),
        "setp" => setp(&instance),
        "hold" => hold(&instance),
        other => panic!("unknown role {other}"),
    }
}

/// Owns a segment and updates it every millisecond until its `w.stop` param is set.
fn writer(instance: &str) {
    let mut b = HalBuilder::new(instance).unwrap();
    let c = b.component("w").unwrap();
    let counter = b.pin::<Out, u64>(c, "w.counter").unwrap();
    let input = b.pin::<In, f64>(c, "w.input").unwrap();
    let echo = b.pin::<Out, f64>(c, "w.echo").unwrap();
    let stop = b.param(c, "w.stop", ParamAccess::Rw, false).unwrap();
    b.function(c, "w.update").unwrap();
    let servo = b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    b.addf("w.update", "servo", None).unwrap();
    let hal = b.build().unwrap();
    let (counter, input, echo, stop) = (
        hal.pin(counter),
        hal.pin(input),
        hal.pin(echo),
        hal.param(stop),
    );
    let stats = hal.stats_writer(servo).unwrap();
    stats.set_running(true);
    hal.set_running(true);
    let start = Instant::now();
    let mut n = 0u64;
    while !stop.get() {
        assert!(start.elapsed() < TIMEOUT, "writer was never told to stop");
        n += 1;
        counter.set(n);
        echo.set(input.get());
        // latency = cycle number: consistent snapshots satisfy sum = n(n+1)/2.
        stats.record(&PeriodSample {
            now_ns: n,
            latency_ns: n as i64,
            exec_ns: 1,
            ..Default::default()
        });
        stats.record_function(0, 1, 0);
        std::thread::sleep(Duration::from_millis(1));
    }
    stats.set_running(false);
    drop(hal); // clean shutdown: unlinks the name
}

/// Takes snapshots while the writer runs: always consistent, and changing.
fn reader(instance: &str) {
    let r = HalReader::open(instance, Access::ReadOnly).unwrap();
    assert!(r.owner_alive());
    assert_ne!(r.header().owner_pid, std::process::id());
    let mut first_counter = None;
    let mut last_cycles = 0;
    for _ in 0..30 {
        let snap = r.snapshot().unwrap();
        let t = &snap.threads[0];
        let n = t.stats.cycles as u128;
        assert_eq!(
            t.stats.latency_sum_ns as u128,
            n * (n + 1) / 2,
            "torn snapshot {:?}",
            t.stats
        );
        assert_eq!(t.stats.latency_sum_sq_ns2, n * (n + 1) * (2 * n + 1) / 6);
        assert!(t.stats.cycles >= last_cycles, "stats went backwards");
        last_cycles = t.stats.cycles;
        let Value::U64(counter) = r.get("w.counter").unwrap() else {
            panic!("w.counter is u64")
        };
        first_counter.get_or_insert(counter);
        assert!(t.running);
        std::thread::sleep(Duration::from_millis(10));
    }
    let Value::U64(end) = r.get("w.counter").unwrap() else {
        unreachable!()
    };
    assert!(
        end > first_counter.unwrap(),
        "the reader saw no change: {end}"
    );
    assert!(r.function_named("w.update").unwrap().timing.calls > 0);
}

/// A third process: `setp` an input (accepted) and an output (refused).
fn setp(instance: &str) {
    let r = HalReader::open(instance, Access::ReadWrite).unwrap();
    assert_eq!(r.setp("w.input", "42").unwrap(), Value::Float(42.0));
    let e = r.setp("w.counter", "1").unwrap_err();
    assert!(
        matches!(
            e,
            HalError::NotWritable {
                reason: WriteRefusal::OutputPin { .. },
                ..
            }
        ),
        "{e}"
    );
}

/// Owns a segment and waits to be killed (or told to stop).
fn hold(instance: &str) {
    let mut b = HalBuilder::new(instance).unwrap();
    let c = b.component("h").unwrap();
    let stop = b.param(c, "h.stop", ParamAccess::Rw, false).unwrap();
    let hal = b.build().unwrap();
    let stop = hal.param(stop);
    let start = Instant::now();
    while !stop.get() && start.elapsed() < TIMEOUT {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn writer_reader_and_setp_in_separate_processes() {
    let inst = unique_instance("proc");
    let _c = Cleanup(inst.clone());
    let mut writer = spawn("writer", &inst);
    let me = open_when_ready(&mut writer, &inst, Access::ReadWrite);
    assert_eq!(me.header().owner_pid, writer.id());

    let mut reader = spawn("reader", &inst);
    wait_success(&mut reader, "reader");
    let mut setter = spawn("setp", &inst);
    wait_success(&mut setter, "setp");

    // The writer copies w.input to w.echo every period: the third process's setp reached it.
    poll(&mut writer, "echo of the setp", || {
        (me.get("w.echo").ok()? == Value::Float(42.0)).then_some(())
    });

    me.setp("w.stop", "1").unwrap();
    wait_success(&mut writer, "writer");
    assert!(
        !shm_path(&inst).exists(),
        "the writer's clean shutdown unlinks the segment"
    );
}

#[test]
fn sigkilled_owner_is_reclaimed_and_live_owner_is_refused() {
    let inst = unique_instance("kill");
    let _c = Cleanup(inst.clone());
    let mut holder = spawn("hold", &inst);
    let r = open_when_ready(&mut holder, &inst, Access::ReadOnly);
    assert_eq!(r.header().owner_pid, holder.id());
    let rw = HalReader::open(&inst, Access::ReadWrite).unwrap();
    assert!(r.owner_alive() && rw.owner_alive());

    // Two live owners of one name: a clear error naming the live one's pid.
    let e = HalBuilder::new(&inst)
        .unwrap()
        .build()
        .err()
        .expect("second owner must be refused");
    assert!(
        matches!(e, HalError::InstanceInUse { pid, .. } if pid == holder.id()),
        "{e}"
    );
    assert!(e.to_string().contains(&holder.id().to_string()), "{e}");

    holder.kill().unwrap(); // SIGKILL: no destructor runs, the segment stays behind
    holder.wait().unwrap();
    assert!(shm_path(&inst).exists());
    // The lock died with it: exact, whatever happens to the pid later.
    assert!(!r.owner_alive());
    // Stale values can still be read, but a write into a dead owner's segment is refused: nothing would
    // ever read it.
    assert_eq!(r.get("h.stop").unwrap(), Value::Bit(false));
    let e = rw.setp("h.stop", "1").unwrap_err();
    assert!(
        matches!(e, HalError::OwnerGone { pid, .. } if pid == holder.id()),
        "{e}"
    );
    assert!(e.to_string().contains("stale segment"), "{e}");
    assert_eq!(r.get("h.stop").unwrap(), Value::Bit(false), "not written");
    // A reader opening it now sees the same.
    assert!(!HalReader::open(&inst, Access::ReadOnly)
        .unwrap()
        .owner_alive());

    let hal = HalBuilder::new(&inst)
        .unwrap()
        .build()
        .expect("a dead owner's segment is reclaimed");
    let fresh = HalReader::open(&inst, Access::ReadOnly).unwrap();
    assert_eq!(fresh.header().owner_pid, std::process::id());
    assert!(fresh.components().unwrap().is_empty());
    drop(hal);
    assert!(!shm_path(&inst).exists());
}
