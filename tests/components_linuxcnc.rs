//! LinuxCNC's safety-chain and stateful components load from a `.hal` file written as for LinuxCNC:
//! its `loadrt` arguments, instance names and function names.

use rtapi::components::{Registry, Validation};
use rtapi::config::Machine;

const TOML: &str = r#"hal = ["m.hal"]

[[thread]]
name = "base"
period = "50us"

[[thread]]
name = "servo"
period = "1ms"
"#;

const HAL: &str = "\
loadrt estop_latch
loadrt watchdog num_inputs=2
loadrt charge_pump
loadrt edge names=probe-edge
loadrt oneshot
loadrt toggle
loadrt flipflop
loadrt timedelay count=2
loadrt debounce cfg=2,3
loadrt ddt
loadrt integ
loadrt lowpass
loadrt updown
loadrt timedelta
loadrt pwmgen output_type=0,2
addf charge-pump base
addf watchdog.process base
addf watchdog.set-timeouts servo
addf estop-latch.0 servo
addf probe-edge base
addf oneshot.0 servo
addf toggle.0 servo
addf flipflop.0 servo
addf timedelay.1 servo
addf debounce.1 servo
addf ddt.0 servo
addf integ.0 servo
addf lowpass.0 servo
addf updown.0 servo
addf timedelta.0 servo
addf pwmgen.1.make-pulses base
addf pwmgen.1.update servo
setp watchdog.timeout-0 0.01
setp debounce.1.delay 3
net heartbeat charge-pump.out => watchdog.input-0
net wd-ok watchdog.ok-out => estop-latch.0.ok-in
net estop-reset toggle.0.out => estop-latch.0.reset
net spindle-on estop-latch.0.ok-out => timedelay.0.in
";

#[test]
fn a_linuxcnc_style_hal_file_validates() {
    let machine = Machine::from_texts("m.toml", TOML, &[("m.hal", HAL)]).unwrap();
    let mut target = Validation::new("linuxcnc-components").unwrap();
    if let Err(e) = machine.apply(&mut target, &Registry::builtin()) {
        panic!("{e}");
    }
}

#[test]
fn singletons_and_groups_refuse_count() {
    for (line, says) in [
        ("loadrt charge_pump count=2", "single instance"),
        ("loadrt watchdog num_inputs=1 names=a", "single instance"),
        ("loadrt debounce count=2", "one instance per value of cfg="),
        ("loadrt debounce", "needs cfg="),
        ("loadrt watchdog", "num_inputs=1..32"),
        (
            "loadrt pwmgen count=2",
            "one instance per value of output_type=",
        ),
    ] {
        let hal = format!("{line}\n");
        let machine = Machine::from_texts("m.toml", TOML, &[("m.hal", &hal)]).unwrap();
        let e = machine
            .apply(
                &mut Validation::new("linuxcnc-bad").unwrap(),
                &Registry::builtin(),
            )
            .err()
            .unwrap_or_else(|| panic!("{line} was accepted"));
        assert!(e.to_string().contains(says), "{line}: {e}");
        assert!(e.to_string().starts_with("m.hal:1: "), "{line}: {e}");
    }
}
