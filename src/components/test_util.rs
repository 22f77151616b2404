//! Helpers for the component tests: a harness per test, and tables of periods.

use super::Harness;

/// A harness on a segment of its own (tests run in parallel), `tag` naming the test file.
pub(crate) fn bench(tag: &str) -> Harness {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    Harness::new(&format!("test-{tag}-{}-{n}", std::process::id())).unwrap()
}

/// The value of a pin or param as a float (bits as 0/1).
pub(crate) fn get(h: &Harness, name: &str) -> f64 {
    h.get_f64(name).unwrap()
}

/// `setp name value`.
pub(crate) fn set(h: &Harness, name: &str, value: f64) {
    h.set(name, &value.to_string()).unwrap();
}

/// Runs one period of `period_ns` per row: sets `ins` to the row's first values, steps, and checks
/// `outs` against the rest (floats to 1e-12, relative above 1), naming the row on a mismatch.
pub(crate) fn table(h: &mut Harness, period_ns: u64, ins: &[&str], outs: &[&str], rows: &[&[f64]]) {
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(
            row.len(),
            ins.len() + outs.len(),
            "row {} has the wrong length",
            i + 1
        );
        for (name, v) in ins.iter().zip(row.iter()) {
            set(h, name, *v);
        }
        h.step(period_ns);
        for (name, want) in outs.iter().zip(&row[ins.len()..]) {
            let got = get(h, name);
            assert!(
                (got - want).abs() <= 1e-12 * want.abs().max(1.0),
                "row {}: {name} = {got}, LinuxCNC gives {want} (inputs {:?})",
                i + 1,
                &row[..ins.len()]
            );
        }
    }
}
