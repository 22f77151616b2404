//! `rtapi`, the Python module: a running instance's HAL from Python, and LinuxCNC-style user-space
//! components whose pins live in the instance's segment.
//!
//! Reads go through [`rtapi_hal::HalReader`] over a read-only mapping opened with the CLI's own
//! trust checks and messages ([`rtapi::instance::open`]); `set` follows `setp`/`sets`' rules
//! over a read-write mapping. A user-space component is declared to the instance's owner over its
//! control socket (the owner creates the component, pins and params live and removes them when the
//! connection closes); its process then writes its own pins' cells directly
//! ([`rtapi_hal::HalReader::write_own`]). See ARCHITECTURE.md, "User-space components".

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use ::rtapi::instance::control::{ClientError, ControlClient, UserComponent, UserParam, UserPin};
use rtapi_hal::{
    Access, HalError, HalReader, Located, ObjectKind, ParamAccess, PinDir, Value, ValueType,
    WriteOptions,
};

pyo3::create_exception!(
    rtapi,
    Error,
    PyException,
    "Every failure of the rtapi module: its text is the message `rtapi` on the command line prints \
     for the same failure (after `rtapi: `)."
);
pyo3::create_exception!(
    rtapi,
    NotFound,
    Error,
    "No pin, param, signal or thread of that name."
);
pyo3::create_exception!(
    rtapi,
    NotWritable,
    Error,
    "The write is refused by HAL's rules (an OUT pin of another component, a connected input, a \
     read-only param, a driven signal, NaN without force, a value of the wrong type)."
);
pyo3::create_exception!(
    rtapi,
    Untrusted,
    Error,
    "The segment is not to be believed (a symlink, another user's file, loose permissions): \
     refused before a byte of it is read."
);
pyo3::create_exception!(
    rtapi,
    Timeout,
    Error,
    "wait() or a component's ready() ran out of time."
);

/// `bit` (LinuxCNC's HAL_BIT).
const BIT: u32 = ValueType::Bit as u32;
/// `float`.
const FLOAT: u32 = ValueType::Float as u32;
/// `s32`.
const S32: u32 = ValueType::S32 as u32;
/// `u32`.
const U32: u32 = ValueType::U32 as u32;
/// `s64`.
const S64: u32 = ValueType::S64 as u32;
/// `u64`.
const U64: u32 = ValueType::U64 as u32;
/// Pin directions and param access, with LinuxCNC's values (so they never collide with each other).
const IN: u32 = 16;
const OUT: u32 = 32;
const IO: u32 = 48;
const RO: u32 = 64;
const RW: u32 = 192;

fn hal_err(e: HalError) -> PyErr {
    let text = e.to_string();
    match e {
        HalError::NotFound { .. } => NotFound::new_err(text),
        HalError::NotWritable { .. } | HalError::BadValue { .. } | HalError::NonFinite { .. } => {
            NotWritable::new_err(text)
        }
        HalError::Untrusted { .. } => Untrusted::new_err(text),
        _ => Error::new_err(text),
    }
}

/// [`hal_err`], with the instance's nearest names after an unknown one, as the CLI says it.
fn hal_err_in(reader: &HalReader, e: HalError) -> PyErr {
    match ::rtapi::instance::open::unknown_name_text(reader, &e) {
        Some(text) => NotFound::new_err(text),
        None => hal_err(e),
    }
}

fn client_err(e: ClientError) -> PyErr {
    Error::new_err(e.to_string())
}

/// The instance a call names, else `$RTAPI_INSTANCE` (set for programs `loadusr` starts), else
/// `default`.
fn instance_name(name: Option<String>) -> String {
    name.or_else(|| std::env::var("RTAPI_INSTANCE").ok())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| rtapi_hal::DEFAULT_INSTANCE.to_string())
}

fn open(instance: &str, access: Access, trust: &[String]) -> PyResult<HalReader> {
    use ::rtapi::instance::OpenError;
    let trust = ::rtapi::instance::trust(trust).map_err(|e| Error::new_err(e.to_string()))?;
    ::rtapi::instance::open(instance, access, &trust).map_err(|e| match e {
        // The same message as the CLI's; the kind of failure picks the exception.
        OpenError::Untrusted(_) => Untrusted::new_err(e.to_string()),
        _ => Error::new_err(e.to_string()),
    })
}

