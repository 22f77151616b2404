//! `fault_drill`: a function fault on demand, to commission the fault path of a machine — does the
//! safety chain trip, does the flight recorder freeze, does `rtapi scope --trigger fault` fire —
//! without waiting for a real bug. rtapi's own; LinuxCNC has no counterpart.
//!
//! Its function panics in the first period in which `fire` is TRUE after having been FALSE (the
//! first period counts `fire` as FALSE before it, so `sets fire 1` before `start` fires at once).
//! The runtime treats it as any other function fault: the function is disabled from then on (a drill
//! fires once per load), the thread's `<thread>.faults` counts it, `<thread>.faulted` goes TRUE, and
//! the log names the function. The panic itself is the fault path's cost (it allocates the panic
//! payload): that is why it is a drill, and never part of a machine's normal running.
//!
//! | name                  | kind     | type | dir | default | meaning                           |
//! |-----------------------|----------|------|-----|---------|-----------------------------------|
//! | `fault_drill.N.fire`  | pin      | bit  | IN  | FALSE   | a rising edge makes the function fault |
//! | `fault_drill.N.calls` | pin      | u32  | OUT | 0       | calls that returned (before the fault) |
//! | `fault_drill.N`       | function |      |     |         | one check of `fire`               |

use rtapi_hal::{In, Out};

use super::{Component, LoadContext, LoadError};

/// The `fault_drill` component.
pub(crate) struct FaultDrill;

impl Component for FaultDrill {
    const NAME: &'static str = "fault_drill";
    const SUMMARY: &'static str =
        "a function fault on demand (rising edge of fire), to test the fault path";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let fire = ctx.pin::<In, bool>("fire")?;
        let calls = ctx.pin::<Out, u32>("calls")?;
        let name = ctx.instance().to_string();
        ctx.instance_function(move |hal| {
            let (fire, calls) = (hal.pin(fire), hal.pin(calls));
            let mut last = false;
            let mut n = 0u32;
            Box::new(move |_| {
                let now = fire.get();
                if now && !last {
                    panic!("fault drill {name}: fire went TRUE");
                }
                last = now;
                n = n.wrapping_add(1);
                calls.set(n);
            })
        })
    }
}
