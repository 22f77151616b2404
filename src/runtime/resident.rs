//! Residents: what the runtime's threads call into that is not Rust the runtime owns — a hosted C
//! module's code and statics — kept by the runtime and released only when no thread can be inside it.
//!
//! A component hands the runtime a value whose `Drop` releases the thing (a LinuxCNC module's
//! `rtapi_app_exit` and `dlclose`). The runtime drops it:
//! - while configuring, whenever it likes (no thread has run yet): a runtime dropped before `start`,
//!   or a `start` that fails, releases what was loaded into it;
//! - once running, in [`stop`](super::Runtime::stop) after every thread has been joined, last kept
//!   first; never if a thread was left behind (it may be inside the code: then the residents stay
//!   mapped and go with the process), and never by dropping a running runtime without `stop`.
//! - when a live `unloadrt` asks ([`Runtime::release_residents`](super::Runtime::release_residents)),
//!   after the functions using it left every run list.

use std::any::Any;
use std::sync::Mutex;

/// A kept resident.
pub type Resident = Box<dyn Any + Send>;

/// The residents of a runtime still configuring: no thread has run their code, so dropping the set
/// (a runtime dropped before `start`, a `start` that fails) releases them, last kept first — a module
/// that uses another's symbols ends before the one it uses, as LinuxCNC unloads.
#[derive(Default)]
pub(super) struct Kept(Vec<Resident>);

impl Kept {
    pub(super) fn push(&mut self, r: Resident) {
        self.0.push(r);
    }

    /// Hands them over to a running runtime's [`Residents`], in the order kept.
    pub(super) fn into_running(mut self) -> Residents {
        Residents::new(std::mem::take(&mut self.0))
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        while let Some(r) = self.0.pop() {
            drop(r);
        }
    }
}

/// The residents of a running runtime: released only explicitly ([`Residents::release_all`],
/// [`Residents::release`]); dropping the set forgets them (a thread may still run their code).
#[derive(Default)]
pub(super) struct Residents(Mutex<Vec<Resident>>);

impl Residents {
    pub(super) fn new(kept: Vec<Resident>) -> Self {
        Residents(Mutex::new(kept))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Resident>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn keep(&self, r: Resident) {
        self.lock().push(r);
    }

    /// Drops the residents `pick` chooses, last kept first, outside the lock.
    pub(super) fn release(&self, pick: &dyn Fn(&(dyn Any + Send)) -> bool) -> usize {
        let picked: Vec<Resident> = {
            let mut kept = self.lock();
            let (picked, stay) = std::mem::take(&mut *kept)
                .into_iter()
                .partition(|r| pick(r.as_ref()));
            *kept = stay;
            picked
        };
        let n = picked.len();
        for r in picked.into_iter().rev() {
            drop(r);
        }
        n
    }

    /// Drops every resident, last kept first.
    pub(super) fn release_all(&self) {
        self.release(&|_| true);
    }

    /// How many are kept.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for Residents {
    fn drop(&mut self) {
        // Not released by `stop`: a thread may still be inside their code. They stay mapped.
        for r in std::mem::take(&mut *self.lock()) {
            std::mem::forget(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Counted(Arc<AtomicUsize>, usize, Arc<Mutex<Vec<usize>>>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
            self.2.lock().unwrap().push(self.1);
        }
    }

    #[test]
    fn released_last_first_picked_only_and_never_by_drop() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let r = Residents::default();
        for i in 0..4 {
            r.keep(Box::new(Counted(dropped.clone(), i, order.clone())));
        }
        let odd = r.release(&|x| x.downcast_ref::<Counted>().is_some_and(|c| c.1 % 2 == 1));
        assert_eq!(odd, 2);
        assert_eq!(*order.lock().unwrap(), vec![3, 1]);
        assert_eq!(r.len(), 2);
        drop(r);
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            2,
            "dropping the set released a resident"
        );
        let r = Residents::new(vec![
            Box::new(Counted(dropped.clone(), 10, order.clone())),
            Box::new(Counted(dropped.clone(), 11, order.clone())),
        ]);
        r.release_all();
        assert_eq!(dropped.load(Ordering::Relaxed), 4);
        assert_eq!(order.lock().unwrap()[2..], [11, 10]);
    }

    #[test]
    fn a_configuring_set_releases_last_first_when_dropped_and_hands_over_in_order() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut k = Kept::default();
        for i in 0..3 {
            k.push(Box::new(Counted(dropped.clone(), i, order.clone())));
        }
        drop(k);
        assert_eq!(*order.lock().unwrap(), vec![2, 1, 0]);
        let mut k = Kept::default();
        for i in 10..12 {
            k.push(Box::new(Counted(dropped.clone(), i, order.clone())));
        }
        let running = k.into_running();
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            3,
            "handing over drops nothing"
        );
        running.release_all();
        assert_eq!(order.lock().unwrap()[3..], [11, 10]);
    }
}
