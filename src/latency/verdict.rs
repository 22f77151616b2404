//! The commissioning verdict: from the worst jitter of the base thread (the servo thread when there is
//! no base thread) to "software stepping / hardware step generator / not usable", with the highest
//! software step rate the base thread supports.
//!
//! Thresholds follow LinuxCNC's long-standing guidance for its latency test:
//!
//! | max jitter     | rating        | meaning                                                          |
//! |----------------|---------------|------------------------------------------------------------------|
//! | < 20 µs        | `good`        | very good for software stepping                                  |
//! | 20 µs – 50 µs  | `ok`          | software stepping, at lower step rates                           |
//! | 50 µs – 500 µs | `servo-only`  | no software stepping: use a hardware step generator (FPGA, Mesa) |
//! | > 500 µs       | `unusable`    | not usable for machine control                                   |
//!
//! Boundaries: exactly 20 µs is `ok`, exactly 50 µs is `servo-only`, exactly 500 µs is `servo-only`,
//! anything above 500 µs is `unusable`.
//!
//! Step rate: a software step generator changes its step output at most once per base period, so a
//! full step (high, then low) takes two periods. Jitter shortens a pulse by up to the jitter; a pulse is
//! kept at least half a period long when the period is at least twice the jitter. So the usable base
//! period is `max(base period, 2 × max jitter)` and the highest step rate is `1 / (2 × usable period)`.
//!
//! No verdict without evidence: a thread with no cycles gives `no-data`; threads that were not real
//! time (flavor `sim`, SCHED_OTHER) give `not-real-time`; a load that failed during the run keeps the
//! jitter rating but is listed in `problems`. Whenever `problems` is not empty, `evidence` is false and
//! no step rate is given.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Rating {
    Good,
    Ok,
    ServoOnly,
    Unusable,
    /// A thread completed no cycle: nothing was measured.
    NoData,
    /// The threads were not real-time threads (flavor sim, SCHED_OTHER).
    NotRealTime,
}

impl Rating {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Rating::Good => "good",
            Rating::Ok => "ok",
            Rating::ServoOnly => "servo-only",
            Rating::Unusable => "unusable",
            Rating::NoData => "no-data",
            Rating::NotRealTime => "not-real-time",
        }
    }

    /// The rating of a worst-case jitter in nanoseconds.
    pub(crate) fn of_jitter(max_jitter_ns: u64) -> Rating {
        match max_jitter_ns {
            j if j < 20_000 => Rating::Good,
            j if j < 50_000 => Rating::Ok,
            j if j <= 500_000 => Rating::ServoOnly,
            _ => Rating::Unusable,
        }
    }

    fn meaning(self) -> &'static str {
        match self {
            Rating::Good => "very good for software stepping",
            Rating::Ok => "software stepping works, at lower step rates",
            Rating::ServoOnly => "no software stepping: use a hardware step generator (FPGA card) and run servo threads only",
            Rating::Unusable => "not usable for machine control",
            Rating::NoData => "nothing was measured, so nothing can be judged",
            Rating::NotRealTime => {
                "the threads were not real-time threads: these numbers are not real-time evidence"
            }
        }
    }
}

