//! The grid as one self-contained HTML page (`target/conformance/report.html`): no script, no
//! file beside it, readable from a CI artifact. Every count in the grid links to the list of its
//! tests, each with its verdict, figures and reason.
//!
//! Anchors: the list behind a count is `#<bound>--<target index>--<status>` (`#B1--0--held`,
//! `#oracle--1--known-gap`); the grid is `#grid`.

use std::fmt::Write as _;

use crate::report::grid::{Grid, GridRow, Status, Tally};
use crate::report::{format_seconds, is_oracle, Report};
use crate::verdicts::Shown as _;

/// `text` safe in HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// The anchor of one count's list of tests.
pub fn anchor(row: &GridRow, target: usize, status: Status) -> String {
    let bound: String = row
        .bound
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{bound}--{target}--{}", status.slug())
}

const STYLE: &str = "\
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:78rem;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;margin:1rem 0}
th,td{border:1px solid #ccc;padding:.35rem .6rem;text-align:left;vertical-align:top}
thead th{background:#f2f2f2}
tr.oracle th,tr.oracle td{background:#f7f7fb;font-style:italic}
a.count{display:inline-block;margin:0 .4rem .1rem 0;padding:0 .35rem;border-radius:.25rem;text-decoration:none}
.held{background:#dff3e3;color:#14532d}.known-gap{background:#fdf1d6;color:#713f12}
.fixed{background:#dbeafe;color:#1e3a8a}.fail{background:#fde0e0;color:#7f1d1d;font-weight:600}
.no-verdict{background:#ece0fd;color:#4c1d95;font-weight:600}
section.tests{border-left:4px solid #ddd;padding-left:1rem;margin:1.5rem 0}
section.tests:target{border-left-color:#2563eb;background:#f5f8ff}
section.tests li{margin:.3rem 0}.why{color:#7f1d1d}.figures{color:#444}
code{font-size:.85em}";

/// The whole page.
pub fn page(report: &Report, commit: &str) -> String {
    let grid = Grid::of(report);
    let title = format!("Conformance: bounded billing ({})", report.date);
    let mut out = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n<h1>{}</h1>\n\
         <p>A run of <code>cargo conformance</code> at <code>{}</code>. Each count is tests; a \
         test that proves two bounds counts in both rows. Click a count for its tests and \
         reasons.</p>\n<ul class=\"targets\">\n",
        escape(&title),
        escape(&title),
        escape(commit)
    );
    for (index, run) in report.runs.iter().enumerate() {
        let c = report.counts(index);
        let _ = writeln!(
            out,
            "<li><b>{}</b>: {}; gap list <code>{}</code>; {} pass, {} known gap, {} fixed?, {} \
             FAIL, {} no verdict, {} n/a; {}</li>",
            escape(&run.name),
            escape(&run.describes),
            escape(&run.gap_list),
            c.pass,
            c.known_gap,
            c.fixed,
            c.fail,
            c.no_verdict,
            c.not_run,
            escape(&format_seconds(run.seconds))
        );
    }
    out.push_str("</ul>\n");
    out.push_str(&grid_table(&grid));
    out.push_str(LEGEND);
    for row in &grid.rows {
        for (target, tally) in row.cells.iter().enumerate() {
            for (status, tests) in &tally.tests {
                out.push_str(&tests_section(report, &grid, row, target, *status, tests));
            }
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

const LEGEND: &str = "<p class=\"legend\"><span class=\"count held\">held</span> the bound held \
    · <span class=\"count known-gap\">known gap</span> it failed as the target's gap list says \
    · <span class=\"count fixed\">fixed?</span> a listed gap did not fire (news) \
    · <span class=\"count fail\">FAIL</span> it failed otherwise \
    · <span class=\"count no-verdict\">no verdict</span> the test concluded nothing (never a \
    pass). The oracle's row counts the tests' runs by their worst invariant verdict.</p>\n";

fn grid_table(grid: &Grid) -> String {
    let mut out = String::from("<table id=\"grid\">\n<thead><tr><th>bound (tests)</th>");
    for target in &grid.targets {
        let _ = write!(out, "<th>{}</th>", escape(target));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &grid.rows {
        let class = if row.is_oracle() {
            " class=\"oracle\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr{class}><th scope=\"row\">{}</th>",
            escape(&row.words())
        );
        for (target, tally) in row.cells.iter().enumerate() {
            out.push_str("<td>");
            out.push_str(&counts(row, target, tally));
            out.push_str("</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

fn counts(row: &GridRow, target: usize, tally: &Tally) -> String {
    if tally.is_empty() {
        return "-".to_owned();
    }
    let mut out = String::new();
    for (status, tests) in &tally.tests {
        let _ = write!(
            out,
            "<a class=\"count {}\" href=\"#{}\">{} {}</a>",
            status.slug(),
            anchor(row, target, *status),
            tests.len(),
            status.words(row.is_oracle())
        );
    }
    out
}

fn tests_section(
    report: &Report,
    grid: &Grid,
    row: &GridRow,
    target: usize,
    status: Status,
    tests: &[usize],
) -> String {
    let mut out = format!(
        "<section class=\"tests\" id=\"{}\">\n<h2>{} · {} · {} ({} test{})</h2>\n<ul>\n",
        anchor(row, target, status),
        escape(&row.words()),
        escape(&grid.targets[target]),
        status.words(row.is_oracle()),
        tests.len(),
        if tests.len() == 1 { "" } else { "s" }
    );
    for index in tests {
        let test = &report.rows[*index];
        let cell = &test.cells[target];
        // The verdicts that speak to this row: the bound's own, or the oracle's.
        let figures: Vec<String> = cell
            .verdicts
            .iter()
            .filter(|v| {
                if row.is_oracle() {
                    is_oracle(v) && v.outcome != fixtures::verdict::Outcome::Pass
                } else {
                    !is_oracle(v) && v.bound == row.bound
                }
            })
            .map(|v| match &v.message {
                Some(message) if v.outcome.fails_the_test() => {
                    format!("{} — {message}", v.figure())
                }
                _ => v.figure(),
            })
            .collect();
        let _ = write!(
            out,
            "<li><b>{}</b> {} — <span class=\"verdict\">{}</span>",
            escape(&test.package),
            escape(&test.scenario),
            escape(&cell.label)
        );
        if !figures.is_empty() {
            let _ = write!(
                out,
                "<br><span class=\"figures\">{}</span>",
                escape(&figures.join("; "))
            );
        }
        if let Some(why) = &cell.why {
            let _ = write!(out, "<br><span class=\"why\">{}</span>", escape(why));
        }
        let _ = writeln!(out, "<br><code>{}</code></li>", escape(&test.key));
    }
    out.push_str("</ul>\n<p><a href=\"#grid\">back to the grid</a></p>\n</section>\n");
    out
}
