//! Writing a [`Plan`] with a revert file, and reverting.
//!
//! The revert file is written first and rewritten (atomically: a temporary file renamed over it)
//! before each write, so it always lists every value tune may have changed: an entry is recorded
//! *before* its write and marked applied after it; a failed write removes its entry. It is created
//! with `O_EXCL`, so a second tune cannot start while one is recorded and the original values are
//! never overwritten by tuned ones.

use super::nic::{self, Made, NicEntry, Reverted};
use super::{Change, Format, Plan};
use crate::detect::SysRoot;
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// One value tune changed (or was about to change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevertEntry {
    /// The system path (`/proc/irq/42/smp_affinity_list`), under the revert file's `root`.
    pub path: String,
    /// How the value is compared.
    pub format: Format,
    /// The value before tune, as it is written back.
    pub before: String,
    /// The value tune wrote.
    pub written: String,
    /// The write succeeded (false only while it is under way).
    pub applied: bool,
}

/// The revert file's contents (JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RevertFile {
    /// What this file is, for someone who finds it: `rtapi tune revert file`.
    pub kind: String,
    /// The directory the paths are under (`/` on a real system).
    pub root: PathBuf,
    /// The RT CPUs tune kept clear.
    pub rt_cpus: Vec<usize>,
    /// The values, in the order they were written.
    pub entries: Vec<RevertEntry>,
    /// NIC settings made with the ethtool ioctl (`--board`), after the files, in that order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nic: Vec<NicEntry>,
    /// The network namespace tune ran in (`net:[4026531840]`), when it changed a NIC: its
    /// interfaces are only there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_namespace: Option<String>,
}

/// This process's network namespace, as `/proc/self/ns/net` links to it.
fn net_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/net")
        .ok()
        .map(|p| p.display().to_string())
}

const KIND: &str = "rtapi tune revert file";

/// A file that could not be read or written, with the error (`EPERM: Operation not permitted`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// The system path.
    pub path: String,
    /// The errno name and text.
    pub error: String,
}

/// What applying a plan did.
#[derive(Debug, Clone, Default)]
pub struct ApplyOutcome {
    /// Written and recorded.
    pub applied: Vec<Change>,
    /// Already at the wanted value when tune came to it (nothing written, nothing recorded).
    pub already: Vec<Change>,
    /// Not written: the error for each.
    pub failed: Vec<Failed>,
    /// The revert file could no longer be updated: tune stopped writing (the reason).
    pub stopped: Option<String>,
    /// The revert file is kept (something was applied); removed when nothing was.
    pub revert_file_kept: bool,
    /// NIC settings made (`--board`), as lines for the user (`hm2host coalescing …`).
    pub nic_applied: Vec<String>,
    /// NIC settings already as wanted.
    pub nic_already: Vec<String>,
    /// NIC fields the driver refused (`hm2host rx-usecs: EINVAL …`): reported, not failures.
    pub nic_refused: Vec<String>,
}

/// Why tune did not start writing.
#[derive(Debug)]
pub enum ApplyError {
    /// A revert file from an earlier tune exists.
    RevertFileExists(PathBuf),
    /// The revert file could not be created.
    RevertFile(PathBuf, String),
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::RevertFileExists(p) => write!(
                f,
                "{} exists: an earlier `rtapi tune` recorded the original values there; run `rtapi tune --revert{}` first (nothing was changed)",
                p.display(),
                if p.as_os_str() == super::DEFAULT_REVERT_FILE {
                    String::new()
                } else {
                    format!(" --revert-file {}", p.display())
                }
            ),
            ApplyError::RevertFile(p, e) => write!(
                f,
                "cannot create the revert file {}: {e}; nothing was changed (choose another with --revert-file)",
                p.display()
            ),
        }
    }
}

impl std::error::Error for ApplyError {}

