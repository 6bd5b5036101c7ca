//! The runs laid out for people: a short terminal summary per target, one Markdown table (a row
//! per test, a column per target) and the same as JSON for tools.
//!
//! Verdicts come from the tests (their records and nextest's JUnit report); this module only
//! reads them. A cell is `pass`, `known gap #N`, `fixed?` (a listed gap that did not fire: news),
//! `FAIL` or `n/a` (not run on that target), with the counts and bounds its verdicts recorded.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fixtures::verdict::{Outcome, Record};
use serde_json::{json, Value};

pub mod grid;

use crate::junit::Case;
use crate::verdicts::{self, listed_label, short, Shown as _};
use grid::Grid;

/// What one target's run left behind.
#[derive(Debug, Clone)]
pub struct TargetRun {
    /// The target's name (`reference`, `upstream`, `upstream@<slug>`).
    pub name: String,
    /// What was run, for people (`hermes-agent==0.19.0 from PyPI`, a binary, …).
    pub describes: String,
    /// The gap list in force (`none`, a list name or a file).
    pub gap_list: String,
    pub cases: Vec<Case>,
    pub verdicts: Vec<Record>,
    /// Wall time of the run.
    pub seconds: f64,
    /// The target's pace the run measured (one CLI call, a fresh gateway's first bill), which
    /// the spans chosen up front were fitted to (`fixtures::pace`).
    pub pace: Option<fixtures::pace::Pace>,
}

impl TargetRun {
    /// `; pace: CLI call 0.0 s, first bill 0.0 s`, or nothing when no test measured it.
    fn pace_words(&self) -> String {
        self.pace.map_or_else(String::new, |pace| {
            format!(
                "; pace: CLI call {:.1} s, first bill {:.1} s",
                pace.cli_call().as_secs_f64(),
                pace.first_bill().as_secs_f64()
            )
        })
    }
}

/// A cell's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mark {
    Pass,
    Fixed,
    KnownGap,
    Fail,
    /// `FAIL (no verdict)`: the test concluded nothing (it ended before any verdict, or its
    /// arrangement was never reached). A failure, never a pass.
    NoVerdict,
    NotRun,
}

impl Mark {
    fn json_name(self) -> &'static str {
        match self {
            Mark::Pass => "pass",
            Mark::Fixed => "fixed",
            Mark::KnownGap => "known_gap",
            Mark::Fail => "fail",
            Mark::NoVerdict => "no_verdict",
            Mark::NotRun => "n/a",
        }
    }

    /// Whether the cell fails the run.
    pub fn fails(self) -> bool {
        matches!(self, Mark::Fail | Mark::NoVerdict)
    }
}

/// One test on one target.
#[derive(Debug, Clone)]
pub struct Cell {
    pub mark: Mark,
    /// `pass`, `known gap #118872`, `fixed? (listed #118872)`, `FAIL`, `FAIL (no verdict)`, `n/a`.
    pub label: String,
    /// The figures behind the label: `bills for doomed card 14 (≤ 3) over 7 ticks, 8.2 s`.
    pub figures: Vec<String>,
    /// Why it failed, for a `FAIL`.
    pub why: Option<String>,
    pub verdicts: Vec<Record>,
}

impl Cell {
    /// The cell as one line of text.
    pub fn text(&self) -> String {
        let mut text = self.label.clone();
        if !self.figures.is_empty() {
            text.push_str(" · ");
            text.push_str(&self.figures.join("; "));
        }
        if let Some(why) = &self.why {
            text.push_str(" — ");
            text.push_str(why);
        }
        text
    }
}

/// One test across targets.
#[derive(Debug, Clone)]
pub struct Row {
    pub key: String,
    pub package: String,
    pub scenario: String,
    /// The promises its own verdicts are about, in first-seen order (`B1`, `cli`, …); the
    /// oracle's, which judge every run, are not the test's.
    pub bounds: Vec<String>,
    pub cells: Vec<Cell>,
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct Report {
    pub runs: Vec<TargetRun>,
    pub rows: Vec<Row>,
    pub date: String,
}

/// Counts of one target's column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub pass: usize,
    pub known_gap: usize,
    pub fixed: usize,
    pub fail: usize,
    pub no_verdict: usize,
    pub not_run: usize,
}

