//! The differential bench: one input sequence through LinuxCNC 2.9's own component (`halrun`, uspace)
//! and through ours ([`rtapi::components::Harness`]), compared period by period.
//!
//! # The LinuxCNC recipe
//!
//! For a case with input pins `i0…` and output pins `o0…`, one `halrun -f session.hal` session:
//!
//! ```text
//! loadrt threads name1=difft period1=1000000
//! loadrt <component> <loadrt args>
//! loadrt streamer depth=<rows+16> cfg=<one letter per input: b f s u>
//! loadrt sampler depth=<rows+60000> cfg=<one letter per output>
//! setp <param or unconnected pin> <value>          (the case's static settings)
//! net diff-in-0 streamer.0.pin.0 => <i0>           (one signal per input)
//! net diff-out-0 <o0> => sampler.0.pin.0           (one signal per output)
//! addf streamer.0 difft                            (1. the period's input row onto the pins)
//! addf <component's functions> difft               (2. the component)
//! addf sampler.0 difft                             (3. the outputs of this same period)
//! loadusr -w halstreamer <dir>/in.txt              (the whole input file into the FIFO, then exit)
//! start
//! loadusr -w /usr/bin/python3 <dir>/read.py N <dir>/out.txt <cfg>
//! ```
//!
//! * **Alignment.** `start` enables the thread; in its first period `streamer.0` writes row 0, the
//!   component runs, `sampler.0` records sample 0. So sample k is the output of period k for input row
//!   k — exactly [`Harness`]'s `set(row k)`, `step`, `get`. The rows are all in the streamer's FIFO before
//!   `start` (`halstreamer` is waited for; the FIFO is deeper than the file), so no period ever lacks its
//!   row, whatever the timing: uspace without realtime is slow and jittery, but the period a component
//!   sees is the thread's nominal `period` (functions get the nominal period, never a measured one), so
//!   the results are deterministic.
//! * **Reading the samples.** `halsampler` prints floats with `%f` (six decimals: 3.141593), far from
//!   the 1e-9 we compare to, so the samples are read instead with LinuxCNC's Python binding
//!   (`hal.stream(comp, hal.sampler_base, cfg).read()`, `repr` of the doubles: exact). `read.py` reads
//!   exactly N samples and exits (failing on a FIFO overrun or after 60 s); the thread runs on after
//!   the last row (the streamer then holds the last values), but nothing is recorded of it: the sampler
//!   FIFO is 60000 samples deeper than N, a minute of slack at 1 ms.
//! * **Stopping.** `halrun -f` unloads everything when the file ends (`read.py` exiting ends it).
//! * **One session at a time.** LinuxCNC's HAL lives in fixed SysV shared-memory keys: one realtime
//!   session per machine. Sessions take an exclusive `flock` on `/tmp/rtapi-linuxcnc-diff.lock` (test
//!   threads and other `cargo test` processes alike). A session that finds another one running
//!   ("Realtime already running", "duplicate component": a halrun outside the lock, or the previous
//!   session still tearing down) waits and retries, up to ~50 s; it never kills the other one
//!   (a leftover of a killed run needs `halrun -U` by hand, as the failure message says).
//! * **Not root.** `rtapi_app` refuses root; as root the session runs as `nobody`
//!   (`runuser -u nobody -- env HOME=<dir> halrun …`; `nobody` has no home, halrun only needs a
//!   writable `HOME`). The case directory (`/tmp/rtapi-lcdiff-<pid>-<case>`) is world-writable for that.
//! * **Parameter changes mid-run** go through pins: a setting that is a pin (siggen's `frequency`,
//!   pid's gains, limit3's `maxv`…) is an input column of the stream like any other, so it changes at
//!   an exact period on both sides. A real HAL param (`debounce.N.delay`) is set once before `start`
//!   (`setp`); cases that need two values use two cases.
//!
//! # Comparison
//!
//! Bits and integers must be equal; floats within 1e-9 relative (`|a−b| ≤ 1e-9·max(|a|,|b|)`, with an
//! absolute floor of 1e-12 for values that should be 0 but come out as 1e-17 on one side), NaN equals
//! NaN, infinities equal only themselves. The first differing period is reported with its inputs and
//! both outputs, and the few periods before it.

