//! The stats block's I/O section (layout 2.2) and I/O errors (2.3): what `StatsWriter::record_io`
//! writes is what a reader reads (count, calls, last, min, max, sum, histogram, errors and the
//! periods with any), `reset` clears it, a segment that says it is 2.2 is read without the errors
//! and one that says 2.1 without the section (its blocks end before them).

mod common;

use std::io::{Seek, SeekFrom, Write};

use common::{shm_path, unique_instance, Cleanup};
use rtapi_hal::layout::header;
use rtapi_hal::*;

#[test]
fn io_time_is_recorded_and_read_back_and_absent_from_a_2_1_segment() {
    let inst = unique_instance("io");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap();
    let t = b
        .thread(
            ThreadConfig::new("servo", 1_000_000).histogram(HistogramConfig {
                bin_ns: 1000,
                bins: 16,
            }),
        )
        .unwrap();
    b.thread(ThreadConfig::new("base", 50_000)).unwrap();
    let hal = b.build().unwrap();
    let w = hal.stats_writer(t).unwrap();
    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    // Before any I/O: a section of zeros, no min.
    let io = r.thread_stats("servo").unwrap().io.unwrap();
    assert_eq!((io.periods, io.min()), (0, None));
    for (i, (io_ns, errors)) in [
        (Some(100), 0),
        (None, 0),
        (Some(2500), 3),
        (Some(700), 0),
        (None, 0),
        (Some(99_000), 1),
    ]
    .into_iter()
    .enumerate()
    {
        w.record(&PeriodSample {
            latency_ns: 1000 + i as i64,
            interval_ns: 1_000_000,
            ..Default::default()
        });
        if let Some(ns) = io_ns {
            w.record_io(ns, 2, errors);
        }
    }
    let s = r.thread_stats("servo").unwrap();
    assert_eq!(s.cycles, 6);
    let io = s.io.unwrap();
    assert_eq!(
        (
            io.periods,
            io.calls,
            io.last_ns,
            io.min(),
            io.max_ns,
            io.sum_ns
        ),
        (4, 8, 99_000, Some(100), 99_000, 102_300)
    );
    assert_eq!(io.mean(), Some(102_300.0 / 4.0));
    assert_eq!(
        io.errors,
        Some(IoErrors {
            count: 4,
            periods: 2
        })
    );
    // The bins of the thread's width: 100 and 700 in bin 0, 2500 in bin 2, 99 µs past 16 µs.
    let h = r.io_histogram("servo").unwrap().unwrap();
    assert_eq!((h.bin_ns, h.counts.len()), (1000, 16));
    assert_eq!(
        (h.counts[0], h.counts[2], h.overflow, h.underflow),
        (2, 1, 1, 0)
    );
    assert_eq!(h.counts.iter().sum::<u64>() + h.overflow, io.periods);
    // The other thread never ran I/O; the latency histogram is untouched by I/O.
    assert_eq!(r.thread_stats("base").unwrap().io.unwrap().periods, 0);
    assert_eq!(r.histogram("servo").unwrap().counts[1], 6);
    // Reset clears the section with the rest.
    w.reset();
    let io = r.thread_stats("servo").unwrap().io.unwrap();
    assert_eq!((io.periods, io.calls, io.sum_ns, io.max_ns), (0, 0, 0, 0));
    assert_eq!(io.errors, Some(IoErrors::default()));
    let h = r.io_histogram("servo").unwrap().unwrap();
    assert_eq!(h.counts.iter().sum::<u64>() + h.overflow, 0);
    // The same segment saying 2.2: the I/O section without the errors.
    w.record_io(5, 1, 7);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(shm_path(&inst))
        .unwrap();
    f.seek(SeekFrom::Start(header::VERSION as u64)).unwrap();
    f.write_all(&((2u32 << 16) | 2).to_ne_bytes()).unwrap();
    let two = HalReader::open(&inst, Access::ReadOnly).unwrap();
    let io = two.thread_stats("servo").unwrap().io.unwrap();
    assert_eq!((io.periods, io.calls, io.errors), (1, 1, None));
    // And saying 2.1: opened and read as before, without an I/O section.
    f.seek(SeekFrom::Start(header::VERSION as u64)).unwrap();
    f.write_all(&((2u32 << 16) | 1).to_ne_bytes()).unwrap();
    let old = HalReader::open(&inst, Access::ReadOnly).unwrap();
    assert_eq!(old.header().version_minor, 1);
    let s = old.thread_stats("servo").unwrap();
    assert_eq!((s.cycles, s.io), (0, None), "reset cleared the cycles too");
    assert_eq!(old.io_histogram("servo").unwrap(), None);
    assert!(old.threads().unwrap().iter().all(|t| t.stats.io.is_none()));
    drop(hal);
}