/// The version of `report.json`'s shape (documented in `docs/report.md`); raised on any change a
/// reader of the file would notice.
pub const FORMAT_VERSION: u32 = 1;

/// The promises of contract §7 and the contracts around them, in words: (label, short, long).
const BOUNDS: &[(&str, &str, &str)] = &[
    (
        "B1",
        "budget",
        "a failing card is billed by the automatic paths at most `decompose_max_attempts` times",
    ),
    (
        "B2",
        "backoff",
        "between failures a card waits, and cards in backoff never take a tick's slot",
    ),
    (
        "B3",
        "validation",
        "a reply is validated whole; an invalid graph writes nothing",
    ),
    (
        "B4",
        "once",
        "a decomposed card is never billed again; a card that left triage gets no rows",
    ),
    (
        "B5",
        "provider pause",
        "401/402/403/429 pause auto-decompose board-wide: one call, not one per card",
    ),
    (
        "B6",
        "hourly ceiling",
        "at most `decompose_calls_per_hour` paid calls board-wide in any rolling hour",
    ),
    ("B7", "holds", "cards people hold are never auto-decomposed"),
    (
        "B8",
        "hung/huge provider",
        "a hung provider blocks neither the ticks nor other cards; a huge body is cut off",
    ),
    (
        "B9",
        "visible",
        "every paid call is visible (ledger, events, one warning per parked card)",
    ),
    (
        "S1",
        "spawn budget",
        "a card whose workers never complete is spawned at most `failure_limit` times",
    ),
    (
        "S2",
        "one worker per card",
        "at most one live worker per card at any moment",
    ),
    (
        "S3",
        "spawn backoff",
        "a failing card waits a doubling backoff before its next worker, behind fresh cards",
    ),
    (
        "S4",
        "one key, one pause",
        "a worker's refusal pauses every spawn, worker request and decompose call",
    ),
    (
        "S5",
        "spawn cap",
        "live workers never exceed `max_spawn`, a lowered cap from the next tick",
    ),
    (
        "S7",
        "reaping",
        "a gateway's stop ends its workers; after a crash the next gateway adopts them",
    ),
    (
        "S8",
        "hand-offs",
        "a card a worker handed to a person is never spawned or decomposed without one",
    ),
    (
        "S9",
        "spawns visible",
        "every worker session is a run on the board (and, on the reference, in the ledger)",
    ),
    (
        "cli",
        "CLI contract",
        "the CLI's exit codes and JSON lines (contract §4)",
    ),
    (
        "reply",
        "reply contract",
        "every reply the contract allows is applied as written (contract §5)",
    ),
    (
        "gateway",
        "one gateway",
        "one gateway per board; a second one refuses to start (contract §6)",
    ),
    (
        "switch",
        "kill switch",
        "`auto_decompose: false` stops paid calls from the next tick",
    ),
    (
        "board",
        "readable board",
        "rows stay in upstream's types and units, so either gateway reads the other's board",
    ),
];

/// The labels of the bounds a report knows, in the order reports show them.
pub const BOUND_LABELS: [&str; BOUNDS.len()] = {
    let mut labels = [""; BOUNDS.len()];
    let mut index = 0;
    while index < BOUNDS.len() {
        labels[index] = BOUNDS[index].0;
        index += 1;
    }
    labels
};

/// `B1` → `B1 budget`; `cli` → `CLI contract`; anything unknown stays as it is.
pub fn bound_words(bound: &str) -> String {
    match BOUNDS.iter().find(|(label, _, _)| *label == bound) {
        Some((label, words, _)) if label.starts_with(['B', 'S']) => format!("{label} {words}"),
        Some((_, words, _)) => (*words).to_owned(),
        None => bound.to_owned(),
    }
}

