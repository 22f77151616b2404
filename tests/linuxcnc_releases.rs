//! `rtapi linuxcnc` against LinuxCNC releases other than the host's (issue 45): Debian trixie's 2.9.4
//! and sid's 2.9.9, each in a reference root (`scripts/lcnc-root`, tests/common/lcnc_root.rs). Each
//! test here runs some of this build's own test binaries inside a root, so that they meet that
//! release's `rtapi_app`, `halcmd`, `linuxcnc` script, modules, headers, `halcompile` and Python
//! module, and passes only if the binary exits 0, every test asked for ran and passed, none said
//! `SKIPPED`, and the root's `linuxcnc_var LINUXCNCVERSION` is the release's.
//!
//! Per release (`cargo test --release --test linuxcnc_releases 2_9_4` for one):
//!
//! * `…_sim_axis_trajectories_equal_stock`: tests/linuxcnc_machine.rs, sim/axis on rtapi's master
//!   against the release's own `rtapi_app`, every servo period equal to the bit;
//! * `…_every_module_is_classified`: tests/linuxcnc_modules.rs, each of the release's modules loaded
//!   and run, or refused with its reason;
//! * `…_halcompiled_comp_loads_and_runs`: a `.comp` built by the release's `halcompile` and headers;
//! * `…_modules_find_their_rtapi_symbols_in_the_master`: tests/linuxcnc_exports.rs against the
//!   release's `rtapi_app` and modules (`nm -D`);
//! * `…_master_runs_the_releases_programs`: tests/linuxcnc_master.rs, the master driven by the
//!   release's `halcmd`, `rtapi_app` (as a slave), `linuxcnc` script and Python module: HAL on the
//!   master's FIFO threads, the estop latch through `rtapi.*.late`, file capabilities, a module
//!   crash, SIGTERM and SIGKILL of the launcher and of the master, a killed master's leftovers
//!   reclaimed;
//! * `…_sim_config_survey` (ignored, about 40 minutes a release): tests/linuxcnc_sim_configs.rs on the
//!   release's stock and then on rtapi; the tables go to `target/lcnc-sim-configs-*-<suite>.tsv`.
//!
//! The sibling binaries must be built first: `cargo build --release --tests` (the workspace's
//! `cargo test` builds them all before running any). Roots are built on first use (a few minutes
//! each, root and network needed) or by `.ci/run`. docs/linuxcnc-releases.md has the results.

mod common;
use common::lcnc_root::{ensure, run_in_root, Job, Release, RootRun, SID, TRIXIE};

use std::time::Duration;

/// tests/linuxcnc_master.rs's tests that drive the master with LinuxCNC's own programs and need no X.
/// Not `trace_names_what_made_linuxcncs_thread_late`: the kernel trace names host pids, which the
/// root's PID namespace hides.
const MASTER: &[&str] = &[
    "linuxcnc_hal_runs_on_the_masters_fifo_threads_and_leaves_nothing",
    "a_stalled_servo_thread_trips_linuxcncs_estop_latch_through_rtapi_late",
    "an_ordinary_user_with_file_capabilities_gets_fifo_threads_and_locked_memory",
    "a_module_crash_in_the_master_is_named_and_leaves_nothing",
    "module_paths_are_refused_and_nothing_of_them_is_opened",
    "a_new_master_reclaims_what_a_killed_master_left",
    "rtapi_linuxcnc_runs_sim_axis_and_leaves_nothing_behind",
    "sigterm_of_the_launcher_ends_the_machine_and_leaves_nothing",
    "a_killed_master_stops_the_machine_and_leaves_nothing",
    "a_killed_launcher_ends_its_master_with_its_segment_and_socket",
];

/// Runs `job` in `release`'s root and fails the test unless it passed (module docs).
fn evidence(test: &str, release: &Release, job: Job) {
    let Some(root) = ensure(test, release) else {
        return;
    };
    let r = run_in_root(&root, release.suite, &job);
    report(&r, release, &job);
    if let Err(why) = r.verdict(release, job.tests.len()) {
        panic!(
            "{} (LinuxCNC {}): {why}\n--- its output\n{}\n--- (kept in {})",
            r.what,
            release.version,
            r.output,
            r.log.display()
        );
    }
}

fn report(r: &RootRun, release: &Release, job: &Job) {
    eprintln!("{}", r.output);
    eprintln!(
        "{} (LinuxCNC {}, root says {:?}): {} of {} passed, {} failed, {} skipped, in {:.1} s \
         ({} test thread(s)); output in {}",
        r.what,
        release.version,
        r.version,
        r.passed,
        job.tests.len(),
        r.failed,
        r.skipped.len(),
        r.seconds,
        job.threads,
        r.log.display()
    );
}

fn sim_axis(test: &str, release: &Release) {
    evidence(
        test,
        release,
        Job::new(
            "linuxcnc_machine",
            &["rtapi_linuxcnc_runs_sim_axis_like_stock"],
        ),
    );
}

