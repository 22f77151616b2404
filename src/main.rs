//! `rtapi`: the command line (see `rtapi --help` and README).

fn main() -> std::process::ExitCode {
    rtapi::cli::main()
}
