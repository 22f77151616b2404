//! `compare-timers`' CPU-clock timers: `setitimer(ITIMER_PROF / ITIMER_VIRTUAL)` and POSIX timers on
//! the process and thread CPU clocks (and on the kernel's process PROF/VIRT clocks, which the seed's
//! 2.6-era measurement used), each counted for a thread that spins.
//!
//! These are not wake mechanisms: a CPU clock advances only while the thread (or process) runs, so
//! a servo thread, which sleeps between periods, would never be woken by one. The rows show what
//! such a timer counts — consumed CPU time, never wall time — and how exactly today's kernel counts
//! it: a CPU timer is checked from the scheduler tick, so an itimer (which has no overrun count)
//! delivers at most one signal per tick, whereas a POSIX timer reports the expirations it could not
//! signal through `timer_getoverrun`.
//!
//! The spinner is a plain SCHED_OTHER thread (a SCHED_FIFO spinner would be throttled by the
//! kernel's RT throttling, and would starve the machine's other work). The signal handler only
//! touches atomics and calls `timer_getoverrun` (async-signal-safe).

use crate::render::{Align, Table};
use crate::rt::clock::Nanos;
use crate::rt::SysError;
use nix::errno::Errno;
use serde::Serialize;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Linux's process CPU clocks by sample, as the kernel encodes them for the calling process
/// (`MAKE_PROCESS_CPUCLOCK(0, CPUCLOCK_PROF)` and `…VIRT`): user+system time, and user time.
/// `CLOCK_PROCESS_CPUTIME_ID` is the third sample, `CPUCLOCK_SCHED` (the scheduler's exact runtime).
const CLOCK_PROCESS_PROF: libc::clockid_t = !0 << 3;
const CLOCK_PROCESS_VIRT: libc::clockid_t = (!0 << 3) | 1;

/// The timers measured, in the order of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ItimerProf,
    ItimerVirtual,
    PosixProcess,
    PosixThread,
    PosixProf,
    PosixVirt,
}

const KINDS: [Kind; 6] = [
    Kind::ItimerProf,
    Kind::ItimerVirtual,
    Kind::PosixProcess,
    Kind::PosixThread,
    Kind::PosixProf,
    Kind::PosixVirt,
];
const N: usize = KINDS.len();

impl Kind {
    fn index(self) -> usize {
        self as usize
    }

    fn label(self) -> &'static str {
        match self {
            Kind::ItimerProf => "ITIMER_PROF",
            Kind::ItimerVirtual => "ITIMER_VIRTUAL",
            Kind::PosixProcess => "timer_create(CLOCK_PROCESS_CPUTIME_ID)",
            Kind::PosixThread => "timer_create(CLOCK_THREAD_CPUTIME_ID)",
            Kind::PosixProf => "timer_create(CPUCLOCK_PROF)",
            Kind::PosixVirt => "timer_create(CPUCLOCK_VIRT)",
        }
    }

    /// The CPU clock the timer counts, read with `clock_gettime` for the ticks expected.
    fn clock(self) -> libc::clockid_t {
        match self {
            Kind::ItimerProf | Kind::PosixProf => CLOCK_PROCESS_PROF,
            Kind::ItimerVirtual | Kind::PosixVirt => CLOCK_PROCESS_VIRT,
            Kind::PosixProcess => libc::CLOCK_PROCESS_CPUTIME_ID,
            Kind::PosixThread => libc::CLOCK_THREAD_CPUTIME_ID,
        }
    }

    /// What that clock counts, in words.
    fn counts(self) -> &'static str {
        match self {
            Kind::ItimerProf | Kind::PosixProf => "process user+system",
            Kind::ItimerVirtual | Kind::PosixVirt => "process user",
            Kind::PosixProcess => "process runtime",
            Kind::PosixThread => "thread runtime",
        }
    }

    /// `setitimer`'s `which` for the itimers.
    fn itimer(self) -> Option<libc::c_int> {
        match self {
            Kind::ItimerProf => Some(libc::ITIMER_PROF),
            Kind::ItimerVirtual => Some(libc::ITIMER_VIRTUAL),
            _ => None,
        }
    }

    /// The signal: the itimers' are fixed; each POSIX timer gets a real-time signal of its own,
    /// below `SIGRTMAX` (the runtime's wake signal).
    fn signo(self) -> libc::c_int {
        match self {
            Kind::ItimerProf => libc::SIGPROF,
            Kind::ItimerVirtual => libc::SIGVTALRM,
            k => libc::SIGRTMAX() - (k.index() as libc::c_int - 1),
        }
    }
}