use std::fmt::{self, Write as _};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rtapi::components::Harness;
use rtapi_hal::{Access, HalReader, Value, WriteOptions};

/// A HAL type as a streamer/sampler column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Bit,
    Float,
    S32,
    U32,
}

impl Ty {
    fn letter(self) -> char {
        match self {
            Ty::Bit => 'b',
            Ty::Float => 'f',
            Ty::S32 => 's',
            Ty::U32 => 'u',
        }
    }
}

/// One value of a row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum V {
    B(bool),
    F(f64),
    S(i32),
    U(u32),
}

impl V {
    /// The value as `halstreamer` and `setp` both read it (floats exact: `{:e}` is shortest round-trip).
    pub(crate) fn text(&self) -> String {
        match *self {
            V::B(b) => u8::from(b).to_string(),
            V::F(f) if f.is_nan() => "nan".into(),
            V::F(f) if f.is_infinite() => (if f > 0.0 { "inf" } else { "-inf" }).into(),
            V::F(f) => format!("{f:e}"),
            V::S(i) => i.to_string(),
            V::U(u) => u.to_string(),
        }
    }

    fn ty(&self) -> Ty {
        match self {
            V::B(_) => Ty::Bit,
            V::F(_) => Ty::Float,
            V::S(_) => Ty::S32,
            V::U(_) => Ty::U32,
        }
    }

    pub(crate) fn from_value(v: Value) -> Option<V> {
        Some(match v {
            Value::Bit(b) => V::B(b),
            Value::Float(f) => V::F(f),
            Value::S32(i) => V::S(i),
            Value::U32(u) => V::U(u),
            #[allow(unreachable_patterns)]
            _ => return None,
        })
    }

    /// Parses one column of `read.py`'s output (`True`/`False` or 0/1, ints, Python float reprs).
    fn parse(ty: Ty, text: &str) -> Option<V> {
        Some(match ty {
            Ty::Bit => V::B(match text {
                "True" | "1" => true,
                "False" | "0" => false,
                _ => return None,
            }),
            Ty::Float => V::F(text.parse().ok()?),
            Ty::S32 => V::S(text.parse().ok()?),
            Ty::U32 => V::U(text.parse().ok()?),
        })
    }

    /// Equal as the comparison rule says (see the module docs).
    pub(crate) fn matches(&self, other: &V) -> bool {
        self.matches_within(other, REL_TOL, ABS_TOL)
    }

    /// Equal, floats within `rel` relative or `abs` absolute.
    pub(crate) fn matches_within(&self, other: &V, rel: f64, abs: f64) -> bool {
        match (*self, *other) {
            (V::F(a), V::F(b)) if !a.is_finite() || !b.is_finite() => {
                (a.is_nan() && b.is_nan()) || a == b
            }
            (V::F(a), V::F(b)) => {
                a == b || (a - b).abs() <= rel * a.abs().max(b.abs()) || (a - b).abs() <= abs
            }
            (a, b) => a == b,
        }
    }
}

impl fmt::Display for V {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            V::B(b) => write!(f, "{}", u8::from(*b)),
            V::F(x) => write!(f, "{x:?}"),
            V::S(i) => write!(f, "{i}"),
            V::U(u) => write!(f, "{u}"),
        }
    }
}

/// Floats: the relative tolerance of the comparison.
pub(crate) const REL_TOL: f64 = 1e-9;
/// Floats: the absolute floor (a 0 that comes out as 1e-17 on one side).
pub(crate) const ABS_TOL: f64 = 1e-12;

