//! The network path of a reply (issue 44): what the kernel did with network traffic, on every CPU,
//! between a request's send and its reply (or the deadline that gave up on it).
//!
//! A reply from a Mesa card is late for reasons an RT CPU's own trace does not show: the NIC's
//! interrupt landed on another CPU (or was held back by interrupt coalescing), the `NET_RX` softirq
//! that moves received packets up the stack ran there behind a flood of other packets, or it was
//! deferred to `ksoftirqd`, a SCHED_OTHER thread that waits behind anything of higher priority. So
//! a second tracefs instance ([`TraceSession::start_network`](super::TraceSession::start_network))
//! records, on the CPUs the RT session does not trace, only what this path needs — device
//! interrupts, the `NET_RX`/`NET_TX` softirqs (an in-kernel filter drops the others) and switches to
//! and from `ksoftirqd` (filtered the same way) — and [`activity`] sums, per CPU, how long each ran
//! inside a window. [`NetworkActivity::busiest`] names the largest share: the likely cause.
//!
//! Durations are the overlap of each run with the window: a handler that began before the window
//! counts from the window's start (its entry is looked for up to [`LOOKBEHIND_NS`] earlier), one
//! still running at the window's end counts to the end.

use std::collections::BTreeMap;

use super::parse::{Event, EventKind};

/// How far before a window its events are read, so that a softirq or handler already running when
/// the window opened is seen from its entry.
pub const LOOKBEHIND_NS: u64 = 2_000_000;

/// The softirq vectors of the network path.
pub const NET_SOFTIRQS: [&str; 2] = ["NET_RX", "NET_TX"];

/// Runs of one thing inside a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Runs {
    /// Runs that overlapped the window.
    pub count: u32,
    /// Their time inside the window, ns.
    pub ns: u64,
    /// The longest one's time inside the window, ns.
    pub longest_ns: u64,
}

impl Runs {
    fn add(&mut self, ns: u64) {
        self.count += 1;
        self.ns += ns;
        self.longest_ns = self.longest_ns.max(ns);
    }
}

/// One CPU's network work inside a window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuNetwork {
    /// Device interrupts by (IRQ number, handler name).
    pub irqs: BTreeMap<(u32, String), Runs>,
    /// `NET_RX` softirq runs (received packets processed).
    pub net_rx: Runs,
    /// `NET_TX` softirq runs.
    pub net_tx: Runs,
    /// `ksoftirqd/N` running (softirq work deferred to a thread).
    pub ksoftirqd: Runs,
}

impl CpuNetwork {
    fn is_empty(&self) -> bool {
        self.irqs.is_empty()
            && self.net_rx.count == 0
            && self.net_tx.count == 0
            && self.ksoftirqd.count == 0
    }
}

/// What ran on the network path, per CPU, inside one window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkActivity {
    /// The window's start, CLOCK_MONOTONIC ns.
    pub from_ns: u64,
    /// The window's end, CLOCK_MONOTONIC ns.
    pub to_ns: u64,
    /// CPUs with anything, by number.
    pub cpus: BTreeMap<usize, CpuNetwork>,
}

/// The largest share of a window's network work: what most likely held a reply back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busiest {
    /// The CPU it ran on.
    pub cpu: usize,
    /// What it was.
    pub what: NetWork,
    /// Its runs inside the window.
    pub runs: Runs,
}

/// A kind of network work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetWork {
    /// A device interrupt handler.
    Irq {
        /// The Linux IRQ number.
        irq: u32,
        /// Its handler name (`/proc/interrupts`).
        name: String,
    },
    /// The `NET_RX` softirq.
    NetRx,
    /// The `NET_TX` softirq.
    NetTx,
    /// `ksoftirqd` running deferred softirq work.
    Ksoftirqd,
}

impl std::fmt::Display for NetWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetWork::Irq { irq, name } => write!(f, "IRQ {irq} ({name})"),
            NetWork::NetRx => f.write_str("the NET_RX softirq (received packets)"),
            NetWork::NetTx => f.write_str("the NET_TX softirq (sent packets)"),
            NetWork::Ksoftirqd => f.write_str("ksoftirqd (softirq work deferred to a thread)"),
        }
    }
}

