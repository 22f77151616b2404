//! The simulated Mesa 7I96S of the Mesa machine (`config/mesa-7i96s/`), as tests/linuxcnc_mesa.rs
//! and benches/mesa_io.rs run it: the card served from a thread in the board's network namespace
//! ([`Card`]), the machine's INI pointed at it ([`machine`]), and rtapi's master with the file
//! capabilities an ordinary user gives it ([`rtapi_launcher`]).

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::lcnc_machine::{self, Launcher, Machine, Program, Sampling};
use super::netns;
use rtapi::mesa::lbp16::{Width, UDP_PORT};
use rtapi::mesa::{BoardKind, Event, HostWrites, Options, Sim, Switch};

/// The card's step generator rate registers (instance 0 at the base, 4 bytes apart).
pub(crate) const RATE_BASE: u16 = 0x2000;
/// Where each home switch closes: 10 mm of travel at the config's 400 steps per mm.
pub(crate) const SWITCH_AT: f64 = 4000.0;
/// The three axes.
pub(crate) const AXES: usize = 3;
/// The card's HAL prefix.
pub(crate) const HAL: &str = "hm2_7i96s.0";

/// One servo period's rates as the card received them, and when (the card's clock, ns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Period {
    pub at: u64,
    pub rates: [i32; AXES],
}

/// The word the host wrote to space-0 address `addr` in this request, if it did.
pub(crate) fn written_word(e: &HostWrites, addr: u16) -> Option<u32> {
    e.writes.iter().rev().find_map(|w| {
        if w.space != 0 || w.info || w.width != Width::W32 {
            return None;
        }
        let off = addr.checked_sub(w.address)? as usize;
        let words = w.words();
        (off % 4 == 0 && w.data.len() > off)
            .then(|| words.get(off / 4).copied())
            .flatten()
    })
}

