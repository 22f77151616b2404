//! hostmot2's read round trip each servo period on the Mesa machine (`config/mesa-7i96s/`, 1 ms),
//! stock LinuxCNC 2.9 against `rtapi linuxcnc`, through the same veth to the simulated 7I96S
//! (tests/common/mesa_card.rs), with and without a delay added to the card's replies.
//!
//! ```text
//! cargo bench --bench mesa_io -- [--rtapi PATH] [--seconds N] [--delay none|netem|both|relay0]
//! ```
//!
//! # What is measured
//!
//! hal_lib (LinuxCNC's own, under both masters) writes each function's run time, in CPU clocks
//! (`rtapi_get_clocks`), to the pin `<funct>.time` every period. The pin `hm2_7i96s.0.read.time`
//! is `net` to LinuxCNC's `sampler` (tests/common/lcnc_machine.rs, `Sampling::Pins`) with
//! `hm2_7i96s.0.packet-error-total`, every period of a hold: the machine on, not homed, not
//! moving, for `--seconds`. hm2_eth's read sends the read request and waits for the card's reply:
//! its time is the round trip. Clocks are converted to ns by the TSC's frequency, measured here
//! against CLOCK_MONOTONIC (ratios do not depend on it); that `rtapi_get_clocks` is RDTSC in both
//! stock's `rtapi_app` and rtapi's master is checked in their code (`objdump`) before the run.
//!
//! Per run: the read time's p50 / p99 / max; **late** reads, longer than 80 % of the period —
//! LinuxCNC 2.9's default `packet-read-timeout`, at which its hostmot2 says `error finishing read!`
//! and stops all I/O with the card, so the runs set the timeout to 10 ms (as tests/linuxcnc_mesa.rs
//! does) and count instead; **lost**: `packet-error-total` at the end (no reply within 10 ms).
//!
//! # The delay
//!
//! `--delay netem`: every reply of the card leaves it 300 µs ± 200 µs (uniform) late — what
//! `tc qdisc add dev hm2board root netem delay 300us 200us` in the board's namespace does, on the
//! board's side of the veth, so only the card's outgoing packets wait: the replies to hm2's reads
//! (the card sends nothing else but ARP), while the host's requests and writes cross undelayed;
//! one reply is in flight at a time, so the jitter cannot reorder them. The whole delay lands in
//! the read's wait, the quantity measured. Where the kernel has no `sch_netem` (this VM's has
//! none), the bench puts a relay of its own in the board's namespace instead: it listens on the
//! card's address, passes requests to the card (on the namespace's loopback) at once and each
//! reply back after the same random delay, measured; the table says which was used.
//! `--delay relay0`: the relay with no delay, to see what it adds by itself.
//!
//! # Checked before a ratio is printed
//!
//! Both servo threads SCHED_FIFO (policy and priority from `/proc`, printed), the card got requests
//! all through the hold (its write log: at least 80 % of the hold's periods, none missing for
//! 100 ms up to the end of the hold, and its watchdog not bitten), and the delay in place when claimed (netem:
//! `tc qdisc show` in the namespace; the relay: it delayed the replies, mean and range printed).
//! Sides: stock as 2.9 runs on this kernel (SCHED_OTHER), stock forced SCHED_FIFO
//! (`LINUXCNC_FORCE_REALTIME=1`, tests/common/lcnc_machine.rs's `ForcedRealtime`), rtapi; the
//! ratios are rtapi ÷ stock forced FIFO.

// The tests' helper tree, named by path (a bench target lives outside `tests/`).
#[path = "../tests/common/mod.rs"]
mod common;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::lcnc_machine::{self, Launcher, Sampling, ThreadInfo};
use common::mesa_card::{self, card_scheduling, enter_netns, run_has, Card, HAL};
use common::netns;
use rtapi::mesa::lbp16::UDP_PORT;

