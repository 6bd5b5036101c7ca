//! The bound × target grid: for each promise (B1–B9 and the contracts around them), how the tests
//! that prove it came out on each target, counted in tests, and on a row of its own how the
//! oracle judged those tests' runs.
//!
//! A test counts under the bounds its own verdicts name (not the oracle's, which judges every
//! run against every invariant): a test that proves two bounds counts in both rows. On one target
//! a test is, for one bound:
//! - `no verdict` when that bound's failing verdicts all stood on an arrangement that was never
//!   reached, or when the test failed before reaching any verdict at all;
//! - `FAIL` when a verdict of that bound failed otherwise, or the test failed outside its
//!   verdicts (a panic after they held): a failed test is never counted as held;
//! - else `known gap` when one of them failed as the gap list says, `fixed?` when a listed gap
//!   did not fire, `held` otherwise.
//!
//! A passing test that recorded nothing about a bound on a target (a verdict only the reference
//! reaches) is not counted for it there. A test that reached no verdict on any target names no
//! bound; it counts in the row [`NO_BOUND`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fixtures::verdict::{Outcome, Record};

use super::{bound_words, is_oracle, Cell, Mark, Report, BOUND_LABELS};

/// How one test came out for one bound on one target, in the order the grid shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// Its verdicts on the bound held (the oracle's row: its run kept every invariant).
    Held,
    /// One failed as the gap list says.
    KnownGap,
    /// A listed gap did not fire.
    Fixed,
    /// One failed otherwise, or the test failed outside its verdicts.
    Fail,
    /// It concluded nothing about the bound.
    NoVerdict,
}

impl Status {
    /// Every status, in the grid's order.
    pub const ALL: [Status; 5] = [
        Status::Held,
        Status::KnownGap,
        Status::Fixed,
        Status::Fail,
        Status::NoVerdict,
    ];

    /// The words a grid cell counts it in (the oracle's row says `kept` for held).
    pub fn words(self, oracle: bool) -> &'static str {
        match self {
            Status::Held if oracle => "kept",
            Status::Held => "held",
            Status::KnownGap => "known gap",
            Status::Fixed => "fixed?",
            Status::Fail => "FAIL",
            Status::NoVerdict => "no verdict",
        }
    }

    /// A name for files and anchors: `held`, `known-gap`, `fixed`, `fail`, `no-verdict`.
    pub fn slug(self) -> &'static str {
        match self {
            Status::Held => "held",
            Status::KnownGap => "known-gap",
            Status::Fixed => "fixed",
            Status::Fail => "fail",
            Status::NoVerdict => "no-verdict",
        }
    }
}

/// The row label of tests that reached no verdict on any target.
pub const NO_BOUND: &str = "no bound reached";

/// The label of the oracle's row.
pub const ORACLE: &str = "oracle";

/// One grid cell: the tests (indexes into [`Report::rows`]) under each status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Each status's tests, as indexes into the report's rows.
    pub tests: BTreeMap<Status, Vec<usize>>,
}

impl Tally {
    fn add(&mut self, status: Status, row: usize) {
        self.tests.entry(status).or_default().push(row);
    }

    /// How many tests have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.tests.get(&status).map_or(0, Vec::len)
    }

    /// Whether no test counts here.
    pub fn is_empty(&self) -> bool {
        self.tests.values().all(Vec::is_empty)
    }

    /// `41 held`, `3 held, 2 known gap`, or `-`.
    pub fn text(&self, oracle: bool) -> String {
        let parts: Vec<String> = Status::ALL
            .iter()
            .filter(|status| self.count(**status) > 0)
            .map(|status| format!("{} {}", self.count(*status), status.words(oracle)))
            .collect();
        if parts.is_empty() {
            "-".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// One row: a bound (`B1`, `cli`, …, [`NO_BOUND`] or [`ORACLE`]) and a tally per target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridRow {
    /// `B1`, `cli`, …, [`NO_BOUND`] or [`ORACLE`].
    pub bound: String,
    /// One tally per target, in the report's order.
    pub cells: Vec<Tally>,
}

impl GridRow {
    /// Whether this is the oracle's row.
    pub fn is_oracle(&self) -> bool {
        self.bound == ORACLE
    }

    /// `B1 budget`, `CLI contract`, `oracle (whole runs)`.
    pub fn words(&self) -> String {
        if self.is_oracle() {
            "oracle (whole runs)".to_owned()
        } else {
            bound_words(&self.bound)
        }
    }
}

/// The grid of a report: a row per bound that any test names, then [`NO_BOUND`] when a test
/// named none, then the oracle's row when it judged anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    /// The targets' names, one per column.
    pub targets: Vec<String>,
    /// The rows, in order.
    pub rows: Vec<GridRow>,
}

impl Grid {
    /// The grid of `report` (see the module docs).
    pub fn of(report: &Report) -> Grid {
        let targets: Vec<String> = report.runs.iter().map(|run| run.name.clone()).collect();
        let mut bounds: Vec<String> = BOUND_LABELS.iter().map(|b| (*b).to_owned()).collect();
        for row in &report.rows {
            for bound in &row.bounds {
                if !bounds.contains(bound) {
                    bounds.push(bound.clone());
                }
            }
        }
        let empty = || vec![Tally::default(); targets.len()];
        let mut rows: Vec<GridRow> = bounds
            .into_iter()
            .map(|bound| GridRow {
                bound,
                cells: empty(),
            })
            .collect();
        let mut unbound = GridRow {
            bound: NO_BOUND.to_owned(),
            cells: empty(),
        };
        let mut oracle = GridRow {
            bound: ORACLE.to_owned(),
            cells: empty(),
        };
        for (index, row) in report.rows.iter().enumerate() {
            for (target, cell) in row.cells.iter().enumerate() {
                if let Some(status) = oracle_status(cell) {
                    oracle.cells[target].add(status, index);
                }
                if row.bounds.is_empty() {
                    if let Some(status) = status_without_bound(cell) {
                        unbound.cells[target].add(status, index);
                    }
                }
                for bound in &row.bounds {
                    if let Some(status) = status(cell, bound) {
                        let grid_row = rows
                            .iter_mut()
                            .find(|r| r.bound == *bound)
                            .expect("every bound of a row has a grid row");
                        grid_row.cells[target].add(status, index);
                    }
                }
            }
        }
        rows.retain(|row| row.cells.iter().any(|tally| !tally.is_empty()));
        for extra in [unbound, oracle] {
            if extra.cells.iter().any(|tally| !tally.is_empty()) {
                rows.push(extra);
            }
        }
        Grid { targets, rows }
    }

