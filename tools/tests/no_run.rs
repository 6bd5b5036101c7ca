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
        stderr.contains("line 6 is not a verdict record"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("conformance/report.md").exists(),
        "no report from half the verdicts"
    );
}
