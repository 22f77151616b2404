//! Single-writer sequence lock over 64-bit atomic words.
//!
//! Why a seqlock: a thread's stats are many words that must be read together (a `sum` without its
//! `cycles` gives a wrong mean), the writer is a real-time thread that must never wait for anyone, and
//! readers live in other processes that may be descheduled at any moment. Readers therefore do all the
//! work: they retry until they copy the words without the writer having touched them in between.
//!
//! Protocol (also in `hal/LAYOUT.md`), with `seq` even when idle:
//! - writer: `seq += 1` (odd: writing), release fence, store the fields, `seq += 1` with release ordering;
//! - reader: `s1 = seq` (acquire); if odd, retry; load the fields; acquire fence; `s2 = seq`; the copy is
//!   consistent iff `s1 == s2`.
//!
//! Every field is an atomic word accessed with relaxed loads/stores, so a racing read is a stale value,
//! never undefined behaviour; the fences make the sequence check meaningful.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Runs `write` as one seqlock write section. Must only be called by the record's single writer.
#[inline]
pub(crate) fn write<R>(seq: &AtomicU64, write: impl FnOnce() -> R) -> R {
    // Relaxed is enough to read our own last store: nobody else writes `seq`.
    let s = seq.load(Ordering::Relaxed);
    // Normally `s` is even; an odd `s` means a previous writer died mid-write, and we move past it.
    let odd = if s & 1 == 0 {
        s.wrapping_add(1)
    } else {
        s.wrapping_add(2)
    };
    seq.store(odd, Ordering::Relaxed);
    // Orders the odd `seq` before the field stores below, for a reader that sees any of them.
    fence(Ordering::Release);
    let r = write();
    seq.store(odd.wrapping_add(1), Ordering::Release);
    r
}

/// How long a reader keeps retrying before concluding the writer died mid-write. A live writer holds a
/// section for tens of nanoseconds once per period, so a reader normally succeeds at the first or second
/// attempt; this bound only matters for a dead writer's odd `seq` (or a reader starved by its scheduler).
pub(crate) const READ_PATIENCE: Duration = Duration::from_millis(200);

/// Reads a consistent copy: `read` loads the fields (relaxed) and may be called several times.
/// Returns `None` if no consistent copy was obtained within [`READ_PATIENCE`].
#[inline]
pub(crate) fn read<R>(seq: &AtomicU64, mut read: impl FnMut() -> R) -> Option<R> {
    let mut started: Option<Instant> = None;
    for attempt in 0u64.. {
        let s1 = seq.load(Ordering::Acquire);
        if s1 & 1 == 0 {
            let value = read();
            // Orders the field loads above before the re-check of `seq` below.
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s1 {
                return Some(value);
            }
        }
        if attempt % 64 == 63 {
            // The clock is only read once contention is real.
            if started.get_or_insert_with(Instant::now).elapsed() > READ_PATIENCE {
                return None;
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn seq_is_even_after_each_write_even_from_odd_start() {
        let seq = AtomicU64::new(0);
        write(&seq, || ());
        assert_eq!(seq.load(Ordering::Relaxed), 2);
        // A block whose writer died mid-write (odd) is recovered by the next writer.
        seq.store(7, Ordering::Relaxed);
        write(&seq, || ());
        assert_eq!(seq.load(Ordering::Relaxed) % 2, 0);
        seq.store(u64::MAX - 1, Ordering::Relaxed);
        write(&seq, || ());
        assert_eq!(seq.load(Ordering::Relaxed) % 2, 0, "wraps around evenly");
    }

    #[test]
    fn reader_gives_up_on_a_writer_that_died_mid_write() {
        let seq = AtomicU64::new(3);
        assert_eq!(read(&seq, || 1), None);
    }

    /// A real writer leaves a whole period between sections (25 µs for the fastest base thread); a
    /// writer in a tight loop could starve a reader forever, which no real thread does.
    fn pause_like_a_fast_thread() {
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(20) {
            std::hint::spin_loop();
        }
    }

    /// A writer stores the same counter into every word; a torn copy would show two different values.
    #[test]
    fn concurrent_reader_never_sees_a_torn_record() {
        const WORDS: usize = 16;
        let seq = Arc::new(AtomicU64::new(0));
        let words: Arc<Vec<AtomicU64>> = Arc::new((0..WORDS).map(|_| AtomicU64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (seq, words, stop) = (seq.clone(), words.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    write(&seq, || {
                        words.iter().for_each(|w| w.store(n, Ordering::Relaxed))
                    });
                    pause_like_a_fast_thread();
                }
                n
            })
        };
        let mut last = 0;
        let mut distinct = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
        while std::time::Instant::now() < deadline {
            let copy = read(&seq, || {
                words
                    .iter()
                    .map(|w| w.load(Ordering::Relaxed))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_else(|| panic!("no consistent read; seq = {}", seq.load(Ordering::Relaxed)));
            assert!(copy.iter().all(|&v| v == copy[0]), "torn read: {copy:?}");
            assert!(copy[0] >= last, "went back in time");
            distinct += usize::from(copy[0] != last);
            last = copy[0];
        }
        stop.store(true, Ordering::Relaxed);
        let written = writer.join().unwrap();
        assert!(written > 0 && distinct > 0);
    }
}