    /// The grid as aligned plain text: a header of targets, a row per bound.
    pub fn text(&self) -> String {
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| row.cells.iter().map(|t| t.text(row.is_oracle())).collect())
            .collect();
        let label_width = self
            .rows
            .iter()
            .map(|row| row.words().chars().count())
            .chain(["bound (tests)".len()])
            .max()
            .unwrap_or(0);
        let widths: Vec<usize> = (0..self.targets.len())
            .map(|target| {
                cells
                    .iter()
                    .map(|row| row[target].chars().count())
                    .chain([self.targets[target].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |label: &str, values: &[String]| -> String {
            let mut text = format!("{label:<label_width$}");
            for (value, width) in values.iter().zip(&widths) {
                let _ = write!(text, "  {value:<width$}");
            }
            text.trim_end().to_owned() + "\n"
        };
        let mut out = line("bound (tests)", &self.targets);
        for (row, values) in self.rows.iter().zip(&cells) {
            out.push_str(&line(&row.words(), values));
        }
        out
    }

    /// The grid as a Markdown table.
    pub fn markdown(&self) -> String {
        let mut out = String::from("| bound (tests) |");
        for target in &self.targets {
            let _ = write!(out, " {target} |");
        }
        out.push_str("\n|---|");
        for _ in &self.targets {
            out.push_str("---|");
        }
        out.push('\n');
        for row in &self.rows {
            let words = if row.is_oracle() {
                format!("*{}*", row.words())
            } else {
                row.words()
            };
            let _ = write!(out, "| {words} |");
            for tally in &row.cells {
                let _ = write!(out, " {} |", tally.text(row.is_oracle()));
            }
            out.push('\n');
        }
        out
    }
}

/// How `cell`'s test came out for `bound` (see the module docs), or `None` when it says nothing
/// about it on that target.
pub fn status(cell: &Cell, bound: &str) -> Option<Status> {
    if cell.mark == Mark::NotRun {
        return None;
    }
    let own: Vec<&Record> = cell
        .verdicts
        .iter()
        .filter(|v| !is_oracle(v) && v.bound == bound)
        .collect();
    if let Some(failed) = failed(&own) {
        return Some(failed);
    }
    if let Some(unattributed) = failure_outside_verdicts(cell) {
        return Some(unattributed);
    }
    if own.is_empty() {
        // A failure of another bound's verdict is that bound's; this test made no claim here
        // unless it failed before any (handled above).
        return (matches!(cell.mark, Mark::Fail | Mark::NoVerdict)
            && cell.verdicts.iter().all(is_oracle))
        .then_some(Status::NoVerdict);
    }
    Some(held_or_listed(&own))
}

/// A test with no own verdict on any target: its cell's mark.
fn status_without_bound(cell: &Cell) -> Option<Status> {
    match cell.mark {
        Mark::NotRun => None,
        Mark::Pass => Some(Status::Held),
        Mark::KnownGap => Some(Status::KnownGap),
        Mark::Fixed => Some(Status::Fixed),
        Mark::Fail => Some(Status::Fail),
        Mark::NoVerdict => Some(Status::NoVerdict),
    }
}

/// How the oracle judged the test's run: its worst invariant verdict, or `None` when it judged
/// nothing there.
fn oracle_status(cell: &Cell) -> Option<Status> {
    if cell.mark == Mark::NotRun {
        return None;
    }
    let judged: Vec<&Record> = cell.verdicts.iter().filter(|v| is_oracle(v)).collect();
    if judged.is_empty() {
        return None;
    }
    Some(failed(&judged).unwrap_or_else(|| {
        if judged.iter().any(|v| v.outcome == Outcome::KnownGap) {
            Status::KnownGap
        } else {
            Status::Held
        }
    }))
}

/// `FAIL` or `no verdict` when one of `verdicts` failed.
fn failed(verdicts: &[&Record]) -> Option<Status> {
    let failing: Vec<&&Record> = verdicts
        .iter()
        .filter(|v| v.outcome.fails_the_test())
        .collect();
    if failing.is_empty() {
        None
    } else if failing.iter().all(|v| v.no_verdict) {
        Some(Status::NoVerdict)
    } else {
        Some(Status::Fail)
    }
}

/// A test that failed although none of its verdicts did (it panicked before or after them).
fn failure_outside_verdicts(cell: &Cell) -> Option<Status> {
    let any_failing = cell.verdicts.iter().any(|v| v.outcome.fails_the_test());
    match cell.mark {
        Mark::Fail if !any_failing => Some(Status::Fail),
        Mark::NoVerdict if !any_failing => Some(Status::NoVerdict),
        _ => None,
    }
}

fn held_or_listed(own: &[&Record]) -> Status {
    if own.iter().any(|v| v.outcome == Outcome::KnownGap) {
        Status::KnownGap
    } else if own.iter().any(|v| v.outcome == Outcome::Fixed) {
        Status::Fixed
    } else {
        Status::Held
    }
}
