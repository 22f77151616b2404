//! Helpers the integration tests share: running the real `rtapi` binary and looking at segments.
//! (`tests/common/mod.rs` is not a test target of its own; each test file that needs it says `mod common;`.)

#![allow(dead_code)] // each test file uses only some of these

use std::process::{Command, Output};

/// Runs `rtapi ARGS` to completion with errors-only logging.
pub fn rtapi(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

/// Standard output and standard error as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Whether the segment of `instance` exists.
pub fn segment_exists(instance: &str) -> bool {
    std::path::Path::new(&format!("/dev/shm/rtapi-{instance}")).exists()
}
