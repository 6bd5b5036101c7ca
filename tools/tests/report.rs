//! The report laid out from sample runs (`testdata/report/`): every kind of cell, the summary and
//! the files' shapes.

use std::path::Path;

use tools::junit;
use tools::report::{Mark, Report, TargetRun};
use tools::verdicts;

fn sample(name: &str, seconds: f64) -> TargetRun {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/report");
    TargetRun {
        name: name.to_owned(),
        describes: format!("the {name} sample"),
        gap_list: if name == "reference" {
            "none"
        } else {
            "upstream-0.19.0"
        }
        .to_owned(),
        cases: junit::read(&dir.join(format!("{name}-junit.xml"))).expect("sample JUnit"),
        verdicts: verdicts::read(&dir.join(format!("{name}.jsonl"))).expect("sample verdicts"),
        seconds,
        pace: None,
    }
}

fn report() -> Report {
    Report::build(
        vec![sample("reference", 12.5), sample("upstream", 201.0)],
        "2026-11-30".to_owned(),
    )
}

fn row<'r>(report: &'r Report, key: &str) -> &'r tools::report::Row {
    report
        .rows
        .iter()
        .find(|r| r.key == key)
        .unwrap_or_else(|| panic!("no row {key}"))
}

#[test]
fn every_kind_of_cell_is_told_apart() {
    let report = report();
    let cells = |key: &str| -> Vec<(Mark, String)> {
        row(&report, key)
            .cells
            .iter()
            .map(|c| (c.mark, c.label.clone()))
            .collect()
    };
    let seed = "gateway-tests::seed::failing_triage_card_is_not_rebilled_every_tick";
    assert_eq!(
        cells(&format!("{seed}::malformed")),
        [
            (Mark::Pass, "pass".to_owned()),
            (Mark::KnownGap, "known gap #118872".to_owned())
        ]
    );
    assert_eq!(
        cells(&format!("{seed}::http_500"))[1],
        (Mark::Fixed, "fixed? (listed #118603)".to_owned())
    );
    assert_eq!(
        cells("gateway-tests::reference_only::hourly_ceiling_holds_across_a_restart"),
        [
            (Mark::Pass, "pass".to_owned()),
            (Mark::NotRun, "n/a".to_owned())
        ]
    );
    assert_eq!(
        cells("cli-tests::json_shape::usage_errors_exit_2_and_bill_nothing::both_id_and_all")[1],
        (Mark::KnownGap, "known gap usage errors exit 0".to_owned()),
        "a gap with no issue is labelled by its reason"
    );
    assert_eq!(
        cells("gateway-tests::restarts::poison_card_budget_survives_restarts_and_sigkill_mid_call"),
        [
            (Mark::NotRun, "n/a".to_owned()),
            (Mark::NoVerdict, "FAIL (no verdict)".to_owned())
        ]
    );
    assert_eq!(
        cells("cli-tests::seed::huge_decompose_reply_is_bounded")[1],
        (Mark::Fail, "FAIL".to_owned())
    );
    assert!(!report.all_held());
}

#[test]
fn cells_carry_counts_bounds_windows_and_reasons() {
    let report = report();
    let seed = "gateway-tests::seed::failing_triage_card_is_not_rebilled_every_tick";
    let malformed = row(&report, &format!("{seed}::malformed"));
    assert_eq!(
        malformed.scenario,
        "seed › failing triage card is not rebilled every tick (malformed)"
    );
    assert_eq!(malformed.bounds, ["B1", "B3"]);
    assert_eq!(
        malformed.cells[1].text(),
        "known gap #118872 · bills for doomed card 14 (≤ 3) over 7 proven ticks, 8.2 s; +1 more verdict(s)"
    );
    assert_eq!(
        malformed.cells[0].text(),
        "pass · bills for doomed card 3 (≤ 3) over 9 proven ticks, 4.0 s; +2 more verdict(s)"
    );

    let mismatch = row(
        &report,
        "gateway-tests::provider_wide::provider_wide_refusal_costs_one_call_not_one_per_card::http_402",
    );
    let text = mismatch.cells[1].text();
    assert!(text.starts_with("FAIL · bills while provider paused 12 (≤ 1) over 60 s (cut short: cards did not leave triage within 60 s)"), "{text}");
    assert!(
        text.contains("listed ProviderFaultNotPaused /bills while paused: \\d+/, seen RebilledEveryTick: cards still in triage"),
        "a mismatch says what was listed and what was seen: {text}"
    );
    assert_eq!(mismatch.cells[0].mark, Mark::NotRun);

    let no_verdict = row(
        &report,
        "gateway-tests::restarts::poison_card_budget_survives_restarts_and_sigkill_mid_call",
    );
    assert_eq!(
        no_verdict.cells[1].text(),
        "FAIL (no verdict) — the board is unreadable: database disk image is malformed"
    );
}

