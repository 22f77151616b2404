//! Process hardening: keep page faults, memory reclaim and deep CPU idle states away from the
//! RT threads.
//!
//! A page fault on the RT path costs microseconds (minor) to milliseconds (major); waking a
//! core from a deep C-state costs up to ~100 µs. Both show up as latency spikes no timer driver
//! can fix, so before the threads start we
//!
//! 1. raise `RLIMIT_MEMLOCK` where allowed, then `mlockall(MCL_CURRENT | MCL_FUTURE)`: every
//!    page, present and future, is resident and stays so;
//! 2. tell glibc malloc never to give memory back (`M_TRIM_THRESHOLD = -1`), never to serve an
//!    allocation with a fresh `mmap` (`M_MMAP_MAX = 0`), and to use one arena (`M_ARENA_MAX =
//!    1`), so that memory freed once is reused from the locked heap by every thread;
//! 3. prefault a heap reserve: allocate it, touch every page, free it — it stays in the heap;
//! 4. prefault the calling thread's stack (each RT thread calls [`prefault_stack`] itself);
//! 5. hold `/dev/cpu_dma_latency` at 0 for the run, which keeps CPUs out of deep C-states.
//!
//! Each step's outcome is recorded in a [`HardenReport`]; the caller decides what is fatal
//! (see [`HardenReport::failures`]): the flavor knows whether this is a real machine.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Write;

use nix::sys::mman::{mlockall, MlockAllFlags};
use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};

use crate::rt::SysError;

/// What to do; [`Default`] is everything, as `rt-preempt` and `posix` want.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardenOptions {
    /// Raise `RLIMIT_MEMLOCK` and `mlockall`.
    pub lock_memory: bool,
    /// Bytes of heap to prefault (0: none).
    pub heap_reserve: usize,
    /// Bytes of the **calling** thread's stack to prefault (0: none).
    pub stack_prefault: usize,
    /// Hold `/dev/cpu_dma_latency` at 0 (`--no-dma-latency` turns it off).
    pub dma_latency: bool,
}

/// 32 MiB: room for the HAL segment's companions, the message queues and whatever the
/// components allocate at load time, without weighing on a small controller board.
pub const DEFAULT_HEAP_RESERVE: usize = 32 << 20;

/// 256 KiB: far more than a cycle loop and its functions use, a small part of a default
/// 2 MiB (Rust) or 8 MiB (main) stack.
pub const DEFAULT_STACK_PREFAULT: usize = 256 << 10;

impl Default for HardenOptions {
    fn default() -> Self {
        HardenOptions {
            lock_memory: true,
            heap_reserve: DEFAULT_HEAP_RESERVE,
            stack_prefault: DEFAULT_STACK_PREFAULT,
            dma_latency: true,
        }
    }
}

/// The hardening steps, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Raising `RLIMIT_MEMLOCK`.
    MemlockLimit,
    /// `mlockall`.
    LockMemory,
    /// `mallopt`.
    MallocTuning,
    /// Prefaulting the heap reserve.
    HeapReserve,
    /// Prefaulting the calling thread's stack.
    StackPrefault,
    /// Holding `/dev/cpu_dma_latency`.
    DmaLatency,
}

impl Step {
    /// Steps whose failure leaves the RT path open to page faults: errors when strict.
    pub const fn is_essential(self) -> bool {
        matches!(self, Step::LockMemory | Step::HeapReserve)
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::MemlockLimit => "memlock limit",
            Step::LockMemory => "memory lock",
            Step::MallocTuning => "malloc tuning",
            Step::HeapReserve => "heap reserve",
            Step::StackPrefault => "stack prefault",
            Step::DmaLatency => "cpu_dma_latency",
        })
    }
}

/// Why a step failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HardenError {
    /// A system call failed.
    Sys(SysError),
    /// `mallopt` refused a parameter (it returns 0 without errno).
    Mallopt(&'static str),
    /// The heap reserve could not be allocated (often: `RLIMIT_MEMLOCK` under `MCL_FUTURE`).
    OutOfMemory {
        /// The size asked for.
        bytes: usize,
    },
    /// A file could not be opened or written.
    Io {
        /// What we were doing.
        what: &'static str,
        /// The OS error message.
        error: String,
    },
}

impl fmt::Display for HardenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HardenError::Sys(e) => e.fmt(f),
            HardenError::Mallopt(p) => write!(f, "mallopt({p}) was refused"),
            HardenError::OutOfMemory { bytes } => write!(
                f,
                "could not allocate {} MiB of heap reserve (is RLIMIT_MEMLOCK too low?)",
                bytes >> 20
            ),
            HardenError::Io { what, error } => write!(f, "{what}: {error}"),
        }
    }
}

