//! Hot paths of the HAL: what a component pays per pin access, what the RT loop pays per period for its
//! stats, and what a `show` of a large machine costs the reader.

// criterion_group! defines a `pub fn` it gives no doc comment.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use rtapi_hal::*;

fn instance(tag: &str) -> String {
    format!("bench-{tag}-{}", std::process::id())
}

fn pins(c: &mut Criterion) {
    let mut b = HalBuilder::new(&instance("pins")).unwrap();
    let comp = b.component("b").unwrap();
    let input = b.pin::<In, f64>(comp, "b.in").unwrap();
    let output = b.pin::<Out, f64>(comp, "b.out").unwrap();
    let hal = b.build().unwrap();
    let (input, output) = (hal.pin(input), hal.pin(output));
    c.bench_function("pin get (f64)", |bench| {
        bench.iter(|| black_box(input.get()))
    });
    // The value is not loop-carried through memory here: the variant below keeps `x` in a captured
    // variable, which the compiler must store and reload around a store through a pointer it cannot
    // prove distinct (the pin's slot), and so also measures that store-to-load round trip.
    c.bench_function("pin set (f64, fresh value)", |bench| {
        bench.iter(|| output.set(black_box(2.5)))
    });
    let mut x = 0.0;
    c.bench_function("pin set (f64)", |bench| {
        bench.iter(|| {
            x += 1.0;
            output.set(black_box(x))
        })
    });
}

fn stats(c: &mut Criterion) {
    let mut b = HalBuilder::new(&instance("stats")).unwrap();
    let comp = b.component("b").unwrap();
    b.function(comp, "b.f").unwrap();
    let t = b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    b.addf("b.f", "servo", None).unwrap();
    let hal = b.build().unwrap();
    let w = hal.stats_writer(t).unwrap();
    let mut n = 0u64;
    c.bench_function("stats record (one period, seqlock write)", |bench| {
        bench.iter(|| {
            n += 1;
            w.record(black_box(&PeriodSample {
                now_ns: n * 1_000_000,
                latency_ns: (n % 5000) as i64,
                interval_ns: 1_000_000 + n % 100,
                exec_ns: 1200,
                missed: 0,
                drift_ns: 0,
                rusage: None,
            }))
        })
    });
    c.bench_function("function timing record", |bench| {
        bench.iter(|| w.record_function(0, black_box(800), 0))
    });
    let r = hal.reader().unwrap();
    c.bench_function("reader thread_stats snapshot", |bench| {
        bench.iter(|| black_box(r.thread_stats("servo").unwrap()))
    });
}

fn reader(c: &mut Criterion) {
    let mut b = HalBuilder::new(&instance("reader")).unwrap();
    for k in 0..100 {
        let comp = b.component(&format!("comp.{k}")).unwrap();
        for i in 0..100 {
            b.pin::<Out, f64>(comp, &format!("comp.{k}.pin{i}"))
                .unwrap();
        }
    }
    let hal = b.build().unwrap();
    let r = HalReader::open(hal.instance().as_str(), Access::ReadOnly).unwrap();
    assert_eq!(r.pins().unwrap().len(), 10_000);
    let mut g = c.benchmark_group("reader 10k pins");
    g.sample_size(20);
    g.bench_function("pins() with names, components, values", |bench| {
        bench.iter(|| black_box(r.pins().unwrap()))
    });
    g.bench_function("pin_values()", |bench| {
        bench.iter(|| black_box(r.pin_values().unwrap()))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = pins, stats, reader
}
criterion_main!(benches);
