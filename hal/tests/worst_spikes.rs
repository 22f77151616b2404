//! The spike ring keeps the worst spikes of a thread, not the latest.

mod common;

use common::{unique_instance, Cleanup};
use rtapi_hal::*;

/// A HAL with one thread whose spike threshold is `threshold_ns`, its writer, and its reader.
fn thread(tag: &str, threshold_ns: i64) -> (Hal, StatsWriter, Cleanup) {
    let instance = unique_instance(tag);
    let cleanup = Cleanup(instance.clone());
    let mut b = HalBuilder::new(&instance).unwrap();
    let t = b
        .thread(ThreadConfig::new("servo", 1_000_000).spike_threshold_ns(threshold_ns))
        .unwrap();
    let hal = b.build().unwrap();
    let w = hal.stats_writer(t).unwrap();
    (hal, w, cleanup)
}

fn sample(cycle: u64, latency_ns: i64) -> PeriodSample {
    PeriodSample {
        now_ns: cycle * 1_000_000,
        latency_ns,
        interval_ns: 1_000_000,
        exec_ns: 10,
        rusage: Some(ThreadRusage {
            involuntary_ctx_switches: cycle,
            page_faults: 2 * cycle,
        }),
        ..Default::default()
    }
}

#[test]
fn keeps_exactly_the_eight_worst_of_a_hundred() {
    let (hal, w, _c) = thread("worst100", 1_000);
    // Distinct latencies in a scrambled order (37 is coprime with 100), all spikes.
    let lats: Vec<i64> = (0..100).map(|i| 1_000 + ((i * 37) % 100) * 50).collect();
    for (i, &lat) in lats.iter().enumerate() {
        w.record(&sample(i as u64 + 1, lat));
    }
    let s = hal.reader().unwrap().thread_stats("servo").unwrap();
    assert_eq!((s.cycles, s.spikes_total), (100, 100));
    let mut expected: Vec<(u64, i64)> = lats
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u64 + 1, l))
        .collect();
    expected.sort_by_key(|&(_, l)| std::cmp::Reverse(l));
    expected.truncate(SPIKES_KEPT);
    let got: Vec<Spike> = s.worst_spikes().collect();
    assert_eq!(
        got.iter()
            .map(|sp| (sp.cycle, sp.latency_ns))
            .collect::<Vec<_>>(),
        expected
    );
    for sp in &got {
        // Every field of an entry belongs to the same period.
        assert_eq!(sp.time_ns, sp.cycle * 1_000_000);
        assert_eq!(
            (sp.involuntary_ctx_switches, sp.page_faults),
            (sp.cycle, 2 * sp.cycle)
        );
    }
    assert_eq!(s.latency_max(), Some(expected[0].1));
}

