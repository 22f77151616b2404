//! The one way a test says it cannot run here: `SKIPPED: <test>: <why>` on stderr.
//!
//! What `.ci/run` provides (the packages it installs: cyclictest, stress-ng, LinuxCNC, halcompile,
//! prometheus; python3, pytest and the Python module; root, which CI runs as) must be there under CI:
//! with `CI` set its absence fails the test instead of skipping it. A property of the machine that CI
//! cannot provide (a second CPU, a device, a kernel feature, other processes' state) is only reported.
//!
//! Shared by the root package's tests (`tests/common/mod.rs`) and the hal crate's
//! (`hal/tests/common/mod.rs`), which include this file.

/// What a missing prerequisite is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prereq {
    /// Something `.ci/run` installs or has (a package, the Python module, root): a failure under `CI`.
    Ci,
    /// A property of this machine that CI cannot provide: printed, never a failure.
    Machine,
}

/// Says that `test` cannot run here because of `why`: prints exactly `SKIPPED: <test>: <why>` on
/// stderr, or panics when `CI` is set and `.ci/run` provides what is missing (`Prereq::Ci`).
#[track_caller]
pub(crate) fn skip(test: &str, why: &str, prereq: Prereq) {
    if prereq == Prereq::Ci && std::env::var_os("CI").is_some() {
        panic!(
            "{test}: {why} — CI is set and .ci/run provides this, so its absence is a failure, not a skip"
        );
    }
    // Straight to the process's stderr, not `eprintln!`, which the test harness captures (and shows
    // only for a failing test): a skip is seen in every `cargo test` run.
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {test}: {why}");
}

/// The last path segment of a function's type name that names the function the macro was used in:
/// `python::the_pytest_suite_passes::here` → `the_pytest_suite_passes` (closures skipped).
pub(crate) fn name_of_enclosing_fn(type_name: &'static str) -> &'static str {
    type_name
        .rsplit("::")
        .find(|s| *s != "here" && *s != "{{closure}}")
        .unwrap_or(type_name)
}

/// The name of the function this is written in (the test's name when written in the test).
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        $crate::common::name_of_enclosing_fn(::std::any::type_name_of_val(&here))
    }};
}

/// `skip!(Ci | Machine, "why {}", args…)`: [`skip`] with the enclosing test's name. Use it as
/// `return skip!(…)` at the place the test cannot go on.
#[macro_export]
macro_rules! skip {
    ($prereq:ident, $($why:tt)+) => {
        $crate::common::skip(
            $crate::test_name!(),
            &format!($($why)+),
            $crate::common::Prereq::$prereq,
        )
    };
}
