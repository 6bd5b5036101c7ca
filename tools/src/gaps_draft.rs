//! `cargo conformance --write-gaps FILE`: a gap list drafted from one target's run, for a
//! maintainer to review (compare `cargo insta accept`).
//!
//! The draft is the list in force, every listing kept as it was, plus one entry per verdict that
//! failed and can be listed: its test key, its verdict's words (`bound`), the kind it failed as,
//! a pattern made from its message, and `reason: TODO`. A listing that fired differently
//! (a mismatch) is rewritten in place to what was seen, its old reason kept beside the TODO; a
//! glob listing is left as it is and the test gets a listing of its own, which wins over the
//! glob there and so also takes the glob's pattern as an alternative; so does a test whose
//! listing names no `bound`. What no listing can excuse (`FAIL (no verdict)`, a kind that is never a gap, a test
//! that failed outside its verdicts) is named in comments at the end.
//!
//! A pattern is the message's statement and first note (up to its second `; `), escaped, with
//! its numbers made general where they vary from run to run: a card id `t_…` becomes
//! `t_[0-9a-f]+`, a decimal `[0-9.]+`, and a whole number `\d+`, except the verdict's own limit,
//! a number glued to letters (`B5`), an HTTP status and an exit code or signal (`Some(15)`),
//! which stay as they are. The draft is checked before it is written: parsed as the suite parses
//! a list, every drafted failure must be a known gap under it.

use std::fmt::Write as _;

use anyhow::{bail, Context as _};
use fixtures::gaps::{GapKind, GapList};
use fixtures::verdict::Record;
use regex::Regex;

use crate::report::Report;

/// One entry of the draft, in the file's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    test: String,
    bound: Option<String>,
    kind: GapKind,
    pattern: String,
    issue: Option<u64>,
    reason: String,
}

/// A verdict's words as a listing names them: a later board's `… (board 2)` is the first's.
pub fn listed_words(what: &str) -> &str {
    match what.rsplit_once(" (board ") {
        Some((words, board))
            if board
                .strip_suffix(')')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            words
        }
        _ => what,
    }
}

/// The pattern drafted from a failure `message` whose verdict's limit is `limit`.
pub fn pattern_of(message: &str, limit: u64) -> String {
    // The verdict's statement (`what: observed, expected … over window`) and its first note,
    // which most often says how it failed; later notes vary more from run to run.
    let first_line = message.lines().next().unwrap_or("").trim();
    let statement = first_line
        .splitn(3, "; ")
        .take(2)
        .collect::<Vec<_>>()
        .join("; ");
    let mut text: String = statement.chars().take(240).collect();
    if text.len() < statement.len() {
        // Cut at a word's end: the pattern is searched for, so a prefix still matches.
        if let Some(space) = text.rfind(' ') {
            text.truncate(space);
        }
    }
    let token = Regex::new(r"t_[0-9a-f]{6,}|\d+(?:\.\d+)+|\d+").expect("a valid regex");
    let mut pattern = String::new();
    let mut last = 0;
    for found in token.find_iter(&text) {
        let before = &text[last..found.start()];
        pattern.push_str(&regex::escape(before));
        let glued = before.chars().last().is_some_and(char::is_alphabetic)
            || text[found.end()..]
                .chars()
                .next()
                .is_some_and(char::is_alphabetic);
        let token = found.as_str();
        let general = if token.starts_with("t_") {
            r"t_[0-9a-f]+".to_owned()
        } else if token.contains('.') {
            "[0-9.]+".to_owned()
        } else if glued
            || before.ends_with("HTTP ")
            || before.ends_with("Some(")
            || token.parse::<u64>().ok() == Some(limit)
        {
            regex::escape(token)
        } else {
            r"\d+".to_owned()
        };
        pattern.push_str(&general);
        last = found.end();
    }
    pattern.push_str(&regex::escape(&text[last..]));
    pattern
}