fn modules(test: &str, release: &Release) {
    evidence(
        test,
        release,
        Job::new("linuxcnc_modules", &["every_linuxcnc_module_is_classified"]),
    );
}

fn halcompile(test: &str, release: &Release) {
    evidence(
        test,
        release,
        Job::new(
            "linuxcnc_modules",
            &["a_comp_compiled_with_halcompile_loads_by_path_and_runs"],
        ),
    );
}

fn exports(test: &str, release: &Release) {
    evidence(
        test,
        release,
        Job::new(
            "linuxcnc_exports",
            &[
                "every_rtapi_function_rtapi_app_exports_the_master_exports",
                "every_symbol_modules_import_from_rtapi_app_the_master_exports",
            ],
        ),
    );
}

fn master(test: &str, release: &Release) {
    evidence(test, release, Job::new("linuxcnc_master", MASTER));
}

fn survey(test: &str, release: &Release) {
    for launcher in ["stock", "rtapi"] {
        let mut job = Job::new(
            "linuxcnc_sim_configs",
            &[if launcher == "stock" {
                "sim_configs_on_stock_linuxcnc"
            } else {
                "sim_configs_on_rtapi_linuxcnc"
            }],
        );
        job.ignored = true;
        job.deadline = Duration::from_secs(3 * 3600);
        job.env.push(("LCNC_SURVEY_TAG", release.suite.to_string()));
        evidence(test, release, job);
    }
}

// ---- LinuxCNC 2.9.4 (Debian 13, trixie) ----------------------------------------------------------

#[test]
fn lcnc_2_9_4_sim_axis_trajectories_equal_stock() {
    sim_axis(test_name!(), &TRIXIE);
}

#[test]
fn lcnc_2_9_4_every_module_is_classified() {
    modules(test_name!(), &TRIXIE);
}

#[test]
fn lcnc_2_9_4_halcompiled_comp_loads_and_runs() {
    halcompile(test_name!(), &TRIXIE);
}

#[test]
fn lcnc_2_9_4_modules_find_their_rtapi_symbols_in_the_master() {
    exports(test_name!(), &TRIXIE);
}

#[test]
fn lcnc_2_9_4_master_runs_the_releases_programs() {
    master(test_name!(), &TRIXIE);
}

#[test]
#[ignore = "every sim config of LinuxCNC 2.9.4, stock then rtapi (about 40 minutes)"]
fn lcnc_2_9_4_sim_config_survey() {
    survey(test_name!(), &TRIXIE);
}

// ---- LinuxCNC 2.9.9 (Debian unstable, sid) -------------------------------------------------------

#[test]
fn lcnc_2_9_9_sim_axis_trajectories_equal_stock() {
    sim_axis(test_name!(), &SID);
}

#[test]
fn lcnc_2_9_9_every_module_is_classified() {
    modules(test_name!(), &SID);
}

#[test]
fn lcnc_2_9_9_halcompiled_comp_loads_and_runs() {
    halcompile(test_name!(), &SID);
}

#[test]
fn lcnc_2_9_9_modules_find_their_rtapi_symbols_in_the_master() {
    exports(test_name!(), &SID);
}

#[test]
fn lcnc_2_9_9_master_runs_the_releases_programs() {
    master(test_name!(), &SID);
}

#[test]
#[ignore = "every sim config of LinuxCNC 2.9.9, stock then rtapi (about 40 minutes)"]
fn lcnc_2_9_9_sim_config_survey() {
    survey(test_name!(), &SID);
}

// ---- the verdict can fail ------------------------------------------------------------------------

/// A run in the wrong root, or one where a test asked for did not run, is not a pass: the exports
/// binary inside trixie's root passes as 2.9.4, not as 2.9.9; a name that matches no test runs
/// nothing and fails.
#[test]
fn a_run_in_the_wrong_root_or_of_fewer_tests_fails() {
    let Some(root) = ensure(test_name!(), &TRIXIE) else {
        return;
    };
    let job = Job::new(
        "linuxcnc_exports",
        &["every_rtapi_function_rtapi_app_exports_the_master_exports"],
    );
    let r = run_in_root(&root, TRIXIE.suite, &job);
    report(&r, &TRIXIE, &job);
    r.verdict(&TRIXIE, 1).unwrap_or_else(|e| panic!("{e}"));
    let e = r
        .verdict(&SID, 1)
        .expect_err("trixie's root passed as 2.9.9");
    assert!(e.contains("not 2.9.9"), "{e}");
    let e = r.verdict(&TRIXIE, 2).expect_err("1 test passed as 2");
    assert!(e.contains("1 of 2 test(s) passed"), "{e}");
    let job = Job::new("linuxcnc_exports", &["no_such_test"]);
    let r = run_in_root(&root, TRIXIE.suite, &job);
    assert_eq!(r.code, Some(0), "{}", r.output);
    let e = r
        .verdict(&TRIXIE, 1)
        .expect_err("no test ran, and it passed");
    assert!(e.contains("0 of 1 test(s) passed"), "{e}");
}
