//! Per-period cost of a LinuxCNC module's function called through rtapi's host (issue 16) against
//! rtapi's native component of the same name: one `Harness::step` = every function of the instance
//! called once, as an RT thread calls them (without the thread's own bookkeeping, `hot_path` has it).
//! The host adds, per call, the copies of the module's params (and of the unlinked pins of a module
//! loaded before start) between its variables and the segment: one compare per cell and direction.

// criterion_group! defines a `pub fn` it gives no doc comment.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use rtapi::components::Harness;
use std::time::Duration;

fn harness(tag: &str, line: &str) -> Harness {
    let mut h = Harness::new(&format!("bench-lch-{tag}-{}", std::process::id())).unwrap();
    h.loadrt(line).unwrap();
    h.start().unwrap();
    h
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("linuxcnc_host");
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_millis(500));
    for (tag, native, hosted) in [
        ("and2", "and2", "linuxcnc:and2"),
        ("pid", "pid count=1", "linuxcnc:pid num_chan=1"),
        ("sum2", "sum2", "linuxcnc:sum2"),
        ("siggen", "siggen", "linuxcnc:siggen"),
    ] {
        let mut n = harness(&format!("n-{tag}"), native);
        g.bench_function(format!("{tag}/native"), |b| b.iter(|| n.step(1_000_000)));
        drop(n);
        let mut h = harness(&format!("h-{tag}"), hosted);
        g.bench_function(format!("{tag}/hosted"), |b| b.iter(|| h.step(1_000_000)));
        drop(h);
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