/// The draft for target `target` (its index in `report`) under `list`, the list in force, as
/// YAML; checked to excuse every failure it drafts.
///
/// # Errors
/// When the draft would not excuse a failure it drafts (a bug here, said rather than written).
pub fn draft(
    report: &Report,
    target: usize,
    list: &GapList,
    header: &str,
) -> anyhow::Result<String> {
    let run = &report.runs[target];
    let mut entries: Vec<Entry> = list
        .listings()
        .iter()
        .map(|listing| Entry {
            test: listing.test.clone(),
            bound: listing.bound.clone(),
            kind: listing.kind,
            pattern: listing.pattern_text.clone(),
            issue: listing.issue,
            reason: listing.reason.clone(),
        })
        .collect();
    let kept = entries.len();
    let mut unlistable: Vec<String> = Vec::new();
    let mut drafted: Vec<&Record> = Vec::new();
    for row in &report.rows {
        let cell = &row.cells[target];
        let failing: Vec<&Record> = cell
            .verdicts
            .iter()
            .filter(|v| v.outcome.fails_the_test())
            .collect();
        if failing.is_empty() {
            if cell.mark.fails() {
                unlistable.push(format!("{}: {}", row.key, cell.text()));
            }
            continue;
        }
        for verdict in failing {
            match why_unlistable(verdict) {
                Some(why) => unlistable.push(format!("{}: {why}", row.key)),
                None => {
                    add(&mut entries, verdict);
                    drafted.push(verdict);
                }
            }
        }
    }
    let name = if list.name() == fixtures::gaps::NONE {
        format!("{}-draft", run.name)
    } else {
        list.name().to_owned()
    };
    let yaml = render(header, &name, &run.describes, &entries, kept, &unlistable);
    check(&yaml, &drafted).context("the drafted list does not excuse what it drafts")?;
    Ok(yaml)
}

fn why_unlistable(verdict: &Record) -> Option<String> {
    if verdict.no_verdict {
        return Some(format!(
            "FAIL (no verdict), never a known gap: {}",
            verdict.message.as_deref().unwrap_or("(no message)")
        ));
    }
    if !verdict.kind.listable() {
        return Some(format!("{} is never a known gap", verdict.kind));
    }
    verdict
        .message
        .is_none()
        .then(|| format!("{:?} failed without a message", verdict.what))
}

/// Adds `verdict`'s listing: rewriting the test's own listing of those words in place, or
/// appending a new one (beside any glob).
fn add(entries: &mut Vec<Entry>, verdict: &Record) {
    let words = listed_words(&verdict.what);
    let message = verdict.message.as_deref().unwrap_or_default();
    let pattern = pattern_of(message, verdict.limit);
    // A listing of the whole test (no `bound`) may excuse its other verdicts: it stays, and
    // one naming these words, which wins over it, is added.
    let own = entries
        .iter_mut()
        .find(|entry| entry.test == verdict.test && entry.bound.as_deref() == Some(words));
    match own {
        Some(entry) if entry.kind == verdict.kind && entry.reason.starts_with("TODO") => {
            // A second failure of the same words (a later board): either message matches.
            if !Regex::new(&entry.pattern).is_ok_and(|p| p.is_match(message)) {
                entry.pattern = format!("(?:{})|(?:{pattern})", entry.pattern);
            }
        }
        Some(entry) => {
            entry.reason = format!("TODO (was: {})", entry.reason);
            entry.kind = verdict.kind;
            entry.pattern = pattern;
            entry.issue = None;
        }
        None => {
            // A glob listing (or one for the whole test) that this failure mismatched goes on
            // excusing what it excused in this test: the new listing, which wins over it here,
            // takes its pattern as an alternative when it is of the same kind.
            let pattern = match &verdict.listed {
                Some(listed) if listed.kind == verdict.kind => {
                    format!("(?:{})|(?:{pattern})", listed.pattern)
                }
                _ => pattern,
            };
            entries.push(Entry {
                test: verdict.test.clone(),
                bound: Some(words.to_owned()),
                kind: verdict.kind,
                pattern,
                issue: None,
                reason: "TODO".to_owned(),
            });
        }
    }
}

