//! Which records of a table are in use, and which deleted ones wait for their slot to be used again.
//!
//! The segment's tables never grow or move (LAYOUT.md section 8), so a table's room is what it was
//! created with. A deleted record (a tombstone) keeps its slot until a later record of the same table
//! takes it (layout 2.1; LAYOUT.md section 5, "Reuse"): the owner rewrites the whole record inside one
//! structural change, so a reader that overlapped the change retries and never sees a mix of the two.
//! Freed slots are handed out oldest deletion first, which leaves a freed slot alone as long as the
//! table allows. Every use of a slot has a serial number, carried by the key the owner got for it, so a
//! key of the object that was there before is told apart from a key of the object there now.

use std::collections::VecDeque;

/// The bookkeeping of one table's slots (indices into the builder's vector of that table).
#[derive(Debug, Clone, Default)]
pub(crate) struct Room {
    /// Per slot: deleted (a tombstone) or in use.
    deleted: Vec<bool>,
    /// Per slot: how many objects used it before the one there now.
    serial: Vec<u32>,
    /// Deleted slots that may be used again, oldest deletion first.
    free: VecDeque<usize>,
}

impl Room {
    /// Slots ever used (the table's `count`, LAYOUT.md section 4: live records and tombstones).
    pub(crate) fn used_ever(&self) -> usize {
        self.deleted.len()
    }

    /// Slots holding a live record.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.deleted.len() - self.deleted.iter().filter(|&&d| d).count()
    }

    /// Deleted slots waiting to be used again.
    pub(crate) fn reusable(&self) -> usize {
        self.free.len()
    }

    /// Whether slot `i` holds a deleted record.
    pub(crate) fn is_deleted(&self, i: usize) -> bool {
        self.deleted.get(i).copied().unwrap_or(true)
    }

    /// The serial number of the object in slot `i` now.
    pub(crate) fn serial(&self, i: usize) -> u32 {
        self.serial.get(i).copied().unwrap_or(u32::MAX)
    }

    /// Whether slot `i` still holds the object whose key carries `serial`.
    pub(crate) fn holds(&self, i: usize, serial: u32) -> bool {
        !self.is_deleted(i) && self.serial(i) == serial
    }

    /// The slot the next object gets: the oldest freed one when `reuse` allows, else a fresh one.
    pub(crate) fn next(&self, reuse: bool) -> usize {
        match self.free.front() {
            Some(&i) if reuse => i,
            _ => self.deleted.len(),
        }
    }

    /// Takes slot `i` (what [`next`](Self::next) said) for a new object; its serial number.
    pub(crate) fn take(&mut self, i: usize) -> u32 {
        if i == self.deleted.len() {
            self.deleted.push(false);
            self.serial.push(0);
            return 0;
        }
        assert_eq!(self.free.front(), Some(&i), "slots are reused in order");
        self.free.pop_front();
        self.deleted[i] = false;
        self.serial[i] = self.serial[i].wrapping_add(1);
        self.serial[i]
    }

    /// Marks slot `i` deleted; `reusable` puts it in line to be used again (a slot the owner handed a
    /// fixed reference to, such as a signal's probe, is kept as a tombstone for good).
    pub(crate) fn delete(&mut self, i: usize, reusable: bool) {
        if self.is_deleted(i) {
            return;
        }
        self.deleted[i] = true;
        if reusable {
            self.free.push_back(i);
        }
    }
}

/// Puts `x` at index `i` of `v`: a fresh slot at the end, or a reused one.
pub(crate) fn put<T>(v: &mut Vec<T>, i: usize, x: T) {
    if i == v.len() {
        v.push(x);
    } else {
        v[i] = x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_slots_are_reused_oldest_first_with_new_serials() {
        let mut r = Room::default();
        for i in 0..3 {
            assert_eq!(r.next(true), i);
            assert_eq!(r.take(i), 0);
        }
        r.delete(1, true);
        r.delete(0, true);
        r.delete(2, false);
        assert_eq!((r.used_ever(), r.live(), r.reusable()), (3, 0, 2));
        assert_eq!(r.next(false), 3, "no reuse allowed: a fresh slot");
        assert_eq!(r.next(true), 1, "the oldest deletion first");
        assert_eq!(r.take(1), 1);
        assert!(r.holds(1, 1) && !r.holds(1, 0));
        assert_eq!(r.next(true), 0);
        assert_eq!(r.take(0), 1);
        assert_eq!(r.next(true), 3, "slot 2 was kept as a tombstone");
        assert!(r.is_deleted(2) && !r.holds(2, 0));
        assert_eq!((r.used_ever(), r.live(), r.reusable()), (3, 2, 0));
    }
}