#[test]
fn summary_counts_and_lists_the_news_and_the_failures() {
    let report = report();
    let summary = report.summary();
    let lines: Vec<&str> = summary.lines().collect();
    assert!(lines[0].starts_with("target "), "{summary}");
    assert!(
        lines[1].starts_with("reference ") && lines[1].contains("12.5 s"),
        "{summary}"
    );
    let upstream: Vec<&str> = lines[2].split_whitespace().collect();
    // pass, known gap, fixed?, FAIL, no verdict, n/a
    assert_eq!(
        &upstream[..7],
        ["upstream", "0", "2", "1", "2", "1", "1"],
        "{summary}"
    );
    assert!(lines[2].ends_with("3m 21s"), "{summary}");
    assert!(
        summary.contains("fixed? (a listed gap did not fire"),
        "{summary}"
    );
    assert!(summary.contains("upstream · gateway-tests seed › failing triage card is not rebilled every tick (http 500): fixed? (listed #118603)"), "{summary}");
    assert!(summary.contains("\nFAIL:\n"), "{summary}");
}

#[test]
fn summary_grids_each_bound_by_target_in_tests_with_the_oracle_on_its_own_row() {
    let summary = report().summary();
    let grid: Vec<&str> = summary
        .lines()
        .skip_while(|line| !line.starts_with("bound (tests)"))
        .take_while(|line| !line.is_empty())
        .collect();
    let expected = [
        "bound (tests)        reference  upstream",
        "B1 budget            2 held     1 known gap, 1 fixed?",
        "B3 validation        1 held     1 held, 1 FAIL",
        "B5 provider pause    -          1 FAIL",
        "B6 hourly ceiling    1 held     -",
        "CLI contract         1 held     1 known gap",
        "no bound reached     -          1 no verdict",
        "oracle (whole runs)  1 kept     1 known gap",
    ];
    assert_eq!(grid, expected, "{summary}");
    assert!(
        summary.contains("oracle on upstream, broken: automatic paid calls per card stay within its budget (1 known gap, 0 FAIL)"),
        "{summary}"
    );
}

#[test]
fn each_row_names_only_its_own_bounds_not_the_oracles() {
    let report = report();
    let seed = "gateway-tests::seed::failing_triage_card_is_not_rebilled_every_tick";
    assert_eq!(
        row(&report, &format!("{seed}::malformed")).bounds,
        ["B1", "B3"]
    );
    assert_eq!(
        row(
            &report,
            "cli-tests::json_shape::usage_errors_exit_2_and_bill_nothing::both_id_and_all"
        )
        .bounds,
        ["cli"]
    );
}

#[test]
fn markdown_and_json_keep_every_verdict() {
    let report = report();
    let md = report.markdown();
    assert!(
        md.contains("| suite | scenario | bound | reference | upstream |"),
        "{md}"
    );
    assert!(md.contains("| gateway-tests | seed › failing triage card is not rebilled every tick (malformed) | B1 budget, B3 validation |"), "{md}");
    assert!(md.contains("- B5 (provider pause): "), "{md}");
    assert!(
        md.contains("\n- CLI contract: the CLI's exit codes"),
        "{md}"
    );
    assert!(
        md.contains(
            "- **upstream**: 0 pass, 2 known gap(s), 1 fixed?, 2 FAIL, 1 no verdict, 1 n/a"
        ),
        "{md}"
    );
    let json = report.json();
    assert_eq!(json["all_held"], false);
    let rows = json["rows"].as_array().unwrap();
    let total: usize = rows
        .iter()
        .flat_map(|r| r["cells"].as_object().unwrap().values())
        .map(|c| c["verdicts"].as_array().unwrap().len())
        .sum();
    assert!(
        md.contains("| bound (tests) | reference | upstream |\n|---|---|---|\n| B1 budget | 2 held | 1 known gap, 1 fixed? |"),
        "the grid heads the table: {md}"
    );
    assert_eq!(
        total, 13,
        "every verdict record of both samples is in the JSON"
    );
    assert_eq!(json["targets"][1]["counts"]["fixed"], 1);
    assert_eq!(
        rows[0]["cells"]["upstream"]["mark"].as_str(),
        Some("known_gap")
    );
}

