//! `rtapi latency-test --all-cpus`: the per-CPU survey (see `crate::latency::survey`). Its flags are
//! latency-test's; this file only checks the combinations, writes the outputs and sets the exit code.

use super::{exit, out, Failure};
use crate::latency::output;
use crate::latency::run::TestConfig;
use crate::latency::survey;
use crate::rt::clock::Nanos;
use std::path::Path;

/// Flags that name one CPU or one run's files do not go with `--all-cpus` (exit 2, before anything
/// runs).
pub(super) fn check_args(cpu: bool, histogram: bool, plot: bool) -> Result<(), Failure> {
    if cpu {
        return Err(Failure::usage(
            "--all-cpus and --cpu cannot be used together: --all-cpus measures every online CPU in turn, --cpu measures the one you give (use it after the survey, with the CPU it recommends)",
        ));
    }
    for (given, flag) in [(histogram, "--histogram"), (plot, "--plot")] {
        if given {
            return Err(Failure::usage(format!(
                "{flag} is not available with --all-cpus (it draws one run): run latency-test --cpu N {flag} FILE for the CPU the survey recommends"
            )));
        }
    }
    Ok(())
}

/// Runs the survey, prints it, writes `--json`, and applies `--fail-above` to the recommended CPU.
pub(super) fn run(
    cfg: &TestConfig,
    json: Option<&Path>,
    json_to_stdout: bool,
    fail_above: Option<Nanos>,
) -> Result<(), Failure> {
    let s = survey::survey(cfg).map_err(Failure::from)?;
    let written = json.map(|path| output::write_text("--json", path, &s.to_json()));
    let printed = if json_to_stdout {
        let p = out::println(&s.to_json());
        out::eprint(&s.render_text());
        p
    } else {
        out::print(&s.render_text())
    };
    if let Some(Err(e)) = written {
        return Err(Failure::runtime(format!(
            "the survey is complete but its output could not be written:\n  {e}"
        )));
    }
    printed?;
    if let Some(limit) = fail_above {
        let fail = |message: String| {
            Err(Failure {
                code: exit::FAIL_ABOVE,
                message,
            })
        };
        let Some(row) = s.recommended_row() else {
            return fail(format!(
                "--fail-above {limit}: no CPU is recommended ({})",
                s.recommendation.reason
            ));
        };
        if let Some(v) = row.verdict.as_ref().filter(|v| !v.evidence) {
            return fail(format!(
                "--fail-above {limit} cannot pass without evidence: CPU {}: {}",
                row.cpu,
                v.problems.join("; ")
            ));
        }
        let worst = row.worst_latency_ns.unwrap_or(u64::MAX);
        if worst as i64 > limit.as_nanos() || worst == u64::MAX {
            return fail(format!(
                "max latency {:.1} µs on the recommended CPU {} exceeds --fail-above {limit}",
                worst as f64 / 1000.0,
                row.cpu
            ));
        }
    }
    Ok(())
}