/// The config's `[EMCMOT]SERVO_PERIOD`.
const PERIOD_NS: f64 = 1_000_000.0;
/// A read later than this was an `error finishing read!` at 2.9's default timeout (80 %).
const LATE_NS: f64 = 0.8 * PERIOD_NS;
/// The added delay: netem's `delay 300us 200us`, uniform in 300 ± 200 µs.
const DELAY_MIN_NS: u64 = 100_000;
const DELAY_MAX_NS: u64 = 500_000;
/// The relay spins this long before a reply is due (a sleep's wake-up is late by about that).
const SPIN_US: u64 = 80;
/// A longer time without a request to the card is not a stall of this VM (its longest are tens
/// of ms) but hostmot2 having stopped talking to the card.
const SILENT_NS: u64 = 100_000_000;

/// The TSC's frequency: RDTSC against CLOCK_MONOTONIC over 200 ms.
fn tsc_hz() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU and has no preconditions.
        let rdtsc = || unsafe { std::arch::x86_64::_rdtsc() };
        let (t0, c0) = (Instant::now(), rdtsc());
        std::thread::sleep(Duration::from_millis(200));
        let (c1, t1) = (rdtsc(), Instant::now());
        (c1 - c0) as f64 / (t1 - t0).as_secs_f64()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        panic!("mesa_io reads the TSC: x86-64 only")
    }
}

/// Whether `rtapi_get_clocks` in `binary` starts with RDTSC (`objdump`); the error says why not.
fn clocks_are_tsc(binary: &Path) -> Result<(), String> {
    let o = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "--disassemble=rtapi_get_clocks"])
        .arg(binary)
        .output()
        .map_err(|e| format!("objdump (binutils): {e}"))?;
    let text = String::from_utf8_lossy(&o.stdout);
    let first = text
        .lines()
        .skip_while(|l| !l.contains("<rtapi_get_clocks"))
        .nth(1)
        .unwrap_or("");
    if first.contains("rdtsc") {
        Ok(())
    } else {
        Err(format!(
            "{}: rtapi_get_clocks does not start with rdtsc ('{}')",
            binary.display(),
            first.trim()
        ))
    }
}

/// The delay added to the card's replies.
enum Delay {
    None,
    /// `tc … netem` on the board's veth; `tc qdisc show` as read back.
    Netem(String),
    /// The bench's relay in front of the card.
    Relay(Relay),
}

/// Tries netem on the board's side of `link`: `Ok(shown)` when installed and shown, `Err(why)`.
fn netem(link: &netns::Link) -> Result<String, String> {
    let tc = |args: &[&str]| {
        link.board
            .command("tc")
            .args(args)
            .output()
            .map_err(|e| format!("tc: {e}"))
    };
    let delay = format!("{}us", (DELAY_MIN_NS + DELAY_MAX_NS) / 2 / 1000);
    let jitter = format!("{}us", (DELAY_MAX_NS - DELAY_MIN_NS) / 2 / 1000);
    let o = tc(&[
        "qdisc",
        "add",
        "dev",
        link.board_if,
        "root",
        "netem",
        "delay",
        &delay,
        &jitter,
    ])?;
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).trim().to_string());
    }
    let shown = tc(&["qdisc", "show", "dev", link.board_if])?;
    let shown = String::from_utf8_lossy(&shown.stdout).trim().to_string();
    if shown.contains("netem") && shown.contains(&format!("delay {delay}")) {
        Ok(shown)
    } else {
        Err(format!("installed, but `tc qdisc show` says: {shown}"))
    }
}

/// What is between the host and the card.
#[derive(Clone, Copy, PartialEq)]
enum Condition {
    /// The veth only.
    Direct,
    /// The replies delayed 300 ± 200 µs: netem, or the relay where there is no netem.
    Delayed,
    /// The relay, with no delay: what the relay itself costs.
    RelayOnly,
}

impl Condition {
    fn title(self) -> &'static str {
        match self {
            Condition::Direct => "no added delay",
            Condition::Delayed => "replies delayed 300 ± 200 µs",
            Condition::RelayOnly => "the relay with no delay (what the relay itself adds)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Condition::Direct => "none",
            Condition::Delayed => "delay",
            Condition::RelayOnly => "relay0",
        }
    }

    /// The relay's delays: from, to (ns).
    fn range(self) -> (u64, u64) {
        match self {
            Condition::Delayed => (DELAY_MIN_NS, DELAY_MAX_NS),
            _ => (0, 0),
        }
    }
}

