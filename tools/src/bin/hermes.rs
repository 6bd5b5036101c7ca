//! The reference `hermes`, built as a binary of this package (`hermes-tools`): what
//! `cargo conformance --explore` runs schedules on. It shares the features of the package's own
//! build, so building it beside `conformance` only links (see `fixtures::target` on why each
//! package carries its own copy).
fn main() -> std::process::ExitCode {
    hermes::cli::main()
}
