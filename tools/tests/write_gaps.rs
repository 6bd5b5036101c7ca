//! `--write-gaps` round trip: failures judged by the suite's own judge with no gap list are
//! drafted into a list, and the same verdicts judged again under that list are known gaps, while
//! what no list can excuse stays a failure.

use std::path::Path;

use fixtures::gaps::{GapKind, GapList};
use fixtures::verdict::{bound, records_dir_in, records_file_in, Judge, Outcome};
use tools::junit::Case;
use tools::report::{Report, TargetRun};

const TARGET: &str = "my-fork";
const SEED: &str = "gateway-tests::seed::failing_triage_card_is_not_rebilled_every_tick::malformed";
const HUGE: &str = "cli-tests::seed::huge_decompose_reply_is_bounded";
const RESTART: &str = "gateway-tests::restarts::poison_card_budget_survives_restarts";

/// Judges this run's verdicts under `list`, recording under `target_dir`; their outcomes in
/// order.
fn judge_run(list: &GapList, target_dir: &Path, seed_bills: u64) -> Vec<Outcome> {
    let judge = |test: &str| Judge::new(TARGET, list.clone(), records_dir_in(target_dir), test);
    let seed = judge(SEED);
    let huge = judge(HUGE);
    let restart = judge(RESTART);
    let unreached: Result<(), String> = Err("the card was not in flight when it restarted".into());
    [
        bound("bills for doomed card", seed_bills)
            .at_most(3u64)
            .over("7 proven ticks, 8.2 s")
            .note(|| "card t_1a2b3c4d was billed at +1.52s and every tick after".to_owned())
            .judged_quietly(&seed, GapKind::RebilledEveryTick),
        bound("bills for doomed card (board 2)", seed_bills + 3)
            .at_most(3u64)
            .over("7 proven ticks, 9.0 s")
            .judged_quietly(&seed, GapKind::RebilledEveryTick),
        bound("child rows", 500u64)
            .at_most(64u64)
            .judged_quietly(&huge, GapKind::UnboundedFanout),
        bound(
            "exit code of `kanban decompose` with --all and an id (HTTP 2)",
            0u64,
        )
        .exactly(2u64)
        .judged_quietly(&huge, GapKind::WrongExitCode),
        bound("bills across the restart", 4u64)
            .at_most(3u64)
            .provided(&unreached)
            .judged_quietly(&restart, GapKind::BudgetNotPersisted),
        bound("the gateway kept running", 0u64)
            .exactly(1u64)
            .judged_quietly(&restart, GapKind::GatewayExited),
    ]
    .into_iter()
    .map(|judged| judged.outcome)
    .collect()
}

fn report_of(target_dir: &Path) -> Report {
    let verdicts =
        tools::verdicts::read(&records_file_in(target_dir, TARGET)).expect("the records written");
    let case = |key: &str, name: &str| Case {
        key: key.to_owned(),
        name: name.to_owned(),
        has_case: false,
        passed: false,
        failure: Some("failed".to_owned()),
        time: None,
    };
    let run = TargetRun {
        name: TARGET.to_owned(),
        describes: "a fork under review".to_owned(),
        gap_list: "none".to_owned(),
        cases: vec![
            case(
                SEED,
                "seed::failing_triage_card_is_not_rebilled_every_tick::case_1_malformed",
            ),
            case(HUGE, "seed::huge_decompose_reply_is_bounded"),
            case(RESTART, "restarts::poison_card_budget_survives_restarts"),
        ],
        verdicts,
        seconds: 1.0,
        pace: None,
    };
    Report::build(vec![run], "2026-12-03".to_owned())
}

