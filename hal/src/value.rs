//! Value types and their cell encoding.
//!
//! Every HAL value lives in one 8-byte, 8-aligned cell slot, so a read or a write is a single atomic
//! instruction in every process, whatever the type: no torn floats, no locks. Inside the slot a value
//! occupies exactly the bytes a LinuxCNC C component expects behind its `hal_*_t *` (fixed by
//! `hal/LAYOUT.md` section 3): bit = the low-addressed byte (0/1), s32/u32 = the low-addressed 4 bytes,
//! float/s64/u64 = all 8. Writers and readers use an atomic of exactly that width at the slot start
//! ([`cell`]), so a C writer storing 4 bytes is read right.
//!
//! In memory (a [`Value`] or [`HalType::to_bits`]) values use one canonical 64-bit encoding: bit = 0/1,
//! float = IEEE-754 bits, s32/s64 sign-extended, u32/u64 zero-extended.

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

/// Width-exact atomic access to a cell slot (LAYOUT.md section 3).
pub(crate) mod cell {
    use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

    use super::ValueType;

    /// Loads the value of type `ty` from the slot at `p`, as canonical bits ([`super::Value::to_bits`]).
    ///
    /// # Safety
    /// `p` must point to a live, 8-aligned 8-byte cell slot that every party accesses only atomically.
    #[inline(always)]
    pub(crate) unsafe fn load(p: *const u8, ty: ValueType) -> u64 {
        match ty {
            // SAFETY: the caller guarantees a live aligned slot; a u8 needs no alignment beyond 1.
            ValueType::Bit => u64::from(unsafe { &*p.cast::<AtomicU8>() }.load(Relaxed) != 0),
            ValueType::S32 => {
                // SAFETY: the slot is 8-aligned, so its first 4 bytes are a 4-aligned u32.
                let v = unsafe { &*p.cast::<AtomicU32>() }.load(Relaxed);
                v as i32 as i64 as u64
            }
            // SAFETY: as above.
            ValueType::U32 => u64::from(unsafe { &*p.cast::<AtomicU32>() }.load(Relaxed)),
            // SAFETY: the slot is 8-aligned and 8 bytes long.
            _ => unsafe { &*p.cast::<AtomicU64>() }.load(Relaxed),
        }
    }

    /// Stores canonical bits of type `ty` into the slot at `p`, touching only the type's bytes.
    ///
    /// # Safety
    /// As [`load`]; the memory must be writable.
    #[inline(always)]
    pub(crate) unsafe fn store(p: *const u8, ty: ValueType, bits: u64) {
        match ty {
            // SAFETY: the caller guarantees a live, writable, aligned slot.
            ValueType::Bit => unsafe { &*p.cast::<AtomicU8>() }.store(u8::from(bits != 0), Relaxed),
            ValueType::S32 | ValueType::U32 => {
                // SAFETY: as above; the first 4 bytes of an 8-aligned slot are 4-aligned.
                unsafe { &*p.cast::<AtomicU32>() }.store(bits as u32, Relaxed)
            }
            // SAFETY: as above.
            _ => unsafe { &*p.cast::<AtomicU64>() }.store(bits, Relaxed),
        }
    }

    /// The bytes of a slot holding `bits` of type `ty`, as the owner writes it at creation (unused
    /// bytes 0), for composing a segment image.
    pub(crate) fn image(ty: ValueType, bits: u64) -> [u8; 8] {
        let mut out = [0u8; 8];
        match ty {
            ValueType::Bit => out[0] = u8::from(bits != 0),
            ValueType::S32 | ValueType::U32 => {
                out[..4].copy_from_slice(&(bits as u32).to_ne_bytes())
            }
            _ => out = bits.to_ne_bytes(),
        }
        out
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

    /// Loads a value from a cell slot with an atomic of this type's width (LAYOUT.md section 3).
    ///
    /// # Safety
    /// `p` must point to a live, 8-aligned 8-byte cell slot accessed only atomically.
    #[inline(always)]
    unsafe fn load_cell(p: *const u8) -> Self {
        // SAFETY: forwarded from our caller.
        Self::from_bits(unsafe { cell::load(p, Self::TYPE) })
    }

    /// Stores a value into a cell slot with an atomic of this type's width.
    ///
    /// # Safety
    /// As [`load_cell`](Self::load_cell); the memory must be writable.
    #[inline(always)]
    unsafe fn store_cell(p: *const u8, value: Self) {
        // SAFETY: forwarded from our caller.
        unsafe { cell::store(p, Self::TYPE, value.to_bits()) }
    }
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
    fn cells_hold_exactly_the_c_width_at_the_slot_start() {
        use std::sync::atomic::AtomicU64;
        let slot = AtomicU64::new(0);
        let p = (&slot as *const AtomicU64).cast::<u8>();
        let bytes = |s: &AtomicU64| s.load(std::sync::atomic::Ordering::Relaxed).to_ne_bytes();
        // A slot pre-filled with garbage: a narrow store must touch only its own bytes.
        slot.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `slot` is a live, aligned 8-byte atomic.
        unsafe { bool::store_cell(p, false) };
        assert_eq!(bytes(&slot), [0, 255, 255, 255, 255, 255, 255, 255]);
        // SAFETY: as above.
        assert!(!unsafe { bool::load_cell(p) });
        slot.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { i32::store_cell(p, -2) };
        let mut want = [255u8; 8];
        want[..4].copy_from_slice(&(-2i32).to_ne_bytes());
        assert_eq!(bytes(&slot), want);
        // SAFETY: as above.
        assert_eq!(unsafe { i32::load_cell(p) }, -2);
        // A C writer storing 4 bytes of a u32 over a slot whose upper half is garbage is read right.
        slot.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
        let mut c_bytes = [0xAAu8; 8];
        c_bytes[..4].copy_from_slice(&7u32.to_ne_bytes());
        slot.store(
            u64::from_ne_bytes(c_bytes),
            std::sync::atomic::Ordering::Relaxed,
        );
        // SAFETY: as above.
        assert_eq!(unsafe { u32::load_cell(p) }, 7);
        assert_eq!(
            cell::image(ValueType::S32, (-1i32).to_bits()),
            [255, 255, 255, 255, 0, 0, 0, 0]
        );
        assert_eq!(cell::image(ValueType::Bit, 5), [1, 0, 0, 0, 0, 0, 0, 0]);
        // SAFETY: as above.
        unsafe { f64::store_cell(p, -1.25) };
        assert_eq!(u64::from_ne_bytes(bytes(&slot)), (-1.25f64).to_bits());
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