/// "No POSIX timer" in [`TIMER`] (kernel timer ids start at 0, so 0 is a valid id).
const NO_TIMER: usize = usize::MAX;

/// Per timer: its signal number, the signals its handler took, the overruns those signals carried,
/// and its POSIX timer id. Only atomics: the handler reads and writes them.
static SIGNO: [AtomicI32; N] = [const { AtomicI32::new(0) }; N];
static SIGNALS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
static OVERRUNS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
static TIMER: [AtomicUsize; N] = [const { AtomicUsize::new(NO_TIMER) }; N];

/// One measurement at a time: the counters above are the process's.
static BUSY: Mutex<()> = Mutex::new(());

/// The handler of every CPU-clock timer's signal: counts it and, for a POSIX timer, the
/// expirations it stands for beyond the first. Async-signal-safe: atomics and
/// `timer_getoverrun` only.
extern "C" fn on_expiry(signo: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    for i in 0..N {
        if SIGNO[i].load(Ordering::Relaxed) != signo {
            continue;
        }
        SIGNALS[i].fetch_add(1, Ordering::Relaxed);
        let timer = TIMER[i].load(Ordering::Relaxed);
        if timer != NO_TIMER {
            // SAFETY: timer_getoverrun is async-signal-safe (POSIX); an id deleted meanwhile
            // only makes it fail with EINVAL, which counts nothing.
            let overrun = unsafe { libc::timer_getoverrun(timer as libc::timer_t) };
            if overrun > 0 {
                OVERRUNS[i].fetch_add(overrun as u64, Ordering::Relaxed);
            }
        }
    }
}

/// Installs [`on_expiry`] for every timer's signal, once for the process, and leaves it there: a
/// signal still pending when a timer is disarmed then only counts into a counter nobody reads,
/// where the default action of `SIGPROF` or `SIGVTALRM` would end the process.
fn install_handlers() -> Result<(), SysError> {
    // Called under BUSY: no two threads install at once. Set only once every handler is in, so a
    // failure is reported again next time instead of leaving SIGPROF at its default action.
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.load(Ordering::Relaxed) {
        return Ok(());
    }
    for k in KINDS {
        SIGNO[k.index()].store(k.signo(), Ordering::Relaxed);
        // SAFETY: sigaction is plain data; all-zero is a valid value we fill in below.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            on_expiry;
        act.sa_sigaction = handler as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: `act.sa_mask` is ours; sigemptyset only writes to it.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: `act` is a valid sigaction whose handler is async-signal-safe; a null
        // old-action pointer is allowed.
        if unsafe { libc::sigaction(k.signo(), &act, std::ptr::null_mut()) } != 0 {
            return Err(SysError::last("sigaction"));
        }
    }
    INSTALLED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Unblocks every timer's signal in the calling thread (it inherited its creator's mask).
fn unblock_signals() -> Result<(), SysError> {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t we own; these calls only write to it.
    unsafe {
        libc::sigemptyset(&mut set);
        for k in KINDS {
            libc::sigaddset(&mut set, k.signo());
        }
    }
    // SAFETY: `set` is initialized; a null old-mask pointer is allowed.
    match unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) } {
        0 => Ok(()),
        e => Err(SysError::new("pthread_sigmask", Errno::from_raw(e))),
    }
}

fn read_clock(clock: libc::clockid_t) -> Result<Nanos, SysError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec we own; clock_gettime only writes to it.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return Err(SysError::last("clock_gettime"));
    }
    Ok(Nanos::from_timespec(ts))
}

