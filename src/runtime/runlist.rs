//! Run lists that change while their thread runs: halcmd's `addf` and `delf` on a running instance.
//!
//! A thread's run list is a list of function slot numbers. The control side (never an RT thread)
//! publishes a new list; the RT thread adopts it at the start of a period, copying it into a buffer it
//! reserved before its loop, and acknowledges. Nothing on the RT side waits, locks or allocates:
//! adopting is one acquire load when nothing changed, a copy of at most [`MAX_RUN_LIST`] words when
//! something did.
//!
//! Two buffers alternate. The control side writes the buffer the thread is *not* reading, and only
//! once the thread has acknowledged the list before (so it has finished copying the other buffer's
//! previous contents), then publishes `(generation << 1) | buffer` with release ordering. After
//! publishing it waits, bounded, for the acknowledgement: once the thread has adopted the new list, a
//! function removed from it will not be called by that thread again, so it may be handed to another
//! thread or dropped. A thread that does not acknowledge (stalled, or stopped by SIGSTOP) gets no new
//! list written over one it may still be copying: the change is refused with [`PublishError`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The most functions one thread can run.
pub(crate) const MAX_RUN_LIST: usize = 1024;

/// One thread's published run list; shared by the control side and the thread.
pub struct RunListCell {
    bufs: [Box<[AtomicU32]>; 2],
    lens: [AtomicU32; 2],
    /// `(generation << 1) | buffer` of the list to run.
    published: AtomicU64,
    /// The `published` word the thread copied last.
    adopted: AtomicU64,
}

/// Why a new run list was not published, or not yet taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishError {
    /// More functions than [`MAX_RUN_LIST`].
    TooLong(usize),
    /// The thread has not taken the previous list yet (it is stalled or stopped): nothing was changed.
    PreviousNotTaken,
    /// The list was published but the thread has not taken it within the wait: it still runs the old
    /// one, and will switch when it next completes a period.
    NotTakenYet,
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PublishError::TooLong(n) => {
                write!(
                    f,
                    "{n} functions in one thread; the most is {MAX_RUN_LIST}: spread them over \
                     more threads"
                )
            }
            PublishError::PreviousNotTaken => write!(
                f,
                "the thread has not taken its previous function list yet (stalled or stopped?); \
                 nothing changed"
            ),
            PublishError::NotTakenYet => write!(
                f,
                "the thread has not taken the new function list yet (stalled or stopped?); it \
                 switches when it next completes a period"
            ),
        }
    }
}

fn buffer() -> Box<[AtomicU32]> {
    (0..MAX_RUN_LIST).map(|_| AtomicU32::new(0)).collect()
}

impl RunListCell {
    /// A cell whose first list is `initial` (already "adopted": the thread starts with it).
    pub fn new(initial: &[u32]) -> Result<RunListCell, PublishError> {
        if initial.len() > MAX_RUN_LIST {
            return Err(PublishError::TooLong(initial.len()));
        }
        let cell = RunListCell {
            bufs: [buffer(), buffer()],
            lens: [AtomicU32::new(initial.len() as u32), AtomicU32::new(0)],
            published: AtomicU64::new(0),
            adopted: AtomicU64::new(0),
        };
        for (slot, &f) in cell.bufs[0].iter().zip(initial) {
            slot.store(f, Ordering::Relaxed);
        }
        Ok(cell)
    }

    /// The list the thread runs (or will run at its next period), as published.
    pub fn current(&self) -> Vec<u32> {
        let p = self.published.load(Ordering::Acquire);
        let b = (p & 1) as usize;
        let n = self.lens[b].load(Ordering::Relaxed) as usize;
        self.bufs[b][..n]
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect()
    }

    /// Whether the thread runs the last published list.
    pub fn taken(&self) -> bool {
        self.adopted.load(Ordering::Acquire) == self.published.load(Ordering::Relaxed)
    }

