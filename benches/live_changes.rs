//! What structural changes to a running instance cost its RT thread: the servo thread's wake
//! latency while another process makes halcmd changes (signals made, linked, unlinked, deleted;
//! functions added and removed), against the same instance left alone, in alternating windows.
//!
//! `cargo bench --bench live_changes` (root; SCHED_FIFO). Prints the per-window p99 and max and the
//! ratios changes / quiet. It checks first that it measured what it claims: a real-time flavor, a
//! FIFO priority, the thread pinned.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rtapi_hal::{Access, HalReader, HistogramSnapshot};

const WINDOW: Duration = Duration::from_secs(4);
const ROUNDS: usize = 3;

fn rtapi() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.env("RUST_LOG", "error");
    c
}

/// Per-bin difference of two snapshots of one histogram.
fn delta(a: &HistogramSnapshot, b: &HistogramSnapshot) -> Vec<u64> {
    b.counts
        .iter()
        .zip(&a.counts)
        .map(|(x, y)| x.saturating_sub(*y))
        .chain([b.overflow.saturating_sub(a.overflow)])
        .collect()
}

/// (p99, max) in µs of the samples of a window, from its bins (upper bin edges; the overflow bin
/// counts as the histogram's end).
fn p99_max(bins: &[u64], bin_ns: u64) -> (f64, f64) {
    let total: u64 = bins.iter().sum();
    let rank = (total as f64 * 0.99).ceil() as u64;
    let (mut acc, mut p99) = (0, 0);
    for (i, &c) in bins.iter().enumerate() {
        acc += c;
        if acc >= rank && p99 == 0 {
            p99 = i + 1;
        }
    }
    let max = bins.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
    let us = |i: usize| (i as u64 * bin_ns) as f64 / 1000.0;
    (us(p99), us(max))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("bench-live-{}", std::process::id());
    let base = dir.path().join("base.hal");
    std::fs::write(
        &base,
        "loadrt threads name1=servo period1=1000000\nloadrt sum2 count=40\naddf sum2.0 servo\nstart\n",
    )
    .unwrap();
    let mut changes = String::new();
    for i in 0..100 {
        let k = i % 40;
        changes.push_str(&format!(
            "newsig b{i} float\nlinksp b{i} sum2.{k}.in1\nunlinkp sum2.{k}.in1\ndelsig b{i}\n"
        ));
        if k > 0 {
            changes.push_str(&format!("addf sum2.{k} servo\ndelf sum2.{k} servo\n"));
        }
    }
    let file = dir.path().join("changes.hal");
    std::fs::write(&file, &changes).unwrap();
    let mut owner = rtapi()
        .args([
            "halrun",
            "--duration",
            "1h",
            "--instance",
            &name,
            "-f",
            base.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let reader = loop {
        if let Ok(r) = HalReader::open(&name, Access::ReadOnly) {
            break r;
        }
        assert!(Instant::now() < until, "the instance did not come up");
        std::thread::sleep(Duration::from_millis(20));
    };
    let t = reader.thread_named("servo").unwrap();
    assert!(
        t.flavor != "sim" && t.priority > 0 && t.cpu.is_some(),
        "not a real-time measurement: flavor {}, priority {}, cpu {:?}; run as root on a kernel with SCHED_FIFO",
        t.flavor,
        t.priority,
        t.cpu
    );
    eprintln!(
        "servo 1 ms, flavor {}, SCHED_FIFO {}, cpu {:?}; {} rounds of {WINDOW:?} quiet / {WINDOW:?} with changes",
        t.flavor, t.priority, t.cpu, ROUNDS
    );
    let bins = reader.histogram("servo").unwrap();
    let (bin_ns, n) = (bins.bin_ns, bins.counts.len() + 1);
    let add = |into: &mut Vec<u64>, d: Vec<u64>| {
        for (x, y) in into.iter_mut().zip(d) {
            *x += y;
        }
    };
    let (mut quiet, mut busy) = (vec![0u64; n], vec![0u64; n]);
    let mut commands = 0usize;
    for _ in 0..ROUNDS {
        let a = reader.histogram("servo").unwrap();
        std::thread::sleep(WINDOW);
        let b = reader.histogram("servo").unwrap();
        add(&mut quiet, delta(&a, &b));
        let start = Instant::now();
        while start.elapsed() < WINDOW {
            let o = rtapi()
                .args(["halcmd", "--instance", &name, "-f", file.to_str().unwrap()])
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            commands += changes.lines().count();
        }
        let c = reader.histogram("servo").unwrap();
        add(&mut busy, delta(&b, &c));
    }
    let (qp, qm) = p99_max(&quiet, bin_ns);
    let (bp, bm) = p99_max(&busy, bin_ns);
    println!("live_changes: {commands} structural commands in {ROUNDS} × {WINDOW:?}");
    println!("  quiet        p99 {qp:8.1} us   max {qm:8.1} us");
    println!("  with changes p99 {bp:8.1} us   max {bm:8.1} us");
    println!(
        "  ratio changes/quiet: p99 {:.2}, max {:.2}",
        bp / qp.max(f64::MIN_POSITIVE),
        bm / qm.max(f64::MIN_POSITIVE)
    );
    let pid = nix::unistd::Pid::from_raw(owner.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let _ = owner.wait();
}
