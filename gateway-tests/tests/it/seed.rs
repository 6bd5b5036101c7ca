//! The original pytest suite's gateway tests, with the same bounds: a card whose decomposition
//! always fails is not re-billed on every tick, and a valid graph bills once and links its
//! children.

use fixtures::aux_model::child_title;
use judge::prelude::*;
use rstest::rstest;

use crate::support::{no_graph_findings, rebill_note, spend_budget};
use crate::{MAX_FAILED_ATTEMPTS, PROBE_TICKS, SHORT_BACKOFF};

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
    let root = board.create("ship the feature", &["--triage"]);
    board.aux().reply(&root, Reply::graph(3, &[(2, &[0])]));
    let mut run = board.scenario();
    run.start()
        .until_left_triage(&root, "the root decomposed")
        .prove_ticks(2);
    let (bills, seen) = (board.aux().billed_for(&root), run.stop());

    bound("bills for valid root", bills)
        .exactly(1)
        .over(&seen)
        .gap(GapKind::RebilledAfterDecompose);
    let (graph, status) = (board.rows().graph(&root), board.rows().status(&root));
    let kids: Vec<String> = (0..3).map(child_title).collect();
    let probes = seen.window.probes().len();
    Findings::new()
        .equal("child titles", &graph.titles(), &kids)
        .that(!["triage", "archived"].contains(&&*status), || {
            format!("root {status}")
        })
        .equal("task rows", &board.task_count(), &(1 + 3 + probes))
        .that(graph.has_edge(&kids[0], &kids[2]), || "no edge 0->2".into())
        .equal("decomposed", graph.decomposed(), &[kids.clone()][..])
        .verdict("valid graph applied as replied")
        .context(|| board.diag(&root))
        .gap(GapKind::ReplyNotApplied);
}
