//! A global allocator that counts the allocations made by the threads that asked to be watched: how
//! the tests show that an RT path (a runtime thread's function, a hosted thread's `wait()`, a timer
//! driver's wait) allocates nothing.
//!
//! A `#[global_allocator]` is one per binary and this module is compiled into every test binary, so
//! it only defines the type; a test binary that counts declares it itself, in one line:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: common::alloc_count::CountingAlloc = common::alloc_count::CountingAlloc;
//! ```
//!
//! and brackets what it measures with [`watch`]`(true)` / [`watch`]`(false)`, reading [`allocations`]
//! before and after. `alloc`, `alloc_zeroed` and `realloc` count one each; everything is forwarded
//! unchanged to the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// The counting allocator (see the module's documentation for how a test binary declares it).
pub(crate) struct CountingAlloc;

/// Allocations made so far by watched threads (all of them: read it before and after).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread's allocations are counted.
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}

/// Allocations counted so far, on every watched thread.
pub(crate) fn allocations() -> u64 {
    ALLOCATIONS.load(SeqCst)
}

/// Starts (`true`) or stops counting the calling thread's allocations.
pub(crate) fn watch(on: bool) {
    WATCHED.with(|w| w.set(on));
}

/// Whether the calling thread's allocations are being counted.
pub(crate) fn watched() -> bool {
    WATCHED.with(Cell::get)
}

fn note_allocation() {
    // `try_with`: no panic if a thread allocates while its thread-locals are being torn down.
    if WATCHED.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, SeqCst);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only an atomic
// and a const-initialized, destructor-free thread-local (which never allocates).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}
