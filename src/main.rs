fn main() -> std::process::ExitCode {
    rtapi::cli::main()
}
