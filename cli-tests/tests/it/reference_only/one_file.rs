//! What the reference's own records keep in a copy of `kanban.db` alone made after CLI verbs:
//! every paid call's ledger row and the failed card's attempt.

use judge::prelude::*;
use rstest::rstest;

use crate::one_file::run_verbs;

#[rstest]
fn a_copy_of_kanban_db_alone_after_cli_verbs_holds_every_paid_call(board: Board) {
    let verbs = run_verbs(&board);
    let copy = Board::new(Config::plain());
    copy.restore_board_file_from(&board);
    let mut findings = Findings::new();
    for card in [&verbs.decomposed, &verbs.failed] {
        findings = findings
            .equal(
                &format!("ledger rows of {card} in the copy"),
                &copy.rows().ledger(card),
                &board.rows().ledger(card),
            )
            .equal(
                &format!("decompose record of {card} in the copy"),
                &copy.rows().decompose_state(card),
                &board.rows().decompose_state(card),
            );
    }
    findings = findings.equal("paid calls", &copy.rows().ledger(&verbs.failed).len(), &1);
    findings
        .verdict("a copy of kanban.db alone after CLI verbs holds every paid call")
        .gap(GapKind::CallNotVisible);
}
