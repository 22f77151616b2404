//! The LinuxCNC module host is owned by what runs the module (issue 26): a library user who builds a
//! runtime from a session gets each module's `rtapi_app_exit` and `dlclose` from `Runtime::stop` (after
//! the threads are joined) or from dropping a runtime that never started — with no global "unload
//! everything" call — and can load the same module into the next runtime of the same process.
//!
//! The module is a `.comp` compiled here with LinuxCNC's `halcompile`: its `extra_setup` and
//! `extra_cleanup` append `main` / `exit` to a file, so the test sees LinuxCNC's own entry points run.
//! Its own process (one test binary, one test): the host's registry is process-wide.

use std::path::{Path, PathBuf};
use std::process::Command;

use rtapi::components::Registry;
use rtapi::config::halcmd::Session;
use rtapi::runtime::RuntimeOptions;

/// The `main`/`exit` lines the module wrote so far.
fn events(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn count(ev: &[String], what: &str) -> usize {
    ev.iter().filter(|e| *e == what).count()
}

/// Whether this process maps `so`.
fn mapped(so: &Path) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .any(|l| l.ends_with(&*so.to_string_lossy()))
}

fn compile(dir: &Path) -> PathBuf {
    std::fs::write(
        dir.join("exitmark.comp"),
        "component exitmark \"records its module's setup and cleanup\";\n\
         pin out s32 n;\n\
         function _;\n\
         option extra_setup yes;\n\
         option extra_cleanup yes;\n\
         license \"GPL\";\n\
         ;;\n\
         #include <stdio.h>\n\
         #include <stdlib.h>\n\
         static void mark(const char *what) {\n\
             const char *p = getenv(\"EXITMARK_LOG\");\n\
             FILE *f = p ? fopen(p, \"a\") : NULL;\n\
             if (f) { fprintf(f, \"%s\\n\", what); fclose(f); }\n\
         }\n\
         FUNCTION(_) { n++; }\n\
         EXTRA_SETUP() { mark(\"main\"); return 0; }\n\
         EXTRA_CLEANUP() { mark(\"exit\"); }\n",
    )
    .unwrap();
    let o = Command::new("halcompile")
        .args(["--compile", "exitmark.comp"])
        .current_dir(dir)
        .output()
        .expect("halcompile is missing: install linuxcnc-uspace-dev (.ci/run does)");
    let so = dir.join("exitmark.so");
    assert!(
        so.is_file(),
        "halcompile failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    so.canonicalize().unwrap()
}

fn session(so: &Path, instance: &str) -> Session {
    let mut s = Session::new(Registry::builtin(), instance).unwrap();
    let mut out = Vec::new();
    for line in [
        "loadrt threads name1=servo period1=1000000".to_string(),
        format!("loadrt {}", so.display()),
        "addf exitmark.0 servo".to_string(),
    ] {
        s.execute(&line, &mut out)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    s
}

fn options(instance: &str) -> RuntimeOptions {
    RuntimeOptions {
        instance: instance.to_string(),
        flavor: Some("posix".into()),
        lock_memory: false,
        dma_latency: false,
        ..RuntimeOptions::default()
    }
}

#[test]
fn stop_runs_each_modules_exit_after_its_threads_and_the_module_loads_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events");
    // Set before any thread of this test binary reads the environment.
    std::env::set_var("EXITMARK_LOG", &log);
    let so = compile(dir.path());
    let instance = format!("t-mhost-{}", std::process::id());

    // 1. Started and stopped: the module's exit runs at stop, and it is unmapped.
    let s = session(&so, &instance);
    let running = rtapi::instance::start(&s, options(&instance)).unwrap();
    let ev = events(&log);
    assert_eq!(
        count(&ev, "main") - count(&ev, "exit"),
        1,
        "the running instance's module is set up and not cleaned up: {ev:?}"
    );
    assert!(mapped(&so), "the running instance maps the module");
    let reader = running.hal().reader().unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !matches!(reader.get("exitmark.0.n"), Ok(rtapi_hal::Value::S32(n)) if n >= 2) {
        assert!(std::time::Instant::now() < until, "exitmark.0 never ran");
        std::thread::yield_now();
    }
    drop(reader);
    let summary = running.stop();
    assert!(
        summary.threads.iter().all(|t| t.stalled.is_none()),
        "every thread stopped"
    );
    let ev = events(&log);
    assert_eq!(
        count(&ev, "main"),
        count(&ev, "exit"),
        "Runtime::stop ran rtapi_app_exit: {ev:?}"
    );
    assert_eq!(ev.last().map(String::as_str), Some("exit"));
    assert!(!mapped(&so), "Runtime::stop closed the module");

    // 2. The same module into the next runtime of the same process: it is not "already loaded".
    let rt = rtapi::instance::build(&s, options(&instance)).unwrap_or_else(|e| panic!("{e}"));
    let ev = events(&log);
    assert_eq!(count(&ev, "main") - count(&ev, "exit"), 1, "{ev:?}");
    // 3. A runtime dropped before it started ends its modules too.
    drop(rt);
    let ev = events(&log);
    assert_eq!(count(&ev, "main"), count(&ev, "exit"), "{ev:?}");
    assert!(!mapped(&so));
    drop(s);
}