#[test]
fn a_drafted_list_excuses_the_failures_it_drafts_when_judged_again() {
    let first = tempfile::tempdir().unwrap();
    let before = judge_run(&GapList::none(), first.path(), 14);
    assert!(
        before.iter().all(|outcome| *outcome == Outcome::Fail),
        "{before:?}"
    );

    let yaml = tools::gaps_draft::draft(&report_of(first.path()), 0, &GapList::none(), "a draft")
        .expect("a draft");
    let drafted = GapList::parse(&yaml, "the draft").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(drafted.name(), "my-fork-draft");
    assert_eq!(drafted.listings().len(), 3, "{yaml}");
    assert!(
        drafted.listings().iter().all(|l| l.reason == "TODO"),
        "{yaml}"
    );
    assert!(
        yaml.contains(r"pattern: '(?:bills for doomed card: \d+, expected at most 3 over \d+ proven ticks, [0-9.]+ s; card t_[0-9a-f]+ was billed at \+[0-9.]+s and every tick after)|(?:bills for doomed card \(board \d+\): \d+,"),
        "{yaml}"
    );
    assert!(
        yaml.contains("the card was not in flight"),
        "the unreached verdict is named: {yaml}"
    );
    assert!(
        yaml.contains("GatewayExited is never a known gap"),
        "{yaml}"
    );

    // The next run, under the draft, with other counts: the patterns are general enough.
    let second = tempfile::tempdir().unwrap();
    let after = judge_run(&drafted, second.path(), 27);
    assert_eq!(
        after,
        [
            Outcome::KnownGap,
            Outcome::KnownGap,
            Outcome::KnownGap,
            Outcome::KnownGap,
            Outcome::Fail,
            Outcome::Fail
        ],
        "{yaml}"
    );
}

#[test]
fn a_listing_that_fired_otherwise_is_rewritten_and_the_rest_kept() {
    let list = GapList::parse(
        r"list: fork-1
gaps:
  - test: cli-tests::seed::huge_decompose_reply_is_bounded
    bound: child rows
    kind: UnboundedFanout
    pattern: 'never matches'
    issue: 7
    reason: a fan-out of any size is applied
  - test: '*'
    bound: 'oracle: applied fan-outs keep within the child cap'
    kind: UnboundedFanout
    pattern: 'past the cap of 8'
    reason: no cap
",
        "fork-1",
    )
    .unwrap();
    let first = tempfile::tempdir().unwrap();
    let before = judge_run(&list, first.path(), 14);
    assert_eq!(before[2], Outcome::Mismatch);
    let yaml = tools::gaps_draft::draft(&report_of(first.path()), 0, &list, "a draft").unwrap();
    let drafted = GapList::parse(&yaml, "the draft").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(drafted.name(), "fork-1");
    let rewritten = drafted
        .listing_for(HUGE, "child rows")
        .expect("the rewritten listing");
    assert_eq!(
        rewritten.reason,
        "TODO (was: a fan-out of any size is applied)"
    );
    assert_eq!(rewritten.issue, None);
    assert!(
        drafted
            .listings()
            .iter()
            .any(|l| l.is_glob() && l.reason == "no cap"),
        "the glob listing is kept: {yaml}"
    );
    let after = judge_run(&drafted, tempfile::tempdir().unwrap().path(), 20);
    assert_eq!(after[..4], [Outcome::KnownGap; 4], "{yaml}");
}

#[test]
fn a_test_drafted_beside_a_glob_keeps_what_the_glob_excused() {
    // The glob excuses the failure without a note; this run's failure carries one: a mismatch.
    let glob = GapList::parse(
        r"list: fork-2
gaps:
  - test: '*'
    bound: 'bills for doomed card'
    kind: RebilledEveryTick
    pattern: 'expected at most 3 over \d+ proven ticks, [0-9.]+ s$'
    reason: no budget
",
        "fork-2",
    )
    .unwrap();
    let first = tempfile::tempdir().unwrap();
    assert_eq!(judge_run(&glob, first.path(), 14)[0], Outcome::Mismatch);
    let yaml = tools::gaps_draft::draft(&report_of(first.path()), 0, &glob, "a draft").unwrap();
    let drafted = GapList::parse(&yaml, "the draft").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let own = drafted
        .listing_for(SEED, "bills for doomed card")
        .expect("the test's own listing");
    assert!(!own.is_glob(), "{yaml}");
    // The next run fails the way the glob excused (no note): the test's own listing, which now
    // wins over the glob there, still excuses it.
    let judge = Judge::new(TARGET, drafted.clone(), records_dir_in(first.path()), SEED);
    let judged = bound("bills for doomed card", 9u64)
        .at_most(3u64)
        .over("5 proven ticks, 4.0 s")
        .judged_quietly(&judge, GapKind::RebilledEveryTick);
    assert_eq!(judged.outcome, Outcome::KnownGap, "{yaml}");
}
