//! `rtapi-lcnc-master`: rtapi as LinuxCNC 2.9's realtime master (see `rtapi linuxcnc`).

fn main() -> std::process::ExitCode {
    rtapi::cli::linuxcnc::master_main()
}
