//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::sync::atomic::{AtomicU32, Ordering};

/// An instance name no other test (or parallel test run) uses: tag, pid and a counter.
pub fn unique_instance(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "test-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn shm_path(instance: &str) -> std::path::PathBuf {
    format!("/dev/shm/rtapi-{instance}").into()
}

/// Removes a segment file a test left behind on failure.
pub struct Cleanup(pub String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(shm_path(&self.0));
    }
}