fn set_itimer(which: libc::c_int, period: Nanos) -> Result<(), SysError> {
    let spec = libc::itimerval {
        it_interval: period.to_timeval_ceil(),
        it_value: period.to_timeval_ceil(),
    };
    // SAFETY: `spec` is a valid itimerval; a null old value is allowed.
    if unsafe { libc::setitimer(which, &spec, std::ptr::null_mut()) } != 0 {
        return Err(SysError::last("setitimer"));
    }
    Ok(())
}

/// A POSIX timer on a CPU clock, signalling the thread that created it; deleted on drop.
struct CpuTimer {
    index: usize,
    id: libc::timer_t,
}

impl CpuTimer {
    fn create(k: Kind) -> Result<Self, SysError> {
        // SAFETY: sigevent is plain data; all-zero is a valid starting value (the members not
        // set must be zero for SIGEV_THREAD_ID).
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = k.signo();
        sev.sigev_notify_thread_id = nix::unistd::gettid().as_raw();
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: `sev` and `id` are valid for the call; `id` is written on success.
        if unsafe { libc::timer_create(k.clock(), &mut sev, &mut id) } != 0 {
            return Err(SysError::last("timer_create"));
        }
        TIMER[k.index()].store(id as usize, Ordering::Relaxed);
        Ok(CpuTimer {
            index: k.index(),
            id,
        })
    }

    /// Arms (relative: the first expiry one period of CPU time from now) or, with zero, disarms.
    fn set(&self, period: Nanos) -> Result<(), SysError> {
        let spec = libc::itimerspec {
            it_interval: period.to_timespec(),
            it_value: period.to_timespec(),
        };
        // SAFETY: `self.id` is a live timer id, `spec` a valid itimerspec; null old value.
        if unsafe { libc::timer_settime(self.id, 0, &spec, std::ptr::null_mut()) } != 0 {
            return Err(SysError::last("timer_settime"));
        }
        Ok(())
    }
}

impl Drop for CpuTimer {
    fn drop(&mut self) {
        // The handler runs on this thread only (SIGEV_THREAD_ID): it sees the id gone before
        // the timer is.
        TIMER[self.index].store(NO_TIMER, Ordering::Relaxed);
        // SAFETY: the id came from a successful timer_create and is deleted exactly once.
        unsafe { libc::timer_delete(self.id) };
    }
}

/// One timer at one period.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CpuClockRow {
    pub(crate) timer: &'static str,
    /// The CPU time the timer's clock counts ("process user+system", "thread runtime", …).
    pub(crate) counts: &'static str,
    pub(crate) period_ns: u64,
    /// That CPU time consumed while the timer was armed (`clock_gettime` on the timer's clock).
    pub(crate) cpu_ns: u64,
    /// Wall time while it was armed.
    pub(crate) real_ns: u64,
    /// Whole periods in `cpu_ns`.
    pub(crate) ticks_expected: u64,
    /// Signals the handler took.
    pub(crate) signals: u64,
    /// Expirations beyond those signals (`timer_getoverrun`); `null` for an itimer, which has none.
    pub(crate) overruns: Option<u64>,
    /// `signals + overruns`.
    pub(crate) ticks_counted: u64,
    /// `(ticks_counted · period − cpu) / cpu`, in %.
    pub(crate) error_pct: f64,
}

impl CpuClockRow {
    fn new(
        k: Kind,
        period: Nanos,
        cpu: Nanos,
        real: Duration,
        signals: u64,
        overruns: u64,
    ) -> Self {
        let period_ns = period.as_nanos().max(1) as u64;
        let cpu_ns = cpu.as_nanos().max(0) as u64;
        let overruns = k.itimer().is_none().then_some(overruns);
        let ticks_counted = signals + overruns.unwrap_or(0);
        CpuClockRow {
            timer: k.label(),
            counts: k.counts(),
            period_ns,
            cpu_ns,
            real_ns: real.as_nanos() as u64,
            ticks_expected: cpu_ns / period_ns,
            signals,
            overruns,
            ticks_counted,
            error_pct: error_pct(ticks_counted, period_ns, cpu_ns),
        }
    }
}

fn error_pct(counted: u64, period_ns: u64, cpu_ns: u64) -> f64 {
    if cpu_ns == 0 {
        return 0.0;
    }
    (counted as f64 * period_ns as f64 - cpu_ns as f64) / cpu_ns as f64 * 100.0
}

