//! Which module files rtapi believes, and what it learns from one without running it.
//!
//! **Ownership.** A module is C code run in rtapi's process, often as root, so a module file is
//! loaded only when nobody but root and the user running rtapi could have written it: the file
//! (after symlinks are resolved) must be a regular file owned by root or the caller (effective uid),
//! not writable by group or others, and so must every directory above it, up to `/`. A directory
//! writable by others is accepted only when it has the sticky bit (`/tmp`): there, only an entry's
//! owner (or root) can rename or remove it, and the entry below is checked in turn — so
//! `/tmp/mine/x.so` with `/tmp/mine` the caller's 0755 directory loads, and `/tmp/x.so` owned by
//! another user does not. The message names the file or directory at fault and the fix.
//!
//! **Inspection.** Before any `dlopen`, the file is read as an ELF shared object of this machine
//! ([`inspect`]): it must define `rtapi_app_main`; its `loadrt` arguments are the
//! `rtapi_info_address_*` symbols, with their types (`rtapi_info_type_*`: a pointer to `"i"`, `"l"` or
//! `"s"`, read through its relocation) and array sizes (`rtapi_info_size_*`). `halrun --check` checks
//! a module from this alone: it never runs module code.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use object::read::elf::{Dyn, ElfFile64};
use object::{Endianness, Object, ObjectSection, ObjectSymbol};

/// A user's name for messages (`uid 1001 (probeuser)`).
fn who(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => format!("uid {uid} ({})", u.name),
        _ => format!("uid {uid}"),
    }
}

/// Why a module file is not believed.
#[derive(Debug)]
pub enum TrustError {
    /// The file, or a directory above it, could not be opened, read or stat'ed.
    Unreadable {
        /// The module file as given (and, when it differs, what it resolves to).
        shown: String,
        /// What failed: `cannot be opened`, `cannot be read`, `is below DIR, which cannot be stat'ed`.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// The path is not a regular file.
    NotRegular {
        /// The module file.
        shown: String,
    },
    /// Somebody other than root or the caller could write the file or a directory above it.
    Refused {
        /// The module file.
        shown: String,
        /// `the file` or `the directory`.
        what: &'static str,
        /// The file or directory at fault.
        at: PathBuf,
        /// `is owned by …` or `has mode …`.
        why: String,
        /// What to do about it.
        fix: String,
        /// The caller's effective uid.
        me: u32,
    },
    /// The file is not a LinuxCNC real-time module for this machine.
    NotModule {
        /// The module file.
        shown: String,
        /// What it is instead.
        why: String,
    },
}

/// What to give instead of a file that is no LinuxCNC module (the ELF check and the `dlopen` one).
pub(super) const NOT_A_MODULE_FIX: &str =
    "give a module of /usr/lib/linuxcnc/modules or one built by `halcompile`";

impl std::fmt::Display for TrustError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrustError::Unreadable {
                shown,
                what,
                source,
            } => write!(f, "LinuxCNC module file {shown} {what}: {source}"),
            TrustError::NotRegular { shown } => {
                write!(f, "LinuxCNC module file {shown} is not a regular file")
            }
            TrustError::Refused {
                shown,
                what,
                at,
                why,
                fix,
                me,
            } => write!(
                f,
                "refused LinuxCNC module file {shown}: {what} {} {why}; a module runs as rtapi's own \
                 code, so it and every directory above it must be owned by {} and not writable by \
                 group or others (a sticky directory such as /tmp excepted): {fix}",
                at.display(),
                if *me == 0 {
                    "root".to_string()
                } else {
                    format!("root or you ({})", who(*me))
                },
            ),
            TrustError::NotModule { shown, why } => {
                write!(
                    f,
                    "{shown} is not a LinuxCNC real-time module ({why}); {NOT_A_MODULE_FIX}"
                )
            }
        }
    }
}

impl std::error::Error for TrustError {}

