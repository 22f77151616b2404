//! Differential tests against LinuxCNC 2.9 itself (issue 12, part 4): each case drives the same input
//! sequence through LinuxCNC's component (`halrun` in uspace, `streamer` → component → `sampler` in one
//! thread) and through ours (`Harness`), and compares the outputs period by period. The recipe, the
//! alignment and the comparison rule are in `tests/common/linuxcnc.rs`.
//!
//! Without LinuxCNC (`halrun` missing, or no non-root user to run it as) every test here prints a loud
//! `LINUXCNC DIFFERENTIAL TEST NOT RUN` banner and FAILS. A case whose component is not in our registry
//! fails too.
//!
//! Known, intended differences are documented with the cases that steer around them (so that what
//! should match is still compared):
//!
//! * `siggen`: LinuxCNC 2.9's square wave is −1 for the first half of each cycle (+1 once the phase
//!   passes ½), its `clock` follows that square, and its triangle starts at +1 and falls (a cosine-like
//!   triangle); ours are the sine's sign and a sine-like triangle (documented in `siggen.rs`). Its
//!   phase step is computed in single precision (`float tmp = period·1e-9; tmp2 = frequency·tmp`) and
//!   its angle uses π = 3.1415927, so even the waves that agree do so to ~1e-7 only (the cases
//!   compare sine, cosine and sawtooth within 2e-6). Above Nyquist it clamps the step to ½ and writes
//!   the clamped value back into its `frequency` pin; its reset and negative-frequency handling are
//!   not compared.
//! * `pid`: LinuxCNC computes the error against the *previous* command by default
//!   (`error-previous-target`, TRUE), ours against the current one: the cases set it FALSE on
//!   LinuxCNC's side. LinuxCNC's derivatives use the history kept even while disabled (and a zero
//!   history at the very first period: a kick of `command/dt`); ours are 0 on the first enabled period
//!   (and `commandDD` on the second) and forget the history on disable. The cases hold the command
//!   and feedback still around the first period and each re-enable, where the two rules agree.
//!   LinuxCNC's error-derivative and command-derivative limits are compared too. LinuxCNC's
//!   `maxoutput` going back to 0 keeps its last saturation state (its `saturated` stays TRUE, its
//!   integrator frozen): the cases never set it back to 0. Its FF3/`maxcmdDDD` (third derivative) are
//!   left at 0: ours has none.
//! * `timedelta` has no case: it measures the wall clock (`rtapi_get_time`), which a uspace LinuxCNC
//!   without realtime makes anything but deterministic; there is nothing period-exact to compare.
//! * Settings that are real HAL params (`debounce.N.delay`, `sum2.N.gain0`, `updown.N.max`…) cannot
//!   change at an exact period in a free-running LinuxCNC thread: each value is its own case.

mod common;
use common::linuxcnc;

use linuxcnc::{check, rows, Case, Rng, Ty, V};

// ---------------------------------------------------------------------------------------------
// siggen

/// siggen with what can match compared: sine, cosine and sawtooth, within 2e-6 (see the file's docs:
/// LinuxCNC steps its phase in single precision and takes π as 3.1415927).
fn siggen_case(name: &str, rows: Vec<Vec<V>>) -> Case {
    Case::new(name, "siggen", "", &["siggen.0.update"])
        .input("siggen.0.frequency", Ty::Float)
        .input("siggen.0.amplitude", Ty::Float)
        .input("siggen.0.offset", Ty::Float)
        .output("siggen.0.sine", Ty::Float)
        .output("siggen.0.cosine", Ty::Float)
        .output("siggen.0.sawtooth", Ty::Float)
        .tolerance(2e-6, 2e-6)
        .rows(rows)
}

#[test]
fn siggen_steady_waves() {
    // 7.3 Hz, amplitude 2, offset 0.5: phases that are no round numbers, three periods of the wave.
    let case = siggen_case(
        "siggen_steady",
        rows(400, 1, |_, _| vec![V::F(7.3), V::F(2.0), V::F(0.5)]),
    );
    check(&case);
}

#[test]
fn siggen_changes_frequency_amplitude_offset_mid_run() {
    // Positive frequencies below Nyquist (500 Hz at 1 ms): the range where both generators agree.
    let case = siggen_case(
        "siggen_changes",
        rows(600, 2, |k, r| {
            let f = match k / 100 {
                0 => 3.0,
                1 => 45.5,
                2 => r.float(0.0, 20.0),
                3 => 0.0,
                4 => 11.0,
                _ => 250.0,
            };
            let a = if k < 300 { 1.5 } else { r.float(-3.0, 3.0) };
            let o = if k % 50 < 25 { 0.0 } else { -1.25 };
            vec![V::F(f), V::F(a), V::F(o)]
        }),
    );
    check(&case);
}

// ---------------------------------------------------------------------------------------------
// pid

