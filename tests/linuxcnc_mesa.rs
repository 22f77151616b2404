//! The Mesa machine (`config/mesa-7i96s/`: three stepgen axes, spindle encoder, E-stop and home
//! switches on the card's GPIO, the card's watchdog) run whole — on stock LinuxCNC 2.9 and on
//! `rtapi linuxcnc` — against the simulated 7I96S (`rtapi::mesa`) in network namespaces of the
//! test's own (issue 43).
//!
//! # The card and its field side
//!
//! The board is served from this process, by a thread that entered the board's network namespace
//! (a socket belongs to the namespace it was made in; the server thread made from there is in it
//! too, so the MAC it reports is the veth's), at SCHED_FIFO 1 when allowed (`rtapi mesa-sim` does
//! the same: a time-shared simulator answered late on this loaded VM), off the masters' RT CPU
//! (hm2_eth spins there at SCHED_FIFO waiting for the reply: a card on that CPU answers late). Its field side is wired
//! like the machine's: input 0 (the E-stop chain) closed, inputs 1, 2, 3 the home switches of X,
//! Y, Z, each closed exactly when its step generator's accumulator is at or past [`SWITCH_AT`]
//! steps, on the board's clock at the instant hostmot2 reads the port (`Board::wire_switch`). A
//! thread copies the board's write log as it fills: for every request that wrote the step
//! generators' rate registers (one per servo period: hm2's `write`), the three rates.
//!
//! # What is compared, and why not to the bit
//!
//! `tests/linuxcnc_machine.rs` compares joint positions to the bit: the sim machine's feedback is
//! its own command. Here the feedback is the card's: hostmot2's step generator (position mode)
//! computes each period's rate from the command *and* the accumulator it read at the start of the
//! period, and when that read happens on the card's clock is the host's timing (wake-up jitter, the
//! veth's latency) — as on a real card. So the rates differ from run to run in their low bits, and
//! the home switches trip at a jittered instant. What the card receives is compared move by move,
//! aligned on each move's first moving period (a move: periods with any rate non-zero, separated by
//! at least [`MIN_REST`] periods of all-zero rates):
//!
//! * the same number of moves, each with the same axes moving;
//! * each move's displacement on the card (the steps its rates made, integrated on the card's
//!   clock exactly as the card did) equal within [`STEP_TOLERANCE`] step per axis — the card's
//!   resolution is one step;
//! * each move's length in periods: reported (the feedback's last correction ends a move a period
//!   sooner or later), and its rates period by period: the largest difference reported.
//!
//! The planner's side: `joint.N.pos-cmd` of every servo period (the sampler), move by move, as in
//! `tests/linuxcnc_machine.rs`, for the programs (homing is excluded: where a switch trips is the
//! card's timing), within one step per period — not to the bit, because each program starts where
//! the machine stood, and motion takes that from the card's feedback after homing and after the
//! E-stop (stock and rtapi started 2.6e-6 mm apart).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::eventually::{until_true, GENEROUS};
use common::lcnc_machine::{self, Launcher, Program, Run};
use common::mesa_card::{
    machine, missing, rtapi_launcher, run_has, Card, Period, AXES, HAL, SWITCH_AT,
};
use common::netns;
use rtapi::mesa::{Event, Sim};

/// The card's clock (the IDROM's low clock): rates are in 2^-32 step per tick of it.
const CLOCK_HZ: u64 = 100_000_000;
/// A standstill of at least this many periods separates two moves.
const MIN_REST: usize = 20;
/// Two runs' displacement of one move on the card agree within this many steps (one step: the
/// card's resolution; the position loop stops within a fraction of one).
const STEP_TOLERANCE: f64 = 1.0;
/// How long the master is stopped (SIGSTOP … SIGCONT) at least.
const STOP: Duration = Duration::from_millis(50);

/// Lines in three axes at exact stop (`G61`), rapids between them.
const LINES: &str = "G21 G90 G61
G0 X-20 Y-10
G1 F600 X-40 Y-30 Z-5
G1 X-10 Y-20 Z-2
G0 X0 Y0 Z0
M2
";