/// Checks that the module file `path` and every directory above it can be written only by root or
/// the caller; returns the file's canonical path (what is then read and loaded).
pub fn check_owner(path: &Path) -> Result<PathBuf, TrustError> {
    let me = nix::unistd::geteuid().as_raw();
    let canonical = path
        .canonicalize()
        .map_err(|source| TrustError::Unreadable {
            shown: path.display().to_string(),
            what: "cannot be opened".into(),
            source,
        })?;
    let shown = if canonical == path {
        canonical.display().to_string()
    } else {
        format!("{} (that is {})", path.display(), canonical.display())
    };
    let refuse = |what: &'static str, at: &Path, why: String, fix: String| {
        Err(TrustError::Refused {
            shown: shown.clone(),
            what,
            at: at.to_path_buf(),
            why,
            fix,
            me,
        })
    };
    let unreadable = |what: String| {
        let shown = shown.clone();
        move |source| TrustError::Unreadable {
            shown,
            what,
            source,
        }
    };
    let meta = std::fs::metadata(&canonical).map_err(unreadable("cannot be read".into()))?;
    if !meta.is_file() {
        return Err(TrustError::NotRegular { shown });
    }
    let owner_ok = |uid: u32| uid == 0 || uid == me;
    if !owner_ok(meta.uid()) {
        return refuse(
            "the file",
            &canonical,
            format!("is owned by {}", who(meta.uid())),
            format!(
                "check it, then `chown root: {}` (as root), or build your own copy",
                canonical.display()
            ),
        );
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(
            "the file",
            &canonical,
            format!(
                "has mode {:04o} (writable by group or others)",
                meta.mode() & 0o7777
            ),
            format!("`chmod go-w {}`", canonical.display()),
        );
    }
    for dir in canonical.ancestors().skip(1) {
        let m = std::fs::metadata(dir).map_err(unreadable(format!(
            "is below {}, which cannot be stat'ed",
            dir.display()
        )))?;
        if !owner_ok(m.uid()) {
            return refuse(
                "the directory",
                dir,
                format!("is owned by {}", who(m.uid())),
                "move the module into a directory of root's or yours (e.g. next to the .hal file)"
                    .to_string(),
            );
        }
        let sticky = m.mode() & libc::S_ISVTX != 0;
        if m.mode() & 0o022 != 0 && !sticky {
            return refuse(
                "the directory",
                dir,
                format!(
                    "has mode {:04o} (writable by group or others)",
                    m.mode() & 0o7777
                ),
                format!("`chmod go-w {}`, or move the module", dir.display()),
            );
        }
    }
    Ok(canonical)
}

/// The type of a module argument (`rtapi_info_type_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ArgKind {
    /// `"i"`: C int.
    Int,
    /// `"l"`: C long.
    Long,
    /// `"s"`: a string.
    Str,
}

/// One declared argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgDecl {
    /// Its type, when the file says it in a way rtapi can read without loading it.
    pub kind: Option<ArgKind>,
    /// `Some(n)`: an array of `n` elements.
    pub size: Option<usize>,
}

/// What a module file says about itself, read without loading it.
#[derive(Clone, Debug, Default)]
pub struct ModuleInfo {
    /// Its `loadrt` arguments.
    pub args: BTreeMap<String, ArgDecl>,
    /// Symbols it defines (other modules loaded after it may use them).
    pub exports: Vec<String>,
    /// Symbols it needs (undefined, not weak).
    pub needs: Vec<String>,
    /// Libraries it names (`DT_NEEDED`).
    pub libraries: Vec<String>,
}

fn this_machine() -> object::Architecture {
    if cfg!(target_arch = "x86_64") {
        object::Architecture::X86_64
    } else if cfg!(target_arch = "aarch64") {
        object::Architecture::Aarch64
    } else {
        object::Architecture::Unknown
    }
}

/// The relocation type of a pointer-sized `base + addend` (ELF `R_*_RELATIVE`) on this machine.
fn relative_type() -> u32 {
    if cfg!(target_arch = "aarch64") {
        object::elf::R_AARCH64_RELATIVE
    } else {
        object::elf::R_X86_64_RELATIVE
    }
}

