//! Embedding the runtime: one 1 ms servo thread running a user function (a first-order filter that
//! follows a square-wave command), for two seconds, then the statistics.
//!
//! ```sh
//! cargo run --release --example servo_loop
//! ```

use rtapi::rt::clock::Nanos;
use rtapi::runtime::function::{Cycle, RtFn};
use rtapi::runtime::{Runtime, RuntimeOptions, ThreadSpec};
use rtapi_hal::{Hal, In, Out};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let mut rt = Runtime::configure(RuntimeOptions {
        instance: "servo-loop".into(),
        ..RuntimeOptions::default()
    })?;
    println!(
        "flavor {} (RT CPU {:?})",
        rt.flavor(),
        rt.system().cpus.rt_cpu
    );
    rt.thread(ThreadSpec::new("servo", Nanos::from_millis(1)))?;

    // Pins and params are declared on the HAL before the threads exist...
    let hal = rt.hal();
    let comp = hal.component("follow")?;
    let command = hal.pin::<Out, f64>(comp, "follow.command")?;
    let output = hal.pin::<Out, f64>(comp, "follow.output")?;
    let tau = hal.pin_with_default::<In, f64>(comp, "follow.tau", 0.02)?;

    // ...and the function turns them into handles once the segment is built. The closure it returns
    // runs every period on the RT thread: only pin reads/writes and arithmetic, no allocation.
    rt.function(
        comp,
        "follow.update",
        Box::new(move |hal: &Hal| -> RtFn {
            let (command, output, tau) = (hal.pin(command), hal.pin(output), hal.pin(tau));
            Box::new(move |c: &Cycle| {
                let target = if (c.number / 500) % 2 == 0 { 1.0 } else { -1.0 };
                command.set(target);
                // Uses the real dt, so a missed period does not distort the filter.
                let alpha = (c.dt_s() / tau.get().max(1e-6)).min(1.0);
                output.set(output.get() + alpha * (target - output.get()));
            })
        }),
    )?;
    rt.addf("follow.update", "servo", None)?;

    let running = rt.start()?;
    println!("running; `rtapi show` (from another terminal) sees instance 'servo-loop'");
    running.wait(Some(Duration::from_secs(2)));
    println!("{}", running.stop());
    Ok(())
}
