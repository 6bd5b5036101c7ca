//! nextest's status lines, read while a target runs, so a person sees which test finished and how
//! many are left instead of minutes of silence. nextest prints one line per finished test
//! (`PASS [   1.234s] (12/64) gateway-tests::it seed::…`) when its status level is `pass`; its
//! machine-readable output is still experimental, so the human lines are what is parsed, and a
//! line that does not parse is simply not progress.

use std::sync::OnceLock;

use fixtures::verdict::{ends_in_case, test_key_of_junit};
use regex::Regex;

/// One status line.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// `PASS`, `FAIL`, `SLOW`, `TIMEOUT`, `SIGSEGV`, `TRY 2 FAIL`, …
    pub word: String,
    /// The seconds nextest showed (for `SLOW`, how long it has been running so far).
    pub seconds: Option<f64>,
    /// `(12/64)`: tests finished so far and in all; absent on lines without a counter.
    pub done: Option<usize>,
    pub total: Option<usize>,
    /// The gate key (`gateway-tests::seed::…::http_500`).
    pub key: String,
    /// Whether nextest's name ended in an rstest case.
    pub has_case: bool,
}

impl Status {
    /// Whether this line ends a test (as opposed to `SLOW`, `START`, `RETRY`, …).
    pub fn finishes(&self) -> bool {
        self.done.is_some()
            && !matches!(self.word.as_str(), "SLOW" | "START" | "SKIP")
            && !self.word.starts_with("TRY")
    }

    /// Whether the test passed.
    pub fn passed(&self) -> bool {
        self.word == "PASS"
    }
}

/// Parses a status line; `None` for any other output.
pub fn parse(line: &str) -> Option<Status> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let re = LINE.get_or_init(|| {
        Regex::new(
            r"^\s*(?P<word>[A-Z][A-Z0-9]*(?: [0-9]+ [A-Z][A-Z-]*)?)\s+\[\s*>?\s*(?P<secs>[0-9.]+)?s?\s*\]\s+(?:\((?:\s*(?P<done>\d+)/(?P<total>\d+)\s*|[^)]*)\)\s+)?(?P<binary>\S+)\s+(?P<test>\S+)\s*$",
        )
        .expect("the status-line pattern is valid")
    });
    let caps = re.captures(line)?;
    let number = |name: &str| caps.name(name).and_then(|m| m.as_str().parse().ok());
    let binary = &caps["binary"];
    let test = &caps["test"];
    Some(Status {
        word: caps["word"].to_owned(),
        seconds: caps.name("secs").and_then(|m| m.as_str().parse().ok()),
        done: number("done"),
        total: number("total"),
        key: test_key_of_junit(binary, test),
        has_case: ends_in_case(test),
    })
}

/// `Starting 64 tests across 2 binaries` → 64.
pub fn starting_total(line: &str) -> Option<usize> {
    let rest = line.trim_start().strip_prefix("Starting ")?;
    rest.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_padded_to_the_total_s_width_still_counts() {
        // nextest pads the count once the total has three digits: `( 41/134)`.
        let status = parse(
            "        PASS [  21.269s] ( 41/134) cli-tests::it json_shape::sweep_prints_one_line",
        )
        .expect("a status line");
        assert_eq!((status.done, status.total), (Some(41), Some(134)));
        assert!(status.finishes());
    }

    #[test]
    fn finished_tests_give_key_count_and_status() {
        let status = parse(
            "        PASS [   8.213s] (12/64) gateway-tests::it seed::failing_triage_card_is_not_rebilled_every_tick::case_2_http_500",
        )
        .unwrap();
        assert_eq!(
            status,
            Status {
                word: "PASS".into(),
                seconds: Some(8.213),
                done: Some(12),
                total: Some(64),
                key:
                    "gateway-tests::seed::failing_triage_card_is_not_rebilled_every_tick::http_500"
                        .into(),
                has_case: true,
            }
        );
        assert!(status.finishes() && status.passed());
        let failed = parse("        FAIL [   1.000s] (13/64) cli-tests::it seed::huge").unwrap();
        assert!(failed.finishes() && !failed.passed());
        let timeout = parse("     TIMEOUT [ 360.002s] (14/64) cli-tests::it hang::x").unwrap();
        assert!(timeout.finishes() && !timeout.passed());
    }

    #[test]
    fn slow_and_retry_lines_do_not_count_as_finished() {
        let slow =
            parse("        SLOW [>  30.000s] (───) gateway-tests::it hang::hung_call").unwrap();
        assert_eq!(slow.word, "SLOW");
        assert_eq!(slow.seconds, Some(30.0));
        assert!(!slow.finishes());
        let retry = parse("  TRY 1 FAIL [   1.000s] (3/9) fixtures lib::x").unwrap();
        assert!(!retry.finishes());
    }

    #[test]
    fn other_output_is_not_progress() {
        for line in [
            "",
            "────────────",
            "   Compiling hermes v0.1.0 (/work/hermes)",
            "thread 'seed::x' panicked at src/lib.rs:3:5:",
            "     Summary [  19.312s] 64 tests run: 64 passed, 0 skipped",
        ] {
            assert_eq!(parse(line), None, "{line}");
        }
        assert_eq!(
            starting_total("    Starting 64 tests across 2 binaries (3 tests skipped)"),
            Some(64)
        );
        assert_eq!(starting_total("    Summary"), None);
    }
}