pub(crate) const CONCLUSION: &str =
    "A CPU-clock timer measures consumed CPU time, never wall time: \
its clock stops while the thread sleeps, so it cannot pace a servo thread (which sleeps between \
periods). Here a spinning thread made CPU time run at most as fast as wall time; even then the \
itimers lose every expiry beyond one per scheduler tick.";

/// The CPU-clock section of `compare-timers`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CpuClockSection {
    pub(crate) periods_ns: Vec<u64>,
    /// Wall time each period's spin lasts (every timer runs at once on the same spinner).
    pub(crate) duration_s: f64,
    /// The kernel's `CONFIG_HZ` (the tick CPU timers are checked on), when its config is readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kernel_hz: Option<u32>,
    pub(crate) rows: Vec<CpuClockRow>,
    pub(crate) conclusion: &'static str,
}

/// For each period, one thread spins for `duration` of wall time with every CPU-clock timer armed
/// at that period; a row per timer. Ends early (fewer rows) on SIGINT/SIGTERM/SIGHUP.
pub(crate) fn measure(periods: &[Nanos], duration: Duration) -> Result<CpuClockSection, SysError> {
    // A poisoned lock only means an earlier measurement panicked: the counters are reset below.
    let _busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
    install_handlers()?;
    let owned = periods.to_vec();
    let rows = std::thread::Builder::new()
        .name("cpu-clock-spin".into())
        .spawn(move || spinner(&owned, duration))
        .map_err(|e| {
            SysError::new(
                "pthread_create",
                Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            )
        })?
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
    Ok(CpuClockSection {
        periods_ns: periods.iter().map(|p| p.as_nanos() as u64).collect(),
        duration_s: duration.as_secs_f64(),
        kernel_hz: crate::detect::kernel_hz(),
        rows,
        conclusion: CONCLUSION,
    })
}

/// The spinning thread: SCHED_OTHER, the timers' signals unblocked, every period in turn.
fn spinner(periods: &[Nanos], duration: Duration) -> Result<Vec<CpuClockRow>, SysError> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is valid; pid 0 is the calling thread; SCHED_OTHER needs no privilege.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) } != 0 {
        return Err(SysError::last("sched_setscheduler"));
    }
    unblock_signals()?;
    let mut rows = Vec::new();
    for &period in periods {
        if crate::rt::signals::stop_requested_if_watched() {
            break;
        }
        rows.extend(one_period(period, duration)?);
    }
    Ok(rows)
}

/// Every timer armed at `period`, a spin of `duration`, every timer disarmed; each timer's own
/// clock and the wall clock read just before it is armed and just after it is disarmed.
fn one_period(period: Nanos, duration: Duration) -> Result<Vec<CpuClockRow>, SysError> {
    for i in 0..N {
        SIGNALS[i].store(0, Ordering::Relaxed);
        OVERRUNS[i].store(0, Ordering::Relaxed);
    }
    let mut timers: Vec<Option<CpuTimer>> = Vec::with_capacity(N);
    for k in KINDS {
        timers.push(match k.itimer() {
            Some(_) => None,
            None => Some(CpuTimer::create(k)?),
        });
    }
    let mut start = [(Nanos::ZERO, Instant::now()); N];
    for k in KINDS {
        start[k.index()] = (read_clock(k.clock())?, Instant::now());
        match (k.itimer(), &timers[k.index()]) {
            (Some(which), _) => set_itimer(which, period)?,
            (None, Some(t)) => t.set(period)?,
            (None, None) => unreachable!("every POSIX kind has a timer"),
        }
    }
    let began = Instant::now();
    while began.elapsed() < duration && !crate::rt::signals::stop_requested_if_watched() {
        let mut x = 0u64;
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        std::hint::black_box(x);
    }
    let mut end = [(Nanos::ZERO, Instant::now()); N];
    for k in KINDS {
        match (k.itimer(), &timers[k.index()]) {
            (Some(which), _) => set_itimer(which, Nanos::ZERO)?,
            (None, Some(t)) => t.set(Nanos::ZERO)?,
            (None, None) => unreachable!("every POSIX kind has a timer"),
        }
        end[k.index()] = (read_clock(k.clock())?, Instant::now());
    }
    // A signal raised by the last expiry before a disarm was delivered on the way back from it
    // (thread-directed, or process-directed to the one thread that does not block it).
    let rows = KINDS
        .iter()
        .map(|&k| {
            let i = k.index();
            CpuClockRow::new(
                k,
                period,
                end[i].0 - start[i].0,
                end[i].1 - start[i].1,
                SIGNALS[i].load(Ordering::Relaxed),
                OVERRUNS[i].load(Ordering::Relaxed),
            )
        })
        .collect();
    drop(timers);
    Ok(rows)
}

