//! A wall clock a test moves under a real process, built with the workspace.
//!
//! `src/shim.c`, compiled by this crate's build script into `libhermes_clock_shim.so`, is
//! preloaded into the process (`LD_PRELOAD`). It adds a whole number of seconds, read from the
//! file [`OFFSET_FILE_VARIABLE`] names, to `CLOCK_REALTIME` and `CLOCK_REALTIME_COARSE`
//! (`clock_gettime`) and to `gettimeofday`, `time` and `timespec_get`, which read the same clock.
//! The monotonic and boot clocks, which a process measures its waits with, run true. The file is
//! read on every call, so rewriting it moves the clock of a running process at once.
//!
//! It works for any dynamically linked program that reads the wall clock through the C library:
//! a Rust program (std's `SystemTime` calls `clock_gettime`), CPython (`time.time`,
//! `datetime.now`), SQLite (`gettimeofday`). It does not reach a statically linked program.
//!
//! The library is found at run time by [`library`]: where the build script wrote it, or, when the
//! test binaries were moved (a nextest archive run on another checkout, which carries the build
//! scripts' output directories), at the same place under the target directory that holds the
//! running test binary.

#![warn(missing_docs)]

use std::path::{Path, PathBuf};

/// The variable naming the file the shim reads its offset from (`+86400` moves the clock a day
/// ahead).
pub const OFFSET_FILE_VARIABLE: &str = "HERMES_CLOCK_OFFSET_FILE";

/// The variable that names the library explicitly, overriding [`library`]'s search.
pub const LIBRARY_VARIABLE: &str = "HERMES_CLOCK_SHIM";

/// Where the build script wrote the library (empty where nothing was built).
const BUILT: &str = env!("CLOCK_SHIM_BUILT");

/// Why the shim could not be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// Every place that was looked at.
    pub tried: Vec<String>,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the clock shim (libhermes_clock_shim.so, built by the clock-shim crate's build \
             script) was not found; rebuild the tests (`cargo nextest run --workspace` builds \
             it), or set {LIBRARY_VARIABLE} to it. Looked at: {}",
            self.tried.join("; ")
        )
    }
}

impl std::error::Error for Missing {}

/// The library to preload: [`LIBRARY_VARIABLE`] when set, else where the build script wrote it,
/// else the same place under the target directory of the running executable.
///
/// # Errors
/// When none of those is a file (with every place looked at).
pub fn library() -> Result<PathBuf, Missing> {
    let current_exe = std::env::current_exe().ok();
    find(
        std::env::var_os(LIBRARY_VARIABLE).map(PathBuf::from),
        Path::new(BUILT),
        current_exe.as_deref(),
    )
}

/// [`library`]'s search, from what it reads: the seam its tests use.
fn find(
    explicit: Option<PathBuf>,
    built: &Path,
    current_exe: Option<&Path>,
) -> Result<PathBuf, Missing> {
    let mut tried = Vec::new();
    if let Some(path) = explicit {
        if path.is_file() {
            return Ok(path);
        }
        tried.push(format!(
            "{LIBRARY_VARIABLE}={} (no such file)",
            path.display()
        ));
        return Err(Missing { tried });
    }
    if built.as_os_str().is_empty() {
        tried.push("nothing was built: the shim preloads only on Linux".to_owned());
        return Err(Missing { tried });
    }
    if built.is_file() {
        return Ok(built.to_path_buf());
    }
    tried.push(format!("{} (no such file)", built.display()));
    // `<target>/<profile>/build/clock-shim-<hash>/out/<library>`: the last four components are
    // the library's place under the profile directory, which a moved target directory keeps.
    let components: Vec<_> = built.components().collect();
    let under_profile: PathBuf = components[components.len().saturating_sub(4)..]
        .iter()
        .collect();
    // A test binary is `<profile>/deps/<test>`, a program `<profile>/<program>`.
    for profile_dir in current_exe
        .into_iter()
        .flat_map(Path::ancestors)
        .skip(1)
        .take(2)
    {
        let candidate = profile_dir.join(&under_profile);
        if candidate.is_file() {
            return Ok(candidate);
        }
        tried.push(format!("{} (no such file)", candidate.display()));
    }
    Err(Missing { tried })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_target_directory_is_searched_where_the_library_sits_under_it() {
        let moved = tempfile::tempdir().unwrap();
        let out = moved.path().join("debug/build/clock-shim-0123/out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("libhermes_clock_shim.so"), "").unwrap();
        let built =
            Path::new("/gone/target/debug/build/clock-shim-0123/out/libhermes_clock_shim.so");
        let test_binary = moved.path().join("debug/deps/gateway_tests-89ab");
        assert_eq!(
            find(None, built, Some(&test_binary)),
            Ok(out.join("libhermes_clock_shim.so"))
        );
        let program = moved.path().join("debug/conformance");
        assert_eq!(
            find(None, built, Some(&program)),
            Ok(out.join("libhermes_clock_shim.so"))
        );
    }

    #[test]
    fn a_missing_library_names_every_place_looked_at() {
        let built =
            Path::new("/gone/target/debug/build/clock-shim-0123/out/libhermes_clock_shim.so");
        let missing = find(None, built, Some(Path::new("/elsewhere/debug/deps/t"))).unwrap_err();
        let text = missing.to_string();
        assert!(text.contains("/gone/target/debug/build"), "{text}");
        assert!(
            text.contains("/elsewhere/debug/build/clock-shim-0123/out/libhermes_clock_shim.so"),
            "{text}"
        );
        let explicit = find(Some("/nope.so".into()), built, None).unwrap_err();
        assert!(explicit.to_string().contains("HERMES_CLOCK_SHIM=/nope.so"));
    }

    #[test]
    fn the_library_this_build_made_is_found() {
        let found = library().unwrap_or_else(|missing| panic!("{missing}"));
        assert!(
            found.ends_with("libhermes_clock_shim.so"),
            "{}",
            found.display()
        );
    }
}
