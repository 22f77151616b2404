//! HAL names and instance names.
//!
//! A name is stored in the segment as a fixed 48-byte field: up to 47 bytes of `[A-Za-z0-9._:-]` and at
//! least one NUL. The charset keeps names safe to print, to use in globs and in file names, and identical in
//! every language that reads the segment; the fixed size keeps every record a constant size. `:` is
//! LinuxCNC's (`net pendant:wheel-counts …` in its sample configs) and allowed in every HAL object name,
//! but not in an instance name: a FIFO's file is `rtapi-<instance>:<fifo>`, split at the first `:`.

use std::fmt;

use crate::error::{HalError, Result};
use crate::layout::NAME_FIELD;

/// Longest name, in bytes (the 48th byte of the field is always a NUL).
pub const MAX_NAME_LEN: usize = NAME_FIELD - 1;

/// The instance used when none is given (`/rtapi-default`).
pub const DEFAULT_INSTANCE: &str = "default";

/// Why `name` is not a valid HAL object name, or `None` if it is.
fn problem(name: &str) -> Option<&'static str> {
    problem_in(name, true)
}

/// Why `name` is not a valid name, `:` allowed or not.
fn problem_in(name: &str, colon: bool) -> Option<&'static str> {
    if name.is_empty() {
        return Some("it is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return Some("it is longer than 47 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        if !colon {
            return Some(
                "it contains a character other than A-Z a-z 0-9 . _ - (an instance name has no :)",
            );
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
        {
            return Some("it contains a character other than A-Z a-z 0-9 . _ - :");
        }
    }
    None
}

/// Checks a HAL object name (component, pin, param, signal, function, thread): 1 to
/// [`MAX_NAME_LEN`] characters of `A-Z a-z 0-9 . _ - :`; [`HalError::InvalidName`] says why not.
pub fn validate(name: &str) -> Result<()> {
    check(name, problem(name))
}

/// Checks an instance name: as [`validate`], without `:`.
pub fn validate_instance(name: &str) -> Result<()> {
    check(name, problem_in(name, false))
}

fn check(name: &str, problem: Option<&'static str>) -> Result<()> {
    match problem {
        None => Ok(()),
        Some(reason) => Err(HalError::InvalidName {
            name: name.to_string(),
            reason,
        }),
    }
}

/// Decodes a name (or label) field read from a segment, which may have been written by anyone: the name must end at
/// the first NUL inside the field, and everything after that NUL must be NUL too (so the field has one
/// meaning), and the name must satisfy [`validate`].
pub(crate) fn decode(field: &[u8]) -> Result<String> {
    let len = field
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| HalError::corrupt("a name field has no terminating NUL"))?;
    if field[len..].iter().any(|&b| b != 0) {
        return Err(HalError::corrupt(
            "a name field has bytes after its terminating NUL",
        ));
    }
    // Charset check first: it guarantees ASCII, so the conversion below cannot fail.
    let text = std::str::from_utf8(&field[..len])
        .map_err(|_| HalError::corrupt("a name field is not ASCII"))?;
    if let Some(reason) = problem(text) {
        return Err(HalError::corrupt(format!(
            "a stored name is invalid: {reason}"
        )));
    }
    Ok(text.to_string())
}

/// A validated instance name: the segment is `/rtapi-<instance>` in the POSIX shm namespace
/// (`/dev/shm/rtapi-<instance>` on Linux).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Instance(String);

impl Instance {
    /// Checks `name` with the instance naming rules ([`validate_instance`]).
    pub fn new(name: &str) -> Result<Self> {
        validate_instance(name)?;
        Ok(Instance(name.to_string()))
    }

    /// The instance name, without the `/rtapi-` prefix.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name given to `shm_open`.
    #[doc(alias = "shm_open")]
    pub fn shm_name(&self) -> String {
        format!("/rtapi-{}", self.0)
    }
}

impl Default for Instance {
    fn default() -> Self {
        Instance(DEFAULT_INSTANCE.to_string())
    }
}

impl fmt::Display for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(name: &str) -> [u8; NAME_FIELD] {
        let mut field = [0u8; NAME_FIELD];
        field[..name.len()].copy_from_slice(name.as_bytes());
        field
    }

    #[test]
    fn accepts_hal_style_names() {
        for n in [
            "pid.0.command",
            "a",
            "motion-controller.servo_thread",
            "X-9_8.7",
            "pendant:wheel-counts",
            &"n".repeat(47),
        ] {
            validate(n).unwrap();
        }
        assert_eq!(
            decode(&encode("db:tool-prepare")).unwrap(),
            "db:tool-prepare"
        );
    }

    #[test]
    fn rejects_bad_names_with_reason() {
        for (n, why) in [
            ("", "empty"),
            (&*"n".repeat(48), "longer"),
            ("pid 0", "character"),
            ("pid/0", "character"),
            ("pidé", "character"),
            ("a\0b", "character"),
        ] {
            let e = validate(n).unwrap_err().to_string();
            assert!(e.contains(why), "{n:?}: {e}");
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let f = encode("pid.0.command");
        assert_eq!(decode(&f).unwrap(), "pid.0.command");
        let long = "x".repeat(47);
        assert_eq!(decode(&encode(&long)).unwrap(), long);
    }

    #[test]
    fn decode_rejects_unterminated_garbage_and_trailing_bytes() {
        assert!(decode(&[b'a'; NAME_FIELD]).is_err());
        let mut f = encode("abc");
        f[10] = b'x';
        assert!(decode(&f).is_err());
        assert!(decode(&[0u8; NAME_FIELD]).is_err(), "empty name");
        let mut f = encode("abc");
        f[1] = 0xff;
        f[2] = 0;
        assert!(decode(&f).is_err());
        let mut f = encode("abc");
        f[1] = b' ';
        assert!(decode(&f).is_err());
    }

    #[test]
    fn instance_shm_name() {
        assert_eq!(Instance::default().shm_name(), "/rtapi-default");
        assert_eq!(Instance::new("mill").unwrap().shm_name(), "/rtapi-mill");
        assert!(Instance::new("../etc").is_err());
        // `:` separates the instance from a FIFO's name in a file name: never in an instance.
        let e = Instance::new("mill:sampler.0").unwrap_err().to_string();
        assert!(e.contains("no :"), "{e}");
    }
}