/// Arcs in XY, one a helix, a full circle, blended (`G64`).
const ARCS: &str = "G21 G90 G17 G64
G0 X-30 Y-20 Z0
G1 F900 X-20
G2 X-10 Y-10 I0 J10
G3 X-20 Y0 I-10 J0 Z-3
G2 X-20 Y0 I5 J0
G0 X0 Y0 Z0
M2
";

/// Short blended segments (`G64 P0.1`), a half-second dwell (`G4`), then more.
const BLENDS: &str = "G21 G90 G64 P0.1
G1 F1200 X-10 Y-2
X-15 Y-8
X-20 Y-6
G4 P0.5
G1 X-30 Y0 Z-4
X0 Y0 Z0
M2
";

fn programs() -> Vec<Program> {
    vec![
        Program::new("lines", LINES),
        Program::new("arcs", ARCS),
        Program::new("blends", BLENDS),
    ]
}

/// A whole run: a network, the card, the machine under `launcher`.
struct MesaRun {
    run: Run,
    periods: Vec<Period>,
    events: Vec<(u64, Event)>,
    /// The card's step generator positions after LinuxCNC ended, steps.
    end: [f64; AXES],
    /// What stopping the master did, when the run stopped it.
    stop: Option<Stopped>,
}

fn run_mesa(launcher: &Launcher, name: &str, stop_master: bool) -> MesaRun {
    let link = netns::Link::new("lcmesa").unwrap_or_else(|e| panic!("test network: {e}"));
    let card = Card::start(&link);
    if !card.fifo {
        eprintln!("note: the simulated card answers time-shared (SCHED_FIFO refused)");
    }
    let mut m = machine(name, &link.host.name, link.board_ip, programs());
    let ended = Arc::new(AtomicBool::new(false));
    let stopper = stop_master.then(|| {
        m.estop_recovery = Some(format!("{HAL}.watchdog.has_bit"));
        m.estop_recovery_signal = Some("watchdog-bit".into());
        let (sim, host, name) = (card.sim.clone(), link.host.name.clone(), name.to_string());
        let ended = ended.clone();
        std::thread::spawn(move || stop_the_master(&sim, &host, &name, &ended))
    });
    let r = lcnc_machine::run(launcher, &m);
    ended.store(true, Ordering::Relaxed);
    let stop = stopper.and_then(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
    let (periods, events, end) = card.finish();
    // MESA_DEBUG=1: what the card received, one line a period (board ns, the three rates), in
    // target/tmp/NAME-periods.txt, to look at a run that failed.
    if std::env::var_os("MESA_DEBUG").is_some() {
        let dump = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-periods.txt"));
        std::fs::write(
            &dump,
            periods
                .iter()
                .map(|p| format!("{} {} {} {}\n", p.at, p.rates[0], p.rates[1], p.rates[2]))
                .collect::<String>(),
        )
        .unwrap();
    }
    let run = r.unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{}: ran in {:.1} s, {} samples, the card got {} periods",
        run.launcher,
        run.seconds,
        run.samples.len(),
        periods.len()
    );
    for l in run.log.lines().filter(|l| l.starts_with("drive.py")) {
        eprintln!("  {l}");
    }
    drop(link);
    MesaRun {
        run,
        periods,
        events,
        end,
        stop,
    }
}

/// A move on the card: its periods (indices into the periods), and the steps it made per axis.
#[derive(Clone, Debug)]
struct CardMove {
    first: usize,
    last: usize,
    axes: [bool; AXES],
    steps: [f64; AXES],
}

/// The steps rate `rate` makes in `ns` on the card's clock (as the card counts its ticks).
fn steps(rate: i32, from_ns: u64, to_ns: u64) -> f64 {
    let ticks = |ns: u64| (u128::from(ns) * u128::from(CLOCK_HZ) / 1_000_000_000) as u64;
    rate as f64 * (ticks(to_ns) - ticks(from_ns)) as f64 / 4_294_967_296.0
}

