//! How a periodic thread is described to the HAL (the runtime owns the thread itself).

use crate::error::{HalError, Result};
use crate::layout::LABEL_FIELD;
use crate::name;
use crate::stats::{HistogramConfig, MAX_BINS};

/// A periodic thread as the HAL records it (the runtime owns the actual thread).
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadConfig {
    /// HAL name of the thread, e.g. `servo`.
    pub name: String,
    /// Period in ns (> 0).
    pub period_ns: u64,
    /// CPU the thread is pinned to, if any.
    pub cpu: Option<u32>,
    /// SCHED_FIFO priority (0 under the `sim` flavor).
    pub priority: i32,
    /// `rt-preempt`, `posix` or `sim`.
    pub flavor: String,
    /// Timer driver name, e.g. `nanosleep`.
    pub timer: String,
    /// Shape of its latency histogram.
    pub histogram: HistogramConfig,
    /// Latency in ns at or above which a period is a spike (counted, and kept if among the worst
    /// [`SPIKES_KEPT`](crate::SPIKES_KEPT)); default: half the period.
    pub spike_threshold_ns: Option<i64>,
}

impl ThreadConfig {
    /// A thread `name` with period `period_ns`; unpinned, priority 0, `sim` flavor, `nanosleep` timer,
    /// the default histogram and spike threshold. Checked when given to
    /// [`HalBuilder::thread`](crate::HalBuilder::thread).
    pub fn new(name: &str, period_ns: u64) -> Self {
        ThreadConfig {
            name: name.to_string(),
            period_ns,
            cpu: None,
            priority: 0,
            flavor: "sim".into(),
            timer: "nanosleep".into(),
            histogram: HistogramConfig::default(),
            spike_threshold_ns: None,
        }
    }
    /// Records the CPU the thread is pinned to.
    pub fn cpu(mut self, cpu: u32) -> Self {
        self.cpu = Some(cpu);
        self
    }
    /// Records its `SCHED_FIFO` priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
    /// Records the runtime flavor (at most 23 characters).
    pub fn flavor(mut self, flavor: &str) -> Self {
        self.flavor = flavor.to_string();
        self
    }
    /// Records the timer driver (at most 23 characters).
    pub fn timer(mut self, timer: &str) -> Self {
        self.timer = timer.to_string();
        self
    }
    /// Sets the latency histogram's shape.
    pub fn histogram(mut self, histogram: HistogramConfig) -> Self {
        self.histogram = histogram;
        self
    }
    /// Sets the spike threshold in ns (see the field).
    pub fn spike_threshold_ns(mut self, ns: i64) -> Self {
        self.spike_threshold_ns = Some(ns);
        self
    }

    pub(crate) fn effective_spike_threshold(&self) -> i64 {
        self.spike_threshold_ns
            .unwrap_or_else(|| i64::try_from(self.period_ns / 2).unwrap_or(i64::MAX))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        name::validate(&self.name)?;
        let bad = |what, reason: String| Err(HalError::InvalidConfig { what, reason });
        if self.period_ns == 0 {
            return bad(
                "thread period",
                format!(
                    "thread '{}' has period 0; give it a period like 1ms",
                    self.name
                ),
            );
        }
        for (what, label) in [
            ("flavor name", &self.flavor),
            ("timer driver name", &self.timer),
        ] {
            if label.len() >= LABEL_FIELD || name::validate(label).is_err() {
                return bad(
                    what,
                    format!("'{label}' must be 1-23 characters of A-Z a-z 0-9 . _ -"),
                );
            }
        }
        let h = self.histogram;
        if h.bin_ns == 0 || h.bins == 0 || h.bins > MAX_BINS {
            return bad(
                "histogram",
                format!("thread '{}': bin width {} ns x {} bins; use a width >= 1 ns and 1..={MAX_BINS} bins",
                    self.name, h.bin_ns, h.bins),
            );
        }
        Ok(())
    }
}

/// What a thread is doing, as its record's `state` word publishes it (see LAYOUT.md §5).
///
/// Encoding: low byte 0 stopped, 1 running, 2 stalled; for a stall, bits 32..63 hold the position + 1
/// of the function the thread is stuck in (0 = outside any function, e.g. in its timer wait). An
/// unknown low byte reads as running (a newer writer's state this reader does not know).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadState {
    /// The loop is not running (not started yet, or ended).
    Stopped,
    /// The loop completes its periods.
    Running,
    /// The watchdog saw no period complete for longer than its limit.
    Stalled {
        /// Position (in run order) of the function the thread was in, if it was in one.
        function: Option<u32>,
    },
}

impl ThreadState {
    /// The word stored in the segment.
    pub(crate) const fn encode(self) -> u64 {
        match self {
            ThreadState::Stopped => 0,
            ThreadState::Running => 1,
            ThreadState::Stalled { function: None } => 2,
            ThreadState::Stalled {
                function: Some(position),
            } => 2 | ((position as u64 + 1) << 32),
        }
    }

    /// Reads a stored word back.
    pub(crate) const fn decode(word: u64) -> ThreadState {
        match word & 0xff {
            0 => ThreadState::Stopped,
            2 => ThreadState::Stalled {
                function: match word >> 32 {
                    0 => None,
                    p => Some((p - 1) as u32),
                },
            },
            _ => ThreadState::Running,
        }
    }

    /// Whether the thread's loop exists (running or stalled).
    pub const fn is_running(self) -> bool {
        !matches!(self, ThreadState::Stopped)
    }
}

#[cfg(test)]
mod state_tests {
    use super::ThreadState;

    #[test]
    fn thread_state_round_trips() {
        for s in [
            ThreadState::Stopped,
            ThreadState::Running,
            ThreadState::Stalled { function: None },
            ThreadState::Stalled { function: Some(0) },
            ThreadState::Stalled {
                function: Some(u32::MAX - 1),
            },
        ] {
            assert_eq!(ThreadState::decode(s.encode()), s);
        }
        // Version 1.0 writers stored 0/1: still read right.
        assert_eq!(ThreadState::decode(1), ThreadState::Running);
        assert_eq!(ThreadState::decode(0), ThreadState::Stopped);
        assert_eq!(ThreadState::decode(7), ThreadState::Running);
    }
}
