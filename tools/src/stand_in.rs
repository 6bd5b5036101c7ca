//! The suite's worker stand-in (`worker-stand-in-tools`) for programs that take a census of
//! workers outside a test run: the explorer and the benchmarks. The census's watchdog runs as
//! the stand-in, and stand-in workers are it, so such a program names it before any census.

use std::path::PathBuf;

use crate::workspace::{named_file, Profile, Workspace};

/// The variable nextest gives a test of `tools` for the stand-in binary.
const NEXTEST_STAND_IN: &str = "NEXTEST_BIN_EXE_worker-stand-in-tools";

/// Makes the stand-in findable by every census this process takes: `HERMES_STAND_IN_BIN` when
/// set, else the one nextest names for a test running this program, else `worker-stand-in-tools`
/// built now in `profile` (cargo builds only the binary it runs, so it may be missing or stale).
/// Call before any thread starts: it sets a variable.
///
/// # Errors
/// When a named binary is no file, or the build fails.
pub fn provide(ws: &Workspace, profile: Profile) -> anyhow::Result<()> {
    let variable = fixtures::workers::STAND_IN_OVERRIDE;
    if let Some(path) = std::env::var_os(variable) {
        return named_file(variable, PathBuf::from(path)).map(drop);
    }
    // A test that runs this program has nextest name it (building it again from there would
    // wait on a build with the test's own environment); else it is built now, never stale.
    let binary = match std::env::var_os(NEXTEST_STAND_IN) {
        Some(path) => named_file(NEXTEST_STAND_IN, PathBuf::from(path))?,
        None => ws.build_tools_binary("worker-stand-in-tools", profile)?,
    };
    std::env::set_var(variable, binary);
    Ok(())
}