fn card_moves(p: &[Period]) -> Vec<CardMove> {
    let mut out: Vec<CardMove> = Vec::new();
    let mut rest = usize::MAX;
    for (k, period) in p.iter().enumerate() {
        let moving = period.rates.iter().any(|r| *r != 0);
        if !moving {
            rest = rest.saturating_add(1);
            continue;
        }
        if rest < MIN_REST {
            out.last_mut().unwrap().last = k;
        } else {
            out.push(CardMove {
                first: k,
                last: k,
                axes: [false; AXES],
                steps: [0.0; AXES],
            });
        }
        rest = 0;
    }
    for m in &mut out {
        for k in m.first..=m.last {
            let to = p.get(k + 1).map_or(p[k].at, |q| q.at);
            for a in 0..AXES {
                m.axes[a] |= p[k].rates[a] != 0;
                m.steps[a] += steps(p[k].rates[a], p[k].at, to);
            }
        }
    }
    out
}

/// Where the card's step generators are after period `k` (integrated from the start).
fn card_position(p: &[Period], upto: usize) -> [f64; AXES] {
    let mut pos = [0.0; AXES];
    for k in 0..upto.min(p.len()) {
        let to = p.get(k + 1).map_or(p[k].at, |q| q.at);
        for (a, x) in pos.iter_mut().enumerate() {
            *x += steps(p[k].rates[a], p[k].at, to);
        }
    }
    pos
}

/// What [`stop_the_master`] saw.
#[derive(Debug)]
struct Stopped {
    /// The master: pid and name.
    pid: i32,
    comm: String,
    /// How long it was stopped.
    stopped_for: Duration,
    /// The card's watchdog timeout as the host set it, ns.
    timeout_ns: u64,
}

/// Sends SIGCONT on drop: a failing test leaves no stopped master.
struct Continue(i32);

impl Drop for Continue {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid of the test's own LinuxCNC run (found in its namespace).
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// The LinuxCNC run's realtime master: the process in network namespace `netns` that mapped
/// LinuxCNC's motion module (stock's `rtapi_app`, or rtapi's master).
fn master_in(netns: &str) -> Option<(i32, String)> {
    let pids = Command::new("ip")
        .args(["netns", "pids", netns])
        .output()
        .ok()?;
    String::from_utf8_lossy(&pids.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/maps"))
                .map(|m| m.contains("/motmod.so"))
                .unwrap_or(false)
        })
        .map(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            (p, comm.trim().to_string())
        })
}

