//! Builds the C half of the LinuxCNC module host (src/components/linuxcnc/shim.c: the printf-style
//! entry points) and makes the `rtapi` binary export the C API to the modules it `dlopen`s.

use std::path::PathBuf;

/// Every symbol of the C API rtapi offers LinuxCNC modules (shim.c and capi.rs). A module that needs
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

fn main() {
    println!("cargo:rerun-if-changed=src/components/linuxcnc/shim.c");
    println!("cargo:rerun-if-changed=build.rs");
    cc::Build::new()
        .file("src/components/linuxcnc/shim.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("rtapi_linuxcnc_shim");
    // Leaving a hosted thread's foreign loop by longjmp between C frames (runtime/hosted.rs).
    println!("cargo:rerun-if-changed=src/runtime/hosted_exit.c");
    cc::Build::new()
        .file("src/runtime/hosted_exit.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("rtapi_hosted_exit");

    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let list = out.join("linuxcnc_exports.list");
    let mut text = String::from("{\n");
    for s in EXPORTED {
        text.push_str(&format!("  {s};\n"));
    }
    text.push_str("};\n");
    std::fs::write(&list, text).expect("write the dynamic symbol list");
    // Only these symbols of the binary become visible to dlopen'ed modules.
    // Tests and benchmarks host modules in their own process too (the component Harness).
    for kind in ["bins", "tests", "benches"] {
        println!(
            "cargo:rustc-link-arg-{kind}=-Wl,--dynamic-list={}",
            list.display()
        );
    }
}
