//! The verdict records the suite writes: one JSON line per verdict a test reaches, in
//! `<cargo target dir>/conformance/verdicts/<target>.jsonl` (interfaces §1).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// `<target dir>/conformance/verdicts`.
pub fn dir_in(target_dir: &Path) -> PathBuf {
    target_dir.join("conformance").join("verdicts")
}

/// `<target dir>/conformance/verdicts/<target>.jsonl`.
pub fn file_in(target_dir: &Path, target: &str) -> PathBuf {
    dir_in(target_dir).join(format!("{target}.jsonl"))
}

/// How a verdict ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The bound held, nothing listed.
    Pass,
    /// The bound held although the gap list names a gap for it: fixed?
    Fixed,
    /// The bound failed as the gap list says it would.
    KnownGap,
    /// The bound failed, a listing exists, but the kind or pattern differ.
    Mismatch,
    /// The bound failed and nothing is listed.
    Fail,
}

impl Outcome {
    /// Whether the verdict fails its test.
    pub fn fails(self) -> bool {
        matches!(self, Outcome::Mismatch | Outcome::Fail)
    }
}

/// How `observed` is compared with `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmp {
    AtMost,
    AtLeast,
    Exactly,
}

impl Cmp {
    pub fn symbol(self) -> &'static str {
        match self {
            Cmp::AtMost => "≤",
            Cmp::AtLeast => "≥",
            Cmp::Exactly => "=",
        }
    }
}

/// The gap-list entry that matched a verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    pub kind: String,
    #[serde(default)]
    pub pattern: String,
    #[serde(default)]
    pub issue: Option<u64>,
    #[serde(default)]
    pub reason: String,
}

impl Listed {
    /// `#118872`, or the reason when the gap has no upstream issue.
    pub fn label(&self) -> String {
        match self.issue {
            Some(issue) => format!("#{issue}"),
            None => short(&self.reason, 40),
        }
    }
}

/// One verdict line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub target: String,
    #[serde(default)]
    pub gap_list: String,
    pub test: String,
    /// Which promise: `B1`…`B9`, `cli`, `gateway`, `reply` or `switch`.
    pub bound: String,
    pub what: String,
    pub observed: u64,
    pub cmp: Cmp,
    pub limit: u64,
    #[serde(default)]
    pub window: Option<String>,
    pub outcome: Outcome,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub listed: Option<Listed>,
    #[serde(default)]
    pub interrupted: Option<String>,
}

impl Verdict {
    /// `bills for doomed card 14 (≤ 3) over 7 proven ticks, 8.2 s`.
    pub fn figure(&self) -> String {
        let mut text = format!(
            "{} {} ({} {})",
            self.what,
            self.observed,
            self.cmp.symbol(),
            self.limit
        );
        if let Some(window) = self.window.as_deref().filter(|w| !w.is_empty()) {
            text.push_str(" over ");
            text.push_str(window);
        }
        if let Some(why) = self.interrupted.as_deref().filter(|w| !w.is_empty()) {
            text.push_str(&format!(" (cut short: {why})"));
        }
        text
    }

    /// For a `mismatch`: what the list expected and what was seen.
    pub fn mismatch_text(&self) -> Option<String> {
        let listed = self.listed.as_ref()?;
        let issue = listed.issue.map(|i| format!(" #{i}")).unwrap_or_default();
        Some(format!(
            "listed {}{issue} /{}/, seen {}: {}",
            listed.kind,
            listed.pattern,
            self.kind,
            self.message.as_deref().unwrap_or("(no message)")
        ))
    }
}

/// Reads a verdict file; a missing file is no verdicts (the run reached none). A line that is
/// not a verdict is an error naming the file and line: a report must not quietly drop verdicts.
pub fn read(path: &Path) -> anyhow::Result<Vec<Verdict>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    parse(&text).with_context(|| format!("reading verdicts from {}", path.display()))
}

/// Parses verdict lines (blank lines are allowed).
pub fn parse(text: &str) -> anyhow::Result<Vec<Verdict>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).with_context(|| {
                format!(
                    "line {} is not a verdict record: {}",
                    index + 1,
                    short(line, 120)
                )
            })
        })
        .collect()
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub fn short(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN_GAP: &str = r#"{"target":"upstream","gap_list":"upstream-0.19.0","test":"gateway-tests::seed::failing_triage_card_is_not_rebilled_every_tick::malformed","bound":"B1","what":"bills for doomed card","observed":14,"cmp":"at_most","limit":3,"window":"7 proven ticks, 8.2 s","outcome":"known_gap","kind":"RebilledEveryTick","message":"doomed card billed 14 aux decompose calls","listed":{"kind":"RebilledEveryTick","pattern":"doomed card billed \\d+","issue":118872,"reason":"re-billed every tick"},"interrupted":null}"#;

    #[test]
    fn a_record_in_the_shared_format_reads() {
        let verdicts = parse(&format!("{KNOWN_GAP}\n\n")).unwrap();
        assert_eq!(verdicts.len(), 1);
        let v = &verdicts[0];
        assert_eq!(v.outcome, Outcome::KnownGap);
        assert_eq!(
            v.figure(),
            "bills for doomed card 14 (≤ 3) over 7 proven ticks, 8.2 s"
        );
        assert_eq!(v.listed.as_ref().unwrap().label(), "#118872");
    }

    #[test]
    fn a_bad_line_names_its_number() {
        let text = format!("{KNOWN_GAP}\n{{\"target\":\"x\"}}\n");
        let error = format!("{:#}", parse(&text).unwrap_err());
        assert!(error.contains("line 2"), "{error}");
        let unknown = KNOWN_GAP.replace("known_gap", "maybe");
        assert!(parse(&unknown).is_err());
    }

    #[test]
    fn a_missing_file_is_no_verdicts() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(&dir.path().join("none.jsonl")).unwrap().is_empty());
    }

    #[test]
    fn short_cuts_at_the_limit_and_not_before() {
        assert_eq!(short("abcde", 5), "abcde");
        assert_eq!(short("abcdef", 5), "abcd…");
    }
}