/// `EPERM: Operation not permitted` for an OS error, else its text.
pub(crate) fn errno_text(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let errno = nix::errno::Errno::from_raw(code);
            format!("{errno:?}: {}", errno.desc())
        }
        None => e.to_string(),
    }
}

/// Writes `file` atomically: a temporary file beside it, synced, renamed over it.
fn save(path: &Path, file: &RevertFile) -> io::Result<()> {
    let text = serde_json::to_string_pretty(file).map_err(io::Error::other)?;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    // A stale one (a crash) would keep its old mode, and one put there by someone else could be a
    // link: remove it, then create afresh, exclusively, 0600.
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes `value` to `path` as `echo` does (one write, a newline after it).
fn write_value(path: &Path, value: &str) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(format!("{value}\n").as_bytes())
}

fn read_value(path: &Path) -> io::Result<String> {
    let bytes = std::fs::read(path)?;
    String::from_utf8(bytes)
        .map(|s| s.trim().to_string())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Applies `plan` under `root`, recording old values in `revert_file` first. `progress` hears about
/// each change as it is done (`Ok`), found already done (`Ok` with nothing written — see
/// [`ApplyOutcome::already`]) or failed. A failed write does not stop the others.
pub fn apply(
    root: &SysRoot,
    plan: &Plan,
    revert_file: &Path,
    progress: &mut dyn FnMut(&Change, Result<(), &str>),
) -> Result<ApplyOutcome, ApplyError> {
    let create_err =
        |e: &io::Error| ApplyError::RevertFile(revert_file.to_path_buf(), errno_text(e));
    if revert_file.exists() {
        return Err(ApplyError::RevertFileExists(revert_file.to_path_buf()));
    }
    if let Some(dir) = revert_file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| create_err(&e))?;
    }
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_EXCL: of two tunes started together, one gets the file and the other refuses.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(revert_file)
            .map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    ApplyError::RevertFileExists(revert_file.to_path_buf())
                } else {
                    create_err(&e)
                }
            })?;
    }
    let mut record = RevertFile {
        kind: KIND.to_string(),
        root: root.root().to_path_buf(),
        rt_cpus: plan.rt_cpus.clone(),
        entries: Vec::new(),
        nic: Vec::new(),
        net_namespace: (!plan.nic.is_empty()).then(net_namespace).flatten(),
    };
    if let Err(e) = save(revert_file, &record) {
        let _ = std::fs::remove_file(revert_file);
        return Err(create_err(&e));
    }
    let mut out = ApplyOutcome::default();
    for change in &plan.changes {
        if !tunable_path(&change.path) {
            // --revert would refuse a revert file naming it: never write it.
            let error = "not a place rtapi tune writes (its revert would be refused)".to_string();
            progress(change, Err(&error));
            out.failed.push(Failed {
                path: change.path.clone(),
                error,
            });
            continue;
        }
        let file = root.path(&change.path);
        // Read again: the value may have changed since planning, and the revert file must hold the
        // value this write replaces.
        let before = match read_value(&file) {
            Ok(v) => v,
            Err(e) => {
                let error = errno_text(&e);
                progress(change, Err(&error));
                out.failed.push(Failed {
                    path: change.path.clone(),
                    error,
                });
                continue;
            }
        };
        if change.format.same(&before, &change.value) {
            progress(change, Ok(()));
            out.already.push(change.clone());
            continue;
        }
        record.entries.push(RevertEntry {
            path: change.path.clone(),
            format: change.format,
            before: change.format.restore_form(&before),
            written: change.value.clone(),
            applied: false,
        });
        if let Err(e) = save(revert_file, &record) {
            out.stopped = Some(format!(
                "the revert file {} could not be updated ({}): stopped before writing {}",
                revert_file.display(),
                errno_text(&e),
                change.path
            ));
            record.entries.pop();
            break;
        }
        match write_value(&file, &change.value) {
            Ok(()) => {
                if let Some(last) = record.entries.last_mut() {
                    last.applied = true;
                }
                progress(change, Ok(()));
                out.applied.push(Change {
                    current: before,
                    ..change.clone()
                });
            }
            Err(e) => {
                // Not applied: nothing to revert for this file.
                record.entries.pop();
                let error = errno_text(&e);
                progress(change, Err(&error));
                out.failed.push(Failed {
                    path: change.path.clone(),
                    error: error.clone(),
                });
                // The very first write refused for access (EACCES) or a read-only /proc or /sys
                // (EROFS, a container): the others would fail the same way.
                let first = out.applied.is_empty() && out.failed.len() == 1;
                if first && matches!(e.raw_os_error(), Some(libc::EACCES | libc::EROFS)) {
                    out.stopped = Some(format!(
                        "the first write, {}, failed with {error}: rtapi tune needs root with write access to /proc and /sys (run it with sudo, outside a container); nothing was changed",
                        change.path
                    ));
                }
            }
        }
        if out.stopped.is_some() {
            break;
        }
        if let Err(e) = save(revert_file, &record) {
            out.stopped = Some(format!(
                "the revert file {} could not be updated ({}) after writing {}: stopped; it still lists that file as about to be written, which --revert handles",
                revert_file.display(),
                errno_text(&e),
                change.path
            ));
            break;
        }
    }
    if out.stopped.is_none() {
        apply_nic(root, plan, revert_file, &mut record, &mut out);
    }
    if record.entries.is_empty() && record.nic.is_empty() {
        let _ = std::fs::remove_file(revert_file);
    } else {
        out.revert_file_kept = true;
    }
    Ok(out)
}

