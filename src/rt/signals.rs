//! Signals the runtime owns: the operator's stop request (SIGINT/SIGTERM/SIGHUP) and the wake-up signal that
//! gets a stop request to an RT thread at once, whatever its period.
//!
//! **Stop requests.** [`shutdown_flag`] installs, once per process, handlers that only set a flag for
//! SIGINT, SIGTERM and SIGHUP (a closed terminal ends a run as SIGTERM does: summary, segment removed,
//! exit status as for SIGTERM). A command that will start a runtime calls it first thing, so that a Ctrl-C at any
//! moment — during configuration and start-up too — is a request the command answers (stop, report,
//! remove the segment), never the default action that kills the process and leaves the segment behind.
//!
//! **Waking a waiting thread.** An RT thread sleeps in its timer driver until its next deadline, which
//! for a long period can be seconds away. [`interrupt`] sends [`wake_signal`] (`SIGRTMAX`) to the thread;
//! its handler does nothing and is installed *without* `SA_RESTART`, so the blocking call
//! (`clock_nanosleep`, `sigwaitinfo`, `read` on a timerfd, `select`) returns `EINTR` and the driver
//! reports [`WakeError::Interrupted`](super::wake::WakeError::Interrupted). The cycle loop then sees
//! the stop flag. A signal that lands between the loop's flag check and its next wait would be lost, so
//! the stopper repeats it until the thread has ended (`Runtime::stop`). The POSIX-timer driver never
//! hands out `SIGRTMAX` for its own timers.

use super::SysError;
use nix::errno::Errno;
use once_cell::sync::OnceCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The signal [`interrupt`] sends: `SIGRTMAX`, reserved for this use.
pub fn wake_signal() -> libc::c_int {
    libc::SIGRTMAX()
}

extern "C" fn on_wake_signal(_: libc::c_int) {
    // Nothing to do: being delivered is the whole point (the interrupted call returns EINTR).
}

static WAKE_HANDLER: OnceCell<Result<(), SysError>> = OnceCell::new();

/// Installs the no-op, non-restarting handler for [`wake_signal`] (once per process).
pub fn install_wake_handler() -> Result<(), SysError> {
    *WAKE_HANDLER.get_or_init(|| {
        // SAFETY: sigaction is plain data; zeroed is a valid starting value, then every field we rely
        // on is set: the handler, an empty mask, and flags 0 (no SA_RESTART, no SA_SIGINFO).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_wake_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = 0;
        // SAFETY: `action.sa_mask` is a valid sigset_t owned by `action`.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: `action` is initialized; the handler is async-signal-safe (it does nothing); a null
        // old-action pointer is allowed.
        if unsafe { libc::sigaction(wake_signal(), &action, std::ptr::null_mut()) } != 0 {
            return Err(SysError::last("sigaction(SIGRTMAX)"));
        }
        Ok(())
    })
}

/// Interrupts whatever blocking call `thread` is in, with [`wake_signal`]. Harmless if the thread is
/// running (the handler does nothing) or has ended but not been joined yet.
pub fn interrupt(thread: libc::pthread_t) -> Result<(), SysError> {
    install_wake_handler()?;
    // SAFETY: `thread` is a pthread_t of a thread the caller has not joined (JoinHandle still owned),
    // so it is valid; the signal has a handler, so it cannot terminate the process.
    match unsafe { libc::pthread_kill(thread, wake_signal()) } {
        0 => Ok(()),
        e => Err(SysError::new("pthread_kill", Errno::from_raw(e))),
    }
}

static SHUTDOWN: OnceCell<Arc<AtomicBool>> = OnceCell::new();

/// The process's stop-request flag, set by SIGINT, SIGTERM or SIGHUP. The first call installs the handlers;
/// call it before anything that should not be cut short by a signal's default action.
pub fn shutdown_flag() -> &'static Arc<AtomicBool> {
    SHUTDOWN.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        // SIGHUP (the terminal closed, or `kill -HUP`) is a stop request like SIGTERM: the
        // default action would end the process with its segment left behind and no summary.
        for sig in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            // Started under `nohup` (SIGHUP ignored): a closed terminal must not stop it.
            if sig == signal_hook::consts::SIGHUP && ignored(sig) {
                continue;
            }
            if let Err(e) = signal_hook::flag::register(sig, flag.clone()) {
                // Without the handler the signal keeps its default action: the process still stops,
                // only without its clean-up. Say so instead of failing a run over it.
                log::warn!(
                    "cannot install the handler for signal {sig}: {e}; Ctrl-C will not clean up"
                );
            }
        }
        flag
    })
}

/// Whether `sig` is ignored (`SIG_IGN`, inherited from the parent, e.g. `nohup`).
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: sigaction is plain data; with a null new action, sigaction only writes the current
    // one into `old`.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `old` is a valid sigaction we own; a null new-action pointer only queries.
    let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
    rc == 0 && old.sa_sigaction == libc::SIG_IGN
}

/// Whether SIGINT, SIGTERM or SIGHUP arrived (installs the handlers if nobody did yet).
pub fn shutdown_requested() -> bool {
    shutdown_flag().load(Ordering::Relaxed)
}

/// Whether a stop request came, in a process that watches for them; `false` (and no handler
/// installed) in one that does not.
pub fn stop_requested_if_watched() -> bool {
    SHUTDOWN.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread, so that the kernel delivers them to a non-RT thread
/// of the process: an RT thread should not run handlers. Called by every RT thread at set-up.
pub fn block_stop_signals_in_current_thread() -> Result<(), SysError> {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t we own; these calls only write to it.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
    }
    // SAFETY: `set` is initialized; a null old-mask pointer is allowed.
    match unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) } {
        0 => Ok(()),
        e => Err(SysError::new("pthread_sigmask", Errno::from_raw(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::thread::JoinHandleExt;
    use std::time::{Duration, Instant};

    #[test]
    fn interrupt_ends_a_long_absolute_sleep_at_once() {
        install_wake_handler().unwrap();
        let far = crate::rt::clock::now() + crate::rt::clock::Nanos::from_secs(100);
        let sleeper = std::thread::spawn(move || {
            let ts = far.to_timespec();
            // SAFETY: valid timespec; null remainder allowed for TIMER_ABSTIME.
            unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        let t0 = Instant::now();
        while !sleeper.is_finished() && t0.elapsed() < Duration::from_secs(5) {
            interrupt(sleeper.as_pthread_t()).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let rc = sleeper.join().unwrap();
        assert_eq!(rc, libc::EINTR, "the sleep ended by the wake signal");
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }
}
