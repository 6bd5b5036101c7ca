//! nextest's JUnit report (`<profile>.junit.path`), read with `quick-junit`, the crate nextest
//! writes it with: which tests ran, and how each ended.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use quick_junit::{Report, TestCaseStatus};

use fixtures::verdict::{ends_in_case, test_key_of_junit};

/// One `<testcase>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The gate key (`gateway-tests::seed::…::http_500`), as the verdict records name it.
    pub key: String,
    /// The test's path inside its binary, as nextest names it (`seed::…::case_2_http_500`).
    pub name: String,
    /// Whether the path ends in an rstest case.
    pub has_case: bool,
    pub passed: bool,
    /// The first line of the failure message, when it failed.
    pub failure: Option<String>,
    pub time: Option<Duration>,
}

/// Reads a nextest JUnit file.
pub fn read(path: &Path) -> anyhow::Result<Vec<Case>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("reading the JUnit report {}", path.display()))
}

/// Parses a JUnit document. A skipped case did not run, so it is left out: it is `n/a`.
pub fn parse(text: &str) -> anyhow::Result<Vec<Case>> {
    let report = Report::deserialize_from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut cases = Vec::new();
    for suite in report.test_suites {
        for case in suite.test_cases {
            let classname = case
                .classname
                .as_ref()
                .map_or(suite.name.as_str(), |c| c.as_str())
                .to_owned();
            let name = case.name.as_str().to_owned();
            let (passed, failure) = match &case.status {
                TestCaseStatus::Success { .. } => (true, None),
                TestCaseStatus::Skipped { .. } => continue,
                TestCaseStatus::NonSuccess {
                    message,
                    description,
                    ..
                } => {
                    // nextest's `message` is often only "thread 'x' panicked at file:line";
                    // the panic's own words are in the captured output that follows it.
                    let from_output = description.as_ref().and_then(|d| panic_line(d.as_str()));
                    let text = from_output
                        .or_else(|| message.as_ref().map(|m| m.as_str().to_owned()))
                        .unwrap_or_else(|| "failed".to_owned());
                    (false, Some(first_line(&text)))
                }
            };
            cases.push(Case {
                key: test_key_of_junit(&classname, &name),
                has_case: ends_in_case(&name),
                name,
                passed,
                failure,
                time: case.time,
            });
        }
    }
    Ok(cases)
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("failed")
        .to_owned()
}

/// The panic's own line from a test's captured output, when there is one.
fn panic_line(output: &str) -> Option<String> {
    let mut lines = output.lines();
    while let Some(line) = lines.next() {
        if line.contains("panicked at") {
            return lines
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_failures_errors_and_skips_are_told_apart() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="5" failures="1" errors="1" skipped="1" uuid="2c8b2ab0-6e8c-4ebe-9ac5-ff4ff5e04c52" timestamp="2026-11-30T10:00:00.000+00:00" time="3.2">
  <testsuite name="gateway-tests::it" tests="5" disabled="0" errors="1" failures="1" skipped="1">
    <testcase name="seed::green" classname="gateway-tests::it" timestamp="2026-11-30T10:00:00.000+00:00" time="1.5"><system-out>x</system-out></testcase>
    <testcase name="seed::red::case_2_http_500" classname="gateway-tests::it" timestamp="2026-11-30T10:00:00.000+00:00" time="1.0"><failure message="test failure: bills 7 &gt; 3" type="test failure">long</failure></testcase>
    <testcase name="seed::crashed" classname="gateway-tests::it" timestamp="2026-11-30T10:00:00.000+00:00" time="1.0"><error type="test abort">
thread 'seed::crashed' panicked at src/x.rs:1:2:
the board is unreadable
</error></testcase>
    <testcase name="seed::located" classname="gateway-tests::it" time="1.0"><failure message="thread &apos;seed::located&apos; panicked at fixtures/src/gaps.rs:378:9" type="test failure">
running 1 test
thread &apos;seed::located&apos; panicked at fixtures/src/gaps.rs:378:9:
sweep exited 0, not 1

note: run with `RUST_BACKTRACE=1`</failure></testcase>
    <testcase name="seed::skipped" classname="gateway-tests::it" time="0"><skipped/></testcase>
    <testcase name="seed::empty" classname="gateway-tests::it" time="0.1"/>
  </testsuite>
</testsuites>"#;
        let cases = parse(xml).unwrap();
        let seen: Vec<(&str, bool)> = cases.iter().map(|c| (c.key.as_str(), c.passed)).collect();
        assert_eq!(
            seen,
            [
                ("gateway-tests::seed::green", true),
                ("gateway-tests::seed::red::http_500", false),
                ("gateway-tests::seed::crashed", false),
                ("gateway-tests::seed::located", false),
                ("gateway-tests::seed::empty", true)
            ]
        );
        assert_eq!(
            cases[1].failure.as_deref(),
            Some("test failure: bills 7 > 3")
        );
        assert!(cases[1].has_case);
        assert_eq!(cases[2].failure.as_deref(), Some("the board is unreadable"));
        assert_eq!(
            cases[3].failure.as_deref(),
            Some("sweep exited 0, not 1"),
            "the panic's words, not only where it happened"
        );
        assert_eq!(cases[0].time, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn a_broken_report_is_an_error_not_an_empty_run() {
        assert!(parse("<testsuites><testsuite name=\"x\"").is_err());
        assert!(parse("not xml at all").is_err());
    }

    /// nextest writes its reports with this crate; what it writes must read back unchanged.
    #[test]
    fn what_quick_junit_writes_reads_back() {
        let mut report = Report::new("nextest-run");
        let mut suite = quick_junit::TestSuite::new("cli-tests::it");
        let mut ok = quick_junit::TestCase::new("seed::a::case_1_big", TestCaseStatus::success());
        ok.set_classname("cli-tests::it");
        let mut bad = quick_junit::TestCase::new(
            "seed::b",
            TestCaseStatus::non_success(quick_junit::NonSuccessKind::Failure),
        );
        bad.set_classname("cli-tests::it");
        bad.status.set_message("bills 2 (≤ 1) <&>");
        suite.add_test_cases([ok, bad]);
        report.add_test_suite(suite);
        let xml = report.to_string().unwrap();
        let cases = parse(&xml).unwrap();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].key, "cli-tests::seed::a::big");
        assert_eq!(cases[1].failure.as_deref(), Some("bills 2 (≤ 1) <&>"));
    }
}