/// Makes the NIC settings of `plan` (after its files), each recorded in `record` before it is made.
fn apply_nic(
    root: &SysRoot,
    plan: &Plan,
    revert_file: &Path,
    record: &mut RevertFile,
    out: &mut ApplyOutcome,
) {
    if plan.nic.is_empty() {
        return;
    }
    let eth = crate::detect::ethtool::for_root(root);
    for change in &plan.nic {
        let label = format!("{} ({})", change.interface, change.command());
        let setting = match nic::prepare(&*eth, change) {
            Ok(None) => {
                out.nic_already.push(label);
                continue;
            }
            Ok(Some(s)) => s,
            Err(e) => {
                out.failed.push(Failed {
                    path: label,
                    error: e,
                });
                continue;
            }
        };
        record.nic.push(NicEntry {
            interface: change.interface.clone(),
            setting: setting.clone(),
            applied: false,
        });
        if let Err(e) = save(revert_file, record) {
            out.stopped = Some(format!(
                "the revert file {} could not be updated ({}): stopped before setting {label}",
                revert_file.display(),
                errno_text(&e)
            ));
            record.nic.pop();
            return;
        }
        let made = nic::make(&*eth, &change.interface, &setting);
        let refused_lines = |r: &[(String, String)]| -> Vec<String> {
            r.iter()
                .map(|(f, e)| {
                    format!(
                        "{} {f}: the driver refuses to change it ({e}); left as it is",
                        change.interface
                    )
                })
                .collect()
        };
        match made {
            Made::Set(setting, refused) => {
                if let Some(last) = record.nic.last_mut() {
                    last.setting = setting;
                    last.applied = true;
                    out.nic_applied.push(nic::entry_text(last, false));
                }
                out.nic_refused.extend(refused_lines(&refused));
            }
            Made::Refused(refused) => {
                record.nic.pop();
                out.nic_refused.extend(refused_lines(&refused));
            }
            Made::Failed(e) => {
                record.nic.pop();
                out.failed.push(Failed {
                    path: label.clone(),
                    error: e,
                });
            }
        }
        if let Err(e) = save(revert_file, record) {
            out.stopped = Some(format!(
                "the revert file {} could not be updated ({}) after setting {label}: stopped; it still lists that setting as about to be made, which --revert handles",
                revert_file.display(),
                errno_text(&e)
            ));
            return;
        }
    }
}

