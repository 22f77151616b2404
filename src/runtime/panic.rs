//! Panics on RT threads are reported by the non-RT side, never printed from the RT thread.
//!
//! The default panic hook writes the message (and, with `RUST_BACKTRACE=1`, a symbolized backtrace)
//! to stderr from the panicking thread: on an RT thread that is I/O and symbol resolution inside a
//! period — one such panic stalled a 25 µs thread for 88 ms. The runtime installs, once per process,
//! a hook that looks for a *sink* registered by the current thread: an RT thread has one, and its
//! panic becomes a [`PanicReport`] sent (without blocking) to the runtime's housekeeping thread, which
//! logs it with the thread and function names. Every other thread keeps the previous hook.
//!
//! On the RT thread the hook only formats the message and, when `RUST_BACKTRACE` asks for one,
//! captures the stack unresolved ([`Backtrace::capture`]); resolving it to symbols happens when the
//! housekeeping thread prints it.

use super::thread::Heartbeat;
use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::RefCell;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Once};

/// One panic of an RT thread, for the log.
#[derive(Debug)]
pub(crate) struct PanicReport {
    /// The thread's name.
    pub thread: String,
    /// The function (position in the thread's run order) that panicked, if it was in one.
    pub function: Option<u32>,
    /// The panic message.
    pub message: String,
    /// `file:line:column` of the panic.
    pub location: Option<String>,
    /// Captured when `RUST_BACKTRACE` / `RUST_LIB_BACKTRACE` ask for one; resolved when printed.
    pub backtrace: Option<Backtrace>,
}

struct Sink {
    thread: String,
    tx: SyncSender<PanicReport>,
    heartbeat: Arc<Heartbeat>,
}

thread_local! {
    static SINK: RefCell<Option<Sink>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Installs the routing hook (once per process), chained in front of whatever hook was there.
pub(crate) fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let routed = SINK
                .try_with(|sink| {
                    let sink = sink.try_borrow().ok()?;
                    let sink = sink.as_ref()?;
                    let message = if let Some(s) = info.payload().downcast_ref::<&str>() {
                        (*s).to_string()
                    } else if let Some(s) = info.payload().downcast_ref::<String>() {
                        s.clone()
                    } else {
                        "(a panic payload that is not a string)".to_string()
                    };
                    let backtrace = Backtrace::capture();
                    let report = PanicReport {
                        thread: sink.thread.clone(),
                        function: sink.heartbeat.in_function(),
                        message,
                        location: info.location().map(|l| l.to_string()),
                        backtrace: (backtrace.status() == BacktraceStatus::Captured)
                            .then_some(backtrace),
                    };
                    // A full queue drops the report rather than block the RT thread; the fault is
                    // still counted and logged through the event ring.
                    let _ = sink.tx.try_send(report);
                    Some(())
                })
                .ok()
                .flatten()
                .is_some();
            if !routed {
                previous(info);
            }
        }));
    });
}

/// Registers the calling thread's sink: its panics go to `tx` instead of stderr.
pub(crate) fn route_panics_of_current_thread(
    thread: &str,
    tx: SyncSender<PanicReport>,
    heartbeat: Arc<Heartbeat>,
) {
    install_hook();
    SINK.with(|sink| {
        *sink.borrow_mut() = Some(Sink {
            thread: thread.to_string(),
            tx,
            heartbeat,
        })
    });
}
