//! `rtapi divert on|off|status [--root DIR]`: LinuxCNC's own `linuxcnc`, `halrun` and desktop icons
//! on rtapi, by putting rtapi's master in `/usr/bin/rtapi_app`'s place (a dpkg diversion of
//! LinuxCNC's setuid `rtapi_app` to `/usr/bin/rtapi_app.linuxcnc`, owned by package `rtapi`, and a
//! symlink `/usr/bin/rtapi_app -> rtapi-lcnc-master`), and `off` putting LinuxCNC's own back.
//!
//! The diversion is `--package rtapi`, not `--local`: dpkg then keeps it as rtapi's (a LinuxCNC
//! upgrade writes its new `rtapi_app` to the diverted name, `dpkg -S` names rtapi), and rtapi's
//! package removes it in its `prerm` with `rtapi divert off`. Nothing is deleted that is not
//! rtapi's symlink: any other file at `/usr/bin/rtapi_app`, a symlink elsewhere, or a diversion
//! of someone else's is refused with what to do.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{out, Failure};
use crate::master::launcher::MASTER_BIN;

/// What LinuxCNC runs as its realtime.
const RTAPI_APP: &str = "/usr/bin/rtapi_app";
/// Where LinuxCNC's own `rtapi_app` goes while diverted.
const DIVERTED: &str = "/usr/bin/rtapi_app.linuxcnc";
/// The package the diversion belongs to.
const PACKAGE: &str = "rtapi";

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Action {
    /// rtapi's master becomes /usr/bin/rtapi_app (LinuxCNC's own is kept as rtapi_app.linuxcnc).
    On,
    /// LinuxCNC's own rtapi_app is put back.
    Off,
    /// Say which rtapi_app is active.
    Status,
}

#[derive(clap::Args)]
pub(super) struct Args {
    /// on, off or status.
    #[arg(value_enum)]
    action: Action,
    /// Act on the system installed under DIR (dpkg-divert --root DIR) instead of /; rtapi must be
    /// installed inside DIR, its master is linked as DIR sees it.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

/// The system acted on: `/` or `--root DIR`.
struct Sys {
    root: Option<PathBuf>,
}

impl Sys {
    /// `p` (absolute, as the system sees it) from here.
    fn here(&self, p: &str) -> PathBuf {
        match &self.root {
            Some(r) => r.join(p.trim_start_matches('/')),
            None => PathBuf::from(p),
        }
    }