impl std::error::Error for HardenError {}

impl From<SysError> for HardenError {
    fn from(e: SysError) -> Self {
        HardenError::Sys(e)
    }
}

/// How one step went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It worked; the text says what was done, for the startup summary.
    Done(String),
    /// Not asked for.
    Skipped,
    /// It failed.
    Failed(HardenError),
}

/// A failed step, whether the run may go on without it, and a message that says what to do.
/// (Machine-level findings with their own severities are detection's `Finding`s; this one only
/// says whether a hardening failure stops the start.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFailure {
    /// Which step.
    pub step: Step,
    /// The run must not start without it (an essential step under a strict flavor); otherwise the
    /// failure is said loudly and the run goes on.
    pub fatal: bool,
    /// The failure and the remedy.
    pub message: String,
}

/// The outcome of every step, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HardenReport {
    /// `(step, outcome)` in the order the steps ran.
    pub steps: Vec<(Step, Outcome)>,
}

impl HardenReport {
    /// The outcome of `step` (`Skipped` if it did not run).
    pub fn outcome(&self, step: Step) -> &Outcome {
        self.steps
            .iter()
            .find(|(s, _)| *s == step)
            .map_or(&Outcome::Skipped, |(_, o)| o)
    }

    /// The failed steps. With `strict` (flavors `rt-preempt` and `posix`), a failure to lock
    /// memory or the heap reserve is fatal; everything else, and everything under `sim`, is not.
    pub fn failures(&self, strict: bool) -> Vec<StepFailure> {
        self.steps
            .iter()
            .filter_map(|(step, outcome)| match outcome {
                Outcome::Failed(e) => Some(StepFailure {
                    step: *step,
                    fatal: strict && step.is_essential(),
                    message: format!("{step}: {e}{}", remedy(*step)),
                }),
                _ => None,
            })
            .collect()
    }
}

fn remedy(step: Step) -> &'static str {
    match step {
        Step::MemlockLimit | Step::LockMemory | Step::HeapReserve => {
            "; run as root, grant CAP_IPC_LOCK (setcap cap_ipc_lock+ep), or set \
             `memlock unlimited` in /etc/security/limits.conf"
        }
        Step::DmaLatency => {
            "; the CPUs may sleep in idle states between periods and wake late (the device is \
             root's: let your group open it with rtapi's udev rule, packaging/udev/60-rtapi.rules, \
             see docs/guide/commission-pc.md, \"Idle states\"; or run as root, or disable the deep \
             states in the BIOS or with intel_idle.max_cstate=1); to run without the hold: \
             --no-dma-latency (latency-test, run, halrun) or `dma_latency = false` under [runtime] in \
             a machine TOML"
        }
        Step::MallocTuning | Step::StackPrefault => "",
    }
}

/// What [`harden_process`] leaves behind: the report, and the `/dev/cpu_dma_latency` hold,
/// which lasts as long as this value — keep it for the whole run.
#[derive(Debug)]
pub struct Hardening {
    /// What worked.
    pub report: HardenReport,
    /// The latency request, if it could be made.
    pub dma_latency: Option<DmaLatencyGuard>,
}

/// Run every hardening step asked for in `opts`, in order, recording each outcome. Call it
/// from the main thread before spawning the RT threads (`MCL_FUTURE` then covers their stacks).
pub fn harden_process(opts: &HardenOptions) -> Hardening {
    let mut steps = Vec::new();
    let mut run = |step, enabled: bool, f: &mut dyn FnMut() -> Result<String, HardenError>| {
        let outcome = if !enabled {
            Outcome::Skipped
        } else {
            match f() {
                Ok(done) => Outcome::Done(done),
                Err(e) => Outcome::Failed(e),
            }
        };
        steps.push((step, outcome));
    };
    run(
        Step::MemlockLimit,
        opts.lock_memory,
        &mut raise_memlock_limit,
    );
    run(Step::LockMemory, opts.lock_memory, &mut || {
        lock_memory().map(|()| "all current and future pages locked".into())
    });
    run(Step::MallocTuning, true, &mut || {
        tune_malloc().map(|()| "no trimming, no mmap, one arena".into())
    });
    run(Step::HeapReserve, opts.heap_reserve > 0, &mut || {
        prefault_heap(opts.heap_reserve)
            .map(|()| format!("{} KiB prefaulted", opts.heap_reserve >> 10))
    });
    run(Step::StackPrefault, opts.stack_prefault > 0, &mut || {
        prefault_stack(opts.stack_prefault).map(|n| format!("{} KiB prefaulted", n >> 10))
    });
    let mut dma = None;
    run(Step::DmaLatency, opts.dma_latency, &mut || {
        dma = Some(DmaLatencyGuard::hold(0)?);
        Ok("held at 0 µs".into())
    });
    Hardening {
        report: HardenReport { steps },
        dma_latency: dma,
    }
}