impl NetworkActivity {
    /// The largest time share, if anything ran.
    pub fn busiest(&self) -> Option<Busiest> {
        let mut best: Option<Busiest> = None;
        for (&cpu, n) in &self.cpus {
            let mut consider = |what: NetWork, runs: Runs| {
                if runs.count > 0 && best.as_ref().is_none_or(|b| runs.ns > b.runs.ns) {
                    best = Some(Busiest { cpu, what, runs });
                }
            };
            for ((irq, name), runs) in &n.irqs {
                consider(
                    NetWork::Irq {
                        irq: *irq,
                        name: name.clone(),
                    },
                    *runs,
                );
            }
            consider(NetWork::NetRx, n.net_rx);
            consider(NetWork::NetTx, n.net_tx);
            consider(NetWork::Ksoftirqd, n.ksoftirqd);
        }
        best
    }
}

/// Sums the network work in `events` (any CPUs, any order; events from [`LOOKBEHIND_NS`] before
/// `from_ns` on are needed to see runs already going at `from_ns`) that overlapped
/// `[from_ns, to_ns]`.
pub fn activity(events: &[Event], from_ns: u64, to_ns: u64) -> NetworkActivity {
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| (e.cpu, e.ts_ns));
    let mut out = NetworkActivity {
        from_ns,
        to_ns,
        cpus: BTreeMap::new(),
    };
    let overlap = |start: u64, end: u64| end.min(to_ns).saturating_sub(start.max(from_ns));
    let mut i = 0;
    while i < sorted.len() {
        let cpu = sorted[i].cpu;
        let mut n = CpuNetwork::default();
        // What is open on this CPU: the handler (irq, name, since), softirqs by vector, ksoftirqd.
        let mut irq: Option<(u32, String, u64)> = None;
        let mut soft: BTreeMap<String, u64> = BTreeMap::new();
        let mut ksoftirqd: Option<u64> = None;
        let close_soft = |n: &mut CpuNetwork, vector: &str, start: u64, end: u64| {
            let ns = overlap(start, end);
            if end < from_ns || start > to_ns {
                return;
            }
            match vector {
                "NET_RX" => n.net_rx.add(ns),
                "NET_TX" => n.net_tx.add(ns),
                _ => {}
            }
        };
        while i < sorted.len() && sorted[i].cpu == cpu {
            let e = sorted[i];
            i += 1;
            if e.ts_ns > to_ns {
                continue;
            }
            match &e.kind {
                EventKind::IrqEntry { irq: nr, name } => irq = Some((*nr, name.clone(), e.ts_ns)),
                EventKind::IrqExit { irq: nr } => {
                    if let Some((open, name, start)) = irq.take() {
                        if open == *nr && e.ts_ns >= from_ns {
                            n.irqs
                                .entry((open, name))
                                .or_default()
                                .add(overlap(start, e.ts_ns));
                        }
                    }
                }
                EventKind::SoftirqEntry { vector } if NET_SOFTIRQS.contains(&vector.as_str()) => {
                    soft.insert(vector.clone(), e.ts_ns);
                }
                EventKind::SoftirqExit { vector } => {
                    if let Some(start) = soft.remove(vector) {
                        close_soft(&mut n, vector, start, e.ts_ns);
                    }
                }
                EventKind::Switch { prev, next, .. } => {
                    if is_ksoftirqd(&prev.comm) {
                        if let Some(start) = ksoftirqd.take() {
                            if e.ts_ns >= from_ns {
                                n.ksoftirqd.add(overlap(start, e.ts_ns));
                            }
                        }
                    }
                    if is_ksoftirqd(&next.comm) {
                        ksoftirqd = Some(e.ts_ns);
                    }
                }
                _ => {}
            }
        }
        // Still running at the window's end: counted to it.
        if let Some((nr, name, start)) = irq {
            n.irqs
                .entry((nr, name))
                .or_default()
                .add(overlap(start, to_ns));
        }
        for (vector, start) in soft {
            close_soft(&mut n, &vector, start, to_ns);
        }
        if let Some(start) = ksoftirqd {
            n.ksoftirqd.add(overlap(start, to_ns));
        }
        if !n.is_empty() {
            out.cpus.insert(cpu, n);
        }
    }
    out
}