/// One differential case: a component, its settings, the pins compared and the input rows.
pub(crate) struct Case {
    /// Unique among the cases (names the temp dir and our segment).
    pub name: String,
    /// The component as both `loadrt`s name it.
    pub component: String,
    /// `loadrt` arguments after the name, the same on both sides (`count=1`, `cfg=…`).
    pub args: String,
    /// More `loadrt` arguments for LinuxCNC only (`debug=1`: pid's internals as pins).
    pub linuxcnc_args: String,
    /// LinuxCNC's function names to `addf`, in order; empty: ours, in our load order (the names are
    /// LinuxCNC's, so a function we name differently fails the session loudly).
    pub functions: Vec<String>,
    /// Input pins (full names) driven by the rows, column by column.
    pub inputs: Vec<(String, Ty)>,
    /// Output pins (full names) compared.
    pub outputs: Vec<(String, Ty)>,
    /// `setp` before `start` on both sides (params and unconnected pins).
    pub setp: Vec<(String, String)>,
    /// `setp` on LinuxCNC's side only: its extra knobs set to our semantics (documented per case).
    pub linuxcnc_only: Vec<(String, String)>,
    /// More halcmd lines after the component's `loadrt`, before the `setp`s: other components of a chain
    /// (`loadrt pid num_chan=1`) and the nets between them (`net cmd siggen.0.sine pid.0.command`).
    pub lines: Vec<String>,
    /// Thread period.
    pub period_ns: u64,
    /// Float tolerances, relative and absolute ([`REL_TOL`], [`ABS_TOL`] unless a case documents why
    /// LinuxCNC cannot be closer, e.g. siggen's single-precision phase step).
    pub tolerance: (f64, f64),
    /// One row per period, one value per input.
    pub rows: Vec<Vec<V>>,
}