/// The card behind a relay (module docs) delaying its replies by `range`.
fn relayed(link: &netns::Link, range: (u64, u64)) -> Result<(Card, Delay), String> {
    let behind = SocketAddrV4::new(Ipv4Addr::LOCALHOST, UDP_PORT);
    let card = Card::start_at(link, behind, Some(board_mac(link)?));
    let listen = SocketAddrV4::new(link.board_ip, UDP_PORT);
    let relay = Relay::start(&link.board.name, listen, behind, range);
    Ok((card, Delay::Relay(relay)))
}

/// A UDP relay in the board's namespace: requests from the host to the card as they come, the
/// card's replies back to the host each after a random delay in a range (uniform).
struct Relay {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Each reply's delay as applied (from the card's reply received to it sent on), ns.
    applied: Arc<Mutex<Vec<u64>>>,
}

impl Relay {
    /// Listens on `listen` (the card's address on the veth) and passes on to `card`.
    fn start(ns: &str, listen: SocketAddrV4, card: SocketAddrV4, range: (u64, u64)) -> Relay {
        let ns = ns.to_string();
        let (host, to_card) = std::thread::spawn(move || {
            enter_netns(&ns);
            let host = UdpSocket::bind(listen).unwrap_or_else(|e| panic!("relay {listen}: {e}"));
            let to_card = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            to_card.connect(card).unwrap();
            (host, to_card)
        })
        .join()
        .expect("the relay's starter thread");
        for s in [&host, &to_card] {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let peer: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let applied: Arc<Mutex<Vec<u64>>> = Arc::default();
        let up = {
            let (host, to_card) = (host.try_clone().unwrap(), to_card.try_clone().unwrap());
            let (stop, peer) = (stop.clone(), peer.clone());
            std::thread::spawn(move || {
                card_scheduling();
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = host.recv_from(&mut buf) {
                        *peer.lock().unwrap() = Some(from);
                        let _ = to_card.send(&buf[..n]);
                    }
                }
            })
        };
        let down = {
            let (stop, applied) = (stop.clone(), applied.clone());
            std::thread::spawn(move || {
                card_scheduling();
                let mut buf = [0u8; 2048];
                // xorshift64: the delays need only be spread, not unpredictable.
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(n) = to_card.recv(&mut buf) else {
                        continue;
                    };
                    let t = Instant::now();
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let due = t + Duration::from_nanos(range.0 + x % (range.1 - range.0).max(1));
                    // A sleep wakes tens of µs late here: sleep to shortly before, spin the rest.
                    let spin = due - Duration::from_micros(SPIN_US);
                    std::thread::sleep(spin.saturating_duration_since(Instant::now()));
                    while Instant::now() < due {
                        std::hint::spin_loop();
                    }
                    let to = *peer.lock().unwrap();
                    if let Some(to) = to {
                        let _ = host.send_to(&buf[..n], to);
                    }
                    applied.lock().unwrap().push(t.elapsed().as_nanos() as u64);
                }
            })
        };
        Relay {
            stop,
            threads: vec![up, down],
            applied,
        }
    }

    /// Stops relaying; every delay applied, ns.
    fn finish(mut self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        std::mem::take(&mut *self.applied.lock().unwrap())
    }
}

/// What the card saw during the hold.
#[derive(Debug)]
struct CardHold {
    /// Requests that wrote the step generators (one per period) while the hold lasted.
    periods: usize,
    /// How long the card was watched.
    seconds: f64,
    /// The longest time between two of them, ns.
    max_gap_ns: u64,
    bitten: bool,
}

/// One run's numbers.
struct Stats {
    periods: usize,
    /// Read times, ns, sorted.
    read_ns: Vec<f64>,
    late: usize,
    lost: f64,
    thread: Option<ThreadInfo>,
    card: Option<CardHold>,
    /// How the delay was in place (empty: none was asked).
    delay: String,
    /// Why the delay is not verified, if it is not.
    delay_problem: Option<String>,
}

