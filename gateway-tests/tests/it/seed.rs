//! The original pytest suite's gateway tests, with the same bounds: a card whose decomposition
//! always fails is not re-billed on every tick, and a valid graph bills once and links its
//! children.

use fixtures::aux_model::child_title;
use fixtures::rows::Event;
use judge::prelude::*;
use rstest::rstest;

use crate::support::{no_graph_findings, rebill_note, spend_budget};
use crate::{MAX_FAILED_ATTEMPTS, PROBE_TICKS, SHORT_BACKOFF};

/// Children in the green control's graph.
const SEED_CHILDREN: usize = 3;

/// Probes proven after the green control's root was decomposed.
const CONTROL_PROBES: usize = 2;

#[rstest]
#[case::malformed(Reply::malformed())]
#[case::http_500(Reply::http_error(500, "upstream exploded"))]
fn failing_triage_card_is_not_rebilled_every_tick(
    #[case] reply: Reply,
    #[with(Config::gateway().backoff(SHORT_BACKOFF))] board: Board,
) {
    let aux = board.aux();
    let doomed = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&doomed, reply);

    let mut run = board.scenario();
    run.start().first_bill(&doomed);
    spend_budget(&mut run, &doomed);
    run.prove_ticks(PROBE_TICKS);
    let bills = aux.billed_for(&doomed);
    let seen = run.stop();

    bound("bills for doomed card", bills)
        .at_most(MAX_FAILED_ATTEMPTS)
        .over(&seen)
        .note(|| rebill_note(&board, &doomed, &[Setting::Backoff]))
        .context(|| board.diag(&doomed))
        .gap(GapKind::RebilledEveryTick);
    no_graph_findings(&board, &doomed)
        .verdict("failed decomposition wrote no rows")
        .context(|| board.diag(&doomed))
        .gap(GapKind::FailureWroteRows);
}

#[rstest]
fn valid_three_child_graph_bills_once_and_links_children(#[with(Config::gateway())] board: Board) {
    let aux = board.aux();
    let root = board.create("ship the feature", &["--triage"]);
    aux.reply(&root, Reply::graph(SEED_CHILDREN, &[(2, &[0])]));

    let mut run = board.scenario();
    run.start()
        .until_left_triage(&root, "the root to be auto-decomposed")
        .prove_ticks(CONTROL_PROBES);
    let bills = aux.billed_for(&root);
    let seen = run.stop();

    bound("bills for valid root", bills)
        .exactly(1)
        .over(&seen)
        .context(|| board.diag(&root))
        .gap(GapKind::RebilledAfterDecompose);

    let rows = board.rows();
    let kids = rows.children_of(&root);
    let status = rows.status(&root);
    let by_title = rows.children_by_title(&root);
    let id_of = |i: usize| by_title.get(&child_title(i)).cloned().unwrap_or_default();
    let titles: Vec<String> = by_title.keys().cloned().collect();
    let mut expected_titles: Vec<String> = (0..SEED_CHILDREN).map(child_title).collect();
    expected_titles.sort();
    let child_ids: Vec<Vec<String>> = rows
        .events(&root, "decomposed")
        .iter()
        .map(Event::child_ids)
        .collect();
    Findings::new()
        .equal("children", &kids.len(), &SEED_CHILDREN)
        .that(status != "triage" && status != "archived", || {
            format!("the root must leave triage and stay live, got {status:?}")
        })
        .equal(
            "task rows (root + children + tick probes)",
            &board.task_count(),
            &(1 + SEED_CHILDREN + seen.window.probes().len()),
        )
        .equal("child titles", &titles, &expected_titles)
        .that(rows.has_link(&id_of(0), &id_of(2)), || {
            "declared dependency child 0 -> child 2 was not persisted".to_owned()
        })
        .equal(
            "`decomposed` events' child_ids",
            &child_ids,
            &vec![(0..SEED_CHILDREN).map(id_of).collect::<Vec<_>>()],
        )
        .verdict("valid graph applied as replied")
        .context(|| board.diag(&root))
        .gap(GapKind::ReplyNotApplied);
}
