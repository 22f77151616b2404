//! Waiting on the event itself instead of sleeping: poll until it has happened, with a generous
//! deadline that only catches a hang, and print how long it took. This machine is shared and noisy;
//! how soon the event comes is never the assertion.

use std::time::{Duration, Instant};

/// The deadline for an event that normally comes within milliseconds.
pub(crate) const GENEROUS: Duration = Duration::from_secs(30);

/// Polls `probe` (every 2 ms) until it returns `Some`, and returns that; fails the test, naming
/// `what`, if `limit` passes first. Prints the time it took.
pub(crate) fn until<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = probe() {
            eprintln!("{what}: after {:?}", t0.elapsed());
            return v;
        }
        assert!(
            t0.elapsed() < limit,
            "{what}: not within {limit:?} (a hang, not a slow machine)"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// [`until`] for a condition.
pub(crate) fn until_true(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    until(what, limit, || ok().then_some(()))
}