    /// `dpkg-divert` with `--root` when given.
    fn dpkg_divert(&self) -> Command {
        let mut c = Command::new("dpkg-divert");
        if let Some(r) = &self.root {
            c.arg("--root").arg(r);
        }
        c
    }
}

/// The diversion of `/usr/bin/rtapi_app` as dpkg has it.
#[derive(Debug, PartialEq, Eq)]
enum Diversion {
    None,
    /// By package rtapi, to [`DIVERTED`].
    Ours,
    /// By someone else (`LOCAL` or another package), or to another name: its words.
    Other(String),
}

/// What `/usr/bin/rtapi_app` is.
#[derive(Debug)]
enum AppFile {
    Absent,
    /// A symlink to a file named `rtapi-lcnc-master`: rtapi's (its target).
    OurLink(PathBuf),
    /// A regular file: LinuxCNC's, or someone's.
    File {
        setuid_root: bool,
    },
    /// Anything else (a symlink elsewhere, a directory): what it is.
    Foreign(String),
}

fn run_dpkg_divert(sys: &Sys, args: &[&str]) -> Result<String, Failure> {
    let o = sys.dpkg_divert().args(args).output().map_err(|e| {
        if e.kind() == ErrorKind::NotFound {
            Failure::runtime(
                "dpkg-divert is not installed: `rtapi divert` works on Debian and its derivatives \
                 (LinuxCNC's packages); elsewhere, run `rtapi linuxcnc INI` instead of `linuxcnc INI`",
            )
        } else {
            Failure::runtime(format!("running dpkg-divert: {e}"))
        }
    })?;
    if !o.status.success() {
        return Err(Failure::runtime(format!(
            "dpkg-divert {} failed ({}): {}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn diversion(sys: &Sys) -> Result<Diversion, Failure> {
    let by = run_dpkg_divert(sys, &["--listpackage", RTAPI_APP])?;
    let by = by.trim();
    if by.is_empty() {
        return Ok(Diversion::None);
    }
    let to = run_dpkg_divert(sys, &["--truename", RTAPI_APP])?;
    let to = to.trim();
    if by == PACKAGE && to == DIVERTED {
        Ok(Diversion::Ours)
    } else {
        let who = if by == "LOCAL" {
            "a local diversion".to_string()
        } else {
            format!("a diversion by package {by}")
        };
        Ok(Diversion::Other(format!("{who} to {to}")))
    }
}

fn app_file(sys: &Sys) -> AppFile {
    use std::os::unix::fs::MetadataExt;
    let p = sys.here(RTAPI_APP);
    let Ok(m) = std::fs::symlink_metadata(&p) else {
        return AppFile::Absent;
    };
    if m.file_type().is_symlink() {
        let target = std::fs::read_link(&p).unwrap_or_default();
        if target.file_name() == Some(std::ffi::OsStr::new(MASTER_BIN)) {
            return AppFile::OurLink(target);
        }
        return AppFile::Foreign(format!("a symlink to {}", target.display()));
    }
    if m.file_type().is_file() {
        return AppFile::File {
            setuid_root: m.uid() == 0 && m.mode() & 0o4000 != 0,
        };
    }
    AppFile::Foreign("neither a file nor a symlink".into())
}

/// The master next to this `rtapi`, as the system acted on sees it.
fn master_path(sys: &Sys) -> Result<PathBuf, Failure> {
    // /proc/self/exe, else an absolute argv[0] (a chroot without /proc).
    let me = std::env::current_exe()
        .ok()
        .or_else(|| {
            std::env::args_os()
                .next()
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        })
        .ok_or_else(|| {
            Failure::runtime(
                "where is this rtapi? /proc is not mounted: mount it, or run rtapi by its absolute \
                 path (/usr/bin/rtapi divert …)",
            )
        })?;
    let here = me.with_file_name(MASTER_BIN);
    if !here.is_file() {
        return Err(Failure::runtime(format!(
            "{} is missing: rtapi's package installs it next to rtapi (cargo: `cargo install` \
             installs both)",
            here.display()
        )));
    }
    match &sys.root {
        None => Ok(here),
        Some(r) => {
            let r = r.canonicalize().unwrap_or_else(|_| r.clone());
            here.strip_prefix(&r)
                .map(|p| Path::new("/").join(p))
                .map_err(|_| {
                    Failure::usage(format!(
                        "--root {}: this rtapi ({}) is not installed inside it; run the rtapi \
                         installed in {0} (its master is what the symlink must name)",
                        r.display(),
                        me.display()
                    ))
                })
        }
    }
}

/// The file capabilities of `path` (`security.capability`): permitted set and effective flag.
fn file_caps(path: &Path) -> Option<(u64, bool)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let name = c"security.capability";
    let mut buf = [0u8; 64];
    // SAFETY: getxattr(2) with C strings and a buffer of its given length.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 8 {
        return None;
    }
    let word = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().unwrap_or_default());
    let magic = word(0);
    let effective = magic & 1 != 0;
    let mut permitted = u64::from(word(4));
    if magic >> 24 >= 2 && n >= 20 {
        permitted |= u64::from(word(12)) << 32;
    }
    Some((permitted, effective))
}

/// What the master lacks to run LinuxCNC's threads SCHED_FIFO for an ordinary user, if anything.
fn caps_missing(master: &Path) -> Option<String> {
    const IPC_LOCK: u64 = 1 << 14;
    const SYS_NICE: u64 = 1 << 23;
    match file_caps(master) {
        Some((p, true)) if p & (IPC_LOCK | SYS_NICE) == IPC_LOCK | SYS_NICE => None,
        _ => Some(format!(
            "{} has not the file capabilities cap_sys_nice and cap_ipc_lock (effective): LinuxCNC \
             run by an ordinary user gets no SCHED_FIFO thread from it; give them with `sudo setcap \
             cap_sys_nice,cap_ipc_lock=ep {0}` (rtapi's package does at install)",
            master.display()
        )),
    }
}

fn need_root(action: &str) -> Result<(), Failure> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(Failure::runtime(format!(
            "`rtapi divert {action}` changes /usr/bin and dpkg's diversions: run it as root (`sudo \
             rtapi divert {action}`)"
        )))
    }
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    if let Some(r) = &args.root {
        if !r.is_dir() {
            return Err(Failure::usage(format!(
                "--root {}: not a directory",
                r.display()
            )));
        }
    }
    let sys = Sys {
        root: args.root.clone(),
    };
    match args.action {
        Action::On => on(&sys),
        Action::Off => off(&sys),
        Action::Status => status(&sys),
    }
}

