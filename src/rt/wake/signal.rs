//! Waiting for a blocked signal with `sigwaitinfo`, shared by `posix-timer` and `itimer`.
//!
//! Why `sigwaitinfo` and not a handler: a handler runs asynchronously, can do almost nothing
//! (async-signal-safety), and interrupts whatever the thread was doing. Blocking the signal and
//! taking it synchronously turns it into a plain blocking wait with no handler at all.

use crate::rt::SysError;
use nix::errno::Errno;

/// A signal blocked in the thread that armed it, ready to be waited for there.
#[derive(Clone, Copy)]
pub(crate) struct BlockedSignal {
    set: libc::sigset_t,
    signo: libc::c_int,
}

impl std::fmt::Debug for BlockedSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockedSignal")
            .field("signo", &self.signo)
            .finish()
    }
}

impl BlockedSignal {
    /// Block `signo` in the calling thread, so that it stays pending until waited for
    /// instead of running its default action (which, for real-time signals and `SIGALRM`,
    /// terminates the process).
    #[doc(alias = "pthread_sigmask")]
    pub(crate) fn block_in_current_thread(signo: libc::c_int) -> Result<Self, SysError> {
        // SAFETY: sigset_t is plain data; all-zero is a valid value that sigemptyset then
        // initializes properly.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t we own; sigemptyset/sigaddset only write to it.
        if unsafe { libc::sigemptyset(&mut set) } != 0
            // SAFETY: as above: `set` is ours and initialised by sigemptyset.
            || unsafe { libc::sigaddset(&mut set, signo) } != 0
        {
            return Err(SysError::last("sigaddset"));
        }
        // SAFETY: `set` is initialized; a null old-mask pointer is allowed.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(SysError::new("pthread_sigmask", Errno::from_raw(rc)));
        }
        Ok(BlockedSignal { set, signo })
    }

    /// The signal number.
    pub(crate) fn signo(&self) -> libc::c_int {
        self.signo
    }

    /// Block until the signal is pending for this thread (or the process) and take it:
    /// `Ok(true)`; `Ok(false)` when a different, handled signal interrupted the wait (`EINTR`).
    #[doc(alias = "sigwaitinfo")]
    #[inline]
    pub(crate) fn wait(&self) -> Result<bool, SysError> {
        loop {
            // SAFETY: `self.set` is an initialized sigset_t; a null siginfo pointer is allowed.
            let rc = unsafe { libc::sigwaitinfo(&self.set, std::ptr::null_mut()) };
            if rc == self.signo {
                return Ok(true);
            }
            let e = Errno::last();
            if rc == -1 && e == Errno::EINTR {
                return Ok(false);
            }
            if rc == -1 {
                return Err(SysError::new("sigwaitinfo", e));
            }
        }
    }

    /// Take every pending instance without blocking, so that a stale expiration from a
    /// previous timeline is not mistaken for one of the new timeline.
    #[doc(alias = "sigtimedwait")]
    pub(crate) fn drain(&self) {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `self.set` and `zero` are valid for the call; null siginfo is allowed.
        while unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &zero) } == self.signo {}
    }
}