/// Reads module file `path` (already checked by [`check_owner`]) as an ELF shared object: refuses
/// anything that is not a LinuxCNC real-time module for this machine.
pub fn inspect(path: &Path) -> Result<ModuleInfo, TrustError> {
    let shown = path.display().to_string();
    let data = std::fs::read(path).map_err(|source| TrustError::Unreadable {
        shown: shown.clone(),
        what: "cannot be read".into(),
        source,
    })?;
    let not_module = |why: &str| TrustError::NotModule {
        shown: shown.clone(),
        why: why.to_string(),
    };
    let file = ElfFile64::<Endianness>::parse(&*data)
        .map_err(|_| not_module("not a 64-bit ELF shared object"))?;
    if file.kind() != object::ObjectKind::Dynamic {
        return Err(not_module("not an ELF shared object"));
    }
    if file.architecture() != this_machine() {
        return Err(not_module(&format!(
            "built for {:?}, this machine is {:?}",
            file.architecture(),
            this_machine()
        )));
    }
    let mut info = ModuleInfo::default();
    let mut addresses = BTreeMap::new();
    for sym in file.dynamic_symbols() {
        let Ok(name) = sym.name() else { continue };
        if sym.is_undefined() {
            if !sym.is_weak() && !name.is_empty() {
                info.needs.push(name.to_string());
            }
            continue;
        }
        info.exports.push(name.to_string());
        addresses.insert(name.to_string(), (sym.address(), sym.size()));
    }
    if !addresses.contains_key("rtapi_app_main") {
        return Err(not_module("it has no rtapi_app_main"));
    }
    // Pointer-sized relocations: where a `const char *` points.
    let mut relative = BTreeMap::new();
    if let Some(relocs) = file.dynamic_relocations() {
        for (offset, r) in relocs {
            if let object::RelocationFlags::Elf { r_type } = r.flags() {
                if r_type == relative_type() {
                    relative.insert(offset, r.addend() as u64);
                }
            }
        }
    }
    let bytes_at = |addr: u64, len: u64| -> Option<&[u8]> {
        file.sections().find_map(|s| {
            let (a, n) = (s.address(), s.size());
            if addr < a || addr.checked_add(len)? > a + n {
                return None;
            }
            let d = s.data().ok()?;
            let from = usize::try_from(addr - a).ok()?;
            d.get(from..from + usize::try_from(len).ok()?)
        })
    };
    let c_string_at = |addr: u64| -> Option<String> {
        let s = file
            .sections()
            .find(|s| addr >= s.address() && addr < s.address() + s.size())?;
        let d = s.data().ok()?;
        let rest = d.get(usize::try_from(addr - s.address()).ok()?..)?;
        let end = rest.iter().position(|b| *b == 0)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    for name in addresses.keys() {
        let Some(arg) = name.strip_prefix("rtapi_info_address_") else {
            continue;
        };
        let kind = addresses
            .get(&format!("rtapi_info_type_{arg}"))
            .and_then(|(addr, _)| relative.get(addr))
            .and_then(|target| c_string_at(*target))
            .and_then(|t| match t.as_str() {
                "i" => Some(ArgKind::Int),
                "l" => Some(ArgKind::Long),
                "s" => Some(ArgKind::Str),
                _ => None,
            });
        let size = addresses
            .get(&format!("rtapi_info_size_{arg}"))
            .and_then(|(addr, size)| (*size == 4).then(|| bytes_at(*addr, 4)).flatten())
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .and_then(|n| usize::try_from(n).ok());
        info.args.insert(arg.to_string(), ArgDecl { kind, size });
    }
    // DT_NEEDED.
    let endian = file.endian();
    let sections = file.elf_section_table();
    if let Ok(Some((dynamic, link))) = sections.dynamic(endian, &*data) {
        if let Ok(strings) = sections.strings(endian, &*data, link) {
            for d in dynamic {
                if d.tag32(endian) == Some(object::elf::DT_NEEDED) {
                    if let Ok(s) = d.string(endian, strings) {
                        info.libraries.push(String::from_utf8_lossy(s).into_owned());
                    }
                }
            }
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_elf_is_not_a_module() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.so");
        std::fs::write(&p, "not elf").unwrap();
        let e = inspect(&p).unwrap_err();
        assert!(matches!(e, TrustError::NotModule { .. }), "{e}");
        assert!(
            e.to_string().contains("is not a LinuxCNC real-time module"),
            "{e}"
        );
    }

    #[test]
    fn a_group_writable_file_is_refused_with_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.so");
        std::fs::write(&p, "x").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o664)).unwrap();
        let e = check_owner(&p).unwrap_err();
        assert!(
            matches!(
                e,
                TrustError::Refused {
                    what: "the file",
                    ..
                }
            ),
            "{e}"
        );
        let e = e.to_string();
        assert!(e.contains("mode 0664") && e.contains("chmod go-w"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_owner(&p).unwrap_err().to_string();
        assert!(
            e.contains("the directory") && e.contains("mode 0777"),
            "{e}"
        );
        // Sticky, like /tmp: its entries are the caller's, so it is accepted.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        check_owner(&p).unwrap();
    }
}