fn value_to_py(py: Python<'_>, v: Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Bit(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        Value::Float(f) => f.into_pyobject(py)?.into_any().unbind(),
        Value::S32(i) => i.into_pyobject(py)?.into_any().unbind(),
        Value::U32(i) => i.into_pyobject(py)?.into_any().unbind(),
        Value::S64(i) => i.into_pyobject(py)?.into_any().unbind(),
        Value::U64(i) => i.into_pyobject(py)?.into_any().unbind(),
    })
}

/// A Python value as the text `setp` would be given: bool as 1/0, int in decimal, float with all
/// its digits (Rust's shortest round-trip form), str as is.
fn value_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(b) = v.cast::<pyo3::types::PyBool>() {
        return Ok(if b.is_true() { "1" } else { "0" }.to_string());
    }
    if let Ok(s) = v.cast::<pyo3::types::PyString>() {
        return Ok(s.to_str()?.to_string());
    }
    if v.cast::<pyo3::types::PyInt>().is_ok() {
        return Ok(v.str()?.to_str()?.to_string());
    }
    if let Ok(f) = v.extract::<f64>() {
        return Ok(format!("{f:?}"));
    }
    Err(NotWritable::new_err(format!(
        "a HAL value is a bool, an int, a float or a string, not {}",
        v.get_type().name()?
    )))
}

fn dir_str(d: PinDir) -> &'static str {
    match d {
        PinDir::In => "in",
        PinDir::Out => "out",
        PinDir::Io => "io",
    }
}

fn access_str(a: ParamAccess) -> &'static str {
    match a {
        ParamAccess::Ro => "ro",
        ParamAccess::Rw => "rw",
    }
}

fn state_str(s: rtapi_hal::ThreadState) -> String {
    match s {
        rtapi_hal::ThreadState::Stopped => "stopped".into(),
        rtapi_hal::ThreadState::Running => "running".into(),
        rtapi_hal::ThreadState::Stalled { function: Some(f) } => format!("stalled in function {f}"),
        rtapi_hal::ThreadState::Stalled { function: None } => "stalled".into(),
    }
}

/// The longest duration an argument may ask for, in seconds (about 31 years): far past any real
/// wait, and far inside what a deadline `Instant::now() + it` can hold (`1e19` s, taken as is,
/// overflowed it and panicked).
const MAX_SECONDS: f64 = 1e9;

/// The shortest and the longest nap between two looks of [`poll`]: `interval` is kept between them
/// (a shorter one would only burn the CPU, a longer one would delay Ctrl-C).
const NAP_MIN: Duration = Duration::from_micros(100);
const NAP_MAX: Duration = Duration::from_secs(1);

/// Argument `arg`'s `value` seconds as a [`Duration`]: a finite number from 0 to [`MAX_SECONDS`];
/// anything else (NaN, an infinity, a negative, a larger number) is an `rtapi.Error` naming the
/// argument and what it accepts — never a panic.
fn seconds(arg: &str, value: f64, note: &str) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(value) {
        Ok(d) if value <= MAX_SECONDS => Ok(d),
        _ => Err(Error::new_err(format!(
            "{arg} must be a finite number of seconds from 0 to {MAX_SECONDS:e}{note}, not {value:?}"
        ))),
    }
}