/// A value `--revert` left alone because it is no longer the one tune wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The entry of the revert file.
    pub entry: RevertEntry,
    /// The value found now.
    pub now: String,
}

/// What reverting did.
#[derive(Debug, Clone, Default)]
pub struct RevertOutcome {
    /// Written back to the value before tune.
    pub restored: Vec<RevertEntry>,
    /// Already at the value before tune.
    pub already: Vec<RevertEntry>,
    /// Changed by someone else since tune: left alone (kept in the revert file).
    pub skipped: Vec<Skipped>,
    /// Could not be read or written back (kept in the revert file).
    pub failed: Vec<Failed>,
    /// Everything is back: the revert file was removed.
    pub file_removed: bool,
    /// NIC settings put back (`hm2host coalescing rx-usecs 0 -> rx-usecs 3`).
    pub nic_restored: Vec<String>,
    /// NIC settings already as before tune.
    pub nic_already: Vec<String>,
}

/// Why reverting did not start (or could not record what is left).
#[derive(Debug)]
pub enum RevertError {
    /// No revert file.
    Missing(PathBuf),
    /// The revert file cannot be read or is not one.
    Unreadable(PathBuf, String),
    /// Some values stayed, and the revert file could not be rewritten to list them.
    Save(PathBuf, String),
}

impl std::fmt::Display for RevertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RevertError::Missing(p) => write!(
                f,
                "no revert file at {}: nothing to revert (tune was not applied, was already reverted, or used another --revert-file)",
                p.display()
            ),
            RevertError::Unreadable(p, e) => write!(f, "cannot use the revert file {}: {e}", p.display()),
            RevertError::Save(p, e) => write!(
                f,
                "could not rewrite the revert file {} with the values not restored: {e}",
                p.display()
            ),
        }
    }
}

impl std::error::Error for RevertError {}