const PID_IN: [(&str, Ty); 17] = [
    ("command", Ty::Float),
    ("feedback", Ty::Float),
    ("enable", Ty::Bit),
    ("Pgain", Ty::Float),
    ("Igain", Ty::Float),
    ("Dgain", Ty::Float),
    ("bias", Ty::Float),
    ("FF0", Ty::Float),
    ("FF1", Ty::Float),
    ("FF2", Ty::Float),
    ("deadband", Ty::Float),
    ("maxoutput", Ty::Float),
    ("maxerror", Ty::Float),
    ("maxerrorI", Ty::Float),
    ("maxerrorD", Ty::Float),
    ("maxcmdD", Ty::Float),
    ("maxcmdDD", Ty::Float),
];

/// The pid inputs of one period, by name (anything not given: LinuxCNC's default).
#[derive(Clone, Copy)]
struct PidRow {
    command: f64,
    feedback: f64,
    enable: bool,
    /// Pgain, Igain, Dgain, bias, FF0, FF1, FF2, deadband, maxoutput, maxerror, maxerrorI, maxerrorD,
    /// maxcmdD, maxcmdDD.
    k: [f64; 14],
}

impl PidRow {
    fn new() -> PidRow {
        let mut k = [0.0; 14];
        k[0] = 1.0;
        PidRow {
            command: 0.0,
            feedback: 0.0,
            enable: true,
            k,
        }
    }

    fn values(&self) -> Vec<V> {
        let mut v = vec![V::F(self.command), V::F(self.feedback), V::B(self.enable)];
        v.extend(self.k.iter().map(|&x| V::F(x)));
        v
    }
}

/// pid's outputs, and with LinuxCNC's `debug=1` its internals as pins too (`errorI`, `errorD`,
/// `commandD`, `commandDD`); `internals` picks which of those are compared.
fn pid_case(name: &str, rows: Vec<PidRow>, internals: &[&str]) -> Case {
    let mut c = Case::new(name, "pid", "", &["pid.0.do-pid-calcs"])
        .linuxcnc_args("debug=1")
        // Ours compares the current command with the feedback (see the file's docs).
        .linuxcnc_setp("pid.0.error-previous-target", "0");
    for (pin, ty) in PID_IN {
        c = c.input(&format!("pid.0.{pin}"), ty);
    }
    c = c
        .output("pid.0.output", Ty::Float)
        .output("pid.0.error", Ty::Float)
        .output("pid.0.saturated", Ty::Bit);
    for pin in internals {
        c = c.output(&format!("pid.0.{pin}"), Ty::Float);
    }
    c.rows(rows.iter().map(PidRow::values).collect())
}

const PID_ALL: [&str; 4] = ["errorI", "errorD", "commandD", "commandDD"];

/// A servo loop's inputs: the command a smooth move, the feedback lagging behind it with noise. The
/// command and feedback are held still where the two derivative rules differ (see the file's docs):
/// the first 3 periods, and from 2 periods before each re-enable to 1 period after it.
fn pid_rows(n: usize, seed: u64, k: [f64; 14], toggle_enable: bool) -> Vec<PidRow> {
    let mut rng = Rng::new(seed);
    let mut out: Vec<PidRow> = Vec::with_capacity(n);
    let mut enable = true;
    for i in 0..n {
        let mut row = PidRow::new();
        row.k = k;
        if toggle_enable && i > 20 && i % 60 == 0 {
            enable = !enable;
        }
        let t = i as f64 * 1e-3;
        if i >= 3 {
            row.command = 2.0 * (t * 5.0).sin() + 0.3 * t;
            row.feedback = row.command - 0.05 * (t * 3.0).cos() + rng.float(-1e-3, 1e-3);
        }
        row.enable = enable;
        out.push(row);
    }
    for r in 2..n {
        if out[r].enable && !out[r - 1].enable {
            let (c, f) = (out[r - 2].command, out[r - 2].feedback);
            for row in &mut out[r - 1..(r + 2).min(n)] {
                row.command = c;
                row.feedback = f;
            }
        }
    }
    out
}

