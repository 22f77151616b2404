//! Output files that never lose a measurement: every path is checked for writability before a run
//! starts ([`check_writable`]), and written through a temporary file in the same directory that is
//! synced and then renamed over the target ([`write_atomic`]), so a failed write (full disk, removed
//! directory, …) leaves an existing file exactly as it was.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where temporary files go: the target's directory (`.` for a bare file name).
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A fresh name next to `path`: `.NAME.rtapi-<pid>-<n>.tmp`.
fn temp_name(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    directory_of(path).join(format!(
        ".{name}.rtapi-{}-{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Creates a new file that did not exist (never follows a symlink, never reuses a file).
fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
}

/// Checks that `path` (given with `flag`, e.g. `--json`) can be written, by creating and removing a
/// temporary file in its directory. The error names the flag, the path and why.
pub(crate) fn check_writable(flag: &str, path: &Path) -> Result<(), String> {
    let fail = |why: String| format!("{flag} {}: {why}", path.display());
    if path.as_os_str().is_empty() {
        return Err(fail("empty path".into()));
    }
    if path.file_name().is_none() {
        return Err(fail("names a directory, not a file".into()));
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(fail("is a directory".into())),
        Ok(m) if !m.is_file() => return Err(fail(
            "exists and is not a regular file (a device, pipe or socket cannot be replaced safely)"
                .into(),
        )),
        _ => {}
    }
    let dir = directory_of(path);
    match std::fs::metadata(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(fail(format!("directory {} does not exist", dir.display())))
        }
        Err(e) => return Err(fail(format!("directory {}: {e}", dir.display()))),
        Ok(m) if !m.is_dir() => return Err(fail(format!("{} is not a directory", dir.display()))),
        Ok(_) => {}
    }
    let probe = temp_name(path);
    create_new(&probe).map_err(|e| {
        fail(format!(
            "cannot create a file in directory {}: {e}",
            dir.display()
        ))
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `path` atomically: `write` fills a new temporary file in the same directory, which is
/// synced and renamed over `path`. On any error the temporary file is removed and `path` is untouched.
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = temp_name(path);
    let mut file = create_new(&tmp)?;
    let result = write(&mut file)
        .and_then(|()| file.flush())
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            drop(file);
            std::fs::rename(&tmp, path)
        });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return result;
    }
    // The rename itself is durable once the directory is synced; a failure here loses nothing.
    if let Ok(d) = File::open(directory_of(path)) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// [`write_atomic`] of a whole text, with an error message naming the flag and the path.
pub(crate) fn write_text(flag: &str, path: &Path, text: &str) -> Result<(), String> {
    write_atomic(path, |f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{flag} {}: cannot write: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::fs::write(&path, "old measurement").unwrap();
        let err = write_atomic(&path, |f| {
            f.write_all(b"half of the new ")?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old measurement");
        assert!(leftovers(dir.path()).is_empty());
        write_text("--json", &path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_symlink_at_the_target_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let path = dir.path().join("out.txt");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_text("--histogram", &path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn unwritable_targets_are_named_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let check = |p: &Path| check_writable("--json", p).unwrap_err();
        let e = check(&dir.path().join("missing/x.json"));
        assert!(
            e.starts_with("--json ") && e.contains("does not exist"),
            "{e}"
        );
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(check(&file.join("x.json")).contains("is not a directory"));
        assert!(check(dir.path()).contains("is a directory"));
        assert!(check(Path::new("/dev/null")).contains("not a regular file"));
        assert!(check(Path::new("/proc/x.json")).contains("cannot create a file"));
        check_writable("--json", &dir.path().join("ok.json")).unwrap();
        check_writable("--json", &file).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "probe removed"
        );
    }
}
