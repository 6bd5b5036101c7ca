//! The original suite's CLI test, ported: one decompose call answering 500 children must be
//! rejected or capped, never fanned out.

use fixtures::observe;
use fixtures::prelude::*;
use fixtures::snapshot::BoardRows;
use rstest::rstest;

use crate::{decompose_card, MAX_CHILDREN};

#[rstest]
fn huge_decompose_reply_is_bounded(board: Board) {
    let aux = board.aux();
    let root = board.create("tiny chore", &["--triage"]);
    aux.reply(&root, Reply::graph(500, &[]));

    let run = decompose_card(&board, &root);

    assert_eq!(
        aux.billed_for(&root),
        1,
        "the decompose CLI must make exactly one aux call\n{}",
        run.output
    );
    let kids = board.children_of(&root);
    // A rejection leaves the root in triage with zero children; a cap leaves <= the bound.
    assert!(
        !kids.is_empty() || board.task(&root).status == "triage",
        "no children, yet the root left triage\n{}",
        board.diag(&root)
    );
    assert_eq!(
        board.task_count(),
        1 + kids.len(),
        "child rows exist that are not linked under the root\n{}",
        board.diag(&root)
    );
    observe::record("child_rows", kids.len(), Some(MAX_CHILDREN));
    known_gate("huge_decompose_reply_is_bounded", || {
        if kids.len() > MAX_CHILDREN {
            return Err(Gap::new(
                GapKind::UnboundedFanout,
                format!(
                    "500-child reply created {} child rows (bound {MAX_CHILDREN})",
                    kids.len()
                ),
            ));
        }
        Ok(())
    });
    assert_rows_snapshot!(
        "huge_reply_rejected",
        "a 500-child reply through `kanban decompose ID`: rejected whole, the root stays in triage",
        BoardRows::capture(&board, &[&root])
    );
}