impl CpuClockSection {
    pub(crate) fn render_text(&self) -> String {
        let mut s = String::new();
        let tick = match self.kernel_hz {
            Some(hz) => format!(
                "; the kernel checks CPU timers on its tick (CONFIG_HZ={hz}: every {})",
                Nanos::from_nanos(1_000_000_000 / i64::from(hz.max(1)))
            ),
            None => String::new(),
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            s,
            "\nCPU-clock timers: one SCHED_OTHER thread spins {:.1} s per period with every timer armed{tick}\n",
            self.duration_s
        );
        let mut table = Table::new([
            ("period", Align::Right),
            ("timer", Align::Left),
            ("counts", Align::Left),
            ("CPU ms", Align::Right),
            ("real ms", Align::Right),
            ("expected", Align::Right),
            ("signals", Align::Right),
            ("overruns", Align::Right),
            ("counted", Align::Right),
            ("error %", Align::Right),
        ]);
        for r in &self.rows {
            table.row(vec![
                Nanos::from_nanos(r.period_ns as i64).to_string(),
                r.timer.to_string(),
                r.counts.to_string(),
                format!("{:.1}", r.cpu_ns as f64 / 1e6),
                format!("{:.1}", r.real_ns as f64 / 1e6),
                r.ticks_expected.to_string(),
                r.signals.to_string(),
                r.overruns
                    .map_or_else(|| "-".to_string(), |o| o.to_string()),
                r.ticks_counted.to_string(),
                format!("{:+.1}", r.error_pct),
            ]);
        }
        let _ = write!(s, "{table}");
        let _ = writeln!(
            s,
            "\nexpected = whole periods in the CPU time the timer's own clock consumed while armed;\n\
             counted = signals + timer_getoverrun() (an itimer has no overrun count: -);\n\
             error = (counted·period − CPU time) / CPU time.\n\n{}",
            wrap(CONCLUSION, 100)
        );
        s
    }
}

fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.len() > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.chars().count();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_relative_to_the_cpu_time() {
        assert_eq!(error_pct(500, 1_000_000, 1_000_000_000), -50.0);
        assert_eq!(error_pct(1000, 1_000_000, 1_000_000_000), 0.0);
        assert_eq!(error_pct(3, 1, 0), 0.0);
    }

    #[test]
    fn an_itimer_row_has_no_overrun_count() {
        let r = CpuClockRow::new(
            Kind::ItimerProf,
            Nanos::from_millis(1),
            Nanos::from_millis(100),
            Duration::from_millis(120),
            25,
            7,
        );
        assert_eq!(
            (r.overruns, r.ticks_counted, r.ticks_expected),
            (None, 25, 100)
        );
        let r = CpuClockRow::new(
            Kind::PosixThread,
            Nanos::from_millis(1),
            Nanos::from_millis(100),
            Duration::from_millis(120),
            25,
            75,
        );
        assert_eq!((r.overruns, r.ticks_counted), (Some(75), 100));
        assert_eq!(r.error_pct, 0.0);
    }

    #[test]
    fn each_timer_has_a_signal_of_its_own_below_the_wake_signal() {
        let mut signals: Vec<_> = KINDS.iter().map(|k| k.signo()).collect();
        assert!(signals.iter().all(|&s| s != libc::SIGRTMAX()));
        signals.sort_unstable();
        signals.dedup();
        assert_eq!(signals.len(), N);
    }
}
