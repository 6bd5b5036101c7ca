//! The original suite's CLI test, ported: one decompose call answering 500 children must be
//! rejected or capped, never fanned out.

use fixtures::snapshot::BoardRows;
use judge::prelude::*;
use rstest::rstest;

use crate::{decompose_card, SEED_MAX_CHILDREN};

#[rstest]
fn huge_decompose_reply_is_bounded(board: Board) {
    let aux = board.aux();
    let root = board.create("tiny chore", &["--triage"]);
    aux.reply(&root, Reply::graph(500, &[]));

    let run = decompose_card(&board, &root);

    let rows = board.rows();
    let kids = rows.children_of(&root);
    bound("child rows", kids.len())
        .at_most(SEED_MAX_CHILDREN)
        .context(|| board.diag(&root))
        .gap(GapKind::UnboundedFanout);
    bound("requests for one decompose", aux.billed_for(&root))
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    // A rejection leaves the root in triage with zero children; a cap leaves every child it
    // wrote linked under the root.
    Findings::new()
        .that(!kids.is_empty() || rows.status(&root) == "triage", || {
            "no children, yet the root left triage".to_owned()
        })
        .equal(
            "task rows (root + linked children)",
            &board.task_count(),
            &(1 + kids.len()),
        )
        .verdict("the reply is applied whole or not at all")
        .context(|| board.diag(&root))
        .gap(GapKind::PartialGraph);
    assert_rows_snapshot!(
        "huge_reply_rejected",
        "a 500-child reply through `kanban decompose ID`: rejected whole, the root stays in triage",
        BoardRows::capture(&board, &[&root])
    );
}
