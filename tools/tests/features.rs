//! The README's two commands build once between them: `cargo conformance` builds `tools` and
//! then the suite crates, `cargo nextest run --workspace` builds everything, and a crate that the
//! three resolve with different features is compiled twice, with everything above it. The
//! `workspace-hack` crate evens them out; this test catches a new difference (a dependency added
//! or upgraded) before a newcomer pays for it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Each crate of one build, by name and version, with the feature sets it is built with (a crate
/// built for build scripts and proc macros too may be built with two).
fn resolved(packages: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tools sits in the workspace");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .current_dir(workspace)
        .args(["tree", "--locked", "--offline", "--prefix", "none"])
        .args(["-e", "normal,build,dev", "-f", "{p}|{f}"])
        .args(packages)
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {packages:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut crates = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((package, features)) = line.split_once('|') else {
            continue;
        };
        // `name vX.Y.Z (path or marker)`: the name and version are the crate.
        let id: Vec<&str> = package.split_whitespace().take(2).collect();
        let features = features.trim_end_matches(" (*)").trim();
        crates
            .entry(id.join(" "))
            .or_insert_with(BTreeSet::new)
            .insert(features.to_owned());
    }
    crates
}

#[test]
fn the_conformance_run_and_the_workspace_tests_build_every_shared_crate_alike() {
    let whole = resolved(&["--workspace"]);
    let mut differ = Vec::new();
    for build in [
        &["-p", "tools"][..],
        &["-p", "gateway-tests", "-p", "cli-tests"],
    ] {
        for (id, sets) in resolved(build) {
            let Some(all) = whole.get(&id) else {
                continue;
            };
            for features in sets.difference(all) {
                differ.push(format!(
                    "{id}: [{features}] in {build:?}, only {all:?} in --workspace"
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "these crates would be compiled twice; add the features to workspace-hack/Cargo.toml:\n{}",
        differ.join("\n")
    );
}