    fn wait_taken(&self, looping: &dyn Fn() -> bool, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        loop {
            if self.taken() || !looping() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Control side: publishes `list` and waits up to `wait` for the thread to take it. `looping` says
    /// whether the thread runs its loop (a thread that does not, takes nothing and reads nothing: the
    /// list is simply there when it starts). Callers serialize publishes of one cell.
    pub fn publish(
        &self,
        list: &[u32],
        looping: &dyn Fn() -> bool,
        wait: Duration,
    ) -> Result<(), PublishError> {
        if list.len() > MAX_RUN_LIST {
            return Err(PublishError::TooLong(list.len()));
        }
        // The other buffer is free only once the thread has taken the list in this one.
        if !self.wait_taken(looping, wait) {
            return Err(PublishError::PreviousNotTaken);
        }
        let p = self.published.load(Ordering::Relaxed);
        let next = 1 - (p & 1) as usize;
        for (slot, &f) in self.bufs[next].iter().zip(list) {
            slot.store(f, Ordering::Relaxed);
        }
        self.lens[next].store(list.len() as u32, Ordering::Relaxed);
        self.published
            .store((((p >> 1) + 1) << 1) | next as u64, Ordering::Release);
        if self.wait_taken(looping, wait) {
            Ok(())
        } else {
            Err(PublishError::NotTakenYet)
        }
    }

    /// RT side, at the start of a period: if a new list was published since `seen`, copies it into
    /// `local` (whose capacity must be [`MAX_RUN_LIST`]: no allocation) and acknowledges it. Returns
    /// whether the list changed.
    #[inline]
    pub fn adopt(&self, seen: &mut u64, local: &mut Vec<u32>) -> bool {
        let p = self.published.load(Ordering::Acquire);
        if p == *seen {
            return false;
        }
        let b = (p & 1) as usize;
        let n = (self.lens[b].load(Ordering::Relaxed) as usize).min(local.capacity());
        local.clear();
        local.extend(self.bufs[b][..n].iter().map(|s| s.load(Ordering::Relaxed)));
        *seen = p;
        self.adopted.store(p, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn a_list_published_before_the_loop_is_simply_there() {
        let cell = RunListCell::new(&[1, 2]).unwrap();
        let (mut seen, mut local) = (0, Vec::with_capacity(MAX_RUN_LIST));
        local.extend([1, 2]);
        assert!(
            !cell.adopt(&mut seen, &mut local),
            "the initial list needs no adoption"
        );
        cell.publish(&[3], &|| false, Duration::ZERO).unwrap();
        assert_eq!(cell.current(), [3]);
        assert!(cell.adopt(&mut seen, &mut local));
        assert_eq!(local, [3]);
        assert!(!cell.adopt(&mut seen, &mut local));
        assert!(matches!(
            cell.publish(&[0; MAX_RUN_LIST + 1], &|| false, Duration::ZERO),
            Err(PublishError::TooLong(_))
        ));
    }

    /// A real thread adopting while the control side publishes 2 000 lists: every list the thread
    /// runs is one that was published whole (never a mix of two), each publish is taken, and the
    /// thread never waits.
    #[test]
    fn a_running_thread_only_ever_sees_whole_lists() {
        let cell = Arc::new(RunListCell::new(&[]).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let looping = Arc::new(AtomicBool::new(true));
        let (c, s) = (cell.clone(), stop.clone());
        let rt = std::thread::spawn(move || {
            let (mut seen, mut local) = (0u64, Vec::with_capacity(MAX_RUN_LIST));
            let (mut periods, mut changes) = (0u64, 0u64);
            while !s.load(Ordering::Relaxed) {
                if c.adopt(&mut seen, &mut local) {
                    changes += 1;
                    // List k is [k, k, …] of length k % 50: whole or torn shows at once.
                    if let Some(&k) = local.first() {
                        assert_eq!(local.len() as u32, k % 50, "length of list {k}");
                        assert!(local.iter().all(|&x| x == k), "torn list: {local:?}");
                    }
                }
                periods += 1;
                std::hint::spin_loop();
            }
            (periods, changes)
        });
        let l = looping.clone();
        let is_looping = move || l.load(Ordering::Relaxed);
        for k in 1..=2000u32 {
            let list = vec![k; (k % 50) as usize];
            cell.publish(&list, &is_looping, Duration::from_secs(5))
                .unwrap();
            assert!(cell.taken());
        }
        stop.store(true, Ordering::Relaxed);
        let (periods, changes) = rt.join().unwrap();
        assert_eq!(changes, 2000, "every published list was taken");
        assert!(periods > changes);
    }

    #[test]
    fn a_thread_that_does_not_take_its_list_blocks_the_next_change() {
        let cell = RunListCell::new(&[1]).unwrap();
        // The thread "loops" but never adopts (stalled).
        assert_eq!(
            cell.publish(&[2], &|| true, Duration::from_millis(20)),
            Err(PublishError::NotTakenYet)
        );
        assert_eq!(
            cell.publish(&[3], &|| true, Duration::from_millis(20)),
            Err(PublishError::PreviousNotTaken)
        );
        assert_eq!(cell.current(), [2], "the unread list was not overwritten");
        let (mut seen, mut local) = (0, Vec::with_capacity(MAX_RUN_LIST));
        assert!(cell.adopt(&mut seen, &mut local));
        assert_eq!(local, [2]);
        cell.publish(&[3], &|| true, Duration::ZERO).unwrap_err(); // not taken within 0 s
        assert!(cell.adopt(&mut seen, &mut local));
        assert_eq!(local, [3]);
    }
}