/// The card's threads (the server, and the copier of its write log, which holds the board's lock a
/// moment each time): SCHED_FIFO 1 when allowed — a time-shared holder of the lock preempted on a
/// busy CPU stalled the server for hundreds of milliseconds — and off the masters' RT CPU (the last
/// one, stock's and rtapi's alike): hm2_eth waits for the reply spinning at SCHED_FIFO there, so a
/// card answering from that CPU would answer only after the wait gave up. Whether FIFO was granted.
pub(crate) fn card_scheduling() -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus > 1 {
        let mut set = nix::sched::CpuSet::new();
        for c in 0..cpus - 1 {
            let _ = set.set(c);
        }
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: sched_setscheduler(2) on the calling thread (0) with a valid parameter; threads it
    // makes inherit the policy.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Moves the calling thread into the network namespace `ns` (`ip netns` made it): the sockets it
/// makes from then on are that namespace's.
pub(crate) fn enter_netns(ns: &str) {
    let f =
        File::open(format!("/var/run/netns/{ns}")).unwrap_or_else(|e| panic!("netns {ns}: {e}"));
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .unwrap_or_else(|e| panic!("setns {ns}: {e}"));
}

/// The simulated card in the board's namespace, its field side wired, its write log copied.
pub(crate) struct Card {
    pub sim: Arc<Sim>,
    pub periods: Arc<Mutex<Vec<Period>>>,
    pub events: Arc<Mutex<Vec<(u64, Event)>>>,
    stop: Arc<AtomicBool>,
    copier: Option<JoinHandle<()>>,
    /// Whether the server thread got SCHED_FIFO.
    pub fifo: bool,
}

impl Card {
    /// The card at the board's address of `link`, on hostmot2's UDP port.
    pub(crate) fn start(link: &netns::Link) -> Card {
        Card::start_at(link, SocketAddrV4::new(link.board_ip, UDP_PORT), None)
    }

    /// The card in the board's namespace of `link`, listening on `listen` (a relay in front of
    /// it: benches/mesa_io.rs), reporting `mac` (`None`: the receiving interface's).
    pub(crate) fn start_at(link: &netns::Link, listen: SocketAddrV4, mac: Option<[u8; 6]>) -> Card {
        let ns = link.board.name.clone();
        let events: Arc<Mutex<Vec<(u64, Event)>>> = Arc::default();
        let (sim, fifo) = {
            let events = events.clone();
            std::thread::spawn(move || {
                enter_netns(&ns);
                let fifo = card_scheduling();
                let clock = std::time::Instant::now();
                let sim = Sim::start(
                    &Options {
                        listen,
                        kind: BoardKind::I96S,
                        log_capacity: 100_000,
                        mac,
                    },
                    move |evs, _| {
                        if !evs.is_empty() {
                            let t = clock.elapsed().as_nanos() as u64;
                            let mut all = events.lock().unwrap();
                            all.extend(evs.iter().map(|e| (t, e.clone())));
                        }
                    },
                )
                .unwrap_or_else(|e| panic!("the simulated card: {e}"));
                (sim, fifo)
            })
            .join()
            .expect("the card's starter thread")
        };
        {
            let mut b = sim.board();
            b.set_input(0, true);
            for axis in 0..AXES {
                b.wire_switch(Switch {
                    pin: 1 + axis,
                    stepgen: axis,
                    at: SWITCH_AT,
                });
            }
        }
        let sim = Arc::new(sim);
        let periods: Arc<Mutex<Vec<Period>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let copier = {
            let (sim, periods, stop) = (sim.clone(), periods.clone(), stop.clone());
            std::thread::spawn(move || {
                card_scheduling();
                let mut seen: u64 = 0;
                loop {
                    let last = stop.load(Ordering::Relaxed);
                    {
                        let b = sim.board();
                        let log = b.write_log();
                        let total = log.dropped() + log.len() as u64;
                        assert!(
                            log.dropped() <= seen,
                            "the card's write log dropped entries before they were copied"
                        );
                        let new = (total - seen) as usize;
                        let mut out = periods.lock().unwrap();
                        for e in log.entries().skip(log.len() - new) {
                            let rates: Vec<Option<u32>> = (0..AXES)
                                .map(|i| written_word(e, RATE_BASE + 4 * i as u16))
                                .collect();
                            if rates.iter().all(Option::is_some) {
                                out.push(Period {
                                    at: e.at,
                                    rates: std::array::from_fn(|i| rates[i].unwrap() as i32),
                                });
                            }
                        }
                        seen = total;
                    }
                    if last {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Card {
            sim,
            periods,
            events,
            stop,
            copier: Some(copier),
            fifo,
        }
    }

    /// Stops copying and returns every period the card received, and its events.
    pub(crate) fn finish(mut self) -> (Vec<Period>, Vec<(u64, Event)>, [f64; AXES]) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(c) = self.copier.take() {
            c.join().expect("the write-log copier");
        }
        let end = {
            let b = self.sim.board();
            std::array::from_fn(|i| b.stepgen_position(i))
        };
        let p = std::mem::take(&mut *self.periods.lock().unwrap());
        let e = std::mem::take(&mut *self.events.lock().unwrap());
        (p, e, end)
    }
}

impl Drop for Card {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(c) = self.copier.take() {
            let _ = c.join();
        }
    }
}

/// The shipped config in this checkout.
pub(crate) fn config_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/mesa-7i96s")
}

/// The Mesa machine, its card at `board_ip`, run in `netns`, `programs` after homing.
pub(crate) fn machine(
    name: &str,
    netns: &str,
    board_ip: Ipv4Addr,
    programs: Vec<Program>,
) -> Machine {
    let mut m = Machine::sim_axis(name, programs);
    m.ini = "mesa-7i96s/mesa-7i96s.ini".into();
    m.config_dir = Some(config_dir());
    m.ini_set = vec![
        ("HOSTMOT2".into(), "BOARD_IP".into(), board_ip.to_string()),
        // 10 ms instead of 80 % of the period: on this shared VM a reply later than 0.8 ms came
        // every few seconds (the card's thread or the veth's softirq not scheduled in time), and
        // LinuxCNC 2.9's hostmot2 stops all I/O with the card at the first late reply (seen: no
        // request reached the card after its "error finishing read!", then a following error).
        // A longer wait makes that period late instead; what is compared stays the same.
        (
            "HOSTMOT2".into(),
            "PACKET_READ_TIMEOUT".into(),
            "10000000".into(),
        ),
    ];
    m.netns = Some(netns.into());
    m.x_server = false;
    m.stage_seconds = 90.0;
    m.sampling = Sampling::Pins {
        hal: Vec::new(),
        pins: (0..AXES)
            .map(|j| (format!("joint.{j}.pos-cmd"), 'f'))
            .collect(),
    };
    m
}

/// Why this cannot run here, if it cannot.
pub(crate) fn missing() -> Option<String> {
    netns::missing()
        .or_else(|| lcnc_machine::missing_prerequisite(false))
        .or_else(|| {
            lcnc_machine::which("setcap")
                .is_none()
                .then(|| "setcap is missing (libcap2-bin)".into())
        })
}

/// `rtapi linuxcnc` as LinuxCNC's user runs it with the privileges README tells an ordinary user
/// to give: a copy of `rtapi` and `rtapi-lcnc-master` side by side, the master with file
/// capabilities — SCHED_FIFO and locked memory as for any machine, and `cap_net_admin`, which
/// hm2_eth needs in the master for its permanent ARP entry of the card (stock's `rtapi_app` is
/// setuid root). The directory goes when the returned guard drops. `RTAPI_LINUXCNC_BIN`: another
/// build's `rtapi` (its master beside it) instead of this one's.
pub(crate) fn rtapi_launcher() -> (tempfile::TempDir, Launcher) {
    let rtapi = std::env::var_os("RTAPI_LINUXCNC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_rtapi").into());
    rtapi_launcher_for(&rtapi)
}

/// [`rtapi_launcher`] of the `rtapi` at `rtapi` (its master beside it).
pub(crate) fn rtapi_launcher_for(rtapi: &Path) -> (tempfile::TempDir, Launcher) {
    let dir = tempfile::Builder::new()
        .prefix("mesa-caps-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = lcnc_machine::master_with_capabilities(
        rtapi,
        dir.path(),
        "cap_sys_nice,cap_ipc_lock,cap_net_admin=ep",
    );
    (dir, Launcher::Rtapi(bin))
}

/// Whether the run of the machine named `name` (lcnc_machine's directory
/// `/tmp/rtapi-lcref-PID-NAME-N`) has the file `file` in its directory: what `drive.py` writes when
/// it reaches a stage (`estop-armed`, `holding`).
pub(crate) fn run_has(name: &str, file: &str) -> bool {
    let pattern = format!("rtapi-lcref-{}-{name}-", std::process::id());
    std::fs::read_dir("/tmp").is_ok_and(|d| {
        d.flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with(&pattern) && e.path().join(file).exists()
        })
    })
}
