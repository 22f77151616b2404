//! Bad command-line input: a clear message that names the flag and the fix, exit code 2, and nothing
//! started (every case here is refused while parsing the arguments, before any thread or segment).

mod common;
use common::rtapi;

fn refused(args: &[&str], says: &[&str]) {
    let out = rtapi(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
    for s in says {
        assert!(stderr.contains(s), "{args:?}: wanted {s:?} in {stderr}");
    }
}

const SHORT: &str =
    "period 1ns is shorter than 1us, which no timer keeps; use e.g. 25us (base) or 1ms (servo)";

#[test]
fn periods_have_the_same_limits_as_configs() {
    refused(
        &["latency-test", "--servo", "1ns"],
        &["'--servo <SERVO>'", SHORT],
    );
    refused(
        &["latency-test", "--base", "1ns"],
        &["'--base <BASE>'", SHORT],
    );
    refused(
        &["compare-timers", "--period", "1ns"],
        &["'--period <PERIOD>'", SHORT],
    );
    refused(
        &["latency-test", "--servo", "100s"],
        &["period 100s is longer than 10s"],
    );
    refused(
        &["compare-timers", "--period", "0"],
        &["period 0ns is not positive"],
    );
    refused(
        &["latency-test", "--servo", "0"],
        &["period 0ns is not positive"],
    );
}

#[test]
fn a_number_needs_a_unit_except_zero() {
    refused(
        &["latency-test", "--servo", "25"],
        &[
            "'--servo <SERVO>'",
            "invalid duration '25': write a unit, e.g. 25us",
        ],
    );
    refused(
        &["compare-timers", "--period", "1000000"],
        &["write a unit, e.g. 1000000us"],
    );
    refused(
        &["compare-timers", "--duration", "5"],
        &["write a unit, e.g. 5us"],
    );
    refused(
        &["latency-test", "--duration", "60"],
        &["write a unit, e.g. 60us"],
    );
    refused(
        &["latency-test", "--fail-above", "50"],
        &["write a unit, e.g. 50us"],
    );
    // `--base 0` (servo only) and `--duration 0` get past parsing: the error here is the servo's.
    refused(
        &[
            "latency-test",
            "--base",
            "0",
            "--duration",
            "0",
            "--servo",
            "2",
        ],
        &["'--servo <SERVO>'", "write a unit"],
    );
}

#[test]
fn run_duration_must_be_positive() {
    refused(
        &["run", "nope.toml", "--duration", "0"],
        &["--duration must be positive; omit it to run until Ctrl-C"],
    );
    refused(
        &["run", "nope.toml", "--duration", "0s"],
        &["--duration must be positive"],
    );
}

#[test]
fn hybrid_margins_say_what_is_wrong() {
    refused(
        &["latency-test", "--wake", "hybrid:0"],
        &[
            "'--wake <WAKE>'",
            "wake mode `hybrid:0`: the hybrid margin must be positive, e.g. hybrid:50us",
        ],
    );
    refused(
        &["latency-test", "--wake", "hybrid:50"],
        &["write a unit, e.g. 50us"],
    );
    refused(
        &["latency-test", "--wake", "hybrid:"],
        &["give a margin after the colon"],
    );
}

#[test]
fn a_cpu_list_with_an_empty_element_is_refused() {
    for list in ["0,", ",1", "0,,1"] {
        refused(
            &["latency-test", "--cpu", list, "--duration", "1s"],
            &["invalid --cpu"],
        );
    }
}

#[test]
fn control_characters_and_huge_values_are_not_echoed_raw() {
    let out = rtapi(&["latency-test", "--servo", "1\u{1b}[2J\u{7}ms"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{7}'),
        "{stderr:?}"
    );
    assert!(stderr.contains("1\\u{1b}[2J\\u{7}ms"), "{stderr}");
    let huge = "9".repeat(100_000);
    let out = rtapi(&["compare-timers", "--period", &huge]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.len() < 1_000, "{} bytes", stderr.len());
    assert!(stderr.contains("(100000 bytes)"), "{stderr}");
}