/// Whether `comm` is a softirq thread (`ksoftirqd/3`).
pub fn is_ksoftirqd(comm: &str) -> bool {
    comm.starts_with("ksoftirqd/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse_text;

    /// Trace text as `per_cpu/cpuN/trace` prints it (timestamps in seconds, µs resolution).
    const TEXT: &str = "\
  stress-1 [000] d.h1.  100.000100: irq_handler_entry: irq=30 name=eth0-rx-0
  stress-1 [000] d.h1.  100.000110: irq_handler_exit: irq=30 ret=handled
  stress-1 [000] ..s1.  100.000110: softirq_entry: vec=3 [action=NET_RX]
  stress-1 [000] ..s1.  100.000410: softirq_exit: vec=3 [action=NET_RX]
  stress-1 [000] d..2.  100.000500: sched_switch: prev_comm=stress prev_pid=1 prev_prio=120 prev_state=R ==> next_comm=ksoftirqd/0 next_pid=15 next_prio=120
  ksoftirqd/0-15 [000] ..s1.  100.000510: softirq_entry: vec=3 [action=NET_RX]
  ksoftirqd/0-15 [000] ..s1.  100.000900: softirq_exit: vec=3 [action=NET_RX]
  ksoftirqd/0-15 [000] d..2.  100.000950: sched_switch: prev_comm=ksoftirqd/0 prev_pid=15 prev_prio=120 prev_state=S ==> next_comm=stress next_pid=1 next_prio=120
  <idle>-0 [001] d.h1.  100.000200: irq_handler_entry: irq=31 name=eth0-tx-0
  <idle>-0 [001] d.h1.  100.000205: irq_handler_exit: irq=31 ret=handled
  <idle>-0 [001] ..s1.  100.000205: softirq_entry: vec=2 [action=NET_TX]
  <idle>-0 [001] ..s1.  100.000215: softirq_exit: vec=2 [action=NET_TX]
";

    fn us(t: u64) -> u64 {
        100_000_000_000 + t * 1000
    }

    #[test]
    fn runs_are_summed_per_cpu_inside_the_window_and_the_busiest_named() {
        let events = parse_text(TEXT).events;
        let a = activity(&events, us(0), us(1000));
        let c0 = &a.cpus[&0];
        assert_eq!(c0.irqs[&(30, "eth0-rx-0".to_string())].ns, 10_000);
        assert_eq!(
            c0.net_rx,
            Runs {
                count: 2,
                ns: 300_000 + 390_000,
                longest_ns: 390_000
            }
        );
        assert_eq!(c0.ksoftirqd.ns, 450_000);
        let c1 = &a.cpus[&1];
        assert_eq!(c1.net_tx.ns, 10_000);
        assert_eq!(c1.irqs.len(), 1);
        let b = a.busiest().unwrap();
        assert_eq!((b.cpu, &b.what), (0, &NetWork::NetRx));
    }

    #[test]
    fn runs_are_clipped_to_the_window_at_both_ends() {
        let events = parse_text(TEXT).events;
        // 300..600 µs: the first NET_RX run (110..410) counts from 300, ksoftirqd (500..950) to
        // 600 and the second NET_RX (510..900) from 510 to 600; the IRQs are outside.
        let a = activity(&events, us(300), us(600));
        let c0 = &a.cpus[&0];
        assert_eq!(c0.net_rx.ns, 110_000 + 90_000);
        assert_eq!(c0.ksoftirqd.ns, 100_000);
        assert!(c0.irqs.is_empty());
        assert!(!a.cpus.contains_key(&1), "CPU 1's work ended at 215 µs");
        // A window with nothing in it.
        assert_eq!(activity(&events, us(2000), us(3000)).busiest(), None);
    }
}
