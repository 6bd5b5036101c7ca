//! `cargo conformance --no-run` end to end: the real binary lays out what a run left in a target
//! directory (the sample runs of `testdata/report/`), writes the files and exits by the verdicts.

use std::path::Path;
use std::process::Command;

fn target_dir_with_samples() -> tempfile::TempDir {
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/report");
    let dir = tempfile::tempdir().expect("scratch target dir");
    let copy = |from: &str, to: &str| {
        let to = dir.path().join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(samples.join(from), to).unwrap();
    };
    copy("reference-junit.xml", "nextest/ci/junit.xml");
    copy("reference.jsonl", "conformance/verdicts/reference.jsonl");
    copy("upstream-junit.xml", "nextest/external/junit.xml");
    copy("upstream.jsonl", "conformance/verdicts/upstream.jsonl");
    dir
}

fn conformance(target_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(args)
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", target_dir)
        .output()
        .expect("running conformance");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_run_that_held_exits_0_and_writes_its_files() {
    let dir = target_dir_with_samples();
    let (code, stdout, stderr) = conformance(dir.path(), &["--no-run"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("reference "))
        .unwrap_or_else(|| panic!("no summary line: {stdout}"));
    let counts: Vec<&str> = line.split_whitespace().take(6).collect();
    assert_eq!(counts, ["reference", "4", "0", "0", "0", "0"], "{stdout}");
    for file in ["report.md", "report.json", "reference.md", "reference.json"] {
        assert!(
            dir.path().join("conformance").join(file).is_file(),
            "{file}"
        );
    }
    let md = std::fs::read_to_string(dir.path().join("conformance/report.md")).unwrap();
    assert!(
        md.contains("bills for doomed card 3 (≤ 3) over 9 proven ticks, 4.0 s"),
        "{md}"
    );
    assert!(
        !stdout.contains("| suite |"),
        "the table is printed only with --table"
    );
    let (_, with_table, _) = conformance(dir.path(), &["--no-run", "--table"]);
    assert!(
        with_table.contains("| suite | scenario | bound | reference |"),
        "{with_table}"
    );
}

#[test]
fn a_fail_exits_1_and_the_news_is_in_the_summary() {
    let dir = target_dir_with_samples();
    let (code, stdout, stderr) = conformance(dir.path(), &["--target", "upstream", "--no-run"]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("fixed? (listed #118603)"), "{stdout}");
    assert!(stdout.contains("FAIL (no verdict)"), "{stdout}");
    assert!(dir.path().join("conformance/upstream.json").is_file());
}

#[test]
fn a_broken_verdict_file_is_an_error_naming_the_line() {
    let dir = target_dir_with_samples();
    let file = dir.path().join("conformance/verdicts/reference.jsonl");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("{\"half a record\n");
    std::fs::write(&file, text).unwrap();
    let (code, stdout, stderr) = conformance(dir.path(), &["--no-run"]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("line 7 is not a verdict record"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("conformance/report.md").exists(),
        "no report from half the verdicts"
    );
}

#[test]
fn a_gateway_given_by_command_is_laid_out_under_its_name() {
    let dir = target_dir_with_samples();
    let copy = |from: &str, to: &str| {
        std::fs::copy(dir.path().join(from), dir.path().join(to)).unwrap();
    };
    // What `--cmd … --name my-fork` leaves: its records and its JUnit report kept by name.
    copy(
        "conformance/verdicts/upstream.jsonl",
        "conformance/verdicts/my-fork.jsonl",
    );
    copy(
        "nextest/external/junit.xml",
        "conformance/my-fork-junit.xml",
    );
    let (code, stdout, stderr) = conformance(
        dir.path(),
        &[
            "--cmd",
            "python -m hermes_cli.main",
            "--name",
            "my-fork",
            "--gaps",
            "upstream-0.19.0",
            "--no-run",
        ],
    );
    assert_eq!(code, 1, "the samples hold a FAIL: {stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|line| line.starts_with("my-fork ")),
        "{stdout}"
    );
    assert!(dir.path().join("conformance/my-fork.md").is_file());
}

#[test]
fn targets_and_their_flags_are_checked_before_anything_runs() {
    let dir = tempfile::tempdir().expect("scratch target dir");
    for (args, says) in [
        (
            &["--target", "upstream-9.9", "--no-run"][..],
            "not `reference`, `all` or a shipped profile (upstream, upstream-iot)",
        ),
        (&["--cmd", "python -m x", "--no-run"][..], "--name"),
        (
            &["--cmd", "python -m x", "--name", "my fork", "--no-run"][..],
            "use letters, digits",
        ),
        (
            &["--cmd", "python 'x", "--name", "mine", "--no-run"][..],
            "cannot be split",
        ),
        (
            &["--target", "all", "--gaps", "none", "--no-run"][..],
            "--gaps selects the gap list of one external build",
        ),
        (
            &["--target", "all", "--upstream-from", "x==1", "--no-run"][..],
            "--upstream-from replaces the build of one profile",
        ),
        (
            &["--target", "all", "--profile", "upstream", "--no-run"][..],
            "--profile describes one external build",
        ),
        (
            &[
                "--target",
                "upstream",
                "--profile",
                "no-such-profile",
                "--no-run",
            ][..],
            "profile \"/",
        ),
        (
            &["--target", "reference", "--install-only"][..],
            "--install-only installs an upstream build",
        ),
    ] {
        let (code, stdout, stderr) = conformance(dir.path(), args);
        assert_eq!(code, 2, "{args:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn the_page_the_verdicts_junit_and_the_step_summary_are_written() {
    let dir = target_dir_with_samples();
    let step_summary = dir.path().join("step-summary.md");
    std::fs::write(&step_summary, "earlier step\n").unwrap();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(["--target", "all", "--no-run"])
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", dir.path())
        .env("GITHUB_STEP_SUMMARY", &step_summary)
        .output()
        .expect("running conformance");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the samples hold a FAIL: {stdout}"
    );
    let page = std::fs::read_to_string(dir.path().join("conformance/report.html")).unwrap();
    assert!(page.starts_with("<!doctype html>"), "{page}");
    assert!(page.contains("<table id=\"grid\">"), "{page}");
    let junit = std::fs::read_to_string(dir.path().join("conformance/verdicts-junit.xml")).unwrap();
    assert!(junit.contains("type=\"known gap\""), "{junit}");
    let summary = std::fs::read_to_string(&step_summary).unwrap();
    assert!(
        summary.starts_with("earlier step\n## Conformance"),
        "appended: {summary}"
    );
    assert!(
        summary.contains("| bound (tests) | reference | upstream |"),
        "{summary}"
    );
}

#[test]
fn write_gaps_drafts_one_external_targets_list_from_its_last_run() {
    let dir = target_dir_with_samples();
    let draft = dir.path().join("draft.yaml");
    let draft_arg = draft.to_str().unwrap();
    let (code, stdout, stderr) = conformance(
        dir.path(),
        &[
            "--target",
            "upstream",
            "--no-run",
            "--write-gaps",
            draft_arg,
        ],
    );
    assert_eq!(code, 1, "the samples hold a FAIL: {stdout}\n{stderr}");
    assert!(stdout.contains("gap list drafted: "), "{stdout}");
    let yaml = std::fs::read_to_string(&draft).unwrap();
    let list = fixtures::gaps::GapList::parse(&yaml, "draft").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        list.name(),
        "upstream-0.19.0",
        "the list in force, extended"
    );
    assert!(yaml.contains("reason: 'TODO"), "{yaml}");

    let (code, _, stderr) = conformance(dir.path(), &["--no-run", "--write-gaps", draft_arg]);
    assert_eq!(code, 2, "the reference has no gaps: {stderr}");
    assert!(
        stderr.contains("--write-gaps drafts the gap list of one external target"),
        "{stderr}"
    );
}
