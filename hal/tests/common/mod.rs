//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

// The one skip helper of the workspace's tests (`SKIPPED: <test>: <why>`, a failure under CI for what
// `.ci/run` provides), shared with the root package's tests.
#[path = "../../../tests/common/skipping.rs"]
mod skipping;
#[allow(unused_imports)] // not every test file skips
pub(crate) use skipping::*;

use std::sync::atomic::{AtomicU32, Ordering};

/// An instance name no other test (or parallel test run) uses: tag, pid and a counter.
pub(crate) fn unique_instance(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "test-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) fn shm_path(instance: &str) -> std::path::PathBuf {
    format!("/dev/shm/rtapi-{instance}").into()
}

/// Removes a segment file a test left behind on failure.
pub(crate) struct Cleanup(pub String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(shm_path(&self.0));
    }
}

/// Writes a file in `/dev/shm` the way an owner's segment is made: mode 0600, owned by us (so the trust
/// check passes and the test reaches what it is about).
pub(crate) fn write_shm(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// Sets a file's permission bits.
pub(crate) fn chmod(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Whether we run as root (tests that need other users print `SKIPPED: reason` otherwise).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