fn on(sys: &Sys) -> Result<(), Failure> {
    need_root("on")?;
    let master = master_path(sys)?;
    let div = diversion(sys)?;
    if let Diversion::Other(d) = &div {
        return Err(Failure::runtime(format!(
            "{RTAPI_APP} has {d}, not rtapi's: not touching it (`dpkg-divert --list {RTAPI_APP}` \
             shows it; remove it first)"
        )));
    }
    match (app_file(sys), &div) {
        (AppFile::OurLink(t), Diversion::Ours) => {
            if t != master {
                // rtapi moved (another install): the link follows this rtapi's master.
                relink(sys, &master)?;
                out::println(&format!(
                    "rtapi divert: on: {RTAPI_APP} now -> {} (was -> {})",
                    master.display(),
                    t.display()
                ))?;
            } else {
                out::println(&format!(
                    "rtapi divert: already on: {RTAPI_APP} -> {} (LinuxCNC's own is {DIVERTED})",
                    master.display()
                ))?;
            }
        }
        (AppFile::File { setuid_root }, Diversion::None) => {
            if !setuid_root {
                return Err(Failure::runtime(format!(
                    "{RTAPI_APP} is not setuid root as LinuxCNC 2.9's rtapi_app is: not diverting \
                     a file that may not be LinuxCNC's (reinstall linuxcnc-uspace to get it back)"
                )));
            }
            run_dpkg_divert(
                sys,
                &[
                    "--package", PACKAGE, "--add", "--rename", "--divert", DIVERTED, RTAPI_APP,
                ],
            )?;
            if sys.here(RTAPI_APP).symlink_metadata().is_ok() || !sys.here(DIVERTED).is_file() {
                return Err(Failure::runtime(format!(
                    "dpkg-divert added the diversion but did not move {RTAPI_APP} to {DIVERTED}: \
                     run `sudo rtapi divert off` and look at `dpkg-divert --list {RTAPI_APP}`"
                )));
            }
            link(sys, &master)?;
            out::println(&format!(
                "rtapi divert: on: {RTAPI_APP} -> {} (LinuxCNC's own kept as {DIVERTED}; `sudo rtapi \
                 divert off` puts it back)",
                master.display()
            ))?;
        }
        (AppFile::Absent, Diversion::Ours) => {
            // Half done (a link removed by hand): the link again.
            link(sys, &master)?;
            out::println(&format!(
                "rtapi divert: on: {RTAPI_APP} -> {} (the diversion was there, the link made again)",
                master.display()
            ))?;
        }
        (AppFile::Absent, Diversion::None) => {
            return Err(Failure::runtime(format!(
                "{RTAPI_APP} does not exist: LinuxCNC 2.9 (package linuxcnc-uspace) is not installed; \
                 install it first"
            )))
        }
        (AppFile::Foreign(what), _) => {
            return Err(Failure::runtime(format!(
                "{RTAPI_APP} is {what}: neither LinuxCNC's rtapi_app nor rtapi's link; not touching it"
            )))
        }
        (AppFile::File { .. }, Diversion::Ours) => {
            return Err(Failure::runtime(format!(
                "{RTAPI_APP} is diverted by rtapi, yet a file is in its place (a LinuxCNC package put \
                 it there?): not touching it; look at it, remove it if it is not yours, and run \
                 `sudo rtapi divert on` again"
            )))
        }
        (AppFile::OurLink(t), Diversion::None) => {
            return Err(Failure::runtime(format!(
                "{RTAPI_APP} is a link to {} with no diversion behind it (LinuxCNC's own rtapi_app is \
                 not kept): remove the link, reinstall linuxcnc-uspace, then `sudo rtapi divert on`",
                t.display()
            )))
        }
        (_, Diversion::Other(_)) => unreachable!("refused above"),
    }
    if let Some(w) = caps_missing(&sys.here(&master.to_string_lossy())) {
        out::eprintln(&format!("rtapi divert: warning: {w}"));
    }
    Ok(())
}

fn link(sys: &Sys, master: &Path) -> Result<(), Failure> {
    std::os::unix::fs::symlink(master, sys.here(RTAPI_APP)).map_err(|e| {
        Failure::runtime(format!(
            "making the link {RTAPI_APP} -> {}: {e}",
            master.display()
        ))
    })
}