impl Report {
    pub fn build(runs: Vec<TargetRun>, date: String) -> Report {
        // key → whether nextest named it with an rstest case
        let mut keys: BTreeMap<String, bool> = BTreeMap::new();
        for run in &runs {
            for case in &run.cases {
                *keys.entry(case.key.clone()).or_default() |= case.has_case;
            }
            for verdict in &run.verdicts {
                keys.entry(verdict.test.clone()).or_default();
            }
        }
        let rows = keys
            .into_iter()
            .map(|(key, has_case)| {
                let cells: Vec<Cell> = runs.iter().map(|run| cell(run, &key)).collect();
                let mut bounds: Vec<String> = Vec::new();
                for verdict in cells.iter().flat_map(|c| &c.verdicts) {
                    if !is_oracle(verdict) && !bounds.contains(&verdict.bound) {
                        bounds.push(verdict.bound.clone());
                    }
                }
                Row {
                    package: fixtures::verdict::package_of(&key).to_owned(),
                    scenario: scenario(&key, has_case),
                    key,
                    bounds,
                    cells,
                }
            })
            .collect();
        Report { runs, rows, date }
    }

    /// True when no cell is `FAIL` or `FAIL (no verdict)`.
    pub fn all_held(&self) -> bool {
        !self
            .rows
            .iter()
            .flat_map(|r| &r.cells)
            .any(|c| c.mark.fails())
    }

    pub fn counts(&self, target: usize) -> Counts {
        let mut counts = Counts::default();
        for row in &self.rows {
            match row.cells[target].mark {
                Mark::Pass => counts.pass += 1,
                Mark::Fixed => counts.fixed += 1,
                Mark::KnownGap => counts.known_gap += 1,
                Mark::Fail => counts.fail += 1,
                Mark::NoVerdict => counts.no_verdict += 1,
                Mark::NotRun => counts.not_run += 1,
            }
        }
        counts
    }

    /// The short summary for the terminal: the counts per target (tests), the grid of bounds
    /// by targets with the oracle's row, the invariants the oracle found broken, then the news
    /// (fixed?) and every failure with its reason.
    pub fn summary(&self) -> String {
        let mut out = self.counts_table();
        out.push('\n');
        out.push_str(&Grid::of(self).text());
        let mut first_broken = true;
        for run in &self.runs {
            let broken: Vec<String> = oracle_counts(run)
                .iter()
                .filter(|(_, _, known, fail)| known + fail > 0)
                .map(|(words, _, known, fail)| {
                    format!(
                        "{} ({known} known gap, {fail} FAIL)",
                        words.trim_start_matches("oracle: ")
                    )
                })
                .collect();
            if !broken.is_empty() {
                if std::mem::take(&mut first_broken) {
                    out.push('\n');
                }
                let _ = writeln!(out, "oracle on {}, broken: {}", run.name, broken.join("; "));
            }
        }
        for (marks, heading) in [
            (
                &[Mark::Fixed][..],
                "fixed? (a listed gap did not fire: check, then drop it from the list)",
            ),
            (&[Mark::Fail, Mark::NoVerdict][..], "FAIL"),
        ] {
            let lines: Vec<String> = self
                .rows
                .iter()
                .flat_map(|row| {
                    self.runs
                        .iter()
                        .zip(&row.cells)
                        .filter(move |(_, cell)| marks.contains(&cell.mark))
                        .map(move |(run, cell)| {
                            format!(
                                "  {} · {} {}: {}",
                                run.name,
                                row.package,
                                row.scenario,
                                cell.text()
                            )
                        })
                })
                .collect();
            if !lines.is_empty() {
                let _ = writeln!(out, "\n{heading}:");
                for line in lines {
                    let _ = writeln!(out, "{line}");
                }
            }
        }
        out
    }

    /// One line per target: its tests by mark, and the run's time.
    fn counts_table(&self) -> String {
        let width = self
            .runs
            .iter()
            .map(|r| r.name.chars().count())
            .max()
            .unwrap_or(6)
            .max(6);
        let mut out = format!(
            "{:<width$}  {:>5}  {:>9}  {:>6}  {:>4}  {:>10}  {:>4}  {:>8}\n",
            "target", "pass", "known gap", "fixed?", "FAIL", "no verdict", "n/a", "time"
        );
        for (index, run) in self.runs.iter().enumerate() {
            let c = self.counts(index);
            let _ = writeln!(
                out,
                "{:<width$}  {:>5}  {:>9}  {:>6}  {:>4}  {:>10}  {:>4}  {:>8}",
                run.name,
                c.pass,
                c.known_gap,
                c.fixed,
                c.fail,
                c.no_verdict,
                c.not_run,
                format_seconds(run.seconds)
            );
        }
        out
    }

