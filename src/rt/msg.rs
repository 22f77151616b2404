//! Messages from RT threads, without the RT thread ever allocating, locking or doing I/O.
//!
//! Each RT thread owns the producer end of a fixed-size single-producer/single-consumer ring of
//! 64-bit atomic slots; a normal thread owns the consumer end, drains it and logs. An event is packed
//! into one `u64` (0 means "empty slot"), so a push is one load and one store, and the code needs no
//! `unsafe`. When the ring is full the event is dropped and counted — the RT thread never waits.

use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// What an RT thread can tell the outside world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtEvent {
    /// Function `function` (index in the thread's `addf` order) panicked and was disabled.
    FunctionFaulted {
        /// 0-based position of the function in its thread's `addf` list.
        function: u16,
    },
    /// The timer wait failed with this errno; the thread stopped.
    WaitFailed {
        /// The `errno` the timer wait failed with (e.g. `libc::EINVAL`).
        errno: i32,
    },
}

const KIND_FAULT: u64 = 1;
const KIND_WAIT: u64 = 2;

impl RtEvent {
    /// Layout: kind in bits 56..64 (never 0), a 16-bit field in 32..48, a 32-bit field in 0..32.
    fn pack(self) -> u64 {
        match self {
            RtEvent::FunctionFaulted { function } => KIND_FAULT << 56 | (function as u64) << 32,
            RtEvent::WaitFailed { errno } => KIND_WAIT << 56 | errno as u32 as u64,
        }
    }

    fn unpack(v: u64) -> Option<RtEvent> {
        let (small, low) = ((v >> 32) as u16, v as u32);
        match v >> 56 {
            KIND_FAULT => Some(RtEvent::FunctionFaulted { function: small }),
            KIND_WAIT => Some(RtEvent::WaitFailed { errno: low as i32 }),
            _ => None,
        }
    }
}

struct Ring {
    slots: Box<[AtomicU64]>,
    /// Next slot the producer writes (only the producer stores it).
    tail: CachePadded<AtomicUsize>,
    /// Next slot the consumer reads (only the consumer stores it).
    head: CachePadded<AtomicUsize>,
    dropped: AtomicU64,
}

/// The RT end. `Send` but not `Sync`: exactly one thread pushes.
pub struct Producer {
    ring: Arc<Ring>,
    _single: PhantomData<Cell<()>>,
}

/// The draining end. `Send` but not `Sync`: exactly one thread pops.
pub struct Consumer {
    ring: Arc<Ring>,
    _single: PhantomData<Cell<()>>,
}

/// A ring of `capacity` events (0 counts as 1), allocated here, before any RT thread starts.
pub fn channel(capacity: usize) -> (Producer, Consumer) {
    let ring = Arc::new(Ring {
        slots: (0..capacity.max(1)).map(|_| AtomicU64::new(0)).collect(),
        tail: CachePadded::new(AtomicUsize::new(0)),
        head: CachePadded::new(AtomicUsize::new(0)),
        dropped: AtomicU64::new(0),
    });
    (
        Producer {
            ring: ring.clone(),
            _single: PhantomData,
        },
        Consumer {
            ring,
            _single: PhantomData,
        },
    )
}

impl Producer {
    /// Queues an event, or counts it as dropped when the ring is full. Wait-free. `true` when
    /// queued, `false` when dropped.
    #[inline]
    pub fn push(&self, event: RtEvent) -> bool {
        let r = &*self.ring;
        let tail = r.tail.load(Ordering::Relaxed);
        let slot = &r.slots[tail % r.slots.len()];
        // A non-zero slot has not been consumed yet: the ring is full.
        if slot.load(Ordering::Acquire) != 0 {
            r.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        slot.store(event.pack(), Ordering::Release);
        r.tail.store(tail.wrapping_add(1), Ordering::Relaxed);
        true
    }
}

impl Consumer {
    /// The oldest queued event, if any.
    pub fn pop(&self) -> Option<RtEvent> {
        let r = &*self.ring;
        let head = r.head.load(Ordering::Relaxed);
        let slot = &r.slots[head % r.slots.len()];
        let v = slot.load(Ordering::Acquire);
        if v == 0 {
            return None;
        }
        // Release: the producer's Acquire load of 0 must see us done with the slot.
        slot.store(0, Ordering::Release);
        r.head.store(head.wrapping_add(1), Ordering::Relaxed);
        RtEvent::unpack(v)
    }

    /// Events dropped because the ring was full, since the channel was made (never reset).
    pub fn dropped(&self) -> u64 {
        self.ring.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_unpacks_every_event() {
        for e in [
            RtEvent::FunctionFaulted { function: 65_535 },
            RtEvent::WaitFailed { errno: 22 },
            RtEvent::WaitFailed { errno: -1 },
            RtEvent::WaitFailed { errno: i32::MIN },
        ] {
            assert_ne!(e.pack(), 0);
            assert_eq!(RtEvent::unpack(e.pack()), Some(e));
        }
    }

    #[test]
    fn full_ring_drops_and_counts() {
        let (p, c) = channel(2);
        assert!(p.push(RtEvent::WaitFailed { errno: 1 }));
        assert!(p.push(RtEvent::WaitFailed { errno: 2 }));
        assert!(!p.push(RtEvent::WaitFailed { errno: 3 }));
        assert_eq!(c.dropped(), 1);
        assert_eq!(c.pop(), Some(RtEvent::WaitFailed { errno: 1 }));
        assert!(p.push(RtEvent::WaitFailed { errno: 4 }));
        assert_eq!(c.pop(), Some(RtEvent::WaitFailed { errno: 2 }));
        assert_eq!(c.pop(), Some(RtEvent::WaitFailed { errno: 4 }));
        assert_eq!(c.pop(), None);
    }

    #[test]
    fn concurrent_producer_and_consumer_lose_nothing_but_drops() {
        let (p, c) = channel(64);
        let n = 200_000u32;
        let t = std::thread::spawn(move || {
            for i in 0..n {
                while !p.push(RtEvent::WaitFailed { errno: i as i32 }) {
                    std::hint::spin_loop();
                }
            }
        });
        let mut expect = 0u32;
        while expect < n {
            if let Some(RtEvent::WaitFailed { errno }) = c.pop() {
                assert_eq!(errno as u32, expect, "in order, none lost");
                expect += 1;
            }
        }
        t.join().unwrap();
    }
}
