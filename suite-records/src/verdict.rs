//! The verdict records: one JSON line per verdict a test reached, appended to
//! `<target dir>/conformance/verdicts/<target>.jsonl` by the fixtures and read by the tools
//! (`cargo conformance`'s report) and the explorer; and the test keys they and the gap lists are
//! keyed by.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::kind::GapKind;

/// How an observation is compared with its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmp {
    /// `observed <= limit`.
    AtMost,
    /// `observed >= limit`.
    AtLeast,
    /// `observed == limit`.
    Exactly,
}

impl Cmp {
    /// Whether `observed` keeps the bound.
    pub fn holds(self, observed: u64, limit: u64) -> bool {
        match self {
            Cmp::AtMost => observed <= limit,
            Cmp::AtLeast => observed >= limit,
            Cmp::Exactly => observed == limit,
        }
    }

    /// The comparison in words (`at most`).
    pub fn words(self) -> &'static str {
        match self {
            Cmp::AtMost => "at most",
            Cmp::AtLeast => "at least",
            Cmp::Exactly => "exactly",
        }
    }
}

/// What a verdict concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The bound held and nothing is listed.
    Pass,
    /// The bound held although the list names a gap for this verdict: fixed?
    Fixed,
    /// The bound failed as the list says it does.
    KnownGap,
    /// The bound failed, and a listing exists, but of another kind or message.
    Mismatch,
    /// The bound failed and nothing is listed.
    Fail,
}

impl Outcome {
    /// Whether the test fails on this outcome.
    pub fn fails_the_test(self) -> bool {
        matches!(self, Outcome::Mismatch | Outcome::Fail)
    }
}

/// The listing that matched a verdict, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedGap {
    /// The only kind it excuses.
    pub kind: GapKind,
    /// The pattern the message must match.
    pub pattern: String,
    /// The upstream issue, when there is one.
    pub issue: Option<u64>,
    /// Why the gap exists.
    pub reason: String,
}

/// One verdict record: one line of `<target dir>/conformance/verdicts/<target>.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The target's name (`HERMES_TARGET`).
    pub target: String,
    /// The gap list in force: its `list:` name, `none`, or the file path given.
    pub gap_list: String,
    /// The test key (see [`test_key_of`]).
    pub test: String,
    /// The promise: `B1`…`B9`, `cli`, `gateway`, `reply`, `switch`.
    pub bound: String,
    /// The verdict's own words, unique within its test.
    pub what: String,
    /// The count seen (booleans are 0/1).
    pub observed: u64,
    /// How it is compared.
    pub cmp: Cmp,
    /// The limit.
    pub limit: u64,
    /// The span the observation covers, when it is time-bound.
    pub window: Option<String>,
    /// What the verdict concluded.
    pub outcome: Outcome,
    /// The kind this verdict fails as.
    pub kind: GapKind,
    /// The failure message; `None` when the bound held.
    pub message: Option<String>,
    /// The listing that applied, if any.
    pub listed: Option<ListedGap>,
    /// Why the scenario was cut short, when it was.
    pub interrupted: Option<String>,
    /// The verdict's arrangement was not reached, so it concluded nothing (`FAIL (no verdict)`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_verdict: bool,
}

/// The test key (`fixtures::verdict::test_key`) of a test of `package` whose path is as nextest
/// (or libtest) names the test thread: every `case_<N>_<label>` segment written as `<label>`.
pub fn test_key_of(package: &str, test_path: &str) -> String {
    let path: Vec<&str> = test_path.split("::").map(segment_label).collect();
    format!("{package}::{}", path.join("::"))
}

/// The key of a test as nextest's JUnit report (or its status lines) names it: the package is
/// the classname (binary id) before its first `::` (`gateway-tests::it` → `gateway-tests`), and
/// the name maps as in [`test_key_of`].
pub fn test_key_of_junit(classname: &str, name: &str) -> String {
    test_key_of(package_of(classname), name)
}

/// The package a test key starts with (`gateway-tests::seed::…` → `gateway-tests`); the same for
/// a JUnit classname or nextest binary id (`gateway-tests::it` → `gateway-tests`).
pub fn package_of(key: &str) -> &str {
    key.split("::").next().unwrap_or(key)
}

/// Whether a test path, as nextest names it, ends in an rstest case, labelled (`case_2_http_500`)
/// or not (`case_2`).
pub fn ends_in_case(test_path: &str) -> bool {
    test_path
        .rsplit("::")
        .next()
        .is_some_and(|last| rstest_case(last).is_some())
}

/// `case_3_http_429` → `http_429`; `case_3` and everything else stay as they are.
fn segment_label(segment: &str) -> &str {
    match rstest_case(segment) {
        Some(Some(label)) => label,
        _ => segment,
    }
}

/// An rstest case segment: `case_3_http_429` → `Some(Some("http_429"))`, `case_3` →
/// `Some(None)`; any other segment → `None`.
pub fn rstest_case(segment: &str) -> Option<Option<&str>> {
    let rest = segment.strip_prefix("case_")?;
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    match &rest[digits..] {
        "" => Some(None),
        tail => match tail.strip_prefix('_') {
            Some(label) if !label.is_empty() => Some(Some(label)),
            _ => None,
        },
    }
}

/// `conformance/verdicts` under the given cargo target directory.
pub fn records_dir_in(target_dir: &Path) -> PathBuf {
    target_dir.join("conformance").join("verdicts")
}

/// `conformance/verdicts/<target>.jsonl` under the given cargo target directory: where the
/// verdicts of a target's run are appended.
pub fn records_file_in(target_dir: &Path, target: &str) -> PathBuf {
    records_file(&records_dir_in(target_dir), target)
}

/// `<target>.jsonl` in `records_dir`.
pub fn records_file(records_dir: &Path, target: &str) -> PathBuf {
    records_dir.join(format!("{target}.jsonl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_segments_become_their_labels() {
        assert_eq!(segment_label("case_1_http_429"), "http_429");
        assert_eq!(segment_label("case_12_a_b"), "a_b");
        assert_eq!(segment_label("case_3"), "case_3");
        assert_eq!(segment_label("case_"), "case_");
        assert_eq!(segment_label("case_x_y"), "case_x_y");
        assert_eq!(segment_label("showcase_1_x"), "showcase_1_x");
        assert_eq!(segment_label("case_3_"), "case_3_");
        assert_eq!(segment_label("case_3x_y"), "case_3x_y");
        assert_eq!(segment_label("case__label"), "case__label");
    }

    #[test]
    fn a_path_ends_in_a_case_labelled_or_not() {
        assert!(ends_in_case("seed::x::case_2_http_500"));
        assert!(ends_in_case("seed::x::case_2"));
        assert!(ends_in_case("case_1"));
        for path in [
            "seed::x",
            "seed::case_2::x",
            "x::case_",
            "x::case_3_",
            "x::cases_1_y",
        ] {
            assert!(!ends_in_case(path), "{path}");
        }
    }

    #[test]
    fn junit_names_map_to_the_same_keys() {
        assert_eq!(
            test_key_of_junit(
                "gateway-tests::it",
                "faults::failing_triage_card_is_not_rebilled_every_tick::case_1_http_429"
            ),
            "gateway-tests::faults::failing_triage_card_is_not_rebilled_every_tick::http_429"
        );
        assert_eq!(
            test_key_of_junit("fixtures", "verdict::tests::x"),
            "fixtures::verdict::tests::x"
        );
        assert_eq!(package_of("cli-tests::seed::huge"), "cli-tests");
        assert_eq!(package_of("fixtures"), "fixtures");
    }
}