/// Reads a revert file.
pub fn load(revert_file: &Path) -> Result<RevertFile, RevertError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let unreadable = |why: String| RevertError::Unreadable(revert_file.to_path_buf(), why);
    // Revert writes what the file says where it says: only a file that no one else could have
    // written is believed (a regular file, not a symlink, ours, not group- or world-writable).
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(revert_file)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(RevertError::Missing(revert_file.to_path_buf()))
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(unreadable(
                "it is a symbolic link; refusing to follow it (a revert file is written as a plain file)".into(),
            ))
        }
        Err(e) => return Err(unreadable(errno_text(&e))),
    };
    let meta = f.metadata().map_err(|e| unreadable(errno_text(&e)))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() {
        return Err(unreadable("not a regular file".into()));
    }
    if meta.uid() != euid || meta.mode() & 0o022 != 0 {
        return Err(unreadable(format!(
            "owned by uid {} with mode {:o}: anyone who can write it could make --revert write any file; only a file owned by uid {euid} and writable by it alone is used (check its contents, then fix with chown/chmod)",
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    let mut text = String::new();
    f.take(MAX_REVERT_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| unreadable(errno_text(&e)))?;
    let file: RevertFile = serde_json::from_str(&text)
        .map_err(|e| unreadable(format!("not a revert file of rtapi tune ({e})")))?;
    if file.kind != KIND {
        return Err(unreadable(format!(
            "its kind is {:?}, not {KIND:?}",
            file.kind
        )));
    }
    if let Some(e) = file.entries.iter().find(|e| !tunable_path(&e.path)) {
        return Err(unreadable(format!(
            "it names {}, which rtapi tune never writes; nothing was restored",
            crate::rt::units::quote(&e.path)
        )));
    }
    Ok(file)
}

/// A revert file larger than this is not one (a few hundred entries take a few tens of KiB).
const MAX_REVERT_FILE_BYTES: u64 = 4 << 20;

/// The only places tune writes, and so the only ones revert will.
const TUNABLE: [&str; 5] = [
    "/proc/irq/",
    "/proc/sys/kernel/",
    "/sys/devices/system/cpu/",
    "/sys/devices/virtual/workqueue/",
    "/sys/kernel/mm/transparent_hugepage/",
];

/// Whether `path` is under one of [`TUNABLE`] with no `..` component.
pub(crate) fn tunable_path(path: &str) -> bool {
    TUNABLE.iter().any(|p| path.starts_with(p)) && !path.split('/').any(|c| c == "..")
}

/// Restores every value of `revert_file`, last written first. A file whose value is neither the one
/// tune wrote nor the one before is left alone (someone else changed it) unless `force`. The revert
/// file is removed when everything is back, else rewritten with what is left.
pub fn revert(revert_file: &Path, force: bool) -> Result<RevertOutcome, RevertError> {
    let mut file = load(revert_file)?;
    let root = SysRoot::new(&file.root);
    let mut out = RevertOutcome::default();
    let mut nic_left = Vec::new();
    // The NIC settings were made after the files: they go back first, last first.
    if !file.nic.is_empty() {
        let eth = crate::detect::ethtool::for_root(&root);
        let here = net_namespace();
        let elsewhere = file.net_namespace.is_some() && here != file.net_namespace;
        for entry in file.nic.iter().rev() {
            let text = nic::entry_text(entry, true);
            let fail = |error: String| Failed {
                path: format!("{} ({})", entry.interface, text),
                error,
            };
            if elsewhere {
                out.failed.push(fail(format!(
                    "tune changed it in network namespace {}, this is {}: run `rtapi tune --revert` there (e.g. `ip netns exec NAME rtapi tune --revert`)",
                    file.net_namespace.as_deref().unwrap_or("?"),
                    here.as_deref().unwrap_or("unknown")
                )));
                nic_left.push(entry.clone());
                continue;
            }
            match nic::restore(&*eth, entry, force) {
                Reverted::Restored => out.nic_restored.push(text),
                Reverted::Already => out.nic_already.push(text),
                Reverted::Skipped(now) => {
                    out.failed.push(fail(format!(
                        "it is now {now}, not what rtapi tune set, so someone else changed it (--force restores the value before tune)"
                    )));
                    nic_left.push(entry.clone());
                }
                Reverted::Failed(e) => {
                    out.failed.push(fail(e));
                    nic_left.push(entry.clone());
                }
            }
        }
    }
    let mut left = Vec::new();
    for entry in file.entries.iter().rev() {
        let path = root.path(&entry.path);
        let now = match read_value(&path) {
            Ok(v) => v,
            Err(e) => {
                out.failed.push(Failed {
                    path: entry.path.clone(),
                    error: errno_text(&e),
                });
                left.push(entry.clone());
                continue;
            }
        };
        let f = entry.format;
        if f.same(&now, &entry.before) {
            out.already.push(entry.clone());
            continue;
        }
        if !f.same(&now, &entry.written) && !force {
            out.skipped.push(Skipped {
                entry: entry.clone(),
                now: f.normalize(&now).unwrap_or(now),
            });
            left.push(entry.clone());
            continue;
        }
        match write_value(&path, &entry.before) {
            Ok(()) => out.restored.push(entry.clone()),
            Err(e) => {
                out.failed.push(Failed {
                    path: entry.path.clone(),
                    error: errno_text(&e),
                });
                left.push(entry.clone());
            }
        }
    }
    nic_left.reverse();
    if left.is_empty() && nic_left.is_empty() {
        std::fs::remove_file(revert_file).map_err(|e| {
            RevertError::Save(
                revert_file.to_path_buf(),
                format!(
                    "everything is restored, but removing it failed: {}",
                    errno_text(&e)
                ),
            )
        })?;
        out.file_removed = true;
    } else {
        left.reverse();
        file.entries = left;
        file.nic = nic_left;
        save(revert_file, &file)
            .map_err(|e| RevertError::Save(revert_file.to_path_buf(), errno_text(&e)))?;
    }
    Ok(out)
}