/// The usable base period and the highest software step rate for a base thread (see the module docs).
pub(crate) fn max_step_rate_hz(base_period_ns: u64, max_jitter_ns: u64) -> (u64, f64) {
    let usable = base_period_ns.max(2 * max_jitter_ns).max(1);
    (usable, 1e9 / (2.0 * usable as f64))
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Verdict {
    pub(crate) rating: Rating,
    pub(crate) summary: String,
    /// The thread the verdict was judged on (`base`, or `servo` when servo only).
    pub(crate) judged_thread: String,
    pub(crate) max_jitter_ns: u64,
    /// Highest software step rate, when the judged thread is a base thread and stepping is possible.
    pub(crate) max_step_rate_hz: Option<f64>,
    /// The numbers are evidence for the rating: data in every thread, real-time threads, and the
    /// requested load ran to the end. False whenever `problems` is not empty.
    pub(crate) evidence: bool,
    /// Why the run is not evidence (empty when it is).
    pub(crate) problems: Vec<String>,
    pub(crate) advice: Vec<String>,
    /// With `--board`: whether the card's round trips fit the servo period (`board.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) board: Option<super::board::BoardVerdict>,
}

/// What the verdict must know besides the numbers: whether they can be trusted.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trust {
    /// Why there is no data: a thread that completed no cycle, a run of zero duration.
    pub(crate) no_data: Vec<String>,
    /// The flavor, when its threads are not real time (`sim`).
    pub(crate) not_real_time: Option<String>,
    /// Loads that failed while the run was meant to be loaded.
    pub(crate) load_failures: Vec<String>,
}

