//! The reference `hermes`, built as a binary of this package so that cargo rebuilds it whenever
//! this package's tests are built (`-p fixtures`, `--partition`, `CARGO_TARGET_DIR` alike).
fn main() -> std::process::ExitCode {
    hermes::cli::main()
}
