//! `Hal::probe`: a read-only view of any pin or signal by name (the flight recorder's), which follows a
//! pin's links and reads a signal's value.

use rtapi_hal::{HalBuilder, HalError, Io, Out, ValueType};

#[test]
fn a_probe_reads_pins_through_their_links_and_signals_directly() {
    let inst = format!("probe-{}", std::process::id());
    let mut b = HalBuilder::new(&inst).unwrap();
    let c = b.component("c").unwrap();
    let out = b.pin::<Out, f64>(c, "c.out").unwrap();
    let io = b.pin::<Io, i32>(c, "c.io").unwrap();
    let bit = b.pin::<Out, bool>(c, "c.bit").unwrap();
    b.signal("other", ValueType::Float).unwrap();
    let hal = b.build().unwrap();
    let (out, io, bit) = (hal.pin(out), hal.pin(io), hal.pin(bit));
    out.set(2.5);
    io.set(-7);
    bit.set(true);
    let p_out = hal.probe("c.out").unwrap();
    let p_io = hal.probe("c.io").unwrap();
    let p_bit = hal.probe("c.bit").unwrap();
    assert_eq!(p_io.value_type(), ValueType::S32);
    assert_eq!(
        (p_out.get_f64(), p_io.get_f64(), p_bit.get_f64()),
        (2.5, -7.0, 1.0)
    );
    // Linked at run time: the pin's probe follows it (and so does the signal's own probe).
    hal.link("c.out", "other").unwrap();
    let p_sig = hal.probe("other").unwrap();
    out.set(4.0);
    assert_eq!((p_out.get_f64(), p_sig.get_f64()), (4.0, 4.0));
    assert!(matches!(
        hal.probe("nothing"),
        Err(HalError::NotFound { .. })
    ));
}