    pub fn markdown(&self) -> String {
        let mut out = format!("## Conformance: bounded billing ({})\n\n", self.date);
        for run in &self.runs {
            let _ = writeln!(
                out,
                "- **{}**: {}; gap list `{}`; {}{}",
                run.name,
                run.describes,
                run.gap_list,
                format_seconds(run.seconds),
                run.pace_words()
            );
        }
        out.push('\n');
        out.push_str(&Grid::of(self).markdown());
        out.push_str("\n| suite | scenario | bound |");
        for run in &self.runs {
            let _ = write!(out, " {} |", run.name);
        }
        out.push_str("\n|---|---|---|");
        for _ in &self.runs {
            out.push_str("---|");
        }
        out.push('\n');
        for row in &self.rows {
            let bounds: Vec<String> = row.bounds.iter().map(|b| bound_words(b)).collect();
            let _ = write!(
                out,
                "| {} | {} | {} |",
                row.package,
                cell_text(&row.scenario),
                cell_text(&bounds.join(", "))
            );
            for cell in &row.cells {
                let _ = write!(out, " {} |", cell_text(&cell.text()));
            }
            out.push('\n');
        }
        out.push('\n');
        for (index, run) in self.runs.iter().enumerate() {
            let c = self.counts(index);
            let _ = writeln!(
                out,
                "- **{}**: {} pass, {} known gap(s), {} fixed?, {} FAIL, {} no verdict, {} n/a",
                run.name, c.pass, c.known_gap, c.fixed, c.fail, c.no_verdict, c.not_run
            );
        }
        out.push_str(&self.oracle_markdown());
        out.push_str(
            "\nCells: `pass` the bound held; `known gap` it failed as the target's gap list says \
             (upstream issue, or the listed reason); `fixed?` the list names a gap that did not \
             fire (news: a fix, or a window too short to see it); `FAIL` it failed otherwise \
             (for a mismatch, what was listed and what was seen); `n/a` not run on that target. \
             Figures read `what observed (≤ limit) over window`.\n\nBounds:\n",
        );
        let used: Vec<&str> = self
            .rows
            .iter()
            .flat_map(|r| r.bounds.iter().map(String::as_str))
            .collect();
        for (label, words, long) in BOUNDS {
            if used.contains(label) {
                if label.starts_with(['B', 'S']) {
                    let _ = writeln!(out, "- {label} ({words}): {long}");
                } else {
                    let _ = writeln!(out, "- {words}: {long}");
                }
            }
        }
        out
    }

    /// The report in short, for the docs (`docs/report.md` embeds it through `cargo docs`) and
    /// CI's step summary: who was run with their counts, the grid of bounds by targets, each
    /// `fixed?` and failing cell, and the oracle's table. The row per test is report.md's.
    pub fn compact_markdown(&self, commit: &str) -> String {
        let mut out = format!(
            "A real run of `cargo conformance` on {} at `{commit}`:\n\n",
            self.date
        );
        for (index, run) in self.runs.iter().enumerate() {
            let c = self.counts(index);
            let _ = writeln!(
                out,
                "- **{}**: {}; gap list `{}`; {} pass, {} known gap, {} fixed?, {} FAIL, {} no \
                 verdict, {} n/a; {}{}",
                run.name,
                run.describes,
                run.gap_list,
                c.pass,
                c.known_gap,
                c.fixed,
                c.fail,
                c.no_verdict,
                c.not_run,
                format_seconds(run.seconds),
                run.pace_words()
            );
        }
        out.push('\n');
        out.push_str(&Grid::of(self).markdown());
        let news: Vec<String> = self
            .rows
            .iter()
            .flat_map(|row| {
                self.runs
                    .iter()
                    .zip(&row.cells)
                    .filter(|(_, cell)| cell.mark == Mark::Fixed || cell.mark.fails())
                    .map(move |(run, cell)| {
                        format!(
                            "- {} · {} {}: {}",
                            run.name,
                            row.package,
                            cell_text(&row.scenario),
                            cell_text(&verdicts::short(&cell.text(), 200))
                        )
                    })
            })
            .collect();
        if !news.is_empty() {
            out.push_str("\nCells that are news (`fixed?`) or failures:\n\n");
            for line in news {
                out.push_str(&line);
                out.push('\n');
            }
        }
        out.push_str(&self.oracle_markdown());
        out
    }