impl Stats {
    fn pct(&self, p: f64) -> f64 {
        let s = &self.read_ns;
        s[(((s.len() - 1) as f64) * p).round() as usize] / 1000.0
    }

    /// Everything the run claims, checked (module docs); the error says what is not so.
    fn verified(&self, fifo: bool) -> Result<String, String> {
        let t = self
            .thread
            .as_ref()
            .ok_or("the servo thread was not found")?;
        t.check(fifo, PERIOD_NS)?;
        let c = self.card.as_ref().ok_or("the card was not watched")?;
        let expected = c.seconds * 1e9 / PERIOD_NS;
        if (c.periods as f64) < 0.8 * expected || c.max_gap_ns > SILENT_NS || c.bitten {
            return Err(format!(
                "the card did not get requests all through the hold: {} in {:.1} s, longest gap {:.1} ms, watchdog bitten: {}",
                c.periods,
                c.seconds,
                c.max_gap_ns as f64 / 1e6,
                c.bitten
            ));
        }
        if let Some(p) = &self.delay_problem {
            return Err(p.clone());
        }
        Ok(format!(
            "{} {}, {:.0} wake-ups/s; the card: {} requests in {:.1} s, longest gap {:.2} ms",
            t.policy,
            t.rt_priority,
            t.wakeups_per_s,
            c.periods,
            c.seconds,
            c.max_gap_ns as f64 / 1e6
        ))
    }
}

