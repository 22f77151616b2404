//! Builds the C half of the LinuxCNC module host (src/components/linuxcnc/shim.c: the printf-style
//! entry points) and makes the `rtapi` binary export the C API to the modules it `dlopen`s.

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

fn main() {
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