    /// The oracle's invariants, one row each, judged on every test of every target: how many
    /// runs kept them, broke them as a listed gap, and broke them otherwise.
    fn oracle_markdown(&self) -> String {
        let per_target: Vec<Vec<(String, usize, usize, usize)>> =
            self.runs.iter().map(oracle_counts).collect();
        let mut invariants: Vec<String> = Vec::new();
        for (words, ..) in per_target.iter().flatten() {
            if !invariants.contains(words) {
                invariants.push(words.clone());
            }
        }
        if invariants.is_empty() {
            return String::new();
        }
        let mut out = String::from(
            "\n### The oracle: every run judged by its whole history\n\n\
             Runs that kept each invariant / broke it as a listed gap / broke it otherwise.\n\n\
             | invariant |",
        );
        for run in &self.runs {
            let _ = write!(out, " {} |", run.name);
        }
        out.push_str("\n|---|");
        for _ in &self.runs {
            out.push_str("---|");
        }
        out.push('\n');
        for words in &invariants {
            let _ = write!(
                out,
                "| {} |",
                cell_text(words.trim_start_matches("oracle: "))
            );
            for counts in &per_target {
                let cell = counts
                    .iter()
                    .find(|(seen, ..)| seen == words)
                    .map_or("n/a".to_owned(), |(_, pass, known, fail)| {
                        format!("{pass} / {known} / {fail}")
                    });
                let _ = write!(out, " {cell} |");
            }
            out.push('\n');
        }
        out
    }

    /// The report for tools, in the shape `docs/report.md` documents under
    /// [`FORMAT_VERSION`].
    pub fn json(&self) -> Value {
        json!({
            "format_version": FORMAT_VERSION,
            "date": self.date,
            "all_held": self.all_held(),
            "targets": self.runs.iter().enumerate().map(|(index, run)| {
                let c = self.counts(index);
                json!({
                    "name": run.name,
                    "describes": run.describes,
                    "gap_list": run.gap_list,
                    "seconds": (run.seconds * 10.0).round() / 10.0,
                    "pace": run.pace,
                    "counts": {
                        "pass": c.pass, "known_gap": c.known_gap, "fixed": c.fixed,
                        "fail": c.fail, "no_verdict": c.no_verdict, "n/a": c.not_run,
                    },
                })
            }).collect::<Vec<_>>(),
            "grid": self.grid_json(),
            "rows": self.rows.iter().map(|row| json!({
                "test": row.key,
                "package": row.package,
                "scenario": row.scenario,
                "bounds": row.bounds,
                "cells": self.runs.iter().zip(&row.cells).map(|(run, cell)| {
                    (run.name.clone(), json!({
                        "mark": cell.mark.json_name(),
                        "label": cell.label,
                        "figures": cell.figures,
                        "why": cell.why,
                        "verdicts": cell.verdicts,
                    }))
                }).collect::<serde_json::Map<String, Value>>(),
            })).collect::<Vec<_>>(),
        })
    }

    /// The grid: per row its bound and, per target, the test keys under each status.
    fn grid_json(&self) -> Value {
        let grid = Grid::of(self);
        Value::Array(
            grid.rows
                .iter()
                .map(|row| {
                    let cells: serde_json::Map<String, Value> = grid
                        .targets
                        .iter()
                        .zip(&row.cells)
                        .map(|(target, tally)| {
                            let statuses: serde_json::Map<String, Value> = tally
                                .tests
                                .iter()
                                .map(|(status, rows)| {
                                    let keys: Vec<&str> =
                                        rows.iter().map(|i| self.rows[*i].key.as_str()).collect();
                                    (status.slug().to_owned(), json!(keys))
                                })
                                .collect();
                            (target.clone(), Value::Object(statuses))
                        })
                        .collect();
                    json!({ "bound": row.bound, "words": row.words(), "cells": cells })
                })
                .collect(),
        )
    }
}