#[test]
fn equal_spikes_keep_the_oldest() {
    let (hal, w, _c) = thread("worsteq", 1_000);
    for cycle in 1..=20 {
        w.record(&sample(cycle, 5_000));
    }
    let s = hal.reader().unwrap().thread_stats("servo").unwrap();
    assert_eq!(s.spikes_total, 20);
    let cycles: Vec<u64> = s.worst_spikes().map(|sp| sp.cycle).collect();
    assert_eq!(cycles, (1..=8).collect::<Vec<_>>());
    // One worse spike replaces the newest of the equal ones; a period below the threshold changes nothing.
    w.record(&sample(21, 9_000));
    w.record(&sample(22, 10));
    let s = hal.reader().unwrap().thread_stats("servo").unwrap();
    assert_eq!((s.cycles, s.spikes_total), (22, 21));
    let cycles: Vec<u64> = s.worst_spikes().map(|sp| sp.cycle).collect();
    assert_eq!(cycles, [21, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn fewer_than_eight_are_all_kept_worst_first() {
    let (hal, w, _c) = thread("worstfew", 1_000);
    let s = hal.reader().unwrap().thread_stats("servo").unwrap();
    assert_eq!(s.worst_spikes().count(), 0);
    for (cycle, lat) in [(1, 2_000), (2, 500), (3, 7_000), (4, 2_000), (5, 3_000)] {
        w.record(&sample(cycle, lat));
    }
    let s = hal.reader().unwrap().thread_stats("servo").unwrap();
    assert_eq!(s.spikes_total, 4);
    let got: Vec<(u64, i64)> = s
        .worst_spikes()
        .map(|sp| (sp.cycle, sp.latency_ns))
        .collect();
    assert_eq!(got, [(3, 7_000), (5, 3_000), (1, 2_000), (4, 2_000)]);
    // After a reset the ring starts empty again.
    w.reset();
    w.record(&sample(6, 1_500));
    let s = hal.reader().unwrap().thread_stats("servo").unwrap();
    assert_eq!(s.spikes_total, 1);
    assert_eq!(
        s.worst_spikes().map(|sp| sp.latency_ns).collect::<Vec<_>>(),
        [1_500]
    );
}

#[test]
fn missed_periods_are_spikes_ranked_by_latency() {
    let (hal, w, _c) = thread("worstmissed", 1_000_000);
    for cycle in 1..=10 {
        w.record(&PeriodSample {
            missed: 1,
            ..sample(cycle, 100 * cycle as i64)
        });
    }
    let s = hal.reader().unwrap().thread_stats("servo").unwrap();
    assert_eq!((s.spikes_total, s.overruns), (10, 10));
    let lats: Vec<i64> = s.worst_spikes().map(|sp| sp.latency_ns).collect();
    assert_eq!(lats, [1_000, 900, 800, 700, 600, 500, 400, 300]);
}

#[test]
fn a_reader_that_follows_sees_every_spike_in_order_and_counts_what_it_was_too_slow_for() {
    let (hal, w, _c) = thread("recent", 1_000);
    let r = hal.reader().unwrap();
    // Nothing yet.
    let none = r.spikes_since("servo", 0).unwrap();
    assert_eq!((none.total, none.spikes.len(), none.lost), (0, 0, 0));
    // Cycle i is a spike when i is odd (latency 2 µs), else quiet (100 ns).
    let mut cycle = 0u64;
    let mut run = |n: u64| {
        for _ in 0..n {
            cycle += 1;
            w.record(&sample(cycle, if cycle % 2 == 1 { 2_000 } else { 100 }));
        }
    };
    run(20); // spikes at cycles 1, 3, …, 19
    let a = r.spikes_since("servo", 0).unwrap();
    assert_eq!((a.total, a.lost), (10, 0));
    assert_eq!(
        a.spikes.iter().map(|s| s.cycle).collect::<Vec<_>>(),
        (1..20).step_by(2).collect::<Vec<u64>>()
    );
    assert!(a.spikes.iter().all(|s| s.time_ns == s.cycle * 1_000_000
        && s.involuntary_ctx_switches == s.cycle
        && s.page_faults == 2 * s.cycle));
    // Read again from where it stopped: nothing new.
    assert!(r.spikes_since("servo", a.total).unwrap().spikes.is_empty());
    // 100 more spikes than the ring holds, read late: the latest RECENT_SPIKES, the rest lost.
    run(2 * (RECENT_SPIKES as u64 + 100));
    let b = r.spikes_since("servo", a.total).unwrap();
    assert_eq!(b.total, 10 + RECENT_SPIKES as u64 + 100);
    assert_eq!(b.lost, 100);
    assert_eq!(b.spikes.len(), RECENT_SPIKES);
    assert!(b.spikes.windows(2).all(|p| p[1].cycle == p[0].cycle + 2));
    assert_eq!(b.spikes.last().unwrap().cycle, cycle - 1);
    // The worst-spike ring is unaffected.
    assert_eq!(
        r.thread_stats("servo").unwrap().worst_spikes().count(),
        SPIKES_KEPT
    );
}
