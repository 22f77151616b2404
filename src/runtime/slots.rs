//! The functions of a running instance, each in a numbered slot: its per-period closure, its timing
//! record writer and its health pins. Threads run lists of slot numbers ([`super::runlist`]), so a
//! function can be added to a running thread, removed from it, or moved to another one without the
//! closure moving in memory.
//!
//! **Ownership.** A slot's closure, timer and health are used by exactly one thread at a time: the
//! one whose adopted run list holds the slot number. The control side fills a slot before any list
//! names it, and hands a slot to another thread only after the first one has taken a list without it
//! (see `RunListCell::publish`). The slot table is allocated once, with room for functions loaded later.
//! A function unloaded for good ([`Slots::free`]) empties its slot, and the next function loaded takes
//! it: the room never runs out however often components are loaded and unloaded.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

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

/// One place of the table: empty, or a function.
struct Place {
    filled: AtomicBool,
    slot: UnsafeCell<Option<FunctionSlot>>,
}

/// The slot table: fixed capacity, filled in order; a freed slot goes to the next function.
///
/// A slot is written (filled or emptied) only by the control side under the runtime's `live` lock,
/// and only while no thread can read it: a slot being filled is in no run list yet, and a slot is
/// freed only once every thread took a run list without it. Threads read the slots of their adopted
/// run list, which the control side never writes.
pub struct Slots {
    places: Box<[Place]>,
    /// Places never used yet start here.
    next: AtomicUsize,
    /// Freed places, reused first (control side).
    free: Mutex<Vec<u32>>,
}

// SAFETY: a place's `slot` is written only by the control side when no thread can read it (the
// ownership rule above, upheld by `put`'s and `free`'s callers), and published with the `filled`
// flag (release) that readers load with acquire; FunctionSlot itself is Sync.
unsafe impl Sync for Slots {}

impl Slots {
    /// A table with room for `capacity` functions.
    pub fn with_capacity(capacity: usize) -> Slots {
        Slots {
            places: (0..capacity)
                .map(|_| Place {
                    filled: AtomicBool::new(false),
                    slot: UnsafeCell::new(None),
                })
                .collect(),
            next: AtomicUsize::new(0),
            free: Mutex::new(Vec::new()),
        }
    }

    /// Control side: puts a function into a free slot (a freed one first); `None` when the table is
    /// full. The slot must not be in any published run list until this returns (it is not: no list
    /// names an empty slot).
    pub fn put(&self, slot: FunctionSlot) -> Option<u32> {
        let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let i = match reused {
            Some(i) => i as usize,
            None => {
                let i = self.next.load(Ordering::Relaxed);
                if i >= self.places.len() {
                    return None;
                }
                self.next.store(i + 1, Ordering::Relaxed);
                i
            }
        };
        let place = &self.places[i];
        // SAFETY: the place is empty (fresh or freed), so no run list names it and no thread reads
        // it; the control side is serialized by the runtime's `live` lock.
        unsafe { *place.slot.get() = Some(slot) };
        place.filled.store(true, Ordering::Release);
        Some(i as u32)
    }

    /// Control side: empties slot `i` — its closure, timer and health handles are dropped now — and
    /// makes it the next one [`put`](Self::put) uses. False if it was empty.
    ///
    /// # Safety
    /// No thread may hold `i` in its run list or be about to adopt one that does (every thread took
    /// its latest list, none of which names `i`), and the caller holds the runtime's `live` lock (no
    /// other control-side access to the table runs).
    pub unsafe fn free(&self, i: u32) -> bool {
        let Some(place) = self.places.get(i as usize) else {
            return false;
        };
        if !place.filled.load(Ordering::Acquire) {
            return false;
        }
        place.filled.store(false, Ordering::Release);
        // SAFETY: per the contract nobody reads the place now.
        let old = unsafe { (*place.slot.get()).take() };
        drop(old);
        self.free.lock().unwrap_or_else(|p| p.into_inner()).push(i);
        true
    }

    /// The slot `i`, when filled.
    #[inline]
    pub fn get(&self, i: u32) -> Option<&FunctionSlot> {
        let place = self.places.get(i as usize)?;
        if !place.filled.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: filled (acquire: the write in `put` is visible); a filled place is emptied only
        // when no thread reads it and under the lock every control-side reader holds (`free`).
        unsafe { (*place.slot.get()).as_ref() }
    }

    /// The name of slot `i`, `?` if there is none.
    pub fn name(&self, i: u32) -> &str {
        self.get(i).map_or("?", FunctionSlot::name)
    }

    /// How many slots were ever filled (the highest used slot number + 1).
    pub fn len(&self) -> usize {
        self.next.load(Ordering::Relaxed).min(self.places.len())
    }

    /// Whether no slot was ever filled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether [`put`](Self::put) would fail: every slot holds a function.
    pub fn is_full(&self) -> bool {
        self.len() >= self.places.len()
            && self
                .free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
    }

    /// How many slots hold a function now.
    pub fn in_use(&self) -> usize {
        (0..self.len() as u32)
            .filter(|&i| self.get(i).is_some())
            .count()
    }

    /// The number of the slot named `name`.
    pub fn find(&self, name: &str) -> Option<u32> {
        (0..self.len() as u32).find(|&i| self.get(i).is_some_and(|s| s.name == name))
    }

    /// How many functions the table can hold.
    pub fn capacity(&self) -> usize {
        self.places.len()
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
        assert!(slots.is_full());
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
        // A freed slot goes to the next function (this test thread is the only user).
        // SAFETY: no thread runs any slot here.
        assert!(unsafe { slots.free(a) });
        // SAFETY: as above.
        assert!(!unsafe { slots.free(a) }, "already empty");
        assert_eq!((slots.get(a).is_none(), slots.in_use()), (true, 1));
        let d = slots
            .put(FunctionSlot::new(
                "d".into(),
                Box::new(|_: &Cycle| {}),
                None,
                None,
            ))
            .unwrap();
        assert_eq!((d, slots.name(d), slots.in_use()), (a, "d", 2));
        assert!(slots.is_full());
    }
}
