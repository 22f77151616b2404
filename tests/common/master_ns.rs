//! The LinuxCNC master in namespaces of a test's own: an IPC namespace (and a private mount
//! namespace) held by a sleeping process, the master as root for nobody, LinuxCNC's programs as
//! nobody. Shared by `tests/linuxcnc_master.rs` and `tests/trust_master.rs`
//! (`use common::master_ns::*;`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use super::eventually::{until, until_true, GENEROUS};

pub(crate) const NOBODY: u32 = 65534;
pub(crate) const HAL_KEY: u32 = 0x4841_4C32;
pub(crate) const RTAPI_KEY: u32 = 0x4848_4c34;

/// The master under test: this build's, or the one `RTAPI_TEST_MASTER` names — to replay a test
/// against an earlier build and see it fail (as the trust tests were, against the master before
/// their fixes).
pub(crate) fn master_bin() -> String {
    std::env::var("RTAPI_TEST_MASTER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rtapi-lcnc-master").to_string())
}

/// Why this machine cannot run these tests, if it cannot.
pub(crate) fn missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (namespaces, runuser, SCHED_FIFO)".into());
    }
    for p in [
        "/usr/bin/halcmd",
        "/usr/bin/rtapi_app",
        "/usr/lib/linuxcnc/modules/hal_lib.so",
        "/usr/bin/unshare",
        "/usr/bin/nsenter",
        "/usr/sbin/runuser",
    ] {
        if !Path::new(p).exists() {
            return Some(format!("{p} is missing (linuxcnc-uspace, util-linux)"));
        }
    }
    None
}

/// A directory nobody may use: HOME and the socket's place.
pub(crate) fn session_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("lcnc-master-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(d.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    d
}

/// An IPC namespace of the test's own, held by a sleeping process, with a mount namespace (a copy
/// of the machine's) where a test may mount what only its programs see.
pub(crate) struct Ipc {
    pub(crate) holder: Child,
    pub(crate) dir: tempfile::TempDir,
    /// The rtapi instance of this test's master (its segment is in the machine's `/dev/shm`, which
    /// an IPC namespace does not separate).
    pub(crate) inst: String,
}

/// A name no other test's master uses.
pub(crate) fn unique_instance() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "lcnct{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One SysV segment as `/proc/sysvipc/shm` shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Seg {
    pub(crate) key: u32,
    pub(crate) id: i64,
    pub(crate) perms: u32,
    pub(crate) nattch: u64,
    pub(crate) uid: u32,
    /// Its creator's uid (SysV keeps the creator's access for the segment's life).
    pub(crate) cuid: u32,
}

impl Ipc {
    pub(crate) fn new() -> Ipc {
        let holder = Command::new("unshare")
            .args([
                "--ipc",
                "--mount",
                "--propagation",
                "private",
                "sleep",
                "3600",
            ])
            .spawn()
            .unwrap();
        let ns = format!("/proc/{}/ns/ipc", holder.id());
        until_true("the IPC namespace", GENEROUS, || {
            std::fs::read_link(&ns).ok() != std::fs::read_link("/proc/self/ns/ipc").ok()
        });
        Ipc {
            holder,
            dir: session_dir(),
            inst: unique_instance(),
        }
    }

    pub(crate) fn fifo(&self) -> PathBuf {
        self.dir.path().join("fifo")
    }

