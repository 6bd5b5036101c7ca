//! The suite's worker stand-in, built as a binary of this package so that cargo builds it
//! whenever this package's tests are built (see `fixtures::workers::stand_in`).
fn main() -> std::process::ExitCode {
    fixtures::workers::stand_in::main()
}