/// A YAML scalar in single quotes (a quote doubled), which takes any text as it is.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn render(
    header: &str,
    name: &str,
    describes: &str,
    entries: &[Entry],
    kept: usize,
    unlistable: &[String],
) -> String {
    let mut out = String::new();
    for line in header.lines() {
        let _ = writeln!(out, "# {line}");
    }
    let _ = writeln!(out, "list: {}", quoted(name));
    let _ = writeln!(out, "describes: {}", quoted(describes));
    out.push_str("gaps:\n");
    for (index, entry) in entries.iter().enumerate() {
        if index == 0 && kept > 0 {
            out.push_str("  # --- the list in force (a rewritten entry's reason says TODO) ---\n");
        }
        if index == kept {
            out.push_str("  # --- drafted from this run's failures: review each ---\n");
        }
        let _ = writeln!(out, "  - test: {}", quoted(&entry.test));
        if let Some(bound) = &entry.bound {
            let _ = writeln!(out, "    bound: {}", quoted(bound));
        }
        let _ = writeln!(out, "    kind: {}", entry.kind);
        let _ = writeln!(out, "    pattern: {}", quoted(&entry.pattern));
        if let Some(issue) = entry.issue {
            let _ = writeln!(out, "    issue: {issue}");
        }
        let _ = writeln!(out, "    reason: {}", quoted(&entry.reason));
    }
    if entries.is_empty() {
        out.push_str("  []\n");
    }
    if !unlistable.is_empty() {
        out.push_str("\n# Failures no listing can excuse (fix the cause, or the test):\n");
        for line in unlistable {
            let _ = writeln!(out, "#   {}", line.replace('\n', " "));
        }
    }
    out
}

/// Parses `yaml` as the suite does and judges each drafted failure by it, as a test would.
fn check(yaml: &str, drafted: &[&Record]) -> anyhow::Result<()> {
    let list = GapList::parse(yaml, "the draft")?;
    for verdict in drafted {
        let message = verdict.message.as_deref().unwrap_or_default();
        match list.listing_for(&verdict.test, &verdict.what) {
            Some(listing) if listing.kind == verdict.kind && listing.pattern.is_match(message) => {}
            Some(listing) => bail!(
                "{} {:?} ({}: {message}) meets {listing}",
                verdict.test,
                verdict.what,
                verdict.kind
            ),
            None => bail!("{} {:?} meets no listing", verdict.test, verdict.what),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_that_vary_are_made_general_and_the_rest_kept() {
        assert_eq!(
            pattern_of(
                "doomed card billed 14 aux decompose calls over 7 proven ticks (bound 3)",
                3
            ),
            r"doomed card billed \d+ aux decompose calls over \d+ proven ticks \(bound 3\)"
        );
        assert_eq!(
            pattern_of("card t_1a2b3c4d: paid call at +4.25s during the 900 s pause of the HTTP 401 answered", 0),
            r"card t_[0-9a-f]+: paid call at \+[0-9.]+s during the \d+ s pause of the HTTP 401 answered"
        );
        assert_eq!(
            pattern_of("B5 broke, v2 said so", 9),
            r"B5 broke, v2 said so"
        );
        assert_eq!(pattern_of("first line (x)\nsecond", 0), r"first line \(x\)");
        assert_eq!(
            pattern_of("bills: 4, expected at most 3; a note of 2; another of 5", 3),
            r"bills: \d+, expected at most 3; a note of \d+"
        );
        assert_eq!(
            pattern_of(
                "stops: 0; it ended with exit code None, signal Some(15) after SIGTERM",
                1
            ),
            r"stops: \d+; it ended with exit code None, signal Some\(15\) after SIGTERM"
        );
        let pattern = Regex::new(&pattern_of("500 child rows [of 64]? *yes*", 64)).unwrap();
        assert!(pattern.is_match("612 child rows [of 64]? *yes* and more"));
        assert!(!pattern.is_match("612 child rows [of 65]? *yes*"));
    }

    #[test]
    fn a_later_boards_words_are_the_first_boards() {
        assert_eq!(
            listed_words("bills for doomed card (board 2)"),
            "bills for doomed card"
        );
        assert_eq!(listed_words("bills (board x)"), "bills (board x)");
        assert_eq!(listed_words("bills"), "bills");
    }

    #[test]
    fn yaml_scalars_take_any_text() {
        assert_eq!(quoted(r"it's \d+ #1: x"), r"'it''s \d+ #1: x'");
    }
}
