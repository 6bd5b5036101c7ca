fn main() -> std::process::ExitCode {
    hermes::cli::main()
}
