//! The Python module's pytest suite (`python/tests`) against this build's `rtapi` binary: real
//! instances, real processes. Needs `pip install pytest ./python`; without them the test prints
//! `SKIPPED: …` to stderr and passes, except under CI (`CI` set), where it fails.

mod common;

use std::process::Command;

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn the_pytest_suite_passes() {
    let root = env!("CARGO_MANIFEST_DIR");
    let probe = Command::new(python())
        .args(["-c", "import rtapi, pytest"])
        .output();
    let missing = match &probe {
        Err(e) => Some(format!("{} cannot run: {e}", python())),
        Ok(o) if !o.status.success() => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Ok(_) => None,
    };
    if let Some(why) = missing {
        return skip!(
            Ci,
            "the rtapi Python module or pytest is missing ({why}); install them with \
             `pip install pytest ./python`"
        );
    }
    let out = Command::new(python())
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "python/tests",
        ])
        .current_dir(root)
        .env("RTAPI_BIN", env!("CARGO_BIN_EXE_rtapi"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "pytest failed:\n{text}");
    assert!(text.contains(" passed"), "pytest ran no test:\n{text}");
}
