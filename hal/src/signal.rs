//! The rules of `net`, as one pure function over the builder's model.
//!
//! A signal carries one value. Exactly one party may drive it each period, so: at most one OUT pin; or,
//! instead of an OUT pin, any number of IO pins (which take turns by convention, like LinuxCNC's bidir
//! signals); never both. Types never convert implicitly: a float command into a bit enable is a wiring
//! mistake that must fail at start, not misbehave at run time.

use crate::error::{HalError, Result};
use crate::pin::PinDir;
use crate::value::ValueType;

/// What `net` needs to know about a signal.
#[derive(Debug, Clone)]
pub(crate) struct SignalDef {
    pub name: String,
    pub ty: ValueType,
    /// Index of the OUT pin driving it.
    pub writer: Option<usize>,
    pub readers: u32,
    pub bidirs: u32,
}

/// What `net` needs to know about a pin.
pub(crate) struct PinView<'a> {
    pub name: &'a str,
    pub ty: ValueType,
    pub dir: PinDir,
    /// Name of the signal it is already on.
    pub on_signal: Option<&'a str>,
}

/// Checks that `pin` may join `signal`; `writer_name` names the signal's current OUT pin, if any.
pub(crate) fn check_net(
    signal: &SignalDef,
    pin: &PinView<'_>,
    writer_name: Option<&str>,
) -> Result<()> {
    if let Some(on) = pin.on_signal {
        return Err(HalError::AlreadyNetted {
            pin: pin.name.to_string(),
            signal: on.to_string(),
        });
    }
    if pin.ty != signal.ty {
        return Err(HalError::TypeMismatch {
            signal: signal.name.clone(),
            signal_type: signal.ty,
            pin: pin.name.to_string(),
            pin_type: pin.ty,
        });
    }
    match pin.dir {
        PinDir::In => Ok(()),
        PinDir::Out => match writer_name {
            Some(w) => Err(HalError::SecondWriter {
                signal: signal.name.clone(),
                writer: w.to_string(),
                pin: pin.name.to_string(),
            }),
            None if signal.bidirs > 0 => Err(HalError::OutWithIo {
                signal: signal.name.clone(),
                pin: pin.name.to_string(),
            }),
            None => Ok(()),
        },
        PinDir::Io if signal.writer.is_some() => Err(HalError::OutWithIo {
            signal: signal.name.clone(),
            pin: pin.name.to_string(),
        }),
        PinDir::Io => Ok(()),
    }
}

/// Records that `pin_index` (already checked) joined the signal.
pub(crate) fn apply_net(signal: &mut SignalDef, pin_index: usize, dir: PinDir) {
    match dir {
        PinDir::In => signal.readers += 1,
        PinDir::Out => signal.writer = Some(pin_index),
        PinDir::Io => signal.bidirs += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(ty: ValueType) -> SignalDef {
        SignalDef {
            name: "cmd".into(),
            ty,
            writer: None,
            readers: 0,
            bidirs: 0,
        }
    }
    fn pin(name: &str, ty: ValueType, dir: PinDir) -> PinView<'_> {
        PinView {
            name,
            ty,
            dir,
            on_signal: None,
        }
    }

    #[test]
    fn one_writer_many_readers() {
        let mut s = sig(ValueType::Float);
        check_net(&s, &pin("a.out", ValueType::Float, PinDir::Out), None).unwrap();
        apply_net(&mut s, 0, PinDir::Out);
        for i in 1..4 {
            check_net(
                &s,
                &pin("b.in", ValueType::Float, PinDir::In),
                Some("a.out"),
            )
            .unwrap();
            apply_net(&mut s, i, PinDir::In);
        }
        assert_eq!((s.writer, s.readers, s.bidirs), (Some(0), 3, 0));
        let e = check_net(
            &s,
            &pin("c.out", ValueType::Float, PinDir::Out),
            Some("a.out"),
        )
        .unwrap_err();
        assert!(matches!(e, HalError::SecondWriter { .. }));
        assert!(e.to_string().contains("a.out") && e.to_string().contains("c.out"));
    }

    #[test]
    fn types_must_match() {
        let s = sig(ValueType::Float);
        let e = check_net(&s, &pin("en", ValueType::Bit, PinDir::In), None).unwrap_err();
        assert!(matches!(e, HalError::TypeMismatch { .. }));
        assert!(e.to_string().contains("bit") && e.to_string().contains("float"));
        let e = check_net(
            &sig(ValueType::S32),
            &pin("x", ValueType::U32, PinDir::In),
            None,
        )
        .unwrap_err();
        assert!(matches!(e, HalError::TypeMismatch { .. }));
    }

    #[test]
    fn out_and_io_do_not_mix() {
        let mut s = sig(ValueType::Bit);
        check_net(&s, &pin("a.io", ValueType::Bit, PinDir::Io), None).unwrap();
        apply_net(&mut s, 0, PinDir::Io);
        check_net(&s, &pin("b.io", ValueType::Bit, PinDir::Io), None).unwrap();
        let e = check_net(&s, &pin("c.out", ValueType::Bit, PinDir::Out), None).unwrap_err();
        assert!(matches!(e, HalError::OutWithIo { .. }));

        let mut s = sig(ValueType::Bit);
        apply_net(&mut s, 0, PinDir::Out);
        let e = check_net(&s, &pin("c.io", ValueType::Bit, PinDir::Io), Some("a.out")).unwrap_err();
        assert!(matches!(e, HalError::OutWithIo { .. }));
    }

    #[test]
    fn a_pin_joins_one_signal_only() {
        let s = sig(ValueType::Float);
        let mut p = pin("x.in", ValueType::Float, PinDir::In);
        p.on_signal = Some("other");
        let e = check_net(&s, &p, None).unwrap_err();
        assert!(e.to_string().contains("other"));
    }
}
