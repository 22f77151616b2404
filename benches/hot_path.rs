//! The runtime's own per-period costs: the whole bookkeeping of one period after the wake (clock reads,
//! dispatch of zero or ten trivial functions with their timing, missed-period accounting, the seqlocked
//! stats record and the histogram bin) — and its parts: reading the clock, the missed-period arithmetic,
//! queueing an RT event.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rtapi::rt::clock::{self, Nanos};
use rtapi::rt::msg::{self, RtEvent};
use rtapi::runtime::function::{Cycle, RtFn};
use rtapi::runtime::runlist::RunListCell;
use rtapi::runtime::slots::{FunctionSlot, Slots};
use rtapi::runtime::thread::Cycler;
use rtapi_hal::{HalBuilder, ThreadConfig};
use std::sync::Arc;

/// One period's bookkeeping with `n` trivial functions, on a real HAL segment.
fn bookkeeping(c: &mut Criterion, n: usize) {
    let mut b = HalBuilder::new(&format!("bench-hot-{n}-{}", std::process::id())).unwrap();
    let comp = b.component("bench").unwrap();
    let thread = b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    for i in 0..n {
        b.function(comp, &format!("bench.f{i}")).unwrap();
        b.addf(&format!("bench.f{i}"), "servo", None).unwrap();
    }
    let hal = b.build().unwrap();
    let stats = hal.stats_writer(thread).unwrap();
    let (events, _drain) = msg::channel(16);
    // As the runtime runs them: each function in a slot with its timing record writer.
    let slots = Slots::with_capacity(n);
    for (i, key) in hal.thread_functions(thread).into_iter().enumerate() {
        let mut x = 0u64;
        let body = Box::new(move |c: &Cycle| x = black_box(x.wrapping_add(c.number))) as RtFn;
        let timer = Some(hal.function_timer(key));
        slots.put(FunctionSlot::new(format!("bench.f{i}"), body, timer, None));
    }
    let list: Vec<u32> = (0..n as u32).collect();
    let period = Nanos::from_millis(1);
    let mut cycler = Cycler::with_slots(
        clock::now(),
        period,
        Arc::new(slots),
        Arc::new(RunListCell::new(&list).unwrap()),
    );
    c.bench_function(&format!("period bookkeeping, {n} functions"), |bench| {
        bench.iter(|| {
            // Woken 20 µs late each time: a normal period, nothing missed.
            let now = cycler.deadline() + Nanos::from_micros(20);
            cycler.period(now, 0, &stats, &events)
        })
    });
}

fn hot_path(c: &mut Criterion) {
    bookkeeping(c, 0);
    bookkeeping(c, 10);
    c.bench_function("clock::now (clock_gettime MONOTONIC)", |b| {
        b.iter(clock::now)
    });
    let ic = clock::IntervalClock::get();
    c.bench_function(
        &format!(
            "IntervalClock::read ({})",
            if ic.is_tsc() {
                "rdtsc"
            } else {
                "clock_gettime"
            }
        ),
        |b| b.iter(|| black_box(ic.read())),
    );
    c.bench_function("missed_periods", |b| {
        let (d, p) = (Nanos::from_millis(5), Nanos::from_micros(25));
        b.iter(|| clock::missed_periods(black_box(d), black_box(d + Nanos::from_micros(80)), p))
    });
    let (producer, consumer) = msg::channel(1024);
    c.bench_function("event push + pop", |b| {
        b.iter(|| {
            producer.push(RtEvent::FunctionFaulted { function: 2 });
            black_box(consumer.pop())
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    targets = hot_path
}
criterion_main!(benches);
