//! `rtapi export` in a child process, on a loopback port of its choosing, for the tests that scrape
//! it (each test file reads the answer its own way: a whole OpenMetrics exposition, a raw HTTP/1.0
//! answer with its timing, one body).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A running `rtapi export --listen 127.0.0.1:0 ARGS` (warnings logged to a file,
/// [`Exporter::stderr`]), killed on drop.
pub(crate) struct Exporter {
    pub(crate) child: Child,
    /// `127.0.0.1:<port>`, from the line it prints first.
    pub(crate) addr: String,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Exporter {
    /// Starts it with `args` and reads its address.
    pub(crate) fn start(args: &[&str]) -> Exporter {
        Exporter::start_with(args, |_| {})
    }

    /// [`Exporter::start`], the command first given to `prepare` (a resource limit, …).
    pub(crate) fn start_with(args: &[&str], prepare: impl FnOnce(&mut Command)) -> Exporter {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtapi"));
        cmd.args(["export", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        prepare(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(addr) = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
        else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "no address in {line:?}; stderr: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        Exporter {
            addr: addr.to_string(),
            child,
            stderr,
            _dir: dir,
        }
    }

    /// What it has logged so far.
    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Whether it still runs.
    pub(crate) fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
