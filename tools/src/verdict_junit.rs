//! The report as JUnit XML (`target/conformance/verdicts-junit.xml`), for CI viewers that read
//! JUnit: one suite per target, one case per test that ran there, each marked by its verdict, not
//! by whether the test process passed. nextest's own JUnit shows a known gap as a plain pass (the
//! test passes when the gap fires as listed); here:
//!
//! | cell | JUnit |
//! |---|---|
//! | `pass` | passed |
//! | `known gap` | skipped, type `known gap`: an expected failure, with its listing |
//! | `fixed?` | passed, with the property `verdict = fixed?` and what did not fire in its output |
//! | `FAIL` | failure, type `FAIL`, with the reason |
//! | `FAIL (no verdict)` | error, type `no verdict`: the test concluded nothing |
//!
//! A test not run on a target (`n/a`) is not in that target's suite. Every case carries the
//! properties `verdict` (the cell's label) and `bound` (each bound its own verdicts name).

use quick_junit::{NonSuccessKind, Property, Report as JunitReport, TestCase, TestCaseStatus};

use crate::report::{Cell, Mark, Report, Row};

/// The report's verdicts as JUnit XML.
///
/// # Errors
/// When the XML cannot be written (quick-junit's serializer failing).
pub fn write(report: &Report) -> anyhow::Result<String> {
    let mut junit = JunitReport::new("conformance verdicts");
    for (index, run) in report.runs.iter().enumerate() {
        let mut suite = quick_junit::TestSuite::new(format!("conformance: {}", run.name));
        suite.add_property(Property::new("gap_list", run.gap_list.as_str()));
        suite.add_property(Property::new("describes", run.describes.as_str()));
        for row in &report.rows {
            let cell = &row.cells[index];
            if cell.mark == Mark::NotRun {
                continue;
            }
            suite.add_test_case(case(row, cell, &run.name));
        }
        junit.add_test_suite(suite);
    }
    junit
        .to_string()
        .map_err(|error| anyhow::anyhow!("writing the verdicts' JUnit: {error}"))
}

fn case(row: &Row, cell: &Cell, target: &str) -> TestCase {
    let status = match cell.mark {
        Mark::Pass | Mark::Fixed | Mark::NotRun => TestCaseStatus::success(),
        Mark::KnownGap => {
            let mut status = TestCaseStatus::skipped();
            status.set_type("known gap").set_message(cell.text());
            status
        }
        Mark::Fail => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status.set_type("FAIL").set_message(cell.text());
            status
        }
        Mark::NoVerdict => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_type("no verdict").set_message(cell.text());
            status
        }
    };
    let mut case = TestCase::new(row.key.as_str(), status);
    case.set_classname(format!("{target}::{}", row.package));
    case.add_property(Property::new("verdict", cell.label.as_str()));
    for bound in &row.bounds {
        case.add_property(Property::new("bound", bound.as_str()));
    }
    if cell.mark == Mark::Fixed {
        case.set_system_out(format!(
            "fixed?: a listed gap did not fire; check, then drop it from the list. {}",
            cell.text()
        ));
    }
    case
}
