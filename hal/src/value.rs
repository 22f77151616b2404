//! Value types and their 64-bit cell encoding.
//!
//! Every HAL value lives in one naturally aligned 64-bit cell so that a read or a write is a single atomic
//! instruction in every process, whatever the type: no torn floats, no locks. The encoding is fixed by
//! `hal/LAYOUT.md`: bit = 0/1, float = IEEE-754 f64 bits, s32/s64 = two's complement sign-extended to 64
//! bits, u32/u64 = zero-extended.

use std::fmt;

use crate::error::{HalError, Result};

/// The six HAL types. The discriminants are the codes stored in the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// A boolean (`bool`).
    Bit = 1,
    /// An IEEE-754 double (`f64`).
    Float = 2,
    /// A signed 32-bit integer (`i32`).
    S32 = 3,
    /// An unsigned 32-bit integer (`u32`).
    U32 = 4,
    /// A signed 64-bit integer (`i64`).
    S64 = 5,
    /// An unsigned 64-bit integer (`u64`).
    U64 = 6,
}

impl ValueType {
    /// Decodes a type code read from a segment (0 and unknown codes are corruption).
    pub(crate) fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            1 => ValueType::Bit,
            2 => ValueType::Float,
            3 => ValueType::S32,
            4 => ValueType::U32,
            5 => ValueType::S64,
            6 => ValueType::U64,
            _ => return None,
        })
    }

    /// The code stored in the segment.
    pub(crate) fn code(self) -> u32 {
        self as u32
    }

    /// `bit`, `float`, `s32`, `u32`, `s64` or `u64`, as HAL configs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ValueType::Bit => "bit",
            ValueType::Float => "float",
            ValueType::S32 => "s32",
            ValueType::U32 => "u32",
            ValueType::S64 => "s64",
            ValueType::U64 => "u64",
        }
    }

    /// What a valid value looks like, appended to parse errors.
    pub(crate) fn value_hint(self) -> &'static str {
        match self {
            ValueType::Bit => " (use 0/1, true/false)",
            ValueType::Float => " (use a number like 1.5 or -2e-3)",
            ValueType::S32 => " (use an integer from -2147483648 to 2147483647)",
            ValueType::U32 => " (use an integer from 0 to 4294967295, or 0x...)",
            ValueType::S64 => " (use a 64-bit signed integer)",
            ValueType::U64 => " (use a 64-bit unsigned integer, or 0x...)",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A typed value, as read from or written to a cell by a reader that learns the type at run time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A `bit`.
    Bit(bool),
    /// A `float`.
    Float(f64),
    /// An `s32`.
    S32(i32),
    /// A `u32`.
    U32(u32),
    /// An `s64`.
    S64(i64),
    /// A `u64`.
    U64(u64),
}

impl Value {
    /// The type of this value.
    pub fn value_type(self) -> ValueType {
        match self {
            Value::Bit(_) => ValueType::Bit,
            Value::Float(_) => ValueType::Float,
            Value::S32(_) => ValueType::S32,
            Value::U32(_) => ValueType::U32,
            Value::S64(_) => ValueType::S64,
            Value::U64(_) => ValueType::U64,
        }
    }

    /// The cell encoding of this value.
    pub fn to_bits(self) -> u64 {
        match self {
            Value::Bit(v) => v.to_bits(),
            Value::Float(v) => v.to_bits(),
            Value::S32(v) => v.to_bits(),
            Value::U32(v) => v.to_bits(),
            Value::S64(v) => v.to_bits(),
            Value::U64(v) => v.to_bits(),
        }
    }

    /// Decodes a cell of a known type.
    pub fn from_bits(ty: ValueType, bits: u64) -> Self {
        match ty {
            ValueType::Bit => Value::Bit(bool::from_bits(bits)),
            ValueType::Float => Value::Float(f64::from_bits(bits)),
            ValueType::S32 => Value::S32(i32::from_bits(bits)),
            ValueType::U32 => Value::U32(u32::from_bits(bits)),
            ValueType::S64 => Value::S64(i64::from_bits(bits)),
            ValueType::U64 => Value::U64(u64::from_bits(bits)),
        }
    }

    /// Parses text the way `setp` accepts it. `name` is only used in the error message.
    pub fn parse(ty: ValueType, text: &str, name: &str) -> Result<Self> {
        let t = text.trim();
        let bad = || HalError::BadValue {
            name: name.to_string(),
            ty,
            text: text.to_string(),
        };
        let parsed = match ty {
            ValueType::Bit => match t.to_ascii_lowercase().as_str() {
                "1" | "true" | "on" | "yes" => Some(Value::Bit(true)),
                "0" | "false" | "off" | "no" => Some(Value::Bit(false)),
                _ => None,
            },
            ValueType::Float => t.parse::<f64>().ok().map(Value::Float),
            ValueType::S32 => parse_int(t)
                .and_then(|v| i32::try_from(v).ok())
                .map(Value::S32),
            ValueType::U32 => parse_int(t)
                .and_then(|v| u32::try_from(v).ok())
                .map(Value::U32),
            ValueType::S64 => parse_int(t)
                .and_then(|v| i64::try_from(v).ok())
                .map(Value::S64),
            ValueType::U64 => parse_int(t)
                .and_then(|v| u64::try_from(v).ok())
                .map(Value::U64),
        };
        parsed.ok_or_else(bad)
    }
}

