//! Stamps `hermes --version` with the commit it was built from: `0.1.0 (a4e39c4 2026-12-01)`,
//! or `0.1.0 (commit unknown)` when there is no git checkout or no `git` (a source tarball).
//! Nothing here can fail the build.
//!
//! A small script rather than a crate (vergen, built, shadow-rs): two `git` calls are all it
//! takes, and those crates bring libgit2 or a dozen dependencies into every build of the suite.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = commit().unwrap_or_else(|| "commit unknown".to_owned());
    println!("cargo:rustc-env=HERMES_VERSION={version} ({commit})");
}

/// `SHORT-HASH YYYY-MM-DD` of HEAD, telling cargo to run this again when HEAD moves.
fn commit() -> Option<String> {
    let git_dir = git_path("--git-dir")?;
    let common_dir = git_path("--git-common-dir")?;
    // HEAD names the branch; the branch's ref (loose, or packed) names the commit. A worktree
    // has its own HEAD but shares the refs.
    rerun_if_changed(&git_dir.join("HEAD"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        rerun_if_changed(&common_dir.join(branch));
    }
    rerun_if_changed(&common_dir.join("packed-refs"));
    let line = git(&[
        "log",
        "-1",
        "--no-show-signature",
        "--date=short",
        "--format=%h %cd",
    ])?;
    let mut parts = line.split(' ');
    let hash = parts
        .next()
        .filter(|h| h.chars().all(|c| c.is_ascii_hexdigit()))?;
    let date = parts.next()?;
    Some(format!("{hash} {date}"))
}

fn rerun_if_changed(path: &Path) {
    // A path that does not exist yet (no packed-refs) makes cargo run the script every time.
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// The trimmed stdout of `git ARGS` run in this crate's directory, when it succeeds.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .args(args)
        .current_dir(&dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A directory `git rev-parse WHICH` names, made absolute (git answers relative to where it ran).
fn git_path(which: &str) -> Option<PathBuf> {
    let path = PathBuf::from(git(&["rev-parse", which])?);
    if path.is_absolute() {
        return Some(path);
    }
    Some(PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?).join(path))
}