fn relink(sys: &Sys, master: &Path) -> Result<(), Failure> {
    let tmp = sys.here("/usr/bin/.rtapi_app.rtapi-new");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(master, &tmp)
        .and_then(|()| std::fs::rename(&tmp, sys.here(RTAPI_APP)))
        .map_err(|e| {
            Failure::runtime(format!(
                "making the link {RTAPI_APP} -> {}: {e}",
                master.display()
            ))
        })
}

fn off(sys: &Sys) -> Result<(), Failure> {
    need_root("off")?;
    let div = diversion(sys)?;
    let file = app_file(sys);
    if let Diversion::Other(d) = &div {
        if let AppFile::OurLink(_) = file {
            return Err(Failure::runtime(format!(
                "{RTAPI_APP} is rtapi's link, but it has {d}, not rtapi's: not touching either; \
                 look at `dpkg-divert --list {RTAPI_APP}`"
            )));
        }
        out::println(&format!(
            "rtapi divert: already off ({RTAPI_APP} has {d}, not rtapi's; left alone)"
        ))?;
        return Ok(());
    }
    match &file {
        AppFile::OurLink(_) => {
            std::fs::remove_file(sys.here(RTAPI_APP))
                .map_err(|e| Failure::runtime(format!("removing the link {RTAPI_APP}: {e}")))?;
        }
        AppFile::Absent => {}
        AppFile::File { .. } if div == Diversion::None => {
            out::println(&format!(
                "rtapi divert: already off: {RTAPI_APP} is LinuxCNC's own"
            ))?;
            return Ok(());
        }
        AppFile::File { .. } => {
            return Err(Failure::runtime(format!(
                "{RTAPI_APP} is a file, not rtapi's link, while rtapi's diversion holds LinuxCNC's own \
                 at {DIVERTED}: not touching it; remove it if it is not yours, then `sudo rtapi \
                 divert off` again"
            )))
        }
        AppFile::Foreign(what) => {
            return Err(Failure::runtime(format!(
                "{RTAPI_APP} is {what}, not rtapi's link: not touching it"
            )))
        }
    }
    if div == Diversion::Ours {
        run_dpkg_divert(
            sys,
            &[
                "--package",
                PACKAGE,
                "--remove",
                "--rename",
                "--divert",
                DIVERTED,
                RTAPI_APP,
            ],
        )?;
        out::println(&format!(
            "rtapi divert: off: {RTAPI_APP} is LinuxCNC's own again"
        ))?;
    } else {
        out::println(&format!(
            "rtapi divert: off: rtapi's link {RTAPI_APP} removed (there was no diversion)"
        ))?;
    }
    Ok(())
}

fn status(sys: &Sys) -> Result<(), Failure> {
    let div = diversion(sys)?;
    match (app_file(sys), div) {
        (AppFile::OurLink(t), Diversion::Ours) => {
            out::println(&format!(
                "on: {RTAPI_APP} -> {} (rtapi's master); LinuxCNC's own is {DIVERTED}",
                t.display()
            ))?;
            if let Some(w) = caps_missing(&sys.here(&t.to_string_lossy())) {
                out::println(&format!("warning: {w}"))?;
            }
            Ok(())
        }
        (AppFile::File { setuid_root: true }, Diversion::None) => {
            out::println(&format!(
                "off: {RTAPI_APP} is LinuxCNC's own (setuid root); `sudo rtapi divert on` puts \
                 rtapi's master in its place"
            ))?;
            Ok(())
        }
        (AppFile::Absent, Diversion::None) => {
            out::println(&format!(
                "off: {RTAPI_APP} does not exist (LinuxCNC 2.9's linuxcnc-uspace is not installed)"
            ))?;
            Ok(())
        }
        (file, div) => Err(Failure::runtime(format!(
            "neither on nor off: {RTAPI_APP} is {}, {}; `sudo rtapi divert off` (or `on`) says what \
             to do",
            match file {
                AppFile::Absent => "absent".to_string(),
                AppFile::OurLink(t) => format!("rtapi's link to {}", t.display()),
                AppFile::File { setuid_root } => format!(
                    "a file{}",
                    if setuid_root { " (setuid root)" } else { " (not setuid root)" }
                ),
                AppFile::Foreign(w) => w,
            },
            match div {
                Diversion::None => "with no diversion".to_string(),
                Diversion::Ours => format!("diverted by rtapi to {DIVERTED}"),
                Diversion::Other(d) => format!("with {d}"),
            }
        ))),
    }
}