/// Raise `RLIMIT_MEMLOCK` as far as allowed: to unlimited if we may (root or
/// `CAP_SYS_RESOURCE`), else the soft limit up to the hard one. `mlockall(MCL_FUTURE)` under
/// a small limit makes later allocations and thread stacks fail, so this comes first.
#[doc(alias = "setrlimit")]
pub fn raise_memlock_limit() -> Result<String, HardenError> {
    let (soft, hard) =
        getrlimit(Resource::RLIMIT_MEMLOCK).map_err(|e| SysError::new("getrlimit", e))?;
    if soft == RLIM_INFINITY {
        return Ok("already unlimited".into());
    }
    if setrlimit(Resource::RLIMIT_MEMLOCK, RLIM_INFINITY, RLIM_INFINITY).is_ok() {
        return Ok("raised to unlimited".into());
    }
    if soft < hard {
        setrlimit(Resource::RLIMIT_MEMLOCK, hard, hard)
            .map_err(|e| SysError::new("setrlimit", e))?;
    }
    let limit = soft.max(hard);
    if limit == RLIM_INFINITY {
        Ok("raised to unlimited".into())
    } else {
        Ok(format!("limited to {} KiB (the hard limit)", limit >> 10))
    }
}

/// Lock every current and future page of the process in RAM.
#[doc(alias = "mlockall")]
pub fn lock_memory() -> Result<(), HardenError> {
    mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE)
        .map_err(|e| SysError::new("mlockall", e).into())
}

/// Make glibc malloc keep and reuse what it has (see the module documentation).
#[doc(alias = "mallopt")]
pub fn tune_malloc() -> Result<(), HardenError> {
    for (param, value, name) in [
        (libc::M_TRIM_THRESHOLD, -1, "M_TRIM_THRESHOLD, -1"),
        (libc::M_MMAP_MAX, 0, "M_MMAP_MAX, 0"),
        (libc::M_ARENA_MAX, 1, "M_ARENA_MAX, 1"),
    ] {
        // SAFETY: mallopt takes two integers and only adjusts malloc's parameters.
        if unsafe { libc::mallopt(param, value) } != 1 {
            return Err(HardenError::Mallopt(name));
        }
    }
    Ok(())
}

