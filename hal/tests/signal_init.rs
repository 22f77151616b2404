//! `HalBuilder::set_signal`: a signal's value when the segment is built.

mod common;

use common::{unique_instance, Cleanup};
use rtapi_hal::*;

#[test]
fn built_segment_starts_with_the_set_value() {
    let instance = unique_instance("siginit");
    let _c = Cleanup(instance.clone());
    let mut b = HalBuilder::new(&instance).unwrap();
    let c = b.component("c").unwrap();
    let input = b.pin::<In, f64>(c, "c.in").unwrap();
    let io = b.pin_with_default::<Io, u32>(c, "c.io", 7).unwrap();
    b.pin::<Out, bool>(c, "c.out").unwrap();
    b.net("feed", "c.in").unwrap();
    b.set_signal("feed", Value::Float(2.5)).unwrap();
    b.set_signal("feed", Value::Float(-1.25)).unwrap(); // the last one wins
    b.signal("count", ValueType::U32).unwrap();
    b.set_signal("count", Value::U32(42)).unwrap();
    b.net("count", "c.io").unwrap(); // an IO pin netted later keeps the set value
    b.net("driven", "c.out").unwrap();
    b.signal("untouched", ValueType::S32).unwrap();

    // Refusals, each typed.
    assert!(matches!(
        b.set_signal("nope", Value::Bit(true)),
        Err(HalError::NotFound {
            kind: ObjectKind::Signal,
            ..
        })
    ));
    assert!(matches!(
        b.set_signal("c.in", Value::Float(1.0)), // a pin, not a signal
        Err(HalError::NotFound { .. })
    ));
    assert!(matches!(
        b.set_signal("feed", Value::S32(1)),
        Err(HalError::WrongType {
            expected: ValueType::Float,
            found: ValueType::S32,
            ..
        })
    ));
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert!(matches!(
            b.set_signal("feed", Value::Float(bad)),
            Err(HalError::NonFinite { .. })
        ));
    }
    assert!(matches!(
        b.set_signal("driven", Value::Bit(true)),
        Err(HalError::NotWritable {
            reason: WriteRefusal::SignalHasWriter { .. },
            ..
        })
    ));

    let hal = b.build().unwrap();
    assert_eq!(hal.pin(input).get(), -1.25);
    assert_eq!(hal.pin(io).get(), 42);
    let r = hal.reader().unwrap();
    assert_eq!(r.get("feed").unwrap(), Value::Float(-1.25));
    assert_eq!(r.get("count").unwrap(), Value::U32(42));
    assert_eq!(r.get("driven").unwrap(), Value::Bit(false));
    assert_eq!(r.get("untouched").unwrap(), Value::S32(0));
}