/// Decimal or `0x` hexadecimal integer, with an optional sign, widened so every HAL integer type fits.
fn parse_int(t: &str) -> Option<i128> {
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => i128::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<i128>().ok()?,
    };
    Some(if neg { -magnitude } else { magnitude })
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bit(v) => f.write_str(if *v { "TRUE" } else { "FALSE" }),
            Value::Float(v) => write!(f, "{v}"),
            Value::S32(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::S64(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
        }
    }
}

/// A Rust type that can live in a HAL cell. Implemented for exactly the six HAL types, so a typed handle
/// like `Pin<In, f64>` fixes the HAL type at compile time.
pub trait HalType: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The HAL type of this Rust type.
    const TYPE: ValueType;
    /// The 64-bit cell encoding (see `hal/LAYOUT.md`): the bits one atomic store writes.
    fn to_bits(self) -> u64;
    /// Decodes a cell of this type.
    fn from_bits(bits: u64) -> Self;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for bool {}
    impl Sealed for f64 {}
    impl Sealed for i32 {}
    impl Sealed for u32 {}
    impl Sealed for i64 {}
    impl Sealed for u64 {}
}

impl HalType for bool {
    const TYPE: ValueType = ValueType::Bit;
    fn to_bits(self) -> u64 {
        self as u64
    }
    /// Any non-zero cell is true, so a foreign writer's `2` does not read as false.
    fn from_bits(bits: u64) -> Self {
        bits != 0
    }
}

impl HalType for f64 {
    const TYPE: ValueType = ValueType::Float;
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
}

impl HalType for i32 {
    const TYPE: ValueType = ValueType::S32;
    fn to_bits(self) -> u64 {
        self as i64 as u64
    }
    fn from_bits(bits: u64) -> Self {
        bits as i64 as i32
    }
}

impl HalType for u32 {
    const TYPE: ValueType = ValueType::U32;
    fn to_bits(self) -> u64 {
        self as u64
    }
    fn from_bits(bits: u64) -> Self {
        bits as u32
    }
}

impl HalType for i64 {
    const TYPE: ValueType = ValueType::S64;
    fn to_bits(self) -> u64 {
        self as u64
    }
    fn from_bits(bits: u64) -> Self {
        bits as i64
    }
}

impl HalType for u64 {
    const TYPE: ValueType = ValueType::U64;
    fn to_bits(self) -> u64 {
        self
    }
    fn from_bits(bits: u64) -> Self {
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: HalType + PartialEq + fmt::Debug>(v: T) {
        assert_eq!(T::from_bits(v.to_bits()), v);
    }

    #[test]
    fn every_type_round_trips_its_extremes() {
        for v in [true, false] {
            round_trip(v);
        }
        for v in [
            0.0,
            -0.0,
            1.5,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            round_trip(v);
        }
        for v in [i32::MIN, -1, 0, i32::MAX] {
            round_trip(v);
        }
        for v in [0, u32::MAX] {
            round_trip(v);
        }
        for v in [i64::MIN, -1, i64::MAX] {
            round_trip(v);
        }
        for v in [0, u64::MAX] {
            round_trip(v);
        }
        assert!(f64::from_bits(f64::NAN.to_bits()).is_nan());
    }

    #[test]
    fn signed_values_are_sign_extended_in_the_cell() {
        assert_eq!((-1i32).to_bits(), u64::MAX);
        assert_eq!(u32::MAX.to_bits(), 0xffff_ffff);
        assert_eq!(true.to_bits(), 1);
    }

    #[test]
    fn typed_and_dynamic_encodings_agree() {
        for ty in [
            ValueType::Bit,
            ValueType::Float,
            ValueType::S32,
            ValueType::U32,
            ValueType::S64,
            ValueType::U64,
        ] {
            assert_eq!(ValueType::from_code(ty.code()), Some(ty));
            let v = Value::parse(ty, "1", "x").unwrap();
            assert_eq!(v.value_type(), ty);
            assert_eq!(Value::from_bits(ty, v.to_bits()), v);
        }
        assert_eq!(ValueType::from_code(0), None);
        assert_eq!(ValueType::from_code(7), None);
        assert_eq!(Value::S32(-5).to_bits(), (-5i32).to_bits());
    }

    #[test]
    fn parse_accepts_hal_spellings_and_rejects_out_of_range() {
        assert_eq!(
            Value::parse(ValueType::Bit, "TRUE", "p").unwrap(),
            Value::Bit(true)
        );
        assert_eq!(
            Value::parse(ValueType::Bit, " 0 ", "p").unwrap(),
            Value::Bit(false)
        );
        assert_eq!(
            Value::parse(ValueType::Float, "-2e-3", "p").unwrap(),
            Value::Float(-2e-3)
        );
        assert_eq!(
            Value::parse(ValueType::U32, "0xff", "p").unwrap(),
            Value::U32(255)
        );
        assert_eq!(
            Value::parse(ValueType::S32, "-2147483648", "p").unwrap(),
            Value::S32(i32::MIN)
        );
        assert_eq!(
            Value::parse(ValueType::U64, &u64::MAX.to_string(), "p").unwrap(),
            Value::U64(u64::MAX)
        );
        for (ty, t) in [
            (ValueType::Bit, "2"),
            (ValueType::Float, "abc"),
            (ValueType::S32, "2147483648"),
            (ValueType::U32, "-1"),
            (ValueType::S64, "1.5"),
            (ValueType::U64, ""),
        ] {
            let e = Value::parse(ty, t, "pid.0.Pgain").unwrap_err().to_string();
            assert!(e.contains("pid.0.Pgain") && e.contains(ty.as_str()), "{e}");
        }
    }
}