/// Waits until `done` (called with the GIL) says yes, polling `read` (without the GIL) every
/// `interval` (kept within [`NAP_MIN`]..=[`NAP_MAX`]), for at most `timeout`. Ctrl-C interrupts it.
fn poll<T>(
    py: Python<'_>,
    timeout: Duration,
    interval: Duration,
    read: impl Fn() -> PyResult<T> + Sync,
    mut done: impl FnMut(Python<'_>, &T) -> PyResult<bool>,
) -> PyResult<Option<T>>
where
    T: Send,
{
    let interval = interval.clamp(NAP_MIN, NAP_MAX);
    let until = Instant::now().checked_add(timeout).ok_or_else(|| {
        Error::new_err(format!(
            "a timeout of {} s is past what this system's clock can count to",
            timeout.as_secs_f64()
        ))
    })?;
    loop {
        let v = py.detach(&read)?;
        if done(py, &v)? {
            return Ok(Some(v));
        }
        let now = Instant::now();
        if now >= until {
            return Ok(None);
        }
        let nap = interval.min(until - now);
        py.detach(|| std::thread::sleep(nap));
        py.check_signals()?;
    }
}

/// Names found once and where: repeated reads and writes skip the search of the names while the
/// structure does not change (a change makes the `_located` calls answer `None`: found again).
#[derive(Default)]
struct Places(Mutex<HashMap<String, Located>>);

/// At most this many names are remembered (a program reading every name once should not grow).
const PLACES_KEPT: usize = 4096;

impl Places {
    /// `f` at the place of `name`, finding it (again) when needed; `None` from `f` twice (the
    /// structure changing all the time) falls back to `slow`.
    fn with<T>(
        &self,
        reader: &HalReader,
        name: &str,
        f: impl Fn(&Located) -> Result<Option<T>, HalError>,
        slow: impl Fn() -> Result<T, HalError>,
    ) -> Result<T, HalError> {
        for _ in 0..2 {
            let known = self
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .copied();
            let at = match known {
                Some(at) => at,
                None => {
                    let at = match reader.locate(name) {
                        Ok(at) => at,
                        // Not there: the slow path gives the caller's own message.
                        Err(HalError::NotFound { .. }) => return slow(),
                        Err(e) => return Err(e),
                    };
                    let mut places = self.0.lock().unwrap_or_else(|p| p.into_inner());
                    if places.len() >= PLACES_KEPT {
                        places.clear();
                    }
                    places.insert(name.to_string(), at);
                    at
                }
            };
            if let Some(v) = f(&at)? {
                return Ok(v);
            }
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(name);
        }
        slow()
    }
}

/// The names of the instances whose segments are in `/dev/shm` (live or stale; open one to know).
#[pyfunction]
fn instances() -> PyResult<Vec<String>> {
    let mut names = Vec::new();
    let dir = match std::fs::read_dir("/dev/shm") {
        Ok(d) => d,
        Err(e) => return Err(Error::new_err(format!("cannot list /dev/shm: {e}"))),
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(instance) = name.strip_prefix("rtapi-") else {
            continue;
        };
        if rtapi_hal::Instance::new(instance).is_ok() {
            names.push(instance.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// A running instance's HAL, opened read-only with the same trust checks as `rtapi show`.
///
/// `Instance(name=None, trust_owner=())`: `name` defaults to `$RTAPI_INSTANCE`, else `default`;
/// `trust_owner` names other users whose segments to believe (as `--trust-owner`).
#[pyclass(module = "rtapi", frozen)]
struct Instance {
    name: String,
    trust: Vec<String>,
    reader: HalReader,
    writer: std::sync::OnceLock<HalReader>,
    places: Places,
}

impl Instance {
    fn value(&self, name: &str) -> Result<Value, HalError> {
        self.places.with(
            &self.reader,
            name,
            |at| self.reader.get_located(at),
            || self.reader.get(name),
        )
    }

    fn writer(&self) -> PyResult<&HalReader> {
        if let Some(w) = self.writer.get() {
            return Ok(w);
        }
        let w = open(&self.name, Access::ReadWrite, &self.trust)?;
        Ok(self.writer.get_or_init(|| w))
    }
}

#[pymethods]
impl Instance {
    #[new]
    #[pyo3(signature = (name=None, trust_owner=Vec::new()))]
    fn new(py: Python<'_>, name: Option<String>, trust_owner: Vec<String>) -> PyResult<Self> {
        let name = instance_name(name);
        let reader = py.detach(|| open(&name, Access::ReadOnly, &trust_owner))?;
        Ok(Instance {
            name,
            trust: trust_owner,
            reader,
            writer: std::sync::OnceLock::new(),
            places: Places::default(),
        })
    }

    /// The instance's name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The owner's pid (from the segment header; for messages).
    #[getter]
    fn owner_pid(&self) -> u32 {
        self.reader.header().owner_pid
    }

    /// Whether the owner process is alive (its lock on the segment is held).
    fn owner_alive(&self) -> bool {
        self.reader.owner_alive()
    }

    /// The structure generation: it moves with every structural change (a component, pin, signal
    /// or link added or removed).
    fn generation(&self) -> u64 {
        self.reader.generation()
    }

    /// Every pin: a list of dicts with name, type, dir, value, owner (its component) and signal.
    fn pins<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let pins = py.detach(|| self.reader.pins()).map_err(hal_err)?;
        let list = PyList::empty(py);
        for p in pins {
            let d = PyDict::new(py);
            d.set_item("name", p.name)?;
            d.set_item("type", p.ty.as_str())?;
            d.set_item("dir", dir_str(p.dir))?;
            d.set_item("value", value_to_py(py, p.value)?)?;
            d.set_item("owner", p.component)?;
            d.set_item("signal", p.signal)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Just the pin values, in the order of `pins()` (cheap: no names). They line up with `pins()`
    /// while `generation()` does not move.
    fn pin_values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let values = py.detach(|| self.reader.pin_values()).map_err(hal_err)?;
        let list = PyList::empty(py);
        for v in values {
            list.append(value_to_py(py, v)?)?;
        }
        Ok(list)
    }

    /// Every param: dicts with name, type, access, value and owner.
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let params = py.detach(|| self.reader.params()).map_err(hal_err)?;
        let list = PyList::empty(py);
        for p in params {
            let d = PyDict::new(py);
            d.set_item("name", p.name)?;
            d.set_item("type", p.ty.as_str())?;
            d.set_item("access", access_str(p.access))?;
            d.set_item("value", value_to_py(py, p.value)?)?;
            d.set_item("owner", p.component)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Every signal: dicts with name, type, value, writer (the OUT pin driving it, or None),
    /// readers and bidirs (counts of IN and IO pins).
    fn signals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let signals = py.detach(|| self.reader.signals()).map_err(hal_err)?;
        let list = PyList::empty(py);
        for s in signals {
            let d = PyDict::new(py);
            d.set_item("name", s.name)?;
            d.set_item("type", s.ty.as_str())?;
            d.set_item("value", value_to_py(py, s.value)?)?;
            d.set_item("writer", s.writer)?;
            d.set_item("readers", s.readers)?;
            d.set_item("bidirs", s.bidirs)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Every component: dicts with name and the numbers of pins, params and functions.
    fn components<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let comps = py.detach(|| self.reader.components()).map_err(hal_err)?;
        let list = PyList::empty(py);
        for c in comps {
            let d = PyDict::new(py);
            d.set_item("name", c.name)?;
            d.set_item("pins", c.pins)?;
            d.set_item("params", c.params)?;
            d.set_item("functions", c.functions)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Every thread: dicts with name, period_ns, cpu, priority, flavor, timer, state and functions.
    fn threads<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let threads = py.detach(|| self.reader.threads()).map_err(hal_err)?;
        let list = PyList::empty(py);
        for t in threads {
            let d = PyDict::new(py);
            d.set_item("name", t.name)?;
            d.set_item("period_ns", t.period_ns)?;
            d.set_item("cpu", t.cpu)?;
            d.set_item("priority", t.priority)?;
            d.set_item("flavor", t.flavor)?;
            d.set_item("timer", t.timer)?;
            d.set_item("state", state_str(t.state))?;
            d.set_item("functions", t.functions)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// The value of a pin, param or signal (pins and params first, as `rtapi getp`).
    fn get(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        let v = py
            .detach(|| self.value(name))
            .map_err(|e| hal_err_in(&self.reader, e))?;
        value_to_py(py, v)
    }

    /// Sets a param or an unconnected IN/IO pin (as `rtapi setp`), or a signal no OUT pin drives
    /// (as `rtapi sets`), with their rules and messages. NaN and infinities need `force=True`.
    #[pyo3(signature = (name, value, force=false))]
    fn set(
        &self,
        py: Python<'_>,
        name: &str,
        value: &Bound<'_, PyAny>,
        force: bool,
    ) -> PyResult<()> {
        let text = value_text(value)?;
        let opts = WriteOptions { force };
        py.detach(|| {
            let w = self.writer()?;
            match w.setp_with(name, &text, opts) {
                Err(HalError::NotFound {
                    kind: ObjectKind::PinOrParam,
                    ..
                }) => match w.sets_with(name, &text, opts) {
                    Err(HalError::NotFound { .. }) => Err(hal_err_in(
                        w,
                        HalError::NotFound {
                            kind: ObjectKind::Any,
                            name: name.to_string(),
                        },
                    )),
                    other => other.map(|_| ()).map_err(hal_err),
                },
                other => other.map(|_| ()).map_err(hal_err),
            }
        })
    }

    /// A thread's statistics, one consistent copy: cycles, overruns, latency_min/max/mean/stddev
    /// (ns; None before the first period), jitter_max, exec_last/max/mean, drift, spikes, the
    /// latency histogram (`histogram`: bin_ns, counts, underflow, overflow), and `io`: None for a
    /// thread that ran no I/O function, else its I/O time per period (periods, calls,
    /// last/min/max/mean_ns) and the errors its drivers counted (errors, error_periods; None from
    /// a segment older than layout 2.3).
    fn thread_stats<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
        let (s, h) = py
            .detach(|| {
                Ok::<_, HalError>((
                    self.reader.thread_stats(name)?,
                    self.reader.histogram(name)?,
                ))
            })
            .map_err(hal_err)?;
        let d = PyDict::new(py);
        d.set_item("period_ns", s.period_ns)?;
        d.set_item("cycles", s.cycles)?;
        d.set_item("overruns", s.overruns)?;
        d.set_item("latency_min_ns", s.latency_min())?;
        d.set_item("latency_max_ns", s.latency_max())?;
        d.set_item("latency_mean_ns", s.latency_mean())?;
        d.set_item("latency_stddev_ns", s.latency_stddev())?;
        d.set_item("jitter_max_ns", s.jitter_max_ns)?;
        d.set_item("exec_last_ns", s.exec_last_ns)?;
        d.set_item("exec_max_ns", s.exec_max_ns)?;
        d.set_item("exec_mean_ns", s.exec_mean())?;
        d.set_item("drift_ns", s.drift_ns)?;
        d.set_item("spikes", s.spikes_total)?;
        let hist = PyDict::new(py);
        hist.set_item("bin_ns", h.bin_ns)?;
        hist.set_item("counts", h.counts)?;
        hist.set_item("underflow", h.underflow)?;
        hist.set_item("overflow", h.overflow)?;
        d.set_item("histogram", hist)?;
        let io = match s.io.filter(|io| io.periods > 0) {
            None => None,
            Some(io) => {
                let o = PyDict::new(py);
                o.set_item("periods", io.periods)?;
                o.set_item("calls", io.calls)?;
                o.set_item("last_ns", io.last_ns)?;
                o.set_item("min_ns", io.min())?;
                o.set_item("max_ns", io.max_ns)?;
                o.set_item("mean_ns", io.mean())?;
                o.set_item("errors", io.errors.map(|e| e.count))?;
                o.set_item("error_periods", io.errors.map(|e| e.periods))?;
                Some(o)
            }
        };
        d.set_item("io", io)?;
        Ok(d)
    }

    /// Waits until the pin, param or signal `name` satisfies `until` and returns its value:
    /// `until` is a callable (called with the value), a value to reach (compared with `==`), or
    /// None for any change from the value at the call. Polls every `interval` seconds without
    /// holding the GIL (kept between 0.1 ms and 1 s); raises `rtapi.Timeout` after `timeout`
    /// seconds. Both are finite numbers of seconds from 0 to 1e9: NaN, infinities, negatives and
    /// larger numbers raise `rtapi.Error` naming the argument.
    #[pyo3(signature = (name, until=None, timeout=5.0, interval=0.001))]
    fn wait(
        &self,
        py: Python<'_>,
        name: &str,
        until: Option<Py<PyAny>>,
        timeout: f64,
        interval: f64,
    ) -> PyResult<Py<PyAny>> {
        // The arguments first: a wrong one is refused before the name is looked up.
        let wait_for = seconds("timeout", timeout, "")?;
        let every = seconds(
            "interval",
            interval,
            " (polled every 0.1 ms at the most often, every second at the least)",
        )?;
        let read = || self.value(name).map_err(|e| hal_err_in(&self.reader, e));
        let first = py.detach(read)?;
        let until = until.map(|u| u.into_bound(py));
        let mut last = first;
        let reached = poll(py, wait_for, every, read, |py, v| {
            last = *v;
            let v = value_to_py(py, *v)?.into_bound(py);
            match &until {
                None => Ok(last != first),
                Some(u) if u.is_callable() => u.call1((v,))?.is_truthy(),
                Some(u) => v.eq(u),
            }
        })?;
        match reached {
            Some(v) => value_to_py(py, v),
            None => Err(Timeout::new_err(format!(
                "{name} did not {} within {timeout} s (last value {last})",
                match &until {
                    None => "change".to_string(),
                    Some(u) if u.is_callable() => "satisfy the predicate".to_string(),
                    Some(u) => format!("reach {}", u.repr()?),
                }
            ))),
        }
    }

    /// `rtapi.Instance("NAME")`.
    fn __repr__(&self) -> String {
        format!("rtapi.Instance({:?})", self.name)
    }
}

/// A LinuxCNC-style user-space component: `component(name, instance=None)`, then `newpin`,
/// `newparam`, `ready()`; `c["pin"]` reads and `c["pin"] = v` writes its pins and params.
///
/// Its pins live in the instance's segment, so halcmd can `net` them to real-time components. It
/// exists from `ready()` until `exit()` — or until its process ends in any way, the owner removing
/// it when the connection that declared it closes.
#[pyclass(module = "rtapi")]
struct Component {
    name: String,
    instance: String,
    trust: Vec<String>,
    decl: UserComponent,
    live: Option<Live>,
}

/// A ready component: the read-write mapping its writes go through and the connection that keeps
/// it in the instance.
struct Live {
    reader: HalReader,
    client: ControlClient,
    places: Places,
}

impl Component {
    fn full(&self, name: &str) -> String {
        format!("{}.{name}", self.name)
    }

    fn taken(&self, full: &str) -> bool {
        self.decl.pins.iter().any(|p| p.name == full)
            || self.decl.params.iter().any(|p| p.name == full)
    }

    fn live(&self) -> PyResult<&Live> {
        self.live.as_ref().ok_or_else(|| {
            Error::new_err(format!(
                "component '{}' is not ready: call ready() first (or it has exited)",
                self.name
            ))
        })
    }

    /// A failed read or write of a ready component: when its instance has stopped, that is the
    /// reason (the owner removed the component as it stopped), whatever the lookup said.
    fn failed(&self, live: &Live, e: HalError) -> PyErr {
        if matches!(e, HalError::NotFound { .. }) && !live.reader.owner_alive() {
            return hal_err(HalError::OwnerGone {
                instance: self.instance.clone(),
                pid: live.reader.header().owner_pid,
            });
        }
        hal_err(e)
    }

    fn declare_check(&self, name: &str) -> PyResult<String> {
        if self.live.is_some() {
            return Err(Error::new_err(format!(
                "component '{}' is ready: pins and params are declared before ready()",
                self.name
            )));
        }
        let full = self.full(name);
        if self.taken(&full) {
            return Err(Error::new_err(format!(
                "component '{}' already has a pin or param named '{full}'",
                self.name
            )));
        }
        Ok(full)
    }
}

fn value_type(code: u32) -> PyResult<ValueType> {
    Ok(match code {
        BIT => ValueType::Bit,
        FLOAT => ValueType::Float,
        S32 => ValueType::S32,
        U32 => ValueType::U32,
        S64 => ValueType::S64,
        U64 => ValueType::U64,
        _ => {
            return Err(Error::new_err(format!(
                "type {code} is not one of rtapi.BIT, FLOAT, S32, U32, S64, U64"
            )))
        }
    })
}

#[pymethods]
impl Component {
    #[new]
    #[pyo3(signature = (name, instance=None, trust_owner=Vec::new()))]
    fn new(name: &str, instance: Option<String>, trust_owner: Vec<String>) -> PyResult<Self> {
        if let Err(e) = rtapi_hal::name::validate(name) {
            return Err(hal_err(e));
        }
        Ok(Component {
            name: name.to_string(),
            instance: instance_name(instance),
            trust: trust_owner,
            decl: UserComponent {
                name: name.to_string(),
                ..UserComponent::default()
            },
            live: None,
        })
    }

    /// The component's name (its pins are `NAME.pin`).
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The name prefix of its pins and params (`NAME`, as LinuxCNC's getprefix).
    fn getprefix(&self) -> String {
        self.name.clone()
    }

    /// The instance it joins.
    #[getter]
    fn instance(&self) -> String {
        self.instance.clone()
    }

    /// Declares pin `NAME.name` of type `rtapi.BIT/FLOAT/S32/U32/S64/U64` and direction
    /// `rtapi.IN/OUT/IO` (before `ready()`); returns its full name.
    fn newpin(&mut self, name: &str, ty: u32, dir: u32) -> PyResult<String> {
        let full = self.declare_check(name)?;
        let dir = match dir {
            IN => PinDir::In,
            OUT => PinDir::Out,
            IO => PinDir::Io,
            _ => {
                return Err(Error::new_err(format!(
                    "pin direction {dir} is not one of rtapi.IN, OUT, IO"
                )))
            }
        };
        self.decl.pins.push(UserPin {
            name: full.clone(),
            ty: value_type(ty)?,
            dir,
        });
        Ok(full)
    }

    /// Declares param `NAME.name` of a type and access `rtapi.RO/RW` (what other processes may
    /// do; the component writes it either way), before `ready()`; returns its full name.
    #[pyo3(signature = (name, ty, access=RW))]
    fn newparam(&mut self, name: &str, ty: u32, access: u32) -> PyResult<String> {
        let full = self.declare_check(name)?;
        let access = match access {
            RO => ParamAccess::Ro,
            RW => ParamAccess::Rw,
            _ => {
                return Err(Error::new_err(format!(
                    "param access {access} is not one of rtapi.RO, RW"
                )))
            }
        };
        self.decl.params.push(UserParam {
            name: full.clone(),
            ty: value_type(ty)?,
            access,
        });
        Ok(full)
    }

    /// Joins the running instance: the owner creates the component with its pins and params. From
    /// now on its pins can be netted, read and written.
    fn ready(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.live.is_some() {
            return Ok(());
        }
        let (instance, trust, decl) = (&self.instance, &self.trust, &self.decl);
        let live = py.detach(|| -> PyResult<Live> {
            let reader = open(instance, Access::ReadWrite, trust)?;
            let mut client =
                ControlClient::connect(instance, reader.header().owner_pid).map_err(client_err)?;
            let reply = client.user_component(decl).map_err(client_err)?;
            if !reply.ok {
                return Err(Error::new_err(reply.error.unwrap_or_default()));
            }
            Ok(Live {
                reader,
                client,
                places: Places::default(),
            })
        })?;
        self.live = Some(live);
        Ok(())
    }

    /// Whether `ready()` was called and `exit()` not yet.
    fn is_ready(&self) -> bool {
        self.live.is_some()
    }

    /// Leaves the instance: the owner unlinks its pins and removes it. Idempotent; nothing to do
    /// once the instance has stopped.
    fn exit(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(mut live) = self.live.take() {
            let name = self.name.clone();
            match py.detach(|| live.client.user_exit(&name)) {
                Ok(reply) if !reply.ok => {
                    return Err(Error::new_err(reply.error.unwrap_or_default()))
                }
                Ok(_) => {}
                // The owner is gone, and the component with it.
                Err(ClientError::Io(_)) => {}
                Err(e) => return Err(client_err(e)),
            }
        }
        Ok(())
    }

    /// The value of pin or param `NAME.key` (an IN pin reads its signal when netted).
    fn __getitem__(&self, py: Python<'_>, key: &str) -> PyResult<Py<PyAny>> {
        let live = self.live()?;
        let full = self.full(key);
        if !self.taken(&full) {
            return Err(NotFound::new_err(format!(
                "component '{}' has no pin or param named '{full}'",
                self.name
            )));
        }
        let v = py
            .detach(|| {
                live.places.with(
                    &live.reader,
                    &full,
                    |at| live.reader.get_located(at),
                    || live.reader.get(&full),
                )
            })
            .map_err(|e| self.failed(live, e))?;
        value_to_py(py, v)
    }

    /// Writes pin or param `NAME.key`: an OUT or IO pin (into its signal when netted), an IN pin
    /// while it is not netted, a param.
    fn __setitem__(&self, py: Python<'_>, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let live = self.live()?;
        let full = self.full(key);
        let text = value_text(value)?;
        let opts = WriteOptions::default();
        py.detach(|| {
            live.places.with(
                &live.reader,
                &full,
                |at| {
                    live.reader
                        .write_own_located(&self.name, at, &full, &text, opts)
                },
                || live.reader.write_own(&self.name, &full, &text, opts),
            )
        })
        .map_err(|e| self.failed(live, e))?;
        Ok(())
    }

    /// The full names of its pins.
    fn pins(&self) -> Vec<String> {
        self.decl.pins.iter().map(|p| p.name.clone()).collect()
    }

    /// The full names of its params.
    fn params(&self) -> Vec<String> {
        self.decl.params.iter().map(|p| p.name.clone()).collect()
    }

    /// `with rtapi.component(…) as c:` … the component exits at the end of the block.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Exits the component (an exception in the block goes on).
    fn __exit__(
        &mut self,
        py: Python<'_>,
        _t: Option<Py<PyAny>>,
        _v: Option<Py<PyAny>>,
        _tb: Option<Py<PyAny>>,
    ) -> PyResult<bool> {
        self.exit(py)?;
        Ok(false)
    }

    /// `rtapi.component("NAME", instance="INSTANCE")`, with "(not ready)" before ready().
    fn __repr__(&self) -> String {
        format!(
            "rtapi.component({:?}, instance={:?}){}",
            self.name,
            self.instance,
            if self.live.is_some() {
                ""
            } else {
                " (not ready)"
            }
        )
    }
}

/// `rtapi.component(name, instance=None)`: a new user-space component (LinuxCNC's
/// `hal.component`).
#[pyfunction]
#[pyo3(signature = (name, instance=None, trust_owner=Vec::new()))]
fn component(
    name: &str,
    instance: Option<String>,
    trust_owner: Vec<String>,
) -> PyResult<Component> {
    Component::new(name, instance, trust_owner)
}

/// Read and set a running rtapi instance's HAL; LinuxCNC-style user-space components.
#[pymodule(name = "rtapi")]
fn rtapi_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(instances, m)?)?;
    m.add_function(wrap_pyfunction!(component, m)?)?;
    m.add_class::<Instance>()?;
    m.add_class::<Component>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("NotWritable", py.get_type::<NotWritable>())?;
    m.add("Untrusted", py.get_type::<Untrusted>())?;
    m.add("Timeout", py.get_type::<Timeout>())?;
    for (name, v) in [
        ("BIT", BIT),
        ("FLOAT", FLOAT),
        ("S32", S32),
        ("U32", U32),
        ("S64", S64),
        ("U64", U64),
        ("IN", IN),
        ("OUT", OUT),
        ("IO", IO),
        ("RO", RO),
        ("RW", RW),
    ] {
        m.add(name, v)?;
    }
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
