//! `rtapi mesa-sim` as a child process in a test network's board namespace, and the lines a child
//! prints, gathered as they come (tests/mesa_sim.rs, tests/latency_board.rs).

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::eventually::GENEROUS;
use super::netns;

/// Lines a child printed, collected as they come.
#[derive(Clone, Default)]
pub(crate) struct Lines(Arc<Mutex<String>>);

impl Lines {
    /// The lines `child` writes to its (piped) standard output and error, gathered as they come.
    pub(crate) fn of(child: &mut Child) -> Lines {
        let out = Lines::default();
        out.collect(child.stdout.take().expect("stdout piped"));
        out.collect(child.stderr.take().expect("stderr piped"));
        out
    }

    pub(crate) fn collect(&self, from: impl std::io::Read + Send + 'static) {
        let me = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines() {
                let Ok(line) = line else { break };
                let mut all = me.0.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
    }

    pub(crate) fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    pub(crate) fn has(&self, needle: &str) -> bool {
        self.0.lock().unwrap().contains(needle)
    }

    pub(crate) fn wait_for(&self, what: &str, needle: &str) {
        let t0 = Instant::now();
        while !self.has(needle) {
            assert!(
                t0.elapsed() < GENEROUS,
                "{what}: no {needle:?} within {GENEROUS:?} (a hang, not a slow machine) in:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        eprintln!("{what}: after {:?}", t0.elapsed());
    }
}

/// `rtapi mesa-sim` in the board's namespace, killed on drop.
pub(crate) struct SimProcess {
    pub(crate) child: Child,
    pub(crate) out: Lines,
}

impl SimProcess {
    pub(crate) fn start(link: &netns::Link, board: &str) -> SimProcess {
        Self::start_with(link, board, &[])
    }

    /// With more of `rtapi mesa-sim`'s options.
    pub(crate) fn start_with(link: &netns::Link, board: &str, more: &[&str]) -> SimProcess {
        Self::start_on(link, board, more, None)
    }

    /// Pinned to `cpu` (`taskset`), when given.
    pub(crate) fn start_on(
        link: &netns::Link,
        board: &str,
        more: &[&str],
        cpu: Option<usize>,
    ) -> SimProcess {
        let mut c = match cpu {
            Some(cpu) => {
                let mut c = link.board.command("taskset");
                c.args(["-c", &cpu.to_string(), env!("CARGO_BIN_EXE_rtapi")]);
                c
            }
            None => link.board.command(env!("CARGO_BIN_EXE_rtapi")),
        };
        let mut child = c
            .args([
                "mesa-sim",
                "--listen",
                &link.board_ip.to_string(),
                "--board",
                board,
            ])
            .args(more)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = Lines::of(&mut child);
        let sim = SimProcess { child, out };
        sim.out.wait_for("the simulator listens", "mesa-sim: a ");
        sim
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
