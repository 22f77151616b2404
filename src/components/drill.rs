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
//! | `fault_drill.N.stall` | pin      | bit  | IN  | FALSE   | a rising edge makes the function stall |
//! | `fault_drill.N.stall-ms` | param | u32  | RW  | 300     | how long a stall lasts, ms        |
//! | `fault_drill.N`       | function |      |     |         | one check of `fire` and `stall`   |
//!
//! A **stall drill**: in the period in which `stall` rises, the function sleeps `stall-ms` and then
//! returns, as a driver stuck on a bus would. The thread's periods stop completing: the watchdog
//! marks it stalled (`<thread>.stalled`), the safety chain wired to it trips, and `rtapi run` exits 1
//! at the end, though the thread went on afterwards. Unlike `fire`, it can be repeated.

use rtapi_hal::{In, Out};

use super::{Component, LoadContext, LoadError, ParamAccess};

/// The `fault_drill` component.
pub(crate) struct FaultDrill;

impl Component for FaultDrill {
    const NAME: &'static str = "fault_drill";
    const SUMMARY: &'static str =
        "a function fault on demand (rising edge of fire), to test the fault path";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let fire = ctx.pin::<In, bool>("fire")?;
        let calls = ctx.pin::<Out, u32>("calls")?;
        let stall = ctx.pin::<In, bool>("stall")?;
        let stall_ms = ctx.param::<u32>("stall-ms", ParamAccess::Rw, 300)?;
        let name = ctx.instance().to_string();
        ctx.instance_function(move |hal| {
            let (fire, calls) = (hal.pin(fire), hal.pin(calls));
            let (stall, stall_ms) = (hal.pin(stall), hal.param(stall_ms));
            let mut last = false;
            let mut last_stall = false;
            let mut n = 0u32;
            Box::new(move |_| {
                let now = fire.get();
                if now && !last {
                    panic!("fault drill {name}: fire went TRUE");
                }
                last = now;
                let stalling = stall.get();
                if stalling && !last_stall {
                    // The drill's point: a function that does not return for a while (a sleep is a
                    // syscall; nothing is allocated).
                    std::thread::sleep(std::time::Duration::from_millis(u64::from(stall_ms.get())));
                }
                last_stall = stalling;
                n = n.wrapping_add(1);
                calls.set(n);
            })
        })
    }
}