impl Case {
    /// A case with a 1 ms period and no settings.
    pub(crate) fn new(name: &str, component: &str, args: &str, functions: &[&str]) -> Case {
        Case {
            name: name.into(),
            component: component.into(),
            args: args.into(),
            linuxcnc_args: String::new(),
            functions: functions.iter().map(|s| s.to_string()).collect(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            setp: Vec::new(),
            linuxcnc_only: Vec::new(),
            lines: Vec::new(),
            period_ns: 1_000_000,
            tolerance: (REL_TOL, ABS_TOL),
            rows: Vec::new(),
        }
    }

    pub(crate) fn input(mut self, pin: &str, ty: Ty) -> Case {
        self.inputs.push((pin.into(), ty));
        self
    }

    pub(crate) fn output(mut self, pin: &str, ty: Ty) -> Case {
        self.outputs.push((pin.into(), ty));
        self
    }

    pub(crate) fn setp(mut self, name: &str, value: &str) -> Case {
        self.setp.push((name.into(), value.into()));
        self
    }

    pub(crate) fn linuxcnc_args(mut self, args: &str) -> Case {
        self.linuxcnc_args = args.into();
        self
    }

    pub(crate) fn linuxcnc_setp(mut self, name: &str, value: &str) -> Case {
        self.linuxcnc_only.push((name.into(), value.into()));
        self
    }

    pub(crate) fn line(mut self, line: &str) -> Case {
        self.lines.push(line.into());
        self
    }

    pub(crate) fn tolerance(mut self, rel: f64, abs: f64) -> Case {
        self.tolerance = (rel, abs);
        self
    }

    pub(crate) fn rows(mut self, rows: Vec<Vec<V>>) -> Case {
        self.rows = rows;
        self
    }
}

/// A small deterministic PRNG (xorshift64*), so the sequences are the same on every run.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [lo, hi).
    pub(crate) fn float(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// TRUE with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.float(0.0, 1.0) < p
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub(crate) fn s32(&mut self) -> i32 {
        self.next_u64() as i32
    }

    pub(crate) fn u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
}

/// `n` input rows of a case, drawn from one seeded [`Rng`]: `f(k, rng)` gives row k.
pub(crate) fn rows(
    n: usize,
    seed: u64,
    mut f: impl FnMut(usize, &mut Rng) -> Vec<V>,
) -> Vec<Vec<V>> {
    let mut rng = Rng::new(seed);
    (0..n).map(|k| f(k, &mut rng)).collect()
}

const LOCK: &str = "/tmp/rtapi-linuxcnc-diff.lock";

/// Reads N samples of sampler FIFO 0 at full precision (see the module docs).
const READ_PY: &str = r#"import hal, os, sys, time
n, out, cfg = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = hal.component("diffread%d" % os.getpid())
s = hal.stream(c, hal.sampler_base, cfg)
c.ready()
rows, deadline = [], time.time() + 60
while len(rows) < n:
    r = s.read()
    if r is None:
        if time.time() > deadline:
            sys.exit("read.py: timed out after %d of %d samples" % (len(rows), n))
        time.sleep(0.002)
        continue
    rows.append(r)
if s.num_overruns:
    sys.exit("read.py: sampler FIFO overrun (%d)" % s.num_overruns)
with open(out + ".tmp", "w") as f:
    for r in rows:
        f.write(" ".join(repr(v) for v in r) + "\n")
os.rename(out + ".tmp", out)
"#;

/// Why LinuxCNC could not be run: the test fails with this, loudly.
fn not_run(why: &str) -> ! {
    let bar = "!".repeat(78);
    eprintln!("\n{bar}\nLINUXCNC DIFFERENTIAL TEST NOT RUN (counted as a FAILURE): {why}\n{bar}\n");
    panic!("LinuxCNC differential test could not run: {why}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `halrun ARGS` as a non-root user (`nobody` when we are root), with `HOME=home`.
fn halrun(home: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--", "env"]);
        c.arg(format!("HOME={}", home.display()));
        c.arg("halrun");
        c
    } else {
        let mut c = Command::new("halrun");
        c.env("HOME", home);
        c
    };
    cmd.args(args);
    cmd.output()
        .unwrap_or_else(|e| not_run(&format!("cannot start halrun: {e}")))
}

/// Checks that halrun exists and can be run as a non-root user; fails loudly otherwise.
fn check_linuxcnc() {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("halrun").is_file()))
        .unwrap_or(false);
    if !found {
        not_run("`halrun` is not installed (Debian package linuxcnc-uspace; .ci/run installs it)");
    }
    if is_root() {
        let ok = Command::new("runuser")
            .args(["-u", "nobody", "--", "true"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            not_run("we are root and `runuser -u nobody` does not work; halrun refuses root");
        }
    }
}

/// Whether an `rtapi_app` (a LinuxCNC realtime session, anyone's) is alive: zombies don't count.
pub(crate) fn rtapi_app_running() -> bool {
    let Ok(dir) = fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let stat = fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // "<pid> (<comm>) <state> …"
        match (stat.find('('), stat.rfind(')')) {
            (Some(a), Some(b)) if a < b => {
                &stat[a + 1..b] == "rtapi_app" && !stat[b + 1..].trim_start().starts_with('Z')
            }
            _ => false,
        }
    })
}

/// An exclusive lock on the one LinuxCNC session of the machine, held until dropped.
pub(crate) struct SessionLock(fs::File);

impl SessionLock {
    pub(crate) fn take() -> SessionLock {
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK)
            .unwrap_or_else(|e| not_run(&format!("cannot open {LOCK}: {e}")));
        let _ = fs::set_permissions(LOCK, fs::Permissions::from_mode(0o666));
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor we own; the lock goes with the file when it is dropped.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(r, 0, "flock {LOCK}: {}", std::io::Error::last_os_error());
        SessionLock(f)
    }
}

/// The case's temp dir, world-writable (the session may run as `nobody`), removed on drop.
struct CaseDir(PathBuf);