#[test]
fn the_json_is_versioned_and_carries_the_grid() {
    let json = report().json();
    assert_eq!(json["format_version"], tools::report::FORMAT_VERSION);
    let grid = json["grid"].as_array().unwrap();
    let b1 = grid.iter().find(|row| row["bound"] == "B1").unwrap();
    assert_eq!(b1["words"], "B1 budget");
    assert_eq!(
        b1["cells"]["upstream"]["known-gap"],
        serde_json::json!([
            "gateway-tests::seed::failing_triage_card_is_not_rebilled_every_tick::malformed"
        ])
    );
    let oracle = grid.iter().find(|row| row["bound"] == "oracle").unwrap();
    assert_eq!(
        oracle["cells"]["reference"]["held"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(json["targets"][1]["counts"]["no_verdict"], 1);
}

/// The opening tag `<name …>` in `xml`, or nothing.
fn element<'x>(xml: &'x str, name: &str) -> &'x str {
    let Some(start) = xml.find(&format!("<{name} ")) else {
        return "";
    };
    let end = xml[start..].find('>').map_or(xml.len(), |end| start + end);
    &xml[start..end]
}

#[test]
fn the_verdicts_junit_marks_a_known_gap_as_no_plain_pass() {
    let xml = tools::verdict_junit::write(&report()).unwrap();
    let case = |key: &str, target: &str| -> String {
        let suite_start = xml
            .find(&format!("<testsuite name=\"conformance: {target}\""))
            .unwrap_or_else(|| panic!("no suite for {target}:\n{xml}"));
        let suite = &xml[suite_start..];
        let suite = &suite[..suite.find("</testsuite>").unwrap()];
        let start = suite
            .find(&format!("<testcase name=\"{key}\""))
            .unwrap_or_else(|| panic!("no case {key} on {target}:\n{xml}"));
        let end = suite[start..].find("</testcase>").unwrap();
        suite[start..start + end].to_owned()
    };
    let seed = "gateway-tests::seed::failing_triage_card_is_not_rebilled_every_tick";
    let known = case(&format!("{seed}::malformed"), "upstream");
    assert!(
        element(&known, "skipped").contains("type=\"known gap\""),
        "{known}"
    );
    assert!(known.contains("known gap #118872"), "{known}");
    let passed = case(&format!("{seed}::malformed"), "reference");
    assert!(
        !passed.contains("<skipped") && !passed.contains("<failure") && !passed.contains("<error"),
        "{passed}"
    );
    let fixed = case(&format!("{seed}::http_500"), "upstream");
    assert!(
        fixed.contains("name=\"verdict\" value=\"fixed? (listed #118603)\""),
        "{fixed}"
    );
    let failed = case(
        "cli-tests::seed::huge_decompose_reply_is_bounded",
        "upstream",
    );
    assert!(
        element(&failed, "failure").contains("type=\"FAIL\""),
        "{failed}"
    );
    let no_verdict = case(
        "gateway-tests::restarts::poison_card_budget_survives_restarts_and_sigkill_mid_call",
        "upstream",
    );
    assert!(
        element(&no_verdict, "error").contains("type=\"no verdict\""),
        "{no_verdict}"
    );
    assert!(
        !xml.contains(
            "poison_card_budget_survives_restarts_and_sigkill_mid_call\" classname=\"reference"
        ),
        "a test not run on a target is not in its suite"
    );
}