/// A test key as people read it: `gateway-tests::seed::failing_card::http_500` →
/// `seed › failing card (http 500)` when nextest's name ended in an rstest case,
/// `[reference only]` for reference-only modules.
pub fn scenario(key: &str, had_case: bool) -> String {
    let path = key.split_once("::").map_or(key, |(_, path)| path);
    let mut segments: Vec<&str> = path.split("::").collect();
    let reference_only = segments.contains(&"reference_only");
    segments.retain(|s| *s != "reference_only");
    let case = if had_case && segments.len() > 1 {
        segments.pop()
    } else {
        None
    };
    let words = |s: &str| s.replace('_', " ");
    let mut text = segments
        .iter()
        .map(|s| words(s))
        .collect::<Vec<_>>()
        .join(" › ");
    if reference_only {
        text.push_str(" [reference only]");
    }
    if let Some(case) = case {
        text.push_str(&format!(" ({})", words(case)));
    }
    text
}

/// Text safe inside a Markdown table cell.
fn cell_text(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

pub fn format_seconds(seconds: f64) -> String {
    if seconds >= 120.0 {
        let whole = seconds.round() as u64;
        format!("{}m {:02}s", whole / 60, whole % 60)
    } else {
        format!("{seconds:.1} s")
    }
}

fn cell(run: &TargetRun, key: &str) -> Cell {
    let case = run.cases.iter().find(|c| c.key == key);
    let verdicts: Vec<Record> = run
        .verdicts
        .iter()
        .filter(|v| v.test == key)
        .cloned()
        .collect();
    let of = |outcomes: &[Outcome]| -> Vec<&Record> {
        verdicts
            .iter()
            .filter(|v| outcomes.contains(&v.outcome))
            .collect()
    };
    let figures = |shown: &[&Record]| -> Vec<String> {
        let mut figures: Vec<String> = shown.iter().map(|v| v.figure()).collect();
        let rest = verdicts.len() - shown.len();
        if rest > 0 && !figures.is_empty() {
            figures.push(format!("+{rest} more verdict(s)"));
        }
        figures
    };
    let failing = of(&[Outcome::Fail, Outcome::Mismatch]);
    // The oracle judges every test: a known gap it found is shown beside the test's own
    // verdicts, not instead of them (the oracle's own table counts them).
    let (oracle_known, known): (Vec<&Record>, Vec<&Record>) = of(&[Outcome::KnownGap])
        .into_iter()
        .partition(|verdict| is_oracle(verdict));
    let fixed = of(&[Outcome::Fixed]);
    let junit_failure = case
        .filter(|c| !c.passed)
        .map(|c| c.failure.clone().unwrap_or_else(|| "failed".to_owned()));

    let (mark, label, shown, why): (Mark, String, Vec<&Record>, Option<String>) =
        if case.is_none() && verdicts.is_empty() {
            (Mark::NotRun, "n/a".to_owned(), vec![], None)
        } else if let Some(first) = failing.first() {
            let why = match first.outcome {
                Outcome::Mismatch => first.mismatch_text(),
                _ => first.message.clone(),
            };
            // A verdict whose arrangement was not reached concluded nothing about the bound.
            let (mark, label) = if failing.iter().all(|verdict| verdict.no_verdict) {
                (Mark::NoVerdict, "FAIL (no verdict)")
            } else {
                (Mark::Fail, "FAIL")
            };
            (
                mark,
                label.to_owned(),
                failing.clone(),
                why.map(|w| short(&w, 300)),
            )
        } else if let Some(failure) = junit_failure {
            // The oracle's verdicts are about the run, not the test's own conclusion.
            let (mark, label) = if verdicts.iter().all(is_oracle) {
                (Mark::NoVerdict, "FAIL (no verdict)")
            } else {
                (Mark::Fail, "FAIL")
            };
            (mark, label.to_owned(), vec![], Some(short(&failure, 300)))
        } else if !known.is_empty() {
            (
                Mark::KnownGap,
                format!("known gap {}", listed_labels(&known)),
                known.clone(),
                None,
            )
        } else if !fixed.is_empty() {
            (
                Mark::Fixed,
                format!("fixed? (listed {})", listed_labels(&fixed)),
                fixed.clone(),
                None,
            )
        } else {
            // A passing cell shows its time-bound verdict first: that is the one with a window
            // worth reading.
            let shown: Vec<&Record> = verdicts
                .iter()
                .filter(|v| v.window.is_some())
                .take(1)
                .chain(verdicts.iter().filter(|v| v.window.is_none()).take(1))
                .take(1)
                .collect();
            let label = if oracle_known.is_empty() {
                "pass".to_owned()
            } else {
                format!("pass (oracle: known gap {})", listed_labels(&oracle_known))
            };
            (Mark::Pass, label, shown, None)
        };
    Cell {
        mark,
        label,
        figures: figures(&shown),
        why,
        verdicts,
    }
}

/// Whether a verdict is one of the oracle's (`fixtures::oracle`), not the test's own.
pub fn is_oracle(verdict: &Record) -> bool {
    verdict.what.starts_with("oracle: ")
}

/// The oracle's invariants as judged on one target's run: `(invariant's words, pass, known
/// gap, FAIL)`, in the order first seen.
pub fn oracle_counts(run: &TargetRun) -> Vec<(String, usize, usize, usize)> {
    let mut counts: Vec<(String, usize, usize, usize)> = Vec::new();
    for verdict in run.verdicts.iter().filter(|v| is_oracle(v)) {
        let words = verdict
            .what
            .rsplit_once(" (board ")
            .map_or(verdict.what.as_str(), |(words, _)| words)
            .to_owned();
        let index = match counts.iter().position(|(seen, ..)| *seen == words) {
            Some(index) => index,
            None => {
                counts.push((words, 0, 0, 0));
                counts.len() - 1
            }
        };
        match verdict.outcome {
            Outcome::Pass | Outcome::Fixed => counts[index].1 += 1,
            Outcome::KnownGap => counts[index].2 += 1,
            Outcome::Fail | Outcome::Mismatch => counts[index].3 += 1,
        }
    }
    counts
}

fn listed_labels(verdicts: &[&Record]) -> String {
    let mut labels: Vec<String> = Vec::new();
    for verdict in verdicts {
        let label = verdict
            .listed
            .as_ref()
            .map_or_else(|| verdict.kind.to_string(), listed_label);
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    labels.join(", ")
}

/// Today's date (UTC) as `YYYY-MM-DD`.
pub fn today() -> String {
    let secs = hermes::clock::now_secs();
    hermes::clock::utc(secs)
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_stay_one_cell_on_one_line() {
        assert_eq!(cell_text("a|b\nc"), "a\\|b c");
    }

    #[test]
    fn scenarios_read_as_words() {
        assert_eq!(
            scenario("gateway-tests::seed::failing_card::http_500", true),
            "seed › failing card (http 500)"
        );
        assert_eq!(
            scenario("gateway-tests::seed::failing_card::case_2", true),
            "seed › failing card (case 2)"
        );
        assert_eq!(
            scenario("cli-tests::reference_only::ledger_is_kept", false),
            "ledger is kept [reference only]"
        );
    }

    #[test]
    fn bounds_read_as_words() {
        assert_eq!(bound_words("B5"), "B5 provider pause");
        assert_eq!(bound_words("S4"), "S4 one key, one pause");
        assert_eq!(bound_words("switch"), "kill switch");
        assert_eq!(bound_words("B42"), "B42");
        assert_eq!(format_seconds(119.94), "119.9 s");
        assert_eq!(format_seconds(201.0), "3m 21s");
        assert_eq!(format_seconds(179.6), "3m 00s");
    }
}
