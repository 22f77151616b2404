//! The functions of a running instance, each in a numbered slot: its per-period closure, its timing
//! record writer and its health pins. Threads run lists of slot numbers ([`super::runlist`]), so a
//! function can be added to a running thread, removed from it, or moved to another one without the
//! closure moving in memory.
//!
//! **Ownership.** A slot's closure, timer and health are used by exactly one thread at a time: the
//! one whose adopted run list holds the slot number. The control side fills a slot before any list
//! names it, and hands a slot to another thread only after the first one has taken a list without it
//! (see `RunListCell::publish`). The slot table is allocated once, with room for functions loaded later;
//! slots are never emptied while the instance lives.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use rtapi_hal::{FunctionTimer, Out, Param, Pin};

use super::function::RtFn;

/// A function's `<funct>.time` pin, `.tmax` and `.tmax-increased` params.
pub struct FunctionHealth {
    pub(crate) time: Pin<Out, i32>,
    pub(crate) tmax: Param<i32>,
    pub(crate) increased: Param<bool>,
}

impl FunctionHealth {
    /// After a call that took `ns`.
    #[inline]
    fn record(&self, ns: u64) {
        let t = i32::try_from(ns).unwrap_or(i32::MAX);
        self.time.set(t);
        let up = t > self.tmax.get();
        if up {
            self.tmax.set(t);
        }
        self.increased.set(up);
    }
}

/// One function: what a thread needs to call and time it.
pub struct FunctionSlot {
    name: String,
    body: UnsafeCell<RtFn>,
    timer: UnsafeCell<Option<FunctionTimer>>,
    health: Option<FunctionHealth>,
    faulted: AtomicBool,
}

// SAFETY: the UnsafeCell fields (the closure and the timer) are only touched by the one thread whose
// adopted run list holds the slot (module docs: the control side never names a slot in two lists that
// threads may hold at once, and fills a slot before publishing it). Everything else is atomics, pins
// and params (atomic cells) or the immutable name.
unsafe impl Sync for FunctionSlot {}
// SAFETY: the closure and timer are Send; the slot moves between threads only as a whole.
unsafe impl Send for FunctionSlot {}

/// What [`FunctionSlot::call`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Called {
    /// It ran and returned.
    Ok,
    /// It panicked now: it is disabled from here on.
    Panicked,
    /// It had panicked before: not called.
    Disabled,
}

impl FunctionSlot {
    /// A function's slot; `timer` and `health` are what its calls are recorded into, if anything.
    pub fn new(
        name: String,
        body: RtFn,
        timer: Option<FunctionTimer>,
        health: Option<FunctionHealth>,
    ) -> FunctionSlot {
        FunctionSlot {
            name,
            body: UnsafeCell::new(body),
            timer: UnsafeCell::new(timer),
            health,
            faulted: AtomicBool::new(false),
        }
    }

    /// Its HAL name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it panicked (and is no longer called).
    pub fn faulted(&self) -> bool {
        self.faulted.load(Ordering::Relaxed)
    }

    /// Calls it once, catching a panic.
    ///
    /// # Safety
    /// Only the thread that owns the slot (module docs) may call it.
    #[inline]
    pub unsafe fn call(&self, cycle: &super::function::Cycle) -> Called {
        if self.faulted.load(Ordering::Relaxed) {
            return Called::Disabled;
        }
        // SAFETY: the caller owns the slot, so nobody else touches the closure now.
        let body = unsafe { &mut *self.body.get() };
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(cycle))).is_ok();
        if ok {
            Called::Ok
        } else {
            self.faulted.store(true, Ordering::Relaxed);
            Called::Panicked
        }
    }

    /// Drops the function's closure (and what it owns: a sampler's FIFO file, a hosted module's
    /// handle), leaving a function that does nothing: for a function that left every thread for
    /// good (its component was unloaded), so its resources go now instead of at exit.
    ///
    /// # Safety
    /// No thread may hold the slot in its run list (the control side checked that every thread took
    /// a list without it), and no other call of `call`/`retire` may run on it.
    pub unsafe fn retire(&self) {
        // SAFETY: the caller guarantees nobody else touches the closure now.
        let body = unsafe { &mut *self.body.get() };
        let old = std::mem::replace(body, Box::new(|_| {}));
        drop(old);
    }

    /// Records a call's time (and fault) in its timing record and health objects.
    ///
    /// # Safety
    /// Only the thread that owns the slot may record.
    #[inline]
    pub unsafe fn record(&self, ns: u64, faulted: bool) {
        // SAFETY: the caller owns the slot: the timer has no other user now.
        if let Some(t) = unsafe { &*self.timer.get() } {
            t.record(ns, u32::from(faulted));
        }
        if let Some(h) = &self.health {
            h.record(ns);
        }
    }
}

/// The slot table: fixed capacity, filled in order, never emptied.
pub struct Slots {
    slots: Box<[OnceLock<FunctionSlot>]>,
    next: AtomicUsize,
}

impl Slots {
    /// A table with room for `capacity` functions.
    pub fn with_capacity(capacity: usize) -> Slots {
        Slots {
            slots: (0..capacity).map(|_| OnceLock::new()).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Control side: puts a function into the next free slot; `None` when the table is full.
    pub fn put(&self, slot: FunctionSlot) -> Option<u32> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= self.slots.len() {
            self.next.store(self.slots.len(), Ordering::Relaxed);
            return None;
        }
        let _ = self.slots[i].set(slot);
        Some(i as u32)
    }

    /// The slot `i`, once filled.
    #[inline]
    pub fn get(&self, i: u32) -> Option<&FunctionSlot> {
        self.slots.get(i as usize).and_then(OnceLock::get)
    }

    /// The name of slot `i`, `?` if there is none.
    pub fn name(&self, i: u32) -> &str {
        self.get(i).map_or("?", FunctionSlot::name)
    }

    /// How many slots are filled.
    pub fn len(&self) -> usize {
        self.next.load(Ordering::Relaxed).min(self.slots.len())
    }

    /// Whether no slot is filled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of the slot named `name`.
    pub fn find(&self, name: &str) -> Option<u32> {
        (0..self.len() as u32).find(|&i| self.get(i).is_some_and(|s| s.name == name))
    }

    /// How many functions the table can hold.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::function::Cycle;

    #[test]
    fn slots_fill_in_order_call_and_disable_a_panicking_function() {
        let slots = Slots::with_capacity(2);
        let a = slots
            .put(FunctionSlot::new(
                "a".into(),
                Box::new(|_: &Cycle| {}),
                None,
                None,
            ))
            .unwrap();
        let b = slots
            .put(FunctionSlot::new(
                "b".into(),
                Box::new(|_: &Cycle| panic!("boom")),
                None,
                None,
            ))
            .unwrap();
        assert_eq!((a, b), (0, 1));
        assert!(slots
            .put(FunctionSlot::new(
                "c".into(),
                Box::new(|_: &Cycle| {}),
                None,
                None
            ))
            .is_none());
        assert_eq!(slots.len(), 2);
        assert_eq!(slots.find("b"), Some(1));
        assert_eq!(slots.name(7), "?");
        let c = Cycle::default();
        // SAFETY: this test thread is the only user of the slots.
        unsafe {
            assert_eq!(slots.get(a).unwrap().call(&c), Called::Ok);
            assert_eq!(slots.get(b).unwrap().call(&c), Called::Panicked);
            assert_eq!(slots.get(b).unwrap().call(&c), Called::Disabled);
        }
        assert!(slots.get(b).unwrap().faulted());
    }
}