/// Once the display says the machine is on and homed (`estop-armed` in the run's directory),
/// stops the master (SIGSTOP) for at least [`STOP`] and until the card's watchdog has bitten, then
/// lets it go on (SIGCONT).
fn stop_the_master(sim: &Sim, netns: &str, name: &str, ended: &AtomicBool) -> Option<Stopped> {
    // Until the display says so, or the run is over without it (its error says why).
    while !run_has(name, "estop-armed") {
        if ended.load(Ordering::Relaxed) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (pid, comm) = master_in(netns).expect("no process of the run mapped motmod.so");
    let timeout_ns = {
        let b = sim.board();
        assert!(
            b.watchdog_armed(),
            "the card's watchdog does not run before the stop"
        );
        b.timeout_ns()
    };
    // SAFETY: kill(2) with the pid of the run's master, found in the test's own namespace.
    let stopped = unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert_eq!(stopped, 0, "SIGSTOP {pid}");
    let cont = Continue(pid);
    let t = Instant::now();
    // The stop's length is the action itself, not a wait for something.
    std::thread::sleep(STOP);
    until_true(
        "the card's watchdog bites while the master is stopped",
        GENEROUS,
        || sim.board().bitten(),
    );
    let stopped_for = t.elapsed();
    drop(cont);
    eprintln!("{comm} (pid {pid}) stopped for {stopped_for:?}; the card's watchdog bit");
    Some(Stopped {
        pid,
        comm,
        stopped_for,
        timeout_ns,
    })
}

/// What any good run of the Mesa machine looks like, whoever the master is.
fn check_shape(r: &MesaRun) -> Vec<CardMove> {
    let who = &r.run.launcher;
    let moves = card_moves(&r.periods);
    eprintln!(
        "{who}: {} periods, {} card moves:",
        r.periods.len(),
        moves.len()
    );
    for m in &moves {
        eprintln!(
            "  periods {}..{} ({}) axes {:?} steps {:?}",
            m.first,
            m.last,
            m.last - m.first + 1,
            m.axes,
            m.steps
        );
    }
    // Homing on the card's switches: Z first (HOME_SEQUENCE 0) towards its switch, at least the
    // switch's distance, then back; then X and Y together, the same way.
    assert!(moves.len() >= 4 + 3, "{who}: moves {moves:?}");
    let z = [false, false, true];
    let xy = [true, true, false];
    assert_eq!(moves[0].axes, z, "{who}: first the Z search: {moves:?}");
    assert!(moves[0].steps[2] >= SWITCH_AT, "{who}: {:?}", moves[0]);
    assert_eq!(moves[1].axes, z, "{who}: {moves:?}");
    assert!(moves[1].steps[2] < 0.0, "{who}: {:?}", moves[1]);
    assert_eq!(moves[2].axes, xy, "{who}: then X and Y: {moves:?}");
    assert!(
        moves[2].steps[..2].iter().all(|s| *s >= SWITCH_AT),
        "{who}: {:?}",
        moves[2]
    );
    assert_eq!(moves[3].axes, xy, "{who}: {moves:?}");
    // Homed: HOME is 10 mm (4000 steps) below the switch; each axis came back that far (and the
    // latch's back-off) from where it stopped.
    let homed = card_position(&r.periods, moves[4].first);
    for (a, p) in homed.iter().enumerate() {
        assert!(
            (p - (SWITCH_AT - 4000.0)).abs() < 10.0,
            "{who}: axis {a} homed at {p} steps: {homed:?}"
        );
    }
    let result = &r.run.result;
    assert_eq!(
        result["final"]["homed"],
        serde_json::json!([1, 1, 1]),
        "{who}: {}",
        result["final"]
    );
    // The dwell splits the blends program in two moves at least 0.5 s (500 periods) apart.
    let (a, b) = (&moves[moves.len() - 2], &moves[moves.len() - 1]);
    assert!(b.first - a.last >= 500, "{who}: the dwell: {a:?} {b:?}");
    // Every program returns to the origin: LinuxCNC says the joints are there, and the card's step
    // generators are where homing left them, within a step.
    let end = r.run.final_position("joint_actual_position");
    assert!(
        end.len() == AXES && end.iter().all(|p| p.abs() < 1e-3),
        "{who}: joints end at {end:?}"
    );
    for (a, (end, homed)) in r.end.iter().zip(&homed).enumerate() {
        assert!(
            (end - homed).abs() <= STEP_TOLERANCE,
            "{who}: the card's axis {a} ends at {end} steps, homed at {homed}"
        );
    }
    moves
}

#[test]
fn rtapi_linuxcnc_runs_the_mesa_machine_homed_and_moving() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let (_caps, rtapi) = rtapi_launcher();
    let r = run_mesa(&rtapi, "mesa-rtapi", false);
    let moves = check_shape(&r);
    // The programs moved all three axes, on the card.
    let program: Vec<&CardMove> = moves[4..].iter().collect();
    for a in 0..AXES {
        assert!(
            program.iter().any(|m| m.axes[a]),
            "axis {a} never moved in the programs"
        );
    }
}

