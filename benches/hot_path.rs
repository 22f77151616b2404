//! The runtime's own per-period costs: the whole bookkeeping of one period after the wake (clock reads,
//! dispatch of zero or ten trivial functions with their timing, missed-period accounting, the seqlocked
//! stats record and the histogram bin) — and its parts: reading the clock, the missed-period arithmetic,
//! queueing an RT event; and the same bookkeeping with the flight recorder writing each period.

// criterion_group! defines a `pub fn` it gives no doc comment.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rtapi::bench_internals::{msg_channel, Cycler, FunctionSlot, RtEvent, RunListCell, Slots};
use rtapi::rt::clock::{self, Nanos};
use rtapi::runtime::function::{Cycle, RtFn};
use rtapi::runtime::recorder::{Recorder, RecorderConfig};
use rtapi_hal::{HalBuilder, ThreadConfig};
use std::sync::Arc;

/// One period's bookkeeping with `n` trivial functions, on a real HAL segment; with `pins` ≥ 0, a
/// flight recorder records every period with that many signals.
fn bookkeeping(c: &mut Criterion, n: usize) {
    bookkeeping_with(c, n, None)
}

fn bookkeeping_with(c: &mut Criterion, n: usize, recorded: Option<usize>) {
    let mut b = HalBuilder::new(&format!(
        "bench-hot-{n}-{}-{}",
        recorded.map_or(0, |p| p + 1),
        std::process::id()
    ))
    .unwrap();
    let pins: Vec<(String, String)> = (0..recorded.unwrap_or(0))
        .map(|i| (format!("rec-{i}"), String::new()))
        .collect();
    for (name, _) in &pins {
        b.signal(name, rtapi_hal::ValueType::Float).unwrap();
    }
    let comp = b.component("bench").unwrap();
    let thread = b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    for i in 0..n {
        b.function(comp, &format!("bench.f{i}")).unwrap();
        b.addf(&format!("bench.f{i}"), "servo", None).unwrap();
    }
    let hal = b.build().unwrap();
    let stats = hal.stats_writer(thread).unwrap();
    let (events, _drain) = msg_channel(16);
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
    let mut name = format!("period bookkeeping, {n} functions");
    if recorded.is_some() {
        let config = RecorderConfig {
            window: Nanos::from_secs(5),
            post: Nanos::from_millis(100),
            pins,
            dir: std::env::temp_dir(),
            on_overrun: 1,
            holdoff: Nanos::ZERO,
            max_dumps: 10,
            on_stall: true,
            on_fault: true,
            triggers: Vec::new(),
        };
        let recorder = Arc::new(Recorder::new(config, "bench", &[("servo".into(), period)]));
        cycler = cycler.with_recorder(recorder.tap(0, &hal).unwrap());
        name = format!("{name} + flight recorder ({} pins)", recorded.unwrap_or(0));
    }
    c.bench_function(&name, |bench| {
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
    bookkeeping_with(c, 0, Some(0));
    bookkeeping_with(c, 0, Some(8));
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
    let (producer, consumer) = msg_channel(1024);
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
