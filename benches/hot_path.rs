//! The runtime's own per-period costs, apart from the HAL (see hal/benches): reading the clock, the
//! missed-period arithmetic, and queueing an RT event.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rtapi::rt::clock::{self, Nanos};
use rtapi::rt::msg::{self, RtEvent};

fn hot_path(c: &mut Criterion) {
    c.bench_function("clock::now (clock_gettime MONOTONIC)", |b| {
        b.iter(clock::now)
    });
    c.bench_function("missed_periods", |b| {
        let (d, p) = (Nanos::from_millis(5), Nanos::from_micros(25));
        b.iter(|| clock::missed_periods(black_box(d), black_box(d + Nanos::from_micros(80)), p))
    });
    let (producer, consumer) = msg::channel(1024);
    c.bench_function("event push + pop", |b| {
        b.iter(|| {
            producer.push(RtEvent::Overrun {
                cycle: 1,
                missed: 2,
            });
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