/// The watchdog's part of a run that stopped its master: the card bit while the master was
/// stopped, LinuxCNC saw it (`has_bit`) and went to E-stop by itself, refused a reset while the bit
/// held, and came back once it was cleared — homed still — and the card then heard from it again.
fn check_watchdog(r: &MesaRun) {
    let who = &r.run.launcher;
    let stop = r.stop.as_ref().expect("the master was stopped");
    assert!(stop.stopped_for >= STOP, "{who}: {stop:?}");
    assert_eq!(
        stop.timeout_ns, 25_000_000,
        "{who}: the config's watchdog timeout reached the card"
    );
    let estop = &r.run.result["estop"];
    assert_eq!(
        estop["has_bit"], true,
        "{who}: has_bit at the E-stop: {estop}"
    );
    assert_eq!(
        estop["reset_refused_while_bitten"], true,
        "{who}: an E-stop reset went through while the card's watchdog had bit: {estop}"
    );
    assert_eq!(
        estop["homed_after"],
        serde_json::json!([1, 1, 1]),
        "{who}: {estop}"
    );
    // The watchdog's events (the step rates' are many), in order, with the last program move's end:
    // the last non-zero rate.
    let last_rate = r
        .events
        .iter()
        .rposition(
            |(_, e)| matches!(e, Event::StepgenRate { steps_per_s, .. } if *steps_per_s != 0.0),
        )
        .unwrap_or_else(|| panic!("{who}: the card never got a step rate"));
    let dog: Vec<(usize, &Event)> = r
        .events
        .iter()
        .enumerate()
        .filter(|(_, (_, e))| !matches!(e, Event::StepgenRate { .. }))
        .map(|(i, (_, e))| (i, e))
        .collect();
    let bites: Vec<usize> = dog
        .iter()
        .filter(|(_, e)| matches!(e, Event::WatchdogBitten { .. }))
        .map(|(i, _)| *i)
        .collect();
    let cleared = dog
        .iter()
        .find(|(_, e)| matches!(e, Event::WatchdogCleared))
        .map(|(i, _)| *i)
        .unwrap_or_else(|| panic!("{who}: the host never cleared a bite: {dog:?}"));
    // One bite before the clear (the stop), none while the programs ran after it; at the end the
    // servo thread stops before hm2 unloads, and the card bites again — as it should.
    assert_eq!(
        bites.iter().filter(|&&i| i < cleared).count(),
        1,
        "{who}: bites before the clear: {dog:?}"
    );
    assert!(
        !bites.iter().any(|&i| i > cleared && i < last_rate),
        "{who}: a bite while the programs ran: {dog:?}"
    );
    assert!(
        dog.iter()
            .any(|(i, e)| *i > cleared && matches!(e, Event::WatchdogPetted)),
        "{who}: no pet after the bite was cleared: {dog:?}"
    );
    eprintln!(
        "{who}: {} (pid {}) stopped {:?}: bit, E-stop, has_bit cleared, back on",
        stop.comm, stop.pid, stop.stopped_for
    );
}

/// One step of the config's axes, mm (400 steps per mm).
const STEP_MM: f64 = 1.0 / 400.0;

/// The planner's side: `joint.N.pos-cmd` of every servo period of the programs (phase ≥ 2), move
/// by move, aligned on each move's first moving period: the same moves (phases), each as long to
/// within a period, and every period within one step ([`STEP_MM`]) per joint. Not to the bit: where
/// a program starts is where the machine stood, and after homing and after an E-stop motion takes
/// its command from the card's feedback (the accumulator read at a jittered instant: stock and
/// rtapi started the programs 2.6e-6 mm apart). Returns the periods compared and the largest
/// difference; the error says where they differ.
fn compare_planner(a: &Run, b: &Run) -> Result<(usize, f64), String> {
    let programs = |r: &Run| -> Vec<lcnc_machine::Sample> {
        r.samples.iter().filter(|s| s.phase != 1).cloned().collect()
    };
    let (sa, sb) = (programs(a), programs(b));
    let (ma, mb) = (lcnc_machine::moves(&sa), lcnc_machine::moves(&sb));
    let phases = |m: &[lcnc_machine::Move]| m.iter().map(|m| m.phase).collect::<Vec<_>>();
    if phases(&ma) != phases(&mb) {
        return Err(format!(
            "different program moves: {:?} vs {:?}",
            phases(&ma),
            phases(&mb)
        ));
    }
    let (mut periods, mut worst) = (0, 0.0f64);
    for (i, (x, y)) in ma.iter().zip(&mb).enumerate() {
        if x.periods().abs_diff(y.periods()) > 1 {
            return Err(format!(
                "program move {i} (phase {}): {} periods vs {}",
                x.phase,
                x.periods(),
                y.periods()
            ));
        }
        let len = x.periods().min(y.periods()) + 1;
        for k in 0..len {
            let (p, q) = (&sa[x.first - 1 + k], &sb[y.first - 1 + k]);
            let d = p
                .values
                .iter()
                .zip(&q.values)
                .map(|(u, v)| (u - v).abs())
                .fold(0.0f64, f64::max);
            worst = worst.max(d);
            if d > STEP_MM {
                return Err(format!(
                    "program move {i} (phase {}) differs at its period {k} by {d} mm: {:?} vs {:?}",
                    x.phase, p.values, q.values
                ));
            }
        }
        periods += len;
    }
    Ok((periods, worst))
}

