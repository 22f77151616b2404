//! Builds the C half of the LinuxCNC module host (src/components/linuxcnc/shim.c: the printf-style
//! entry points) and makes the `rtapi` binary export the C API to the modules it `dlopen`s.

#[path = "src/rt/civil_date.rs"]
mod civil;

use std::path::PathBuf;

/// Every symbol of the C API rtapi offers LinuxCNC modules (shim.c and capi/). A module that needs
/// another one fails at `loadrt`, naming it. Keep in sync with `capi::EXPORTED`.
const EXPORTED: &[&str] = &[
    "hal_init",
    "hal_ready",
    "hal_set_unready",
    "hal_exit",
    "hal_malloc",
    "hal_comp_name",
    "hal_export_funct",
    "hal_pin_new",
    "hal_pin_bit_new",
    "hal_pin_float_new",
    "hal_pin_u32_new",
    "hal_pin_s32_new",
    "hal_pin_bit_newf",
    "hal_pin_float_newf",
    "hal_pin_u32_newf",
    "hal_pin_s32_newf",
    "hal_param_new",
    "hal_param_bit_new",
    "hal_param_float_new",
    "hal_param_u32_new",
    "hal_param_s32_new",
    "hal_param_bit_newf",
    "hal_param_float_newf",
    "hal_param_u32_newf",
    "hal_param_s32_newf",
    "rtapi_print",
    "rtapi_print_msg",
    "rtapi_snprintf",
    "rtapi_vsnprintf",
    "rtapi_get_msg_level",
    "rtapi_set_msg_level",
    "rtapi_get_time",
    "rtapi_get_clocks",
    "rtapi_delay",
    "rtapi_delay_max",
    "rtapi_shmem_new",
    "rtapi_shmem_getptr",
    "rtapi_shmem_delete",
    "hal_param_alias",
    "rtapi_argv_split",
    "rtapi_argv_free",
    "rtapi_request_firmware",
    "rtapi_release_firmware",
    "rtapi_task_self",
    "rtapi_spawn_as_root",
    "rtapi_parport_get",
    "rtapi_parport_release",
    "simple_strtol",
];

/// What the LinuxCNC master binary (`rtapi-lcnc-master`) exports: the 53 `rtapi_*`/`simple_strtol`
/// functions LinuxCNC 2.9's `rtapi_app` exports, and **no** `hal_*` symbol (hal_lib.so's must win
/// for every module). Keep in sync with `master::capi::keep_linked` and `capi::keep_linked`.
const MASTER_EXPORTED: &[&str] = &[
    "rtapi_argv_free",
    "rtapi_argv_split",
    "rtapi_clock_set_period",
    "rtapi_delay",
    "rtapi_delay_max",
    "rtapi_exit",
    "rtapi_get_clocks",
    "rtapi_get_msg_handler",
    "rtapi_get_msg_level",
    "rtapi_get_time",
    "rtapi_inb",
    "rtapi_init",
    "rtapi_iounmap",
    "rtapi_is_kernelspace",
    "rtapi_is_realtime",
    "rtapi_kstrndup",
    "rtapi_open_as_root",
    "rtapi_outb",
    "rtapi_parport_get",
    "rtapi_parport_release",
    "rtapi_pci_disable_device",
    "rtapi_pci_enable_device",
    "rtapi_pci_ioremap_bar",
    "rtapi_pci_register_driver",
    "rtapi_pci_unregister_driver",
    "rtapi_print",
    "rtapi_print_msg",
    "rtapi_prio_highest",
    "rtapi_prio_lowest",
    "rtapi_prio_next_higher",
    "rtapi_prio_next_lower",
    "rtapi_release_firmware",
    "rtapi_request_firmware",
    "rtapi_set_msg_handler",
    "rtapi_set_msg_level",
    "rtapi_shmem_delete",
    "rtapi_shmem_getptr",
    "rtapi_shmem_new",
    "rtapi_snprintf",
    "rtapi_spawn_as_root",
    "rtapi_spawnp_as_root",
    "rtapi_task_delete",
    "rtapi_task_new",
    "rtapi_task_pause",
    "rtapi_task_pll_get_reference",
    "rtapi_task_pll_set_correction",
    "rtapi_task_resume",
    "rtapi_task_self",
    "rtapi_task_start",
    "rtapi_vsnprintf",
    "rtapi_wait",
    "simple_strtol",
];

