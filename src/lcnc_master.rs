//! `rtapi-lcnc-master`: rtapi as LinuxCNC 2.9's realtime master (see `rtapi linuxcnc`); started
//! as `rtapi_app` (a symlink of that name, `rtapi divert on`), it is 2.9's `rtapi_app` itself.

fn main() -> std::process::ExitCode {
    if rtapi::master::app::invoked_as_app() {
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
        return rtapi::master::app::main();
    }
    rtapi::cli::linuxcnc::master_main()
}
