//! The suite's worker stand-in (`worker-stand-in-tools`) for programs that take a census of
//! workers outside a test run: the explorer and the benchmarks. The census's watchdog runs as
//! the stand-in, and stand-in workers are it, so such a program names it before any census.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{bail, Context as _};

use crate::workspace::Workspace;

/// The variable nextest gives a test of `tools` for the stand-in binary.
const NEXTEST_STAND_IN: &str = "NEXTEST_BIN_EXE_worker-stand-in-tools";

/// How a binary of `tools` is built when it must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `cargo build`, as the explorer's own build.
    Debug,
    /// `cargo build --release`, as the benchmarks' own build.
    Release,
}

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
        return existing(variable, PathBuf::from(path)).map(drop);
    }
    // A test that runs this program has nextest name it (building it again from there would
    // wait on a build with the test's own environment); else it is built now, never stale.
    let binary = match std::env::var_os(NEXTEST_STAND_IN) {
        Some(path) => existing(NEXTEST_STAND_IN, PathBuf::from(path))?,
        None => built_binary(ws, "worker-stand-in-tools", profile)?,
    };
    std::env::set_var(variable, binary);
    Ok(())
}

/// `path`, when it is a file that `variable` named.
///
/// # Errors
/// When it is not a file.
pub fn existing(variable: &str, path: PathBuf) -> anyhow::Result<PathBuf> {
    if !path.is_file() {
        bail!("{variable}={} is no file", path.display());
    }
    Ok(path)
}

/// `cargo build -p tools --bin NAME` (with `--release` for [`Profile::Release`]), and the binary
/// it left.
///
/// # Errors
/// When the build fails or leaves no binary.
pub fn built_binary(ws: &Workspace, name: &str, profile: Profile) -> anyhow::Result<PathBuf> {
    let (flag, dir) = match profile {
        Profile::Debug => (None, "debug"),
        Profile::Release => (Some("--release"), "release"),
    };
    let shown = format!(
        "cargo build{} -p tools --bin {name}",
        flag.map_or(String::new(), |f| format!(" {f}"))
    );
    eprintln!("building {name} ({shown})");
    let status = ws
        .cargo()
        .args(["build", "-q", "-p", "tools", "--bin", name])
        .args(flag)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running {shown}"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    let binary = ws.target_dir.join(dir).join(name);
    if !binary.is_file() {
        bail!("the build left no binary at {}", binary.display());
    }
    Ok(binary)
}