impl CaseDir {
    fn new(case: &str) -> CaseDir {
        let p = PathBuf::from(format!("/tmp/rtapi-lcdiff-{}-{case}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o777)).unwrap();
        CaseDir(p)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        fs::write(&p, text).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        p
    }
}

impl Drop for CaseDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

/// The session file of the recipe (module docs).
pub(crate) fn session_hal(case: &Case, functions: &[String], dir: &Path) -> String {
    let n = case.rows.len();
    let cfg = |cols: &[(String, Ty)]| cols.iter().map(|c| c.1.letter()).collect::<String>();
    let mut s = String::new();
    let _ = writeln!(s, "loadrt threads name1=difft period1={}", case.period_ns);
    let _ = writeln!(
        s,
        "loadrt {} {} {}",
        case.component, case.args, case.linuxcnc_args
    );
    if !case.inputs.is_empty() {
        let _ = writeln!(
            s,
            "loadrt streamer depth={} cfg={}",
            n + 16,
            cfg(&case.inputs)
        );
    }
    let _ = writeln!(
        s,
        "loadrt sampler depth={} cfg={}",
        n + 60_000,
        cfg(&case.outputs)
    );
    for l in &case.lines {
        let _ = writeln!(s, "{l}");
    }
    for (k, v) in case.setp.iter().chain(&case.linuxcnc_only) {
        let _ = writeln!(s, "setp {k} {v}");
    }
    for (i, (pin, _)) in case.inputs.iter().enumerate() {
        let _ = writeln!(s, "net diff-in-{i} streamer.0.pin.{i} => {pin}");
    }
    for (i, (pin, _)) in case.outputs.iter().enumerate() {
        // A pin already on a signal of the chain (Case::line): the sampler joins that signal.
        let chained = case.lines.iter().find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&"net") && w[2..].contains(&pin.as_str())).then(|| w[1].to_string())
        });
        match chained {
            Some(sig) => {
                let _ = writeln!(s, "net {sig} sampler.0.pin.{i}");
            }
            None => {
                let _ = writeln!(s, "net diff-out-{i} {pin} => sampler.0.pin.{i}");
            }
        }
    }
    if !case.inputs.is_empty() {
        let _ = writeln!(s, "addf streamer.0 difft");
    }
    for f in functions {
        let _ = writeln!(s, "addf {f} difft");
    }
    let _ = writeln!(s, "addf sampler.0 difft");
    if !case.inputs.is_empty() {
        let _ = writeln!(s, "loadusr -w halstreamer {}/in.txt", dir.display());
    }
    let _ = writeln!(s, "start");
    let _ = writeln!(
        s,
        "loadusr -w /usr/bin/python3 {d}/read.py {n} {d}/out.txt {}",
        cfg(&case.outputs),
        d = dir.display()
    );
    s
}