    pub(crate) fn enter(&self) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--ipc=/proc/{}/ns/ipc", self.holder.id()));
        c.arg(format!("--mount=/proc/{}/ns/mnt", self.holder.id()));
        c
    }

    /// The master, as root for nobody, listening; its standard error in `master.<n>.err`.
    pub(crate) fn master(&self, n: u32, args: &[&str]) -> Child {
        let child = self.spawn_master(n, args);
        let log = self.dir.path().join(format!("master.{n}.err"));
        until_true("the master listening", GENEROUS, || {
            std::fs::read_to_string(&log).is_ok_and(|t| t.contains("listening on"))
        });
        child
    }

    /// The master, as root for nobody, just started (it may yet refuse to run); its standard
    /// error in `master.<n>.err`.
    pub(crate) fn spawn_master(&self, n: u32, args: &[&str]) -> Child {
        self.master_command(n, args).spawn().unwrap()
    }

    /// The command [`Ipc::spawn_master`] runs (the master as root for nobody, in the namespaces,
    /// its standard error in `master.<n>.err`), for a test to add to.
    pub(crate) fn master_command(&self, n: u32, args: &[&str]) -> Command {
        self.master_command_at(n, &self.fifo(), args)
    }

    /// [`Ipc::master_command`] with its socket at `fifo`.
    pub(crate) fn master_command_at(&self, n: u32, fifo: &Path, args: &[&str]) -> Command {
        let err = std::fs::File::create(self.dir.path().join(format!("master.{n}.err"))).unwrap();
        let mut c = self.enter();
        c.arg("env")
            .arg(format!("RTAPI_UID={NOBODY}"))
            .arg(format!("HOME={}", self.dir.path().display()))
            .arg(format!("RTAPI_FIFO_PATH={}", fifo.display()))
            .arg(format!("RTAPI_INSTANCE={}", self.inst))
            .arg("RTAPI_FLAVOR=posix")
            .arg(master_bin())
            .args(args)
            .stdout(Stdio::null())
            .stderr(err);
        c
    }

    pub(crate) fn master_log(&self, n: u32) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("master.{n}.err"))).unwrap_or_default()
    }

    /// A LinuxCNC program as nobody, in the namespace.
    pub(crate) fn as_user(&self, prog: &str, args: &[&str]) -> Output {
        self.enter()
            .args(["runuser", "-u", "nobody", "--", "env"])
            .arg(format!("HOME={}", self.dir.path().display()))
            .arg(format!("RTAPI_FIFO_PATH={}", self.fifo().display()))
            .arg(prog)
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }

    pub(crate) fn halcmd(&self, args: &[&str]) -> Output {
        self.as_user("/usr/bin/halcmd", args)
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let o = self.halcmd(args);
        let (out, err) = super::text(&o);
        assert!(
            o.status.success(),
            "halcmd {args:?}: {}\n{out}\n{err}",
            o.status
        );
        out
    }

    /// `rtapi show thread --instance <ours> --json`, as the session's user.
    pub(crate) fn show_threads(&self) -> serde_json::Value {
        let o = Command::new("runuser")
            .args(["-u", "nobody", "--", env!("CARGO_BIN_EXE_rtapi")])
            .args(["show", "thread", "--instance", &self.inst, "--json"])
            .output()
            .unwrap();
        let (out, err) = super::text(&o);
        assert!(o.status.success(), "rtapi show: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    pub(crate) fn segments(&self) -> Vec<Seg> {
        let o = self
            .enter()
            .args(["cat", "/proc/sysvipc/shm"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some(Seg {
                    key: f.first()?.parse::<i64>().ok()? as u32,
                    id: f.get(1)?.parse().ok()?,
                    perms: u32::from_str_radix(f.get(2)?, 8).ok()?,
                    nattch: f.get(6)?.parse().ok()?,
                    uid: f.get(7)?.parse().ok()?,
                    cuid: f.get(9)?.parse().ok()?,
                })
            })
            .collect()
    }

    pub(crate) fn seg(&self, key: u32) -> Option<Seg> {
        self.segments().into_iter().find(|s| s.key == key)
    }
}

impl Drop for Ipc {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

pub(crate) fn wait_exit(c: &mut Child) -> std::process::ExitStatus {
    until("the master's exit", GENEROUS, || {
        c.try_wait().ok().flatten()
    })
}

/// A master that is stopped (SIGTERM, then SIGKILL after 10 s) when the test ends without having
/// waited for it — a failed assertion included — so that no master, nor its segment, outlives its
/// test.
pub(crate) struct Master(pub(crate) Child);

impl std::ops::Deref for Master {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Master {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Master {
    /// [`Child::wait_with_output`] of a master that has exited (its piped standard output and
    /// error, read to their end, and its status): the guard keeps the child, so it cannot be given
    /// away.
    pub(crate) fn output_after_exit(&mut self) -> Output {
        use std::io::Read;
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        if let Some(mut o) = self.0.stdout.take() {
            o.read_to_end(&mut stdout).unwrap();
        }
        if let Some(mut e) = self.0.stderr.take() {
            e.read_to_end(&mut stderr).unwrap();
        }
        let status = self.0.wait().unwrap();
        Output {
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        // SAFETY: kill(2) of our own child, not yet reaped (try_wait said it runs).
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let t0 = std::time::Instant::now();
        while matches!(self.0.try_wait(), Ok(None)) {
            if t0.elapsed() > std::time::Duration::from_secs(10) {
                let _ = self.0.kill();
                let _ = self.0.wait();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
