//! What the HAL side of a machine costs per period: one servo cycle of the sim-axis functions (the
//! safety chain, then siggen → command select/limit → pid → sim_axis → stepgen planning, as
//! `config/sim-axis.hal` wires them), and a net of 1 000 pins (one writer, 999 readers) updated each
//! cycle.

// criterion_group! defines a `pub fn` it gives no doc comment.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rtapi::bench_internals::{declare_function, declare_thread, health_owner};
use rtapi::components::{LoadError, Registry, Target};
use rtapi::config::Machine;
use rtapi::runtime::function::{Cycle, FunctionFactory, RtFn};
use rtapi::runtime::ThreadSpec;
use rtapi_hal::{ComponentKey, FunctionKey, Hal, HalBuilder, In, Out, ThreadConfig, ThreadKey};
use std::time::Duration;

/// Builds the HAL for real and keeps the factories, so a thread's functions can be called by hand.
struct BenchTarget {
    builder: HalBuilder,
    health_owner: Option<ComponentKey>,
    factories: Vec<(FunctionKey, FunctionFactory)>,
    threads: Vec<(String, ThreadKey)>,
}

impl Target for BenchTarget {
    fn hal(&mut self) -> &mut HalBuilder {
        &mut self.builder
    }
    fn function(
        &mut self,
        c: ComponentKey,
        name: &str,
        f: FunctionFactory,
    ) -> Result<(), LoadError> {
        let key = self.builder.function(c, name)?;
        declare_function(&mut self.builder, c, name)?;
        self.factories.push((key, f));
        Ok(())
    }
    fn thread(&mut self, t: &ThreadSpec) -> Result<(), LoadError> {
        let key = self
            .builder
            .thread(ThreadConfig::new(&t.name, t.period.as_nanos() as u64))?;
        let owner = health_owner(&mut self.builder, &mut self.health_owner)?;
        declare_thread(&mut self.builder, owner, &t.name)?;
        self.threads.push((t.name.clone(), key));
        Ok(())
    }
    fn addf(&mut self, f: &str, t: &str, pos: Option<usize>) -> Result<(), LoadError> {
        self.builder.addf(f, t, pos)?;
        Ok(())
    }
}

/// The functions of `thread` in run order, made from a built HAL (kept alive alongside).
fn thread_functions(target: BenchTarget, thread: &str) -> (Hal, Vec<RtFn>) {
    let hal = target.builder.build().unwrap();
    let key = target.threads.iter().find(|(n, _)| n == thread).unwrap().1;
    let mut factories = target.factories;
    let order = hal.thread_functions(key).to_vec();
    let fns = order
        .iter()
        .map(|k| {
            let i = factories.iter().position(|(fk, _)| fk == k).unwrap();
            (factories.remove(i).1)(&hal)
        })
        .collect();
    (hal, fns)
}

fn instance(name: &str) -> String {
    format!("bench-{name}-{}", std::process::id())
}

fn sim_axis_servo_cycle(c: &mut Criterion) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/config/sim-axis.toml");
    let machine = Machine::load(std::path::Path::new(dir)).unwrap();
    let mut target = BenchTarget {
        builder: HalBuilder::new(&instance("sim-axis")).unwrap(),
        health_owner: None,
        factories: Vec::new(),
        threads: Vec::new(),
    };
    machine.apply(&mut target, &Registry::builtin()).unwrap();
    let (_hal, mut fns) = thread_functions(target, "servo");
    let mut cycle = Cycle {
        period_ns: 1_000_000,
        dt_ns: 1_000_000,
        ..Cycle::default()
    };
    c.bench_function(
        &format!("sim-axis servo cycle ({} functions)", fns.len()),
        |b| {
            b.iter(|| {
                cycle.number += 1;
                cycle.now_ns += 1_000_000;
                for f in fns.iter_mut() {
                    f(black_box(&cycle));
                }
            })
        },
    );
}

fn net_of_1000_pins(c: &mut Criterion) {
    let mut b = HalBuilder::new(&instance("net")).unwrap();
    let comp = b.component("fan").unwrap();
    let out = b.pin::<Out, f64>(comp, "fan.out").unwrap();
    let ins: Vec<_> = (0..999)
        .map(|i| b.pin::<In, f64>(comp, &format!("fan.in-{i}")).unwrap())
        .collect();
    b.net("wide", "fan.out").unwrap();
    for i in 0..999 {
        b.net("wide", &format!("fan.in-{i}")).unwrap();
    }
    let hal = b.build().unwrap();
    let out = hal.pin(out);
    let ins: Vec<_> = ins.into_iter().map(|k| hal.pin(k)).collect();
    let mut x = 0.0;
    c.bench_function("net of 1000 pins: 1 write + 999 reads", |bench| {
        bench.iter(|| {
            x += 1.0;
            out.set(x);
            let mut sum = 0.0;
            for p in &ins {
                sum += p.get();
            }
            black_box(sum)
        })
    });
}

/// `sampler cfg=ffffbbsu` (8 channels): one call of its per-period function with room in the ring,
/// i.e. 8 pin reads and one record published. The ring is drained by a `FifoClient` between timed
/// batches (outside the measurement), so every timed call stores a sample.
fn sampler_8_channels(c: &mut Criterion) {
    use rtapi::components::{Declared, Instances, LoadArgs, Presets};
    let name = instance("sampler");
    let mut target = BenchTarget {
        builder: HalBuilder::new(&name).unwrap(),
        health_owner: None,
        factories: Vec::new(),
        threads: Vec::new(),
    };
    target
        .thread(&ThreadSpec::new(
            "servo",
            rtapi::rt::clock::Nanos::from_nanos(1_000_000),
        ))
        .unwrap();
    let args = LoadArgs {
        args: [
            ("cfg".to_string(), "ffffbbsu".to_string()),
            ("depth".to_string(), "4096".to_string()),
        ]
        .into(),
    };
    Registry::builtin()
        .load(
            &mut target,
            &mut Declared::default(),
            &Presets::new(),
            "sampler",
            &Instances::Count(1),
            &args,
        )
        .unwrap();
    target.addf("sampler.0", "servo", None).unwrap();
    let (_hal, mut fns) = thread_functions(target, "servo");
    let reader =
        rtapi_hal::FifoClient::sampler(&name, "sampler.0", &rtapi_hal::Trust::new()).unwrap();
    let cycle = Cycle::default();
    c.bench_function("sampler, 8 channels: one sample into the ring", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(4000);
                let t = std::time::Instant::now();
                for _ in 0..n {
                    fns[0](black_box(&cycle));
                }
                total += t.elapsed();
                left -= n;
                for row in reader.rows() {
                    black_box(row.unwrap());
                }
            }
            total
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = sim_axis_servo_cycle, net_of_1000_pins, sampler_8_channels
}
criterion_main!(benches);
