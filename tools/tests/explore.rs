//! `cargo conformance --explore` end to end: the real binary explores a seed on the reference
//! (this package's own `hermes-tools`, given as `HERMES_BIN` so no nested build runs), replays a
//! schedule file once, and refuses a file that is not a schedule before running anything.

use std::path::Path;
use std::process::Command;

fn conformance(target_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(args)
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", target_dir)
        .env("HERMES_BIN", env!("CARGO_BIN_EXE_hermes-tools"))
        .output()
        .expect("running conformance");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_seed_explores_its_schedules_through_the_reference() {
    let dir = tempfile::tempdir().expect("scratch target dir");
    let (code, stdout, stderr) = conformance(
        dir.path(),
        &["--explore", "--seed", "11", "--schedules", "2"],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("explored 2 schedules on `reference`") && stdout.contains("nothing found"),
        "{stdout}"
    );
    for index in 0..2 {
        assert!(
            stderr.contains(&format!("schedule {index} (")),
            "schedule {index} not shown: {stderr}"
        );
    }
    assert!(stderr.contains("seed(s) 11"), "{stderr}");
    assert!(
        stderr.matches(" ok in ").count() == 2,
        "two schedules ran through real processes: {stderr}"
    );
}

#[test]
fn a_schedule_file_is_replayed_once_and_judged() {
    let dir = tempfile::tempdir().expect("scratch target dir");
    let file = dir.path().join("by-hand.json");
    std::fs::write(
        &file,
        r#"{"config": {"max_attempts": 1, "backoff_seconds": 0},
            "cards": [{"kind": "triage", "replies": [{"reply": "malformed"}]},
                      {"kind": "triage", "replies": [{"reply": "ok"}]}],
            "steps": [{"step": "start", "gateway": "first"},
                      {"step": "let_ticks_pass", "ticks": 3},
                      {"step": "sweep"}]}"#,
    )
    .expect("schedule written");
    let path = file.to_string_lossy().into_owned();
    let (code, stdout, stderr) = conformance(dir.path(), &["--explore", "--replay", &path]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains(" 3. kanban decompose --all"), "{stdout}");
    assert!(
        stdout.contains("on `reference`: nothing found"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("decompose calls"),
        "the run is described: {stdout}"
    );
}

#[test]
fn a_replay_file_that_is_no_schedule_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("scratch target dir");
    let file = dir.path().join("broken.json");
    std::fs::write(
        &file,
        r#"{"cards": [{"kind": "triage", "replies": [{"reply": "ok"}]}],
            "steps": [{"step": "unpark", "card": 3}]}"#,
    )
    .expect("file written");
    let path = file.to_string_lossy().into_owned();
    let (code, stdout, stderr) = conformance(dir.path(), &["--explore", "--replay", &path]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("broken.json") && stderr.contains("names card #3"),
        "{stderr}"
    );
    assert!(!stderr.contains("replaying"), "nothing ran: {stderr}");
    assert!(
        !stderr.contains("panicked"),
        "a bad file is an error, not a panic: {stderr}"
    );
}

#[test]
fn explorer_flags_need_explore() {
    let dir = tempfile::tempdir().expect("scratch target dir");
    let (code, _, stderr) = conformance(dir.path(), &["--seed", "3"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--explore"), "{stderr}");
}