fn page_size() -> usize {
    // SAFETY: sysconf with a constant name has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Allocate `bytes`, write one byte per page so that the kernel backs every page, and free it.
/// After [`tune_malloc`] the freed block stays in the (locked) heap, so later allocations up
/// to this size are served without a page fault.
pub fn prefault_heap(bytes: usize) -> Result<(), HardenError> {
    let mut reserve: Vec<u8> = Vec::new();
    reserve
        .try_reserve_exact(bytes)
        .map_err(|_| HardenError::OutOfMemory { bytes })?;
    let spare = reserve.spare_capacity_mut();
    for slot in spare.iter_mut().step_by(page_size()) {
        // SAFETY: `slot` is a valid, exclusively borrowed byte of the allocation; the volatile
        // write keeps the compiler from dropping a store to memory that is freed unread.
        unsafe { std::ptr::write_volatile(slot.as_mut_ptr(), 0) };
    }
    Ok(())
}

/// Bytes left free below the deepest prefault, for the frames of whatever runs next
/// (signal delivery, the caller's own calls).
const STACK_SAFETY_MARGIN: usize = 64 << 10;

/// Touch `bytes` of the calling thread's stack below the current frame, so that the pages
/// the cycle loop will use are present before the first period. Clamped to the stack that
/// is actually left (from `pthread_getattr_np`) minus a safety margin; returns the bytes
/// touched.
#[doc(alias = "pthread_getattr_np")]
pub fn prefault_stack(bytes: usize) -> Result<usize, HardenError> {
    let here = &bytes as *const usize as usize;
    let left = stack_lowest_address()
        .map(|low| here.saturating_sub(low).saturating_sub(STACK_SAFETY_MARGIN))?;
    let n = bytes.min(left);
    touch_stack(n, page_size());
    Ok(n)
}

fn stack_lowest_address() -> Result<usize, SysError> {
    // SAFETY: pthread_attr_t is plain data that pthread_getattr_np initializes.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    // SAFETY: pthread_self() is valid; `attr` is writable.
    let rc = unsafe { libc::pthread_getattr_np(libc::pthread_self(), &mut attr) };
    if rc != 0 {
        return Err(SysError::new(
            "pthread_getattr_np",
            nix::errno::Errno::from_raw(rc),
        ));
    }
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: `attr` was initialized above; the out-pointers are valid.
    let rc = unsafe { libc::pthread_attr_getstack(&attr, &mut addr, &mut size) };
    // SAFETY: `attr` was initialized by pthread_getattr_np and is destroyed once.
    unsafe { libc::pthread_attr_destroy(&mut attr) };
    if rc != 0 {
        return Err(SysError::new(
            "pthread_attr_getstack",
            nix::errno::Errno::from_raw(rc),
        ));
    }
    Ok(addr as usize)
}

/// One stack frame of `CHUNK` bytes, written page by page, recursing until `remaining` is
/// covered. Not inlined, and the buffer is used after the recursive call, so each level keeps
/// its own frame (no tail call folding them into one).
#[inline(never)]
fn touch_stack(remaining: usize, page: usize) {
    const CHUNK: usize = 16 << 10;
    let mut buf = [0u8; CHUNK];
    for i in (0..CHUNK).step_by(page) {
        // SAFETY: `i < CHUNK`, so the pointer is inside `buf`, which we own exclusively.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), 1) };
    }
    if remaining > CHUNK {
        touch_stack(remaining - CHUNK, page);
    }
    std::hint::black_box(&buf);
}

/// A request to the kernel's PM QoS to keep CPU wake-up latency at or below a bound, held as
/// long as this value lives (the kernel drops the request when the fd is closed, i.e. on
/// drop). 0 keeps all CPUs out of C-states deeper than C0/C1.
#[doc(alias = "cpu_dma_latency")]
#[derive(Debug)]
pub struct DmaLatencyGuard {
    _file: File,
}

impl DmaLatencyGuard {
    /// Open `/dev/cpu_dma_latency` and write `max_latency_us` as a native-endian `i32`.
    pub fn hold(max_latency_us: i32) -> Result<Self, HardenError> {
        let io = |what| {
            move |e: std::io::Error| HardenError::Io {
                what,
                error: e.to_string(),
            }
        };
        let mut file = OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .map_err(io("opening /dev/cpu_dma_latency"))?;
        file.write_all(&max_latency_us.to_ne_bytes())
            .map_err(io("writing /dev/cpu_dma_latency"))?;
        Ok(DmaLatencyGuard { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(step: Step) -> HardenReport {
        HardenReport {
            steps: vec![
                (Step::MemlockLimit, Outcome::Done("unlimited".into())),
                (
                    step,
                    Outcome::Failed(HardenError::Sys(SysError::new(
                        "mlockall",
                        nix::errno::Errno::ENOMEM,
                    ))),
                ),
                (Step::StackPrefault, Outcome::Skipped),
            ],
        }
    }

    #[test]
    fn failing_to_lock_memory_is_an_error_only_when_strict() {
        let r = report(Step::LockMemory);
        let strict = r.failures(true);
        assert_eq!(strict.len(), 1);
        assert!(strict[0].fatal);
        assert!(strict[0].message.contains("mlockall failed"));
        assert!(strict[0].message.contains("CAP_IPC_LOCK"));
        assert!(!r.failures(false)[0].fatal);
    }

    #[test]
    fn dma_latency_failure_is_always_a_warning() {
        let r = report(Step::DmaLatency);
        assert!(!r.failures(true)[0].fatal);
        assert!(r.failures(true)[0].message.contains("--no-dma-latency"));
        assert_eq!(r.outcome(Step::HeapReserve), &Outcome::Skipped);
    }

    #[test]
    fn stack_prefault_is_clamped_to_the_stack_left() {
        // Asking for far more than any stack: clamped to what is left, no overflow. The real size is
        // read back, not assumed: glibc may hand out a cached stack larger than the request.
        let (n, size) = std::thread::Builder::new()
            .stack_size(512 << 10)
            .spawn(|| {
                // SAFETY: pthread_attr_t is plain data filled by pthread_getattr_np for the calling
                // thread and destroyed once; the out-pointers are valid locals.
                let size = unsafe {
                    let mut attr: libc::pthread_attr_t = std::mem::zeroed();
                    assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
                    let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
                    assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
                    libc::pthread_attr_destroy(&mut attr);
                    size
                };
                (prefault_stack(usize::MAX).unwrap(), size)
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(size >= 512 << 10, "{size}");
        assert!(n > size / 2 && n < size, "{n} of {size}");
        assert_eq!(prefault_stack(64 << 10).unwrap(), 64 << 10);
    }

    #[test]
    fn heap_prefault_touches_and_frees() {
        prefault_heap(4 << 20).unwrap();
        assert!(matches!(
            prefault_heap(usize::MAX / 2),
            Err(HardenError::OutOfMemory { .. })
        ));
    }
}
