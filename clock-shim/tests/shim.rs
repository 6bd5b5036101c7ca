//! The shim preloaded into real processes: a dynamically linked Rust program (the probe, reading
//! every clock through the C library as std does) and a C one (`date`). Only the wall clock
//! moves, by the file's offset, and a rewrite of the file moves a running process's clock.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use clock_shim::{library, OFFSET_FILE_VARIABLE};

const DAY: f64 = 86_400.0;
/// Room for the machine's load between two readings of the same clock.
const SLACK: f64 = 30.0;

/// The probe binary (`src/bin/probe.rs`), where nextest or cargo says it is.
fn probe() -> PathBuf {
    for variable in [
        "NEXTEST_BIN_EXE_clock-shim-probe",
        "CARGO_BIN_EXE_clock-shim-probe",
    ] {
        if let Some(path) = std::env::var_os(variable).map(PathBuf::from) {
            if path.is_file() {
                return path;
            }
        }
    }
    PathBuf::from(env!("CARGO_BIN_EXE_clock-shim-probe"))
}

fn set_offset(file: &Path, seconds: i64) {
    let staging = file.with_extension("writing");
    std::fs::write(&staging, format!("{seconds:+}\n")).unwrap();
    std::fs::rename(&staging, file).unwrap();
}

fn shim_env(file: &Path) -> [(OsString, OsString); 2] {
    let library = library().unwrap_or_else(|missing| panic!("{missing}"));
    [
        ("LD_PRELOAD".into(), library.into_os_string()),
        (OFFSET_FILE_VARIABLE.into(), file.as_os_str().to_owned()),
    ]
}

/// A running probe and its answers.
struct Probe {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Probe {
    fn start(env: &[(OsString, OsString)]) -> Probe {
        let mut child = Command::new(probe())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Probe { child, out }
    }

    /// One reading of every clock, by name, in seconds.
    fn read(&mut self) -> BTreeMap<String, f64> {
        let mut clocks = BTreeMap::new();
        loop {
            let mut line = String::new();
            assert_ne!(
                self.out.read_line(&mut line).unwrap(),
                0,
                "the probe ended early"
            );
            let line = line.trim();
            if line == "end" {
                return clocks;
            }
            let (name, value) = line.split_once(' ').unwrap();
            let seconds: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("{name} could not be read: {value}"));
            clocks.insert(name.to_owned(), seconds);
        }
    }

    fn read_again(&mut self) -> BTreeMap<String, f64> {
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
        self.read()
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

const WALL_CLOCKS: [&str; 5] = [
    "system_time",
    "realtime",
    "realtime_coarse",
    "gettimeofday",
    "time",
];
const TRUE_CLOCKS: [&str; 3] = ["monotonic", "monotonic_raw", "boottime"];

/// Asserts each clock of `shimmed` reads `expected_shift` seconds from `plain` (within
/// [`SLACK`]): the wall clocks by `wall_shift`, the others by nothing.
fn assert_shifted(plain: &BTreeMap<String, f64>, shimmed: &BTreeMap<String, f64>, wall_shift: f64) {
    for (names, shift) in [(&WALL_CLOCKS[..], wall_shift), (&TRUE_CLOCKS[..], 0.0)] {
        for name in names {
            let moved = shimmed[*name] - plain[*name];
            assert!(
                (moved - shift).abs() < SLACK,
                "{name} moved {moved:.1} s, not {shift} s (plain {plain:?}, shimmed {shimmed:?})"
            );
        }
    }
}

#[test]
fn a_rust_program_sees_only_its_wall_clock_moved() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("offset");
    set_offset(&file, 86_400);
    let mut plain = Probe::start(&[]);
    let mut shimmed = Probe::start(&shim_env(&file));
    assert_shifted(&plain.read(), &shimmed.read(), DAY);
    plain.stop();
    shimmed.stop();
}

#[test]
fn rewriting_the_file_moves_a_running_process_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("offset");
    set_offset(&file, 0);
    let mut plain = Probe::start(&[]);
    let mut shimmed = Probe::start(&shim_env(&file));
    assert_shifted(&plain.read(), &shimmed.read(), 0.0);
    set_offset(&file, 2 * 3600 + 60);
    assert_shifted(&plain.read_again(), &shimmed.read_again(), 7260.0);
    set_offset(&file, -DAY as i64);
    assert_shifted(&plain.read_again(), &shimmed.read_again(), -DAY);
    plain.stop();
    shimmed.stop();
}

#[test]
fn a_missing_offset_file_leaves_the_clock_true() {
    let dir = tempfile::tempdir().unwrap();
    let mut plain = Probe::start(&[]);
    let mut shimmed = Probe::start(&shim_env(&dir.path().join("never-written")));
    assert_shifted(&plain.read(), &shimmed.read(), 0.0);
    plain.stop();
    shimmed.stop();
}

#[test]
fn a_c_program_sees_its_wall_clock_moved() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("offset");
    set_offset(&file, 86_400);
    let epoch = |env: &[(OsString, OsString)]| -> f64 {
        let out = Command::new("date")
            .arg("+%s")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let plain = epoch(&[]);
    let shimmed = epoch(&shim_env(&file));
    assert!(
        (shimmed - plain - DAY).abs() < SLACK,
        "date read {plain} plain, {shimmed} shimmed"
    );
}