/// Judges a run. `base` is `(period_ns, max_jitter_ns)` of the base thread when there is one.
pub(crate) fn judge(
    base: Option<(u64, u64)>,
    servo: Option<(u64, u64)>,
    overruns: u64,
    trust: &Trust,
    system_advice: Vec<String>,
) -> Verdict {
    let (thread, (period, jitter)) = match (base, servo) {
        (Some(b), _) => ("base", b),
        (None, Some(s)) => ("servo", s),
        (None, None) => ("none", (0, 0)),
    };
    let mut problems = Vec::new();
    if thread == "none" {
        problems.push("no thread was measured".to_string());
    }
    for why in &trust.no_data {
        problems.push(format!("no data: {why}"));
    }
    if let Some(flavor) = &trust.not_real_time {
        problems.push(format!(
            "not real time: flavor {flavor} runs SCHED_OTHER threads, so latencies say nothing about real-time behaviour"
        ));
    }
    for l in &trust.load_failures {
        problems.push(format!("not under the requested load: {l}"));
    }
    let no_data = thread == "none" || !trust.no_data.is_empty();
    let rating = if no_data {
        Rating::NoData
    } else if trust.not_real_time.is_some() {
        Rating::NotRealTime
    } else {
        Rating::of_jitter(jitter)
    };
    let evidence = problems.is_empty();
    let step_rate = (evidence && thread == "base" && matches!(rating, Rating::Good | Rating::Ok))
        .then(|| max_step_rate_hz(period, jitter));
    let mut summary = if no_data {
        format!("{}: {}", rating.name(), rating.meaning())
    } else {
        format!(
            "{}: max jitter {:.1} µs on the {thread} thread — {}",
            rating.name(),
            jitter as f64 / 1000.0,
            rating.meaning()
        )
    };
    if !evidence && !no_data && trust.not_real_time.is_none() {
        summary.push_str(" — but NOT evidence: the requested load failed during the run");
    }
    if let Some((usable, hz)) = step_rate {
        summary.push_str(&format!(
            "; base period {:.0} µs or more, up to {:.1} kHz step rate",
            usable as f64 / 1000.0,
            hz / 1000.0
        ));
    }
    let mut advice = Vec::new();
    if overruns > 0 {
        advice.push(format!(
            "{overruns} period(s) were missed: the machine could not keep up; a servo loop would have lost those updates"
        ));
    }
    if thread == "servo" && matches!(rating, Rating::Good | Rating::Ok | Rating::ServoOnly) {
        advice.push("servo only was measured: run with a base thread (--base 25us) to judge software stepping".into());
    }
    advice.extend(system_advice);
    Verdict {
        rating,
        summary,
        judged_thread: thread.to_string(),
        max_jitter_ns: jitter,
        max_step_rate_hz: step_rate.map(|(_, hz)| hz),
        evidence,
        problems,
        advice,
        board: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_at_their_boundaries() {
        assert_eq!(Rating::of_jitter(0), Rating::Good);
        assert_eq!(Rating::of_jitter(19_999), Rating::Good);
        assert_eq!(Rating::of_jitter(20_000), Rating::Ok);
        assert_eq!(Rating::of_jitter(49_999), Rating::Ok);
        assert_eq!(Rating::of_jitter(50_000), Rating::ServoOnly);
        assert_eq!(Rating::of_jitter(500_000), Rating::ServoOnly);
        assert_eq!(Rating::of_jitter(500_001), Rating::Unusable);
        assert_eq!(Rating::of_jitter(u64::MAX / 4), Rating::Unusable);
    }

    #[test]
    fn step_rate_follows_the_usable_period() {
        // 25 µs base, 5 µs jitter: the period is the limit: 1 / 50 µs = 20 kHz.
        let (p, hz) = max_step_rate_hz(25_000, 5_000);
        assert_eq!(p, 25_000);
        assert!((hz - 20_000.0).abs() < 1e-6);
        // 25 µs base, 30 µs jitter: period must grow to 60 µs: 1 / 120 µs ≈ 8.33 kHz.
        let (p, hz) = max_step_rate_hz(25_000, 30_000);
        assert_eq!(p, 60_000);
        assert!((hz - 8_333.333).abs() < 0.01);
    }

    #[test]
    fn judges_base_then_servo() {
        let v = judge(
            Some((25_000, 10_000)),
            Some((1_000_000, 400_000)),
            0,
            &Trust::default(),
            vec![],
        );
        assert_eq!((v.rating, v.judged_thread.as_str()), (Rating::Good, "base"));
        assert!(v.evidence && v.problems.is_empty());
        assert!(v.max_step_rate_hz.is_some());
        let v = judge(
            None,
            Some((1_000_000, 60_000)),
            2,
            &Trust::default(),
            vec!["isolate a CPU".into()],
        );
        assert_eq!(
            (v.rating, v.judged_thread.as_str()),
            (Rating::ServoOnly, "servo")
        );
        assert_eq!(v.max_step_rate_hz, None);
        assert!(v.advice[0].contains("2 period(s) were missed"));
        assert!(v.advice.iter().any(|a| a == "isolate a CPU"));
        let v = judge(Some((25_000, 700_000)), None, 0, &Trust::default(), vec![]);
        assert_eq!(v.rating, Rating::Unusable);
        assert_eq!(v.max_step_rate_hz, None);
    }

    #[test]
    fn no_verdict_without_evidence() {
        // The finding: zero cycles gave "good … 20 kHz step rate".
        let empty = Trust {
            no_data: vec![
                "the base thread completed no cycle".into(),
                "the servo thread completed no cycle".into(),
            ],
            ..Trust::default()
        };
        let v = judge(Some((25_000, 0)), Some((1_000_000, 0)), 0, &empty, vec![]);
        assert_eq!(v.rating, Rating::NoData);
        assert!(!v.evidence && v.max_step_rate_hz.is_none());
        assert!(
            v.summary.starts_with("no-data") && !v.summary.contains("kHz"),
            "{}",
            v.summary
        );
        assert_eq!(v.problems.len(), 2);

        let sim = Trust {
            not_real_time: Some("sim".into()),
            ..Trust::default()
        };
        let v = judge(Some((25_000, 5_000)), None, 0, &sim, vec![]);
        assert_eq!(v.rating, Rating::NotRealTime);
        assert!(!v.evidence && v.max_step_rate_hz.is_none());
        assert!(
            v.summary.contains("not real-time evidence"),
            "{}",
            v.summary
        );

        let load = Trust {
            load_failures: vec!["stress-ng exited".into()],
            ..Trust::default()
        };
        let v = judge(Some((25_000, 5_000)), None, 0, &load, vec![]);
        assert_eq!(v.rating, Rating::Good, "the jitter was measured");
        assert!(!v.evidence && v.max_step_rate_hz.is_none());
        assert!(v.summary.contains("NOT evidence"), "{}", v.summary);
        assert!(v.problems[0].contains("stress-ng exited"));
    }
}