/// The card's side (module docs): the same moves with the same axes; each program move's steps
/// within [`STEP_TOLERANCE`] per axis. Returns a report line per move.
fn compare_card(
    a: &MesaRun,
    b: &MesaRun,
    ma: &[CardMove],
    mb: &[CardMove],
) -> Result<Vec<String>, String> {
    if ma.len() != mb.len() || ma.iter().zip(mb).any(|(x, y)| x.axes != y.axes) {
        return Err(format!("different card moves:\n  {ma:?}\n  {mb:?}"));
    }
    let mut report = Vec::new();
    for (i, (x, y)) in ma.iter().zip(mb).enumerate() {
        let homing = i < 4;
        let len = (x.last - x.first).min(y.last - y.first) + 1;
        let steps_per_s = |r: i32| r as f64 * CLOCK_HZ as f64 / 4_294_967_296.0;
        let worst = (0..len)
            .flat_map(|k| {
                (0..AXES).map(move |ax| {
                    (steps_per_s(a.periods[x.first + k].rates[ax])
                        - steps_per_s(b.periods[y.first + k].rates[ax]))
                    .abs()
                })
            })
            .fold(0.0f64, f64::max);
        let d: Vec<f64> = (0..AXES).map(|ax| x.steps[ax] - y.steps[ax]).collect();
        report.push(format!(
            "move {i}{}: {} vs {} periods, steps differ by {d:.3?}, rates by at most {worst:.1} steps/s",
            if homing { " (homing)" } else { "" },
            x.last - x.first + 1,
            y.last - y.first + 1
        ));
        if !homing && d.iter().any(|v| v.abs() > STEP_TOLERANCE) {
            return Err(format!(
                "card move {i}: steps {:?} vs {:?}\n{}",
                x.steps,
                y.steps,
                report.join("\n")
            ));
        }
    }
    Ok(report)
}

/// Stock LinuxCNC (its `rtapi_app` at SCHED_FIFO: `LINUXCNC_FORCE_REALTIME`) and `rtapi linuxcnc`,
/// each against a card of its own: estop reset, homing on the card's switches, the master stopped
/// until the card's watchdog bites (LinuxCNC goes to E-stop; has_bit cleared, reset, on again),
/// then the programs; the planner's commands equal to the bit, what the card received equal move
/// by move (module docs).
#[test]
fn the_card_gets_the_same_moves_from_rtapi_as_from_stock_and_the_watchdog_bites_alike() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let stock = run_mesa(&Launcher::StockRealtime, "mesa-stock", true);
    let ms = check_shape(&stock);
    check_watchdog(&stock);
    let (_caps, rtapi) = rtapi_launcher();
    let ours = run_mesa(&rtapi, "mesa-rtapi-wd", true);
    let mr = check_shape(&ours);
    check_watchdog(&ours);
    let (periods, worst) = compare_planner(&stock.run, &ours.run)
        .unwrap_or_else(|e| panic!("the planner's commands differ: {e}"));
    let report = compare_card(&stock, &ours, &ms, &mr)
        .unwrap_or_else(|e| panic!("what the card received differs: {e}"));
    eprintln!(
        "stock vs rtapi: the planner's commands within {worst:e} mm over {periods} periods; the card:"
    );
    for l in report {
        eprintln!("  {l}");
    }
    // The comparisons can fail: two steps off in one program period of the planner's commands,
    // and two steps more in one program move on the card, are differences.
    let program_move = ms.len() - 1;
    let mut ulp = ours.run.samples.clone();
    let k = (1..ulp.len())
        .filter(|&i| ulp[i].phase == 3 && ulp[i].values != ulp[i - 1].values)
        .nth(100)
        .expect("the arcs program moved");
    ulp[k].values[0] += 2.0 * STEP_MM;
    let altered = Run {
        launcher: "altered copy".into(),
        result: ours.run.result.clone(),
        samples: ulp,
        seconds: 0.0,
        log: String::new(),
        servo_thread: None,
        ended_after: Vec::new(),
    };
    let e = compare_planner(&stock.run, &altered).expect_err("two steps compared equal");
    eprintln!("two steps off in one period, as reported: {e}");
    let mut more = mr.clone();
    more[program_move].steps[0] += 2.0;
    let e = compare_card(&stock, &ours, &ms, &more).expect_err("two steps compared equal");
    assert!(e.contains(&format!("card move {program_move}")), "{e}");
}