/// Runs the case through LinuxCNC: one row of outputs per period.
pub(crate) fn run_linuxcnc(case: &Case, functions: &[String]) -> Vec<Vec<V>> {
    check_linuxcnc();
    let dir = CaseDir::new(&case.name);
    let mut input = String::new();
    for row in &case.rows {
        let cols: Vec<String> = row.iter().map(V::text).collect();
        input.push_str(&cols.join(" "));
        input.push('\n');
    }
    dir.write("in.txt", &input);
    dir.write("read.py", READ_PY);
    let hal = dir.write("session.hal", &session_hal(case, functions, &dir.0));
    let out_path = dir.0.join("out.txt");
    let output = {
        let _lock = SessionLock::take();
        let mut tries = 0;
        loop {
            // Starting while another session runs would fail, and halrun's cleanup after the
            // failure would stop the other session's realtime too: wait for it first.
            for _ in 0..200 {
                if !rtapi_app_running() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            let o = halrun(&dir.0, &["-f", hal.to_str().unwrap()]);
            let err = String::from_utf8_lossy(&o.stderr);
            // Another LinuxCNC session on the machine (a halrun outside this lock, or the previous
            // one still tearing down): wait for it, never kill it.
            let busy =
                err.contains("Realtime already running") || err.contains("duplicate component");
            tries += 1;
            if out_path.exists() || !busy || tries == 20 {
                break o;
            }
            std::thread::sleep(std::time::Duration::from_millis(250 * tries));
        }
    };
    let text = fs::read_to_string(&out_path).unwrap_or_else(|e| {
        panic!(
            "case {}: LinuxCNC produced no samples ({e}); halrun exit {:?} (a leftover session? \
             `halrun -U` as its user clears it)\nsession:\n{}\nstdout:\n{}\nstderr:\n{}",
            case.name,
            output.status.code(),
            fs::read_to_string(&hal).unwrap_or_default(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let stderr = String::from_utf8_lossy(&output.stderr);
    // halstreamer skips a bad line with a message and goes on: that would shift every later row.
    assert!(
        !stderr.contains("halstreamer") && !stderr.to_lowercase().contains("error"),
        "case {}: halrun complained:\n{stderr}",
        case.name
    );
    let rows: Vec<Vec<V>> = text
        .lines()
        .enumerate()
        .map(|(k, line)| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cols.len(), case.outputs.len(), "sample {k}: {line}");
            cols.iter()
                .zip(&case.outputs)
                .map(|(t, (pin, ty))| {
                    V::parse(*ty, t)
                        .unwrap_or_else(|| panic!("sample {k}: {pin} = '{t}' is not a {ty:?}"))
                })
                .collect()
        })
        .collect();
    assert_eq!(
        rows.len(),
        case.rows.len(),
        "case {}: LinuxCNC gave {} samples for {} rows",
        case.name,
        rows.len(),
        case.rows.len()
    );
    rows
}

/// Runs the case through our component: one row of outputs per period, and our functions in order. A
/// component missing from our registry fails here (never skipped).
pub(crate) fn run_ours(case: &Case) -> (Vec<Vec<V>>, Vec<String>) {
    let instance = format!("lcdiff-{}-{}", std::process::id(), case.name);
    // `loadrt` falls back to LinuxCNC's own module when rtapi has no component of that name (issue
    // 16): that would compare LinuxCNC with itself. Ours must be native.
    assert!(
        rtapi::components::Registry::builtin()
            .entries()
            .any(|e| e.name == case.component),
        "case {}: rtapi has no native component '{}' (a component missing from our registry FAILS its differential case)",
        case.name,
        case.component
    );
    let mut h = Harness::new(&instance).unwrap();
    // LinuxCNC's `num_chan=` is rtapi's `count=` (halcmd maps it; the Harness takes rtapi's own
    // arguments).
    let rtapi_args = |args: &str| args.replace("num_chan=", "count=");
    let line = format!("{} {}", case.component, rtapi_args(&case.args));
    if let Err(e) = h.loadrt(&line) {
        panic!(
            "case {}: our `loadrt {line}` failed: {e}\n(a component missing from our registry FAILS its differential case)",
            case.name
        );
    }
    // A chain: the other components, native too (functions run in load order, which the chain's
    // `loadrt` lines follow), and the nets between them.
    for l in &case.lines {
        let words: Vec<&str> = l.split_whitespace().collect();
        match words.as_slice() {
            ["loadrt", name, args @ ..] => {
                assert!(
                    rtapi::components::Registry::builtin()
                        .entries()
                        .any(|e| e.name == *name),
                    "case {}: rtapi has no native component '{name}'",
                    case.name
                );
                let line = format!("{name} {}", rtapi_args(&args.join(" ")));
                h.loadrt(&line)
                    .unwrap_or_else(|e| panic!("case {}: our loadrt {line}: {e}", case.name));
            }
            ["net", signal, pins @ ..] => {
                for p in pins.iter().filter(|p| !matches!(**p, "=>" | "<=" | "<=>")) {
                    rtapi::components::Target::hal(&mut h)
                        .net(signal, p)
                        .unwrap_or_else(|e| panic!("case {}: {l}: {e}", case.name));
                }
            }
            _ => panic!("case {}: line '{l}' is neither loadrt nor net", case.name),
        }
    }
    h.start().unwrap();
    let functions: Vec<String> = h.functions().map(String::from).collect();
    // A second mapping of the same segment, to write NaN and infinities (`setp --force`; the
    // harness's own `set` refuses them, as `rtapi setp` does by default).
    let w = HalReader::open(&instance, Access::ReadWrite).unwrap();
    let force = WriteOptions { force: true };
    for (k, v) in &case.setp {
        w.setp_with(k, v, force)
            .unwrap_or_else(|e| panic!("case {}: our setp {k} {v}: {e}", case.name));
    }
    let mut out = Vec::with_capacity(case.rows.len());
    for row in &case.rows {
        for ((pin, _), v) in case.inputs.iter().zip(row) {
            w.setp_with(pin, &v.text(), force)
                .unwrap_or_else(|e| panic!("case {}: our setp {pin}: {e}", case.name));
        }
        h.step(case.period_ns);
        out.push(
            case.outputs
                .iter()
                .map(|(pin, ty)| {
                    let v = h
                        .get(pin)
                        .unwrap_or_else(|e| panic!("case {}: our {pin}: {e}", case.name));
                    let v = V::from_value(v).unwrap();
                    assert_eq!(
                        v.ty(),
                        *ty,
                        "case {}: our {pin} has another type",
                        case.name
                    );
                    v
                })
                .collect(),
        );
    }
    (out, functions)
}

/// Runs both sides and fails on the first differing period, showing it and the ones before it.
pub(crate) fn check(case: &Case) {
    for (k, row) in case.rows.iter().enumerate() {
        assert_eq!(row.len(), case.inputs.len(), "case {}: row {k}", case.name);
        for ((pin, ty), v) in case.inputs.iter().zip(row) {
            assert_eq!(v.ty(), *ty, "case {}: row {k}, {pin}", case.name);
        }
    }
    let (ours, our_functions) = run_ours(case);
    let functions = if case.functions.is_empty() {
        &our_functions
    } else {
        &case.functions
    };
    let theirs = run_linuxcnc(case, functions);
    let (rel, abs) = case.tolerance;
    let same = |a: &V, b: &V| a.matches_within(b, rel, abs);
    let Some(k) =
        (0..case.rows.len()).find(|&k| !ours[k].iter().zip(&theirs[k]).all(|(a, b)| same(a, b)))
    else {
        eprintln!(
            "case {}: {} periods, {} outputs: equal to LinuxCNC",
            case.name,
            case.rows.len(),
            case.outputs.len()
        );
        return;
    };
    let mut msg = format!(
        "case {}: differs from LinuxCNC first at period {k} (of {})\n",
        case.name,
        case.rows.len()
    );
    for p in k.saturating_sub(3)..=k {
        let _ = writeln!(msg, "period {p}:");
        for (i, ((pin, _), v)) in case.inputs.iter().zip(&case.rows[p]).enumerate() {
            // The first period shown gives every input, the later ones only what changed.
            if p == k.saturating_sub(3) || !case.rows[p - 1][i].matches(v) {
                let _ = writeln!(msg, "    in  {pin:<28} {v}");
            }
        }
        for (i, (pin, _)) in case.outputs.iter().enumerate() {
            let (a, b) = (ours[p][i], theirs[p][i]);
            let mark = if same(&a, &b) { "" } else { "   <-- differs" };
            let _ = writeln!(msg, "    out {pin:<28} ours {a:<24} linuxcnc {b}{mark}");
        }
    }
    panic!("{msg}");
}

/// Runs `script` as a `.hal` file through LinuxCNC's `halrun -f` (as a non-root user, one session at
/// a time); returns its standard output without halrun's `Note:` lines, and its standard error.
pub(crate) fn halrun_script(name: &str, script: &str) -> (String, String) {
    check_linuxcnc();
    let dir = CaseDir::new(name);
    let hal = dir.write("script.hal", script);
    let _lock = SessionLock::take();
    for _ in 0..200 {
        if !rtapi_app_running() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let o = halrun(&dir.0, &["-f", hal.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !stderr.contains("Realtime already running"),
        "{name}: LinuxCNC's halrun refused to start: an rtapi_app runs somewhere on this machine \
         (`ps -C rtapi_app`; halrun looks machine-wide, namespaces included), so there is nothing \
         to compare against:\n{stderr}"
    );
    let stdout: String = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with("Note: "))
        .map(|l| format!("{l}\n"))
        .collect();
    (stdout, stderr.into_owned())
}