/// Watches the card from the hold's start (`drive.py`'s `holding`) for about `seconds`.
fn watch_card(
    card: &Card,
    name: &str,
    seconds: f64,
    ended: Arc<AtomicBool>,
) -> JoinHandle<Option<CardHold>> {
    let (periods, sim, name) = (card.periods.clone(), card.sim.clone(), name.to_string());
    std::thread::spawn(move || {
        while !run_has(&name, "holding") {
            if ended.load(Ordering::Relaxed) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let (t0, n0) = (Instant::now(), periods.lock().unwrap().len());
        // Until just before the hold ends (the copier lags up to 20 ms).
        std::thread::sleep(Duration::from_secs_f64((seconds - 1.0).max(0.5)));
        let (bitten, now) = {
            let b = sim.board();
            (b.bitten(), b.now())
        };
        let seconds = t0.elapsed().as_secs_f64();
        let p = periods.lock().unwrap();
        let held = &p[n0.min(p.len())..];
        // Between two requests, and from the last one to now (hm2 may have stopped at the end).
        let gaps = held.windows(2).map(|w| w[1].at - w[0].at);
        let tail = held.last().map_or(u64::MAX, |l| now.saturating_sub(l.at));
        Some(CardHold {
            periods: held.len(),
            seconds,
            max_gap_ns: gaps.chain([tail]).max().unwrap_or(u64::MAX),
            bitten,
        })
    })
}

fn measure(
    launcher: &Launcher,
    seconds: f64,
    condition: Condition,
    name: &str,
    hz: f64,
) -> Result<Stats, String> {
    let link = netns::Link::new("mesaio")?;
    let (card, delay) = match condition {
        Condition::Direct => (Card::start(&link), Delay::None),
        Condition::Delayed => match netem(&link) {
            Ok(shown) => (Card::start(&link), Delay::Netem(shown)),
            Err(why) => {
                eprintln!("mesa_io: no netem here ({why}): the relay delays the replies");
                relayed(&link, condition.range())?
            }
        },
        Condition::RelayOnly => relayed(&link, condition.range())?,
    };
    if !card.fifo {
        eprintln!("mesa_io: note: the simulated card answers time-shared (SCHED_FIFO refused)");
    }
    let mut m = mesa_card::machine(name, &link.host.name, link.board_ip, Vec::new());
    m.home = false;
    m.hold_seconds = seconds;
    m.stage_seconds = 60.0;
    m.tail_periods = 0;
    // The error says why (`RunError::reason`); nothing of a failed run is left behind.
    m.keep_failed = false;
    m.sampling = Sampling::Pins {
        hal: Vec::new(),
        pins: vec![
            (format!("{HAL}.read.time"), 's'),
            (format!("{HAL}.packet-error-total"), 'u'),
        ],
    };
    let ended = Arc::new(AtomicBool::new(false));
    let watcher = watch_card(&card, name, seconds, ended.clone());
    let r = lcnc_machine::run(launcher, &m);
    ended.store(true, Ordering::Relaxed);
    let hold = watcher.join().expect("the card's watcher");
    // Still in place at the end of the run, and applied?
    let (delay, delay_problem) = match delay {
        Delay::None => (String::new(), None),
        Delay::Netem(shown) => {
            let now = link
                .board
                .command("tc")
                .args(["qdisc", "show", "dev", link.board_if])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            let problem = (!now.contains("netem")).then(|| format!("netem gone: {now}"));
            (format!("netem on {}: {shown}", link.board_if), problem)
        }
        Delay::Relay(relay) => {
            let mut applied = relay.finish();
            applied.sort_unstable();
            let n = applied.len();
            let mean = applied.iter().sum::<u64>() as f64 / n.max(1) as f64 / 1000.0;
            let at = |p: f64| {
                applied
                    .get(((n.max(1) - 1) as f64 * p).round() as usize)
                    .map_or(0.0, |v| *v as f64 / 1000.0)
            };
            let (lo, hi) = condition.range();
            let mid = (lo + hi) as f64 / 2000.0;
            let problem = ((n as f64) < seconds * 800.0 || (mean - mid).abs() > 30.0).then(|| {
                format!("the relay delayed {n} replies, mean {mean:.0} µs: not the delay claimed")
            });
            (
                format!(
                    "relay in {}: {n} replies delayed, µs: min {:.0}, p50 {:.0}, mean {mean:.0}, p99 {:.0}, max {:.0}",
                    link.board.name, at(0.0), at(0.5), at(0.99), at(1.0)
                ),
                problem,
            )
        }
    };
    let _ = card.finish();
    drop(link);
    let r = r.map_err(|e| e.reason())?;
    let hold_samples: Vec<&lcnc_machine::Sample> =
        r.samples.iter().filter(|s| s.phase == 2).skip(1).collect();
    if hold_samples.len() < (seconds * 500.0) as usize {
        return Err(format!(
            "only {} samples in {seconds} s of hold",
            hold_samples.len()
        ));
    }
    let mut read_ns: Vec<f64> = hold_samples
        .iter()
        .map(|s| s.values[0] * 1e9 / hz)
        .collect();
    read_ns.sort_by(f64::total_cmp);
    Ok(Stats {
        periods: read_ns.len(),
        late: read_ns.iter().filter(|v| **v > LATE_NS).count(),
        read_ns,
        lost: r.samples.last().map_or(0.0, |s| s.values[1]),
        thread: r.servo_thread,
        card: hold,
        delay,
        delay_problem,
    })
}

/// The MAC address of the board's veth (the card reports it; hm2_eth makes it a permanent ARP
/// entry): the relay's card listens on loopback, whose MAC it would report otherwise.
fn board_mac(link: &netns::Link) -> Result<[u8; 6], String> {
    let o = link.board.ip(&["link", "show", "dev", link.board_if])?;
    let text = String::from_utf8_lossy(&o.stdout);
    let mac = text
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .ok_or_else(|| format!("no link/ether in: {text}"))?;
    let bytes: Vec<u8> = mac
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    bytes
        .try_into()
        .map_err(|_| format!("not a MAC address: {mac}"))
}

fn label(l: &Launcher) -> &'static str {
    match l {
        Launcher::Stock => "stock rtapi_app",
        Launcher::StockRealtime => "stock rtapi_app, forced FIFO",
        Launcher::Rtapi(_) => "rtapi linuxcnc",
        Launcher::Diverted(_) => "linuxcnc, rtapi_app diverted to rtapi",
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut rtapi = PathBuf::from(env!("CARGO_BIN_EXE_rtapi"));
    let mut seconds = 20.0;
    let mut conditions = vec![Condition::Direct, Condition::Delayed];
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rtapi" => rtapi = args.next().expect("--rtapi PATH").into(),
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("--seconds N")
            }
            "--delay" => {
                conditions = match args.next().as_deref() {
                    Some("none") => vec![Condition::Direct],
                    Some("netem") => vec![Condition::Delayed],
                    Some("both") => vec![Condition::Direct, Condition::Delayed],
                    Some("relay0") => vec![Condition::RelayOnly],
                    other => panic!("--delay none|netem|both|relay0, not {other:?}"),
                }
            }
            _ => {}
        }
    }
    if let Some(why) = mesa_card::missing() {
        eprintln!("SKIPPED: mesa_io: {why}");
        return;
    }
    let stock_app = lcnc_machine::which("rtapi_app").unwrap_or_else(|| "/usr/bin/rtapi_app".into());
    let master = rtapi.with_file_name("rtapi-lcnc-master");
    let clocks = [&stock_app, &master]
        .iter()
        .map(|b| clocks_are_tsc(b))
        .collect::<Result<Vec<()>, String>>();
    let hz = tsc_hz();
    let (_caps, rtapi_launcher) = mesa_card::rtapi_launcher_for(&rtapi);
    let launchers = [Launcher::Stock, Launcher::StockRealtime, rtapi_launcher];
    println!(
        "hm2_7i96s.0.read.time, mesa-7i96s (1 ms servo period), simulated 7I96S over a veth, {seconds} s hold per run (machine on, not moving)"
    );
    println!(
        "TSC {:.4} GHz (RDTSC against CLOCK_MONOTONIC, 200 ms); rtapi_get_clocks is RDTSC in {} and {}: {}",
        hz / 1e9,
        stock_app.display(),
        master.display(),
        match &clocks {
            Ok(_) => "yes".to_string(),
            Err(e) => format!("NOT VERIFIED: {e}"),
        }
    );
    for condition in conditions {
        println!();
        println!("== {}", condition.title());
        println!(
            "{:<30} {:>7} {:>9} {:>9} {:>9} {:>11} {:>5}  checks",
            "side", "periods", "p50 µs", "p99 µs", "max µs", "late >80%", "lost"
        );
        let mut results = Vec::new();
        for (i, l) in launchers.iter().enumerate() {
            let name = format!("mesaio-{}-{i}", condition.tag());
            let r = measure(l, seconds, condition, &name, hz);
            match &r {
                Ok(st) => {
                    let fifo = !matches!(l, Launcher::Stock);
                    let checks = match st.verified(fifo) {
                        Ok(v) => v,
                        Err(e) => format!("NOT VERIFIED: {e}"),
                    };
                    println!(
                        "{:<30} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>11} {:>5}  {checks}",
                        label(l),
                        st.periods,
                        st.pct(0.5),
                        st.pct(0.99),
                        st.pct(1.0),
                        st.late,
                        st.lost
                    );
                    if !st.delay.is_empty() {
                        println!("{:<30} delay: {}", "", st.delay);
                    }
                }
                Err(e) => println!("{:<30} FAILED: {e}", label(l)),
            }
            results.push(r);
        }
        match (&results[1], &results[2], &clocks) {
            (Ok(a), Ok(b), Ok(_)) => match (a.verified(true), b.verified(true)) {
                (Ok(_), Ok(_)) => println!(
                    "{:<30} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>11}",
                    "rtapi ÷ stock forced FIFO",
                    "",
                    b.pct(0.5) / a.pct(0.5),
                    b.pct(0.99) / a.pct(0.99),
                    b.pct(1.0) / a.pct(1.0),
                    format!("{}/{}", b.late, a.late)
                ),
                (ea, eb) => println!(
                    "no ratio: not verified (stock: {:?}; rtapi: {:?})",
                    ea.err(),
                    eb.err()
                ),
            },
            _ => println!("no ratio: a run failed or the clocks were not verified"),
        }
    }
}
