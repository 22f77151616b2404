//! The CLI's printing. Standard output may be a pipe whose reader has gone (`rtapi show | head -1`);
//! Rust ignores SIGPIPE, so `print!` would panic with "failed printing to stdout". Here a broken
//! pipe (EPIPE) quietly ends the printing instead: that call and every later one print nothing and
//! succeed, and the command carries on to its end (a run still stops, reports and removes its
//! segment). Any other write error (e.g. a full disk behind `>`) fails the command.

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use super::Failure;

/// Set once standard output's reader has gone.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output (locked, flushed); see the module doc for errors.
pub(super) fn print(text: &str) -> Result<(), Failure> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe, or a terminal that hung up (EIO): nobody reads any more.
        Err(e) if e.kind() == ErrorKind::BrokenPipe || e.raw_os_error() == Some(libc::EIO) => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(Failure::runtime(format!("writing to standard output: {e}"))),
    }
}

/// [`print`] with a newline after `text`.
pub(super) fn println(text: &str) -> Result<(), Failure> {
    print(&format!("{text}\n"))
}

/// Writes `text` to standard error. Errors are ignored: there is nowhere left to report them.
pub(super) fn eprint(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

/// [`eprint`] with a newline after `text`.
pub(super) fn eprintln(text: &str) {
    eprint(&format!("{text}\n"));
}