#[test]
fn pid_p_i_d_with_feed_forward() {
    //        P     I      D     bias FF0  FF1  FF2    db  maxout maxerr maxI maxD maxcD maxcDD
    let k = [
        40.0, 300.0, 0.05, 0.1, 0.0, 1.0, 0.002, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    check(&pid_case(
        "pid_pid_ff",
        pid_rows(500, 11, k, false),
        &PID_ALL,
    ));
}

#[test]
fn pid_deadband_limits_and_saturation() {
    //       P     I      D    bias FF0  FF1  FF2  db    maxout maxerr maxI  maxD  maxcD maxcDD
    let k = [
        200.0, 2000.0, 0.2, 0.0, 0.5, 1.0, 0.0, 0.01, 3.0, 0.05, 0.002, 20.0, 8.0, 400.0,
    ];
    check(&pid_case(
        "pid_limits",
        pid_rows(500, 12, k, false),
        &PID_ALL,
    ));
}

#[test]
fn pid_d_term_with_deadband_and_maxerror() {
    // LinuxCNC 2.9: errorD = command' − feedback' (the raw error's derivative, then maxerrorD);
    // the deadband and maxerror shape only the P and I terms.
    //       P     I    D    bias FF0  FF1  FF2  db    maxout maxerr maxI maxD  maxcD maxcDD
    let k = [
        20.0, 0.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.01, 0.0, 0.03, 0.0, 50.0, 0.0, 0.0,
    ];
    check(&pid_case(
        "pid_d_deadband",
        pid_rows(300, 16, k, false),
        &PID_ALL,
    ));
}

#[test]
fn pid_enable_toggling() {
    let k = [
        50.0, 500.0, 0.02, 0.0, 0.0, 1.0, 0.001, 0.0, 2.5, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    // While disabled, LinuxCNC goes on computing its derivatives (ours shows 0): not compared.
    check(&pid_case(
        "pid_enable",
        pid_rows(500, 13, k, true),
        &["errorI"],
    ));
}

#[test]
fn pid_gains_and_limits_change_mid_run() {
    // Every gain and limit is a pin: a new value every 50 periods, at the exact period on both sides.
    let mut rng = Rng::new(14);
    let mut base = pid_rows(500, 14, [0.0; 14], false);
    let mut k = [0.0; 14];
    for (i, row) in base.iter_mut().enumerate() {
        if i % 50 == 0 {
            k = [
                rng.float(0.0, 100.0),
                rng.float(0.0, 1000.0),
                rng.float(0.0, 0.1),
                rng.float(-0.5, 0.5),
                rng.float(0.0, 1.0),
                rng.float(0.0, 1.0),
                rng.float(0.0, 0.01),
                rng.float(0.0, 0.02),
                // Never back to 0 once limited: LinuxCNC keeps its last saturation state when
                // maxoutput becomes 0 (its saturated stays TRUE, its integrator frozen).
                rng.float(0.5, 10.0),
                if rng.chance(0.5) {
                    0.0
                } else {
                    rng.float(0.01, 1.0)
                },
                if rng.chance(0.5) {
                    0.0
                } else {
                    rng.float(0.0, 0.01)
                },
                if rng.chance(0.5) {
                    0.0
                } else {
                    rng.float(1.0, 50.0)
                },
                if rng.chance(0.5) {
                    0.0
                } else {
                    rng.float(1.0, 20.0)
                },
                if rng.chance(0.5) {
                    0.0
                } else {
                    rng.float(10.0, 1000.0)
                },
            ];
        }
        row.k = k;
    }
    check(&pid_case("pid_changes", base, &PID_ALL));
}

#[test]
fn pid_nan_and_infinite_inputs() {
    let mut base = pid_rows(
        200,
        15,
        [
            10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ],
        false,
    );
    // On the feedback: a non-finite *command* also reaches LinuxCNC's third derivative (FF3, which
    // ours does not have): 0·∞ makes its output NaN one period longer than ours.
    base[50].feedback = f64::INFINITY;
    base[80].feedback = f64::NEG_INFINITY;
    base[120].feedback = f64::NAN;
    base[121].feedback = f64::NAN;
    check(&pid_case("pid_nonfinite", base, &PID_ALL));
}

#[test]
fn the_comparison_rule_itself() {
    // No LinuxCNC needed: the rule every case relies on.
    assert!(V::F(1.0).matches(&V::F(1.0 + 1e-12)));
    assert!(!V::F(1.0).matches(&V::F(1.0 + 1e-6)));
    assert!(V::F(0.0).matches(&V::F(1e-17)));
    assert!(V::F(f64::NAN).matches(&V::F(f64::NAN)));
    assert!(!V::F(f64::NAN).matches(&V::F(0.0)));
    assert!(V::F(f64::INFINITY).matches(&V::F(f64::INFINITY)));
    assert!(!V::F(f64::INFINITY).matches(&V::F(1e300)));
    assert!(!V::F(f64::INFINITY).matches(&V::F(f64::NEG_INFINITY)));
    assert!(!V::B(true).matches(&V::B(false)));
    assert!(!V::U(u32::MAX).matches(&V::U(0)));
    assert!(!V::S(-1).matches(&V::U(u32::MAX)));
    // halstreamer reads what we write: exact floats, 0/1 bits, plain integers.
    assert_eq!(V::F(0.1).text().parse::<f64>().unwrap(), 0.1);
    assert_eq!(V::F(f64::NEG_INFINITY).text(), "-inf");
    assert_eq!(V::B(true).text(), "1");
    assert_eq!(V::S(i32::MIN).text(), "-2147483648");
}

// ---------------------------------------------------------------------------------------------
// The catalogue (issue 12): one case per component and setting, inputs from a seeded PRNG with the
// edge values of each type mixed in at fixed rows.

/// How one input column is generated.
#[derive(Clone, Copy)]
enum G {
    /// A bit that flips with this probability each period.
    Bit(f64),
    /// A float in [lo, hi), with the float edges (0, −0, ±1e300, the smallest subnormal, NaN, ±∞)
    /// every 17th row.
    F(f64, f64),
    /// A float in [lo, hi) that holds its value for a few periods, finite only (for settings).
    Slow(f64, f64),
    /// A float in [lo, hi), finite, with 0, −0, lo and hi every 17th row (for components with
    /// state, which one NaN would poison for the rest of the run on both sides).
    Fin(f64, f64),
    /// An s32 in [lo, hi], with i32::MIN/MAX, −1, 0, 1 every 13th row.
    S(i32, i32),
    /// A u32 in [lo, hi], with 0, u32::MAX, 2³¹, 2³¹−1, 1 every 13th row.
    U(u32, u32),
}

const EDGE_F: [f64; 9] = [
    0.0,
    -0.0,
    1e300,
    -1e300,
    5e-324,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    1.0,
];
const EDGE_S: [i32; 6] = [i32::MIN, i32::MAX, -1, 0, 1, i32::MIN + 1];
const EDGE_U: [u32; 6] = [0, u32::MAX, 1 << 31, (1 << 31) - 1, 1, u32::MAX - 1];

fn gen(n: usize, seed: u64, cols: &[G]) -> Vec<Vec<V>> {
    let mut rng = Rng::new(seed);
    let mut prev: Vec<V> = cols
        .iter()
        .map(|g| match g {
            G::Bit(_) => V::B(false),
            G::F(lo, _) | G::Slow(lo, _) | G::Fin(lo, _) => V::F(*lo),
            G::S(lo, _) => V::S(*lo),
            G::U(lo, _) => V::U(*lo),
        })
        .collect();
    (0..n)
        .map(|k| {
            let row: Vec<V> = cols
                .iter()
                .zip(&prev)
                .enumerate()
                .map(|(c, (g, p))| {
                    let edge = (k + 3 * c) / 13;
                    match *g {
                        G::Bit(flip) => match p {
                            V::B(b) => V::B(*b ^ rng.chance(flip)),
                            _ => unreachable!(),
                        },
                        G::F(lo, hi) => {
                            if (k + 5 * c) % 17 == 5 {
                                V::F(EDGE_F[((k + 5 * c) / 17) % EDGE_F.len()])
                            } else {
                                V::F(rng.float(lo, hi))
                            }
                        }
                        G::Fin(lo, hi) => {
                            if (k + 5 * c) % 17 == 5 {
                                V::F([0.0, -0.0, lo, hi][((k + 5 * c) / 17) % 4])
                            } else {
                                V::F(rng.float(lo, hi))
                            }
                        }
                        G::Slow(lo, hi) => {
                            if k == 0 || rng.chance(0.1) {
                                V::F(rng.float(lo, hi))
                            } else {
                                *p
                            }
                        }
                        G::S(lo, hi) => {
                            if (k + 3 * c) % 13 == 3 {
                                V::S(EDGE_S[edge % EDGE_S.len()])
                            } else {
                                V::S(lo.wrapping_add(
                                    rng.below((hi as i64 - lo as i64 + 1) as u64) as i32
                                ))
                            }
                        }
                        G::U(lo, hi) => {
                            if (k + 3 * c) % 13 == 3 {
                                V::U(EDGE_U[edge % EDGE_U.len()])
                            } else {
                                V::U(lo + rng.below(u64::from(hi - lo) + 1) as u32)
                            }
                        }
                    }
                })
                .collect();
            prev = row.clone();
            row
        })
        .collect()
}

/// A catalogue case: `ins`/`outs` are pin suffixes of `inst` (`"in0"` → `and2.0.in0`).
#[allow(clippy::too_many_arguments)]
fn cat(
    name: &str,
    component: &str,
    args: &str,
    inst: &str,
    ins: &[(&str, Ty, G)],
    outs: &[(&str, Ty)],
    setp: &[(&str, &str)],
    n: usize,
) -> Case {
    let mut c = Case::new(name, component, args, &[]);
    for (pin, ty, _) in ins {
        c = c.input(&format!("{inst}.{pin}"), *ty);
    }
    for (pin, ty) in outs {
        c = c.output(&format!("{inst}.{pin}"), *ty);
    }
    for (k, v) in setp {
        c = c.setp(&format!("{inst}.{k}"), v);
    }
    let gens: Vec<G> = ins.iter().map(|i| i.2).collect();
    let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    c.rows(gen(n, seed, &gens))
}

use Ty::{Bit as B, Float as F, S32 as S, U32 as U};

#[test]
fn cat_and2_or2_xor2_not() {
    for comp in ["and2", "or2", "xor2"] {
        let inst = format!("{comp}.0");
        check(&cat(
            comp,
            comp,
            "",
            &inst,
            &[("in0", B, G::Bit(0.5)), ("in1", B, G::Bit(0.3))],
            &[("out", B)],
            &[],
            200,
        ));
    }
    check(&cat(
        "not",
        "not",
        "",
        "not.0",
        &[("in", B, G::Bit(0.5))],
        &[("out", B)],
        &[],
        100,
    ));
}

#[test]
fn cat_mux2_mux4_mux8() {
    check(&cat(
        "mux2",
        "mux2",
        "",
        "mux2.0",
        &[
            ("sel", B, G::Bit(0.3)),
            ("in0", F, G::F(-10.0, 10.0)),
            ("in1", F, G::F(-10.0, 10.0)),
        ],
        &[("out", F)],
        &[],
        300,
    ));
    let mut ins = vec![("sel0", B, G::Bit(0.3)), ("sel1", B, G::Bit(0.2))];
    let names = ["in0", "in1", "in2", "in3", "in4", "in5", "in6", "in7"];
    for n in &names[..4] {
        ins.push((n, F, G::F(-5.0, 5.0)));
    }
    check(&cat(
        "mux4",
        "mux4",
        "",
        "mux4.0",
        &ins,
        &[("out", F)],
        &[],
        300,
    ));
    let mut ins = vec![
        ("sel0", B, G::Bit(0.3)),
        ("sel1", B, G::Bit(0.2)),
        ("sel2", B, G::Bit(0.1)),
    ];
    for n in &names {
        ins.push((n, F, G::F(-5.0, 5.0)));
    }
    check(&cat(
        "mux8",
        "mux8",
        "",
        "mux8.0",
        &ins,
        &[("out", F)],
        &[],
        300,
    ));
}

#[test]
fn cat_select8() {
    let outs: Vec<(&str, Ty)> = [
        "out0", "out1", "out2", "out3", "out4", "out5", "out6", "out7",
    ]
    .iter()
    .map(|o| (*o, B))
    .collect();
    check(&cat(
        "select8",
        "select8",
        "",
        "select8.0",
        &[("enable", B, G::Bit(0.1)), ("sel", S, G::S(-2, 9))],
        &outs,
        &[],
        300,
    ));
}

#[test]
fn cat_demux() {
    let outs: Vec<(&str, Ty)> = [
        "out-00", "out-01", "out-02", "out-03", "out-04", "out-05", "out-06", "out-07",
    ]
    .iter()
    .map(|o| (*o, B))
    .collect();
    let ins = [
        ("sel-u32", U, G::U(0, 9)),
        ("sel-bit-00", B, G::Bit(0.3)),
        ("sel-bit-01", B, G::Bit(0.2)),
        ("sel-bit-02", B, G::Bit(0.1)),
    ];
    for bargraph in ["0", "1"] {
        check(&cat(
            &format!("demux_bargraph{bargraph}"),
            "demux",
            "personality=8",
            "demux.0",
            &ins,
            &outs,
            &[("bargraph", bargraph)],
            300,
        ));
    }
}

#[test]
fn cat_sample_hold() {
    check(&cat(
        "sample_hold",
        "sample_hold",
        "",
        "sample-hold.0",
        &[("in", S, G::S(-1000, 1000)), ("hold", B, G::Bit(0.2))],
        &[("out", S)],
        &[],
        300,
    ));
}

#[test]
fn cat_conv() {
    // (component, input, outputs, has clamp): LinuxCNC 2.9's ten converters.
    let big = G::F(-5e9, 5e9);
    type Conv<'a> = (&'a str, Ty, G, &'a [(&'a str, Ty)], bool);
    let convs: [Conv; 10] = [
        ("conv_bit_s32", B, G::Bit(0.5), &[("out", S)], false),
        ("conv_bit_u32", B, G::Bit(0.5), &[("out", U)], false),
        (
            "conv_float_s32",
            F,
            big,
            &[("out", S), ("out-of-range", B)],
            true,
        ),
        (
            "conv_float_u32",
            F,
            big,
            &[("out", U), ("out-of-range", B)],
            true,
        ),
        (
            "conv_s32_bit",
            S,
            G::S(-2, 3),
            &[("out", B), ("out-of-range", B)],
            true,
        ),
        (
            "conv_s32_float",
            S,
            G::S(i32::MIN, i32::MAX),
            &[("out", F)],
            false,
        ),
        (
            "conv_s32_u32",
            S,
            G::S(-100, 100),
            &[("out", U), ("out-of-range", B)],
            true,
        ),
        (
            "conv_u32_bit",
            U,
            G::U(0, 3),
            &[("out", B), ("out-of-range", B)],
            true,
        ),
        ("conv_u32_float", U, G::U(0, u32::MAX), &[("out", F)], false),
        (
            "conv_u32_s32",
            U,
            G::U(0, u32::MAX),
            &[("out", S), ("out-of-range", B)],
            true,
        ),
    ];
    let mut cases = Vec::new();
    for (comp, ty, g, outs, clamp) in convs {
        let inst = format!("{}.0", comp.replace('_', "-"));
        for c in if clamp { &["0", "1"][..] } else { &["0"][..] } {
            let setp: Vec<(&str, &str)> = if clamp { vec![("clamp", *c)] } else { vec![] };
            let case = cat(
                &format!("{comp}_clamp{c}"),
                comp,
                "",
                &inst,
                &[("in", ty, g)],
                outs,
                &setp,
                300,
            );
            cases.push(case);
        }
    }
    check_all(&cases);
}

