//! Writing your own HAL component, from declaration to running on a thread.
//!
//! `lowpass` is a first-order filter: `lowpass.N.out` follows `lowpass.N.in` with time constant
//! `lowpass.N.tau`. It is registered next to the built-ins, loaded and wired by ordinary `.hal`
//! commands (here inline text; usually a file named by the machine TOML), and run for one second
//! behind a square wave from `siggen`.
//!
//! ```text
//! cargo run --example custom_component
//! ```
//!
//! Runs as any user: without SCHED_FIFO privileges the runtime falls back to the `sim` flavor.

use rtapi::components::{Component, LoadContext, LoadError, Registry};
use rtapi::config::Machine;
use rtapi::runtime::Runtime;
use rtapi_hal::{In, Out, ParamAccess, Value};

/// The control math, pure and testable on its own: one step of an exact first-order lag.
fn lowpass_step(y: f64, x: f64, dt_s: f64, tau_s: f64) -> f64 {
    if tau_s <= 0.0 {
        return x;
    }
    y + (x - y) * (1.0 - (-dt_s / tau_s).exp())
}

/// The HAL glue: pins, a param, and one function.
struct Lowpass;

impl Component for Lowpass {
    const NAME: &'static str = "lowpass";
    const SUMMARY: &'static str = "first-order low-pass filter";
    /// `loadrt lowpass tau=0.05` sets every instance's initial time constant.
    const ARGS: &'static [&'static str] = &["tau"];

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let tau0: f64 = ctx.arg("tau")?.unwrap_or(0.1);
        let input = ctx.pin::<In, f64>("in")?;
        let output = ctx.pin::<Out, f64>("out")?;
        let tau = ctx.param("tau", ParamAccess::Rw, tau0)?;
        // Runs once, after the segment exists: resolve handles, set up state, return the body.
        ctx.function("update", move |hal| {
            let (input, output, tau) = (hal.pin(input), hal.pin(output), hal.param(tau));
            let mut y = 0.0;
            // The body runs every period on the RT thread: atomics and arithmetic only.
            Box::new(move |cycle| {
                y = lowpass_step(y, input.get(), cycle.dt_s(), tau.get());
                output.set(y);
            })
        })
    }
}

const MACHINE: &str = r#"
hal = ["inline.hal"]
[runtime]
instance = "custom-component-example"
lock_memory = false
dma_latency = false
[[thread]]
name = "servo"
period = "1ms"
"#;

const HAL: &str = r#"
loadrt siggen
loadrt lowpass tau=0.05
addf siggen.0.update servo
addf lowpass.0.update servo
setp siggen.0.frequency 2
net wave siggen.0.square => lowpass.0.in
net smooth lowpass.0.out
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut registry = Registry::builtin();
    registry.register::<Lowpass>();

    let machine = Machine::from_texts("inline.toml", MACHINE, &[("inline.hal", HAL)])
        .map_err(|errors| errors[0].to_string())?;
    // The config's [runtime] table is the runtime's options.
    let mut rt = Runtime::configure(machine.runtime.clone())?;
    machine.apply(&mut rt, &registry)?;
    let running = rt.start()?;

    let reader = running.hal().reader()?;
    for _ in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (Value::Float(wave), Value::Float(smooth)) =
            (reader.get("wave")?, reader.get("smooth")?)
        else {
            return Err("wave and smooth are float signals".into());
        };
        println!("square {wave:>5}   lowpass {smooth:>8.4}");
    }
    print!("{}", running.stop());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::lowpass_step;

    #[test]
    fn one_time_constant_reaches_63_percent() {
        let mut y = 0.0;
        for _ in 0..50 {
            y = lowpass_step(y, 1.0, 0.001, 0.05);
        }
        assert!((y - (1.0 - (-1.0f64).exp())).abs() < 1e-9);
        assert_eq!(lowpass_step(0.3, 1.0, 0.001, 0.0), 1.0);
    }
}
