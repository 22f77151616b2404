//! A module's `loadrt` arguments, written through its `rtapi_info_*` symbols.
//!
//! LinuxCNC's `RTAPI_MP_INT(var, …)` and friends (rtapi.h) export, for an argument `var`:
//! `rtapi_info_address_var` (a `void *` holding `&var`), `rtapi_info_type_var` (a `const char *`: `"i"`
//! int, `"l"` long, `"s"` string) and, for arrays (`RTAPI_MP_ARRAY_*`), `rtapi_info_size_var` (an `int`,
//! the number of elements). An array argument takes comma-separated values, element by element.

use std::ffi::{c_char, c_int, c_long, c_void, CStr, CString};
use std::path::Path;

/// One argument's place in the module, from its `rtapi_info_*` symbols.
struct Slot {
    address: *mut c_void,
    kind: Kind,
    /// `Some(n)`: an array of `n` elements.
    size: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Int,
    Long,
    Str,
}

/// Looks a symbol up in a loaded module.
fn symbol(handle: *mut c_void, name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: `handle` is a live handle from `dlopen` (the caller holds it open) and `c` is a
    // NUL-terminated string that outlives the call.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// The names of the arguments a module declares, read from its file (its dynamic symbol names):
/// only for error messages.
pub(super) fn declared_names(path: &Path) -> Vec<String> {
    const MARK: &[u8] = b"rtapi_info_address_";
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut i = 0;
    while let Some(pos) = bytes[i..].windows(MARK.len()).position(|w| w == MARK) {
        let start = i + pos + MARK.len();
        let end = bytes[start..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
            .map_or(bytes.len(), |n| start + n);
        if end > start {
            let n = String::from_utf8_lossy(&bytes[start..end]).into_owned();
            if !names.contains(&n) {
                names.push(n);
            }
        }
        i = end.max(start);
    }
    names.sort();
    names
}

fn slot(handle: *mut c_void, module: &str, path: &Path, key: &str) -> Result<Slot, String> {
    let Some(address_sym) = symbol(handle, &format!("rtapi_info_address_{key}")) else {
        let known = declared_names(path);
        return Err(format!(
            "LinuxCNC module {module} has no argument '{key}'; it takes {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known
                    .iter()
                    .map(|k| format!("{k}="))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
    };
    let type_sym = symbol(handle, &format!("rtapi_info_type_{key}")).ok_or_else(|| {
        format!("LinuxCNC module {module}: argument '{key}' has an address but no type symbol")
    })?;
    // SAFETY: rtapi.h defines `rtapi_info_address_<key>` as a `void *` variable and
    // `rtapi_info_type_<key>` as a `const char *` variable; dlsym gave their addresses in the loaded
    // module, which stays mapped while the caller holds the handle.
    let (address, type_ptr) = unsafe {
        (
            *address_sym.cast::<*mut c_void>(),
            *type_sym.cast::<*const c_char>(),
        )
    };
    if address.is_null() || type_ptr.is_null() {
        return Err(format!(
            "LinuxCNC module {module}: argument '{key}' has a null address or type"
        ));
    }
    // SAFETY: a non-null `const char *` initialised by the module to a string literal.
    let type_text = unsafe { CStr::from_ptr(type_ptr) }.to_string_lossy();
    let kind = match type_text.as_ref() {
        "i" => Kind::Int,
        "l" => Kind::Long,
        "s" => Kind::Str,
        other => {
            return Err(format!(
                "LinuxCNC module {module}: argument '{key}' has type '{other}', which rtapi cannot \
                 write (it knows i, l and s)"
            ))
        }
    };
    let size = symbol(handle, &format!("rtapi_info_size_{key}")).map(|p| {
        // SAFETY: rtapi.h defines `rtapi_info_size_<key>` as an `int` variable.
        usize::try_from(unsafe { *p.cast::<c_int>() }).unwrap_or(0)
    });
    Ok(Slot {
        address,
        kind,
        size,
    })
}

/// Parses an integer as LinuxCNC's argument parser accepts it: decimal, `0x` hex, optional sign.
fn parse_integer(text: &str) -> Option<i64> {
    let t = text.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let v = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i64::from_str_radix(hex, 16).ok()?
    } else {
        digits.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// Writes `key=value` into the loaded module at `handle`. Strings are copied into `keep`, which the
/// caller keeps alive for as long as the module is loaded (the module keeps the pointers).
pub(crate) fn write(
    handle: *mut c_void,
    module: &str,
    path: &Path,
    key: &str,
    value: &str,
    keep: &mut Vec<CString>,
) -> Result<(), String> {
    let s = slot(handle, module, path, key)?;
    let values: Vec<&str> = match s.size {
        Some(_) => value.split(',').collect(),
        None => vec![value],
    };
    if let Some(n) = s.size {
        if values.len() > n {
            return Err(format!(
                "{key}={value}: LinuxCNC module {module} takes at most {n} values for {key}"
            ));
        }
    }
    for (i, v) in values.iter().enumerate() {
        if s.size.is_some() && v.is_empty() {
            // `a,,b`: the element keeps its default.
            continue;
        }
        match s.kind {
            Kind::Int => {
                let n = parse_integer(v)
                    .and_then(|n| c_int::try_from(n).ok())
                    .ok_or_else(|| {
                        format!("{key}={value}: '{v}' is not an integer (a C int) for {module}")
                    })?;
                // SAFETY: the module declared `key` as an int (or an int array of `size` elements,
                // `i < size` checked above) at `address`, a variable of the loaded module.
                unsafe { *s.address.cast::<c_int>().add(i) = n };
            }
            Kind::Long => {
                let n = parse_integer(v)
                    .and_then(|n| c_long::try_from(n).ok())
                    .ok_or_else(|| {
                        format!("{key}={value}: '{v}' is not an integer (a C long) for {module}")
                    })?;
                // SAFETY: as above, for a long (array).
                unsafe { *s.address.cast::<c_long>().add(i) = n };
            }
            Kind::Str => {
                let c = CString::new(*v).map_err(|_| {
                    format!("{key}: a value with a NUL byte cannot be given to {module}")
                })?;
                let p = c.as_ptr().cast_mut();
                keep.push(c);
                // SAFETY: as above, for a `char *` (array); the string lives in `keep` as long as
                // the module is loaded.
                unsafe { *s.address.cast::<*mut c_char>().add(i) = p };
            }
        }
    }
    Ok(())
}

/// Checks `key=value` against the arguments module file `info` declares, without loading it (the
/// same messages as [`write`]; a type the file does not show statically is not checked).
pub(super) fn check_static(
    info: &super::trust::ModuleInfo,
    module: &str,
    key: &str,
    value: &str,
) -> Result<(), String> {
    use super::trust::ArgKind;
    let Some(decl) = info.args.get(key) else {
        let known: Vec<String> = info.args.keys().map(|k| format!("{k}=")).collect();
        return Err(format!(
            "LinuxCNC module {module} has no argument '{key}'; it takes {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ));
    };
    let values: Vec<&str> = match decl.size {
        Some(_) => value.split(',').collect(),
        None => vec![value],
    };
    if let Some(n) = decl.size {
        if values.len() > n {
            return Err(format!(
                "{key}={value}: LinuxCNC module {module} takes at most {n} values for {key}"
            ));
        }
    }
    for v in values {
        if decl.size.is_some() && v.is_empty() {
            continue;
        }
        match decl.kind {
            Some(ArgKind::Int) => {
                parse_integer(v)
                    .and_then(|n| c_int::try_from(n).ok())
                    .ok_or_else(|| {
                        format!("{key}={value}: '{v}' is not an integer (a C int) for {module}")
                    })?;
            }
            Some(ArgKind::Long) => {
                parse_integer(v)
                    .and_then(|n| c_long::try_from(n).ok())
                    .ok_or_else(|| {
                        format!("{key}={value}: '{v}' is not an integer (a C long) for {module}")
                    })?;
            }
            Some(ArgKind::Str) | None => {
                if v.contains('\0') {
                    return Err(format!(
                        "{key}: a value with a NUL byte cannot be given to {module}"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_like_linuxcnc() {
        assert_eq!(parse_integer("12"), Some(12));
        assert_eq!(parse_integer("-3"), Some(-3));
        assert_eq!(parse_integer("0x1f"), Some(31));
        assert_eq!(parse_integer(" 7 "), Some(7));
        assert_eq!(parse_integer("x"), None);
        assert_eq!(parse_integer("1.5"), None);
    }
}