/// Checks every case, then fails with all the failures together (not only the first).
fn check_all(cases: &[Case]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            std::panic::catch_unwind(|| check(case)).err().map(|e| {
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn cat_estop_latch() {
    check(&cat(
        "estop_latch",
        "estop_latch",
        "",
        "estop-latch.0",
        &[
            ("ok-in", B, G::Bit(0.05)),
            ("fault-in", B, G::Bit(0.05)),
            ("reset", B, G::Bit(0.2)),
        ],
        &[("ok-out", B), ("fault-out", B), ("watchdog", B)],
        &[],
        400,
    ));
}

#[test]
fn cat_watchdog() {
    // Two inputs with timeouts of 5 and 12.5 periods; they toggle often or stall; enable-in toggles.
    check(&cat(
        "watchdog",
        "watchdog",
        "num_inputs=2",
        "watchdog",
        &[
            ("input-0", B, G::Bit(0.35)),
            ("input-1", B, G::Bit(0.12)),
            ("enable-in", B, G::Bit(0.02)),
        ],
        &[("ok-out", B)],
        &[("timeout-0", "0.005"), ("timeout-1", "0.0125")],
        600,
    ));
}

#[test]
fn cat_charge_pump() {
    check(&cat(
        "charge_pump",
        "charge_pump",
        "",
        "charge-pump",
        &[("enable", B, G::Bit(0.03))],
        &[("out", B), ("out-2", B), ("out-4", B)],
        &[],
        300,
    ));
}

/// One catalogue component per call, for the simple ones: `check(&cat(…))` with the instance
/// `<component>.0` (LinuxCNC's `_` → `-` in the instance name).
fn simple(
    name: &str,
    component: &str,
    ins: &[(&str, Ty, G)],
    outs: &[(&str, Ty)],
    setp: &[(&str, &str)],
) {
    let inst = format!("{}.0", component.replace('_', "-"));
    check(&cat(name, component, "", &inst, ins, outs, setp, 400));
}

#[test]
fn cat_limit1() {
    let ins = [
        ("in", F, G::F(-10.0, 10.0)),
        ("min", F, G::Slow(-8.0, 0.0)),
        ("max", F, G::Slow(0.0, 8.0)),
    ];
    simple("limit1", "limit1", &ins, &[("out", F)], &[]);
}

#[test]
fn cat_limit2() {
    let ins = [
        ("in", F, G::Fin(-10.0, 10.0)),
        ("load", B, G::Bit(0.02)),
        ("min", F, G::Slow(-8.0, 0.0)),
        ("max", F, G::Slow(0.0, 8.0)),
        ("maxv", F, G::Slow(0.0, 3000.0)),
    ];
    simple("limit2", "limit2", &ins, &[("out", F)], &[]);
}

#[test]
fn cat_limit3() {
    // A command that holds, then jumps; bounds, maxv and maxa that change mid-run through their pins.
    let ins = [
        ("in", F, G::Slow(-5.0, 5.0)),
        ("enable", B, G::Bit(0.01)),
        ("load", B, G::Bit(0.01)),
        ("min", F, G::Slow(-4.0, -1.0)),
        ("max", F, G::Slow(1.0, 4.0)),
        ("maxv", F, G::Slow(50.0, 500.0)),
        ("maxa", F, G::Slow(1e4, 1e5)),
    ];
    simple("limit3", "limit3", &ins, &[("out", F)], &[]);
}

#[test]
fn cat_limit3_edges() {
    // A noisy command with 0, −0 and the bounds as edge values, smooth-steps changing (0 and huge
    // included), enable toggling often, and crossed bounds now and then.
    let ins = [
        ("in", F, G::Fin(-3.0, 3.0)),
        ("enable", B, G::Bit(0.05)),
        ("load", B, G::Bit(0.005)),
        ("min", F, G::Slow(-2.0, 0.5)),
        ("max", F, G::Slow(-0.5, 2.0)),
        ("maxv", F, G::Slow(10.0, 300.0)),
        ("maxa", F, G::Slow(1e3, 1e5)),
        ("smooth-steps", U, G::U(0, 6)),
    ];
    simple("limit3_edges", "limit3", &ins, &[("out", F)], &[]);
    // NaN, infinities and 1e300 in the command: the state goes non-finite on both sides until `load`
    // (which ignores a NaN) brings it back.
    let ins = [
        ("in", F, G::F(-3.0, 3.0)),
        ("load", B, G::Bit(0.08)),
        ("maxv", F, G::Slow(10.0, 300.0)),
        ("maxa", F, G::Slow(1e3, 1e5)),
    ];
    simple("limit3_nonfinite", "limit3", &ins, &[("out", F)], &[]);
}

#[test]
fn cat_scale_sum2_mult2_div2() {
    simple(
        "scale",
        "scale",
        &[
            ("in", F, G::F(-10.0, 10.0)),
            ("gain", F, G::F(-3.0, 3.0)),
            ("offset", F, G::F(-1.0, 1.0)),
        ],
        &[("out", F)],
        &[],
    );
    simple(
        "sum2",
        "sum2",
        &[("in0", F, G::F(-10.0, 10.0)), ("in1", F, G::F(-10.0, 10.0))],
        &[("out", F)],
        &[("gain0", "1.5"), ("gain1", "-0.25"), ("offset", "0.125")],
    );
    simple(
        "mult2",
        "mult2",
        &[("in0", F, G::F(-10.0, 10.0)), ("in1", F, G::F(-10.0, 10.0))],
        &[("out", F)],
        &[],
    );
    for (db, name) in [("0", "div2"), ("0.5", "div2_deadband")] {
        simple(
            name,
            "div2",
            &[("in0", F, G::F(-10.0, 10.0)), ("in1", F, G::F(-1.0, 1.0))],
            &[("out", F)],
            &[("deadband", db)],
        );
    }
}

#[test]
fn cat_abs() {
    simple(
        "abs",
        "abs",
        &[("in", F, G::F(-10.0, 10.0))],
        &[
            ("out", F),
            ("sign", B),
            ("is-positive", B),
            ("is-negative", B),
        ],
        &[],
    );
}

#[test]
fn cat_near_comp_wcomp() {
    simple(
        "near",
        "near",
        &[("in1", F, G::F(-2.0, 2.0)), ("in2", F, G::F(-2.0, 2.0))],
        &[("out", B)],
        &[("scale", "1.5"), ("difference", "0.5")],
    );
    for (hyst, name) in [("0", "comp"), ("0.5", "comp_hyst")] {
        simple(
            name,
            "comp",
            &[("in0", F, G::Fin(-2.0, 2.0)), ("in1", F, G::Fin(-2.0, 2.0))],
            &[("out", B), ("equal", B)],
            &[("hyst", hyst)],
        );
    }
    simple(
        "wcomp",
        "wcomp",
        &[
            ("in", F, G::F(-3.0, 3.0)),
            ("min", F, G::Slow(-2.0, 0.5)),
            ("max", F, G::Slow(-0.5, 2.0)),
        ],
        &[("out", B), ("over", B), ("under", B)],
        &[],
    );
}

#[test]
fn cat_deadzone() {
    simple(
        "deadzone",
        "deadzone",
        &[("in", F, G::F(-3.0, 3.0))],
        &[("out", F)],
        &[("center", "0.25"), ("threshold", "0.75")],
    );
}

#[test]
fn cat_constant() {
    check(&cat(
        "constant",
        "constant",
        "",
        "constant.0",
        &[],
        &[("out", F)],
        &[("value", "-2.75")],
        20,
    ));
}

#[test]
fn cat_edge() {
    for (name, setp) in [
        (
            "edge_rising",
            vec![("in-edge", "1"), ("both", "0"), ("out-width-ns", "0")],
        ),
        (
            "edge_falling",
            vec![("in-edge", "0"), ("both", "0"), ("out-width-ns", "0")],
        ),
        (
            "edge_both_wide",
            vec![("both", "1"), ("out-width-ns", "2500000")],
        ),
    ] {
        simple(
            name,
            "edge",
            &[("in", B, G::Bit(0.15))],
            &[("out", B), ("out-invert", B)],
            &setp,
        );
    }
}

#[test]
fn cat_oneshot() {
    for (name, setp) in [
        ("oneshot", vec![]),
        (
            "oneshot_retrig_both",
            vec![("retriggerable", "1"), ("falling", "1")],
        ),
        (
            "oneshot_falling_only",
            vec![("rising", "0"), ("falling", "1"), ("retriggerable", "0")],
        ),
    ] {
        simple(
            name,
            "oneshot",
            &[
                ("in", B, G::Bit(0.08)),
                ("reset", B, G::Bit(0.01)),
                ("width", F, G::Slow(0.0005, 0.02)),
            ],
            &[("out", B), ("out-not", B), ("time-left", F)],
            &setp,
        );
    }
}

#[test]
fn cat_toggle_flipflop() {
    for (name, db) in [("toggle", "2"), ("toggle_db5", "5")] {
        simple(
            name,
            "toggle",
            &[("in", B, G::Bit(0.2))],
            &[("out", B)],
            &[("debounce", db)],
        );
    }
    simple(
        "flipflop",
        "flipflop",
        &[
            ("data", B, G::Bit(0.3)),
            ("clk", B, G::Bit(0.3)),
            ("set", B, G::Bit(0.02)),
            ("reset", B, G::Bit(0.02)),
        ],
        &[("out", B), ("out-not", B)],
        &[],
    );
}

#[test]
fn cat_timedelay() {
    simple(
        "timedelay",
        "timedelay",
        &[
            ("in", B, G::Bit(0.05)),
            ("on-delay", F, G::Slow(0.0, 0.02)),
            ("off-delay", F, G::Slow(0.0, 0.02)),
        ],
        &[("out", B), ("elapsed", F)],
        &[],
    );
}

#[test]
fn cat_debounce() {
    for (name, delay) in [("debounce", "5"), ("debounce_1", "1")] {
        check(&cat(
            name,
            "debounce",
            "cfg=1",
            "debounce.0",
            &[("0.in", B, G::Bit(0.2))],
            &[("0.out", B)],
            &[("delay", delay)],
            400,
        ));
    }
}

#[test]
fn cat_ddt_integ_lowpass() {
    simple(
        "ddt",
        "ddt",
        &[("in", F, G::Fin(-10.0, 10.0))],
        &[("out", F)],
        &[],
    );
    simple(
        "integ",
        "integ",
        &[
            ("in", F, G::Fin(-10.0, 10.0)),
            ("gain", F, G::Slow(-2.0, 2.0)),
            ("max", F, G::Slow(0.0, 0.05)),
            ("min", F, G::Slow(-0.05, 0.0)),
            ("reset", B, G::Bit(0.01)),
        ],
        &[("out", F)],
        &[],
    );
    for (name, gain) in [("lowpass", "0.1"), ("lowpass_1", "1")] {
        simple(
            name,
            "lowpass",
            &[("in", F, G::Fin(-10.0, 10.0)), ("load", B, G::Bit(0.01))],
            &[("out", F)],
            &[("gain", gain)],
        );
    }
}

#[test]
fn cat_updown() {
    for (name, setp) in [
        ("updown", vec![]),
        (
            "updown_clamp",
            vec![("clamp", "1"), ("min", "-3"), ("max", "4")],
        ),
        (
            "updown_wrap",
            vec![("wrap", "1"), ("min", "-3"), ("max", "4")],
        ),
    ] {
        simple(
            name,
            "updown",
            &[
                ("countup", B, G::Bit(0.4)),
                ("countdown", B, G::Bit(0.3)),
                ("reset", B, G::Bit(0.01)),
            ],
            &[("count", S)],
            &setp,
        );
    }
}

#[test]
fn cat_pwmgen() {
    // LinuxCNC's pwmgen exports one make-pulses and one update for all channels; ours one per
    // instance: the session adds LinuxCNC's, in our load order (make-pulses, then update).
    type Run<'a> = (
        &'a str,
        &'a str,
        &'a [(&'a str, Ty)],
        &'a [(&'a str, &'a str)],
    );
    let runs: [Run; 3] = [
        (
            "pwmgen",
            "output_type=0",
            &[("pwm", B), ("curr-dc", F)],
            &[
                ("pwm-freq", "100"),
                ("scale", "1"),
                ("max-dc", "0.9"),
                ("min-dc", "0.1"),
            ],
        ),
        (
            "pwmgen_dir_dither",
            "output_type=1",
            &[("pwm", B), ("dir", B), ("curr-dc", F)],
            &[
                ("pwm-freq", "70"),
                // Not 2: with `setp scale 2` before start, LinuxCNC 2.9's curr-dc ignored the
                // value (curr-dc = offset, dir FALSE) — its scale-change detector apparently starts
                // at 2 and never computes 1/scale; any other value works.
                ("scale", "2.5"),
                ("offset", "0.1"),
                ("dither-pwm", "1"),
            ],
        ),
        (
            "pwmgen_pdm_updown",
            "output_type=2",
            &[("up", B), ("down", B), ("curr-dc", F)],
            &[("pwm-freq", "0"), ("scale", "1.5")],
        ),
    ];
    let mut cases = Vec::new();
    for (name, args, outs, setp) in runs {
        let mut c = cat(
            name,
            "pwmgen",
            args,
            "pwmgen.0",
            &[
                ("value", F, G::Slow(-1.2, 1.2)),
                ("enable", B, G::Bit(0.01)),
            ],
            outs,
            setp,
            400,
        );
        c.functions = vec!["pwmgen.make-pulses".into(), "pwmgen.update".into()];
        cases.push(c);
    }
    check_all(&cases);
}