fn write_list(path: &std::path::Path, symbols: &[&str]) {
    let mut text = String::from("{\n");
    for s in symbols {
        text.push_str(&format!("  {s};\n"));
    }
    text.push_str("};\n");
    std::fs::write(path, text).expect("write the dynamic symbol list");
}

/// `git ARGS` in the package's directory: its output, trimmed, or `None` when git is missing or
/// fails (not a checkout: a source tarball, a vendored copy).
fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        // Never write the index (a refresh would change it, and so rerun this script next build).
        .arg("--no-optional-locks")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A day count since 1970-01-01 as `YYYY-MM-DD`.
fn civil_date(days: i64) -> String {
    let (year, month, day) = civil::from_days(days);
    format!("{year:04}-{month:02}-{day:02}")
}

/// What `rtapi --version` says of the build: `RTAPI_GIT` (the commit's short hash, `-dirty` when
/// tracked files differed from it, `unknown` outside a git checkout) and `RTAPI_BUILD_DATE` (UTC;
/// `SOURCE_DATE_EPOCH` when set, as reproducible package builds set it). Both are as of this script's
/// last run: a commit or a checkout reruns it, an edit or a `git add` alone does not.
fn build_info() {
    let hash = git(&["rev-parse", "--short", "HEAD"]).filter(|h| !h.is_empty());
    let described = match hash {
        Some(hash) => {
            // --no-optional-locks: a plain `git status` rewrites the index's stat cache, which
            // would make every later build see a changed index and rebuild the crate.
            let dirty = git(&[
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--untracked-files=no",
            ])
            .is_some_and(|s| !s.is_empty());
            format!("{hash}{}", if dirty { "-dirty" } else { "" })
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=RTAPI_GIT={described}");
    // Rerun when HEAD moves (a commit, a checkout). Not on the index: every `git status` (an
    // editor's, a prompt's) rewrites it, and each rerun recompiles the whole crate (minutes here).
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    println!(
        "cargo:rustc-env=RTAPI_BUILD_DATE={}",
        civil_date(seconds.div_euclid(86_400))
    );
}

fn main() {
    build_info();
    println!("cargo:rerun-if-changed=src/components/linuxcnc/shim.c");
    println!("cargo:rerun-if-changed=build.rs");
    cc::Build::new()
        .file("src/components/linuxcnc/shim.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("rtapi_linuxcnc_shim");
    // Leaving a hosted thread's foreign loop by longjmp between C frames (runtime/hosted/period.rs).
    println!("cargo:rerun-if-changed=src/runtime/hosted_exit.c");
    cc::Build::new()
        .file("src/runtime/hosted_exit.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("rtapi_hosted_exit");

    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let list = out.join("linuxcnc_exports.list");
    write_list(&list, EXPORTED);
    assert!(
        MASTER_EXPORTED.iter().all(|s| !s.starts_with("hal")),
        "the master must not export hal_* symbols"
    );
    let master = out.join("linuxcnc_master_exports.list");
    write_list(&master, MASTER_EXPORTED);
    // Only these symbols of a binary become visible to dlopen'ed modules. The standalone host
    // (`rtapi`) exports its hal_* and rtapi_* C API; tests and benchmarks host modules in their own
    // process too (the component Harness). The master exports rtapi_* only.
    println!(
        "cargo:rustc-link-arg-bin=rtapi=-Wl,--dynamic-list={}",
        list.display()
    );
    println!(
        "cargo:rustc-link-arg-bin=rtapi-lcnc-master=-Wl,--dynamic-list={}",
        master.display()
    );
    for kind in ["tests", "benches"] {
        println!(
            "cargo:rustc-link-arg-{kind}=-Wl,--dynamic-list={}",
            list.display()
        );
    }
}
