//! The verdict records as the report reads and shows them. The records are
//! [`fixtures::verdict::Record`]s, the type the tests write them with, in the file
//! [`fixtures::verdict::records_file_in`] names (interfaces §1); what is here is reading a whole
//! file, and the words a report cell shows for a record.

use std::path::Path;

use anyhow::Context as _;
use fixtures::verdict::{Cmp, ListedGap, Record};

/// How a report cell shows a record.
pub trait Shown {
    /// `bills for doomed card 14 (≤ 3) over 7 proven ticks, 8.2 s`.
    fn figure(&self) -> String;
    /// For a `mismatch`: what the list expected and what was seen.
    fn mismatch_text(&self) -> Option<String>;
}

impl Shown for Record {
    fn figure(&self) -> String {
        let mut text = format!(
            "{} {} ({} {})",
            self.what,
            self.observed,
            symbol(self.cmp),
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

    fn mismatch_text(&self) -> Option<String> {
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

/// `≤`, `≥` or `=`.
pub fn symbol(cmp: Cmp) -> &'static str {
    match cmp {
        Cmp::AtMost => "≤",
        Cmp::AtLeast => "≥",
        Cmp::Exactly => "=",
    }
}

/// `#118872`, or the reason when the gap has no upstream issue.
pub fn listed_label(listed: &ListedGap) -> String {
    match listed.issue {
        Some(issue) => format!("#{issue}"),
        None => short(&listed.reason, 40),
    }
}

/// Reads a verdict file; a missing file is no verdicts (the run reached none). A line that is
/// not a verdict is an error naming the file and line: a report must not quietly drop verdicts.
pub fn read(path: &Path) -> anyhow::Result<Vec<Record>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    parse(&text).with_context(|| format!("reading verdicts from {}", path.display()))
}

/// Parses verdict lines (blank lines are allowed).
///
/// Each line is read as strictly as `Record`'s own `Deserialize`: every field but the optional
/// ones is required, and a kind must be a `GapKind` of this build. The lines were written by this
/// build's tests with this same type, and a run clears its target's file before it starts, so a
/// line this type cannot read is not one of them: a torn or edited line, or one left by another
/// build (a `--no-run` over an old target dir). Laying it out anyway would show a verdict under a
/// kind no gap list of this build can name; refusing it names the file and line, and a rerun
/// writes records this build can read.
pub fn parse(text: &str) -> anyhow::Result<Vec<Record>> {
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
    use fixtures::gaps::{GapKind, GapList};
    use fixtures::verdict::{bound, records_dir_in, records_file_in, Judge, Outcome};

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
        assert_eq!(listed_label(v.listed.as_ref().unwrap()), "#118872");
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
    fn a_kind_this_build_does_not_know_is_refused() {
        let renamed = KNOWN_GAP.replace(
            r#""kind":"RebilledEveryTick","message""#,
            r#""kind":"RebilledForever","message""#,
        );
        assert_ne!(renamed, KNOWN_GAP);
        let error = format!(
            "{:#}",
            parse(&format!("{KNOWN_GAP}\n{renamed}")).unwrap_err()
        );
        assert!(error.contains("line 2"), "{error}");
        assert!(error.contains("RebilledForever"), "{error}");
    }

    #[test]
    fn what_a_judge_appends_reads_back_from_the_file_the_report_reads() {
        let target_dir = tempfile::tempdir().unwrap();
        let judge = Judge::new(
            "reference",
            GapList::none(),
            records_dir_in(target_dir.path()),
            "gateway-tests::seed::x::http_500",
        );
        let outcome = bound("bills for doomed card", 2u64)
            .at_most(3u64)
            .over("9 proven ticks, 3.9 s")
            .judged_by(&judge, GapKind::RebilledEveryTick);
        assert_eq!(outcome, Outcome::Pass);
        let records = read(&records_file_in(target_dir.path(), "reference")).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].test, "gateway-tests::seed::x::http_500");
        assert_eq!(
            records[0].figure(),
            "bills for doomed card 2 (≤ 3) over 9 proven ticks, 3.9 s"
        );
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

    #[test]
    fn comparisons_and_listings_read_as_the_report_shows_them() {
        assert_eq!(
            [Cmp::AtMost, Cmp::AtLeast, Cmp::Exactly].map(symbol),
            ["≤", "≥", "="]
        );
        let listed = ListedGap {
            kind: GapKind::WrongExitCode,
            pattern: "exit code".to_owned(),
            issue: None,
            reason: "usage errors exit 0".to_owned(),
        };
        assert_eq!(listed_label(&listed), "usage errors exit 0");
    }
}
