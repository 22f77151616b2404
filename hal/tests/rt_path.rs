//! The real-time path allocates nothing: pin get/set, stats and function recording, counted by a global
//! allocator that tallies this thread's allocations.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{unique_instance, Cleanup};
use rtapi_hal::*;

struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; the counter is a const-initialised thread-local
// Cell, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_in(f: impl FnOnce()) -> usize {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

#[test]
fn rt_operations_do_not_allocate() {
    let inst = unique_instance("rt");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap();
    let c = b.component("c").unwrap();
    let i = b.pin::<In, f64>(c, "c.in").unwrap();
    let o = b.pin::<Out, f64>(c, "c.out").unwrap();
    let p = b.param(c, "c.k", ParamAccess::Rw, 2.0f64).unwrap();
    b.function(c, "c.f").unwrap();
    let t = b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    b.addf("c.f", "servo", None).unwrap();
    b.net("s", "c.out").unwrap();
    let hal = b.build().unwrap();
    let (i, o, p, w) = (
        hal.pin(i),
        hal.pin(o),
        hal.param(p),
        hal.stats_writer(t).unwrap(),
    );

    let n = allocations_in(|| {
        w.set_running(true);
        for k in 0..10_000u64 {
            o.set(i.get() * p.get() + k as f64);
            let lat = (k % 700_000) as i64 - 5;
            let spike = w.is_spike(lat, k % 1000);
            w.record(&PeriodSample {
                now_ns: k,
                latency_ns: lat,
                interval_ns: 1_000_000,
                exec_ns: 10,
                missed: k % 1000,
                drift_ns: 0,
                rusage: spike.then_some(ThreadRusage::default()),
            });
            w.record_function(0, 10, 0);
        }
    });
    assert_eq!(n, 0, "the RT path allocated {n} times");
}

#[test]
fn handles_can_move_to_rt_threads() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<StatsWriter>();
    send::<Pin<In, f64>>();
    sync::<Pin<Out, bool>>();
    send::<Param<u32>>();
    sync::<Hal>();
    send::<Hal>();
    send::<HalReader>();
}
