//! `kanban decompose --all` and human holds (SPEC B7): the sweep never bills a card with prior
//! runs or a `needs_input` / `capability` block, while an explicit `kanban decompose ID` on such a
//! card is a person's choice and makes exactly one request.

use fixtures::observe;
use fixtures::prelude::*;
use fixtures::snapshot::BoardRows;
use rstest::rstest;

use crate::{decompose_all, decompose_card};

/// A state that makes a triage card a human hold. No CLI verb produces these; real boards reach
/// them through workers and block recurrence, so they are arranged as that other writer would.
#[derive(Debug, Clone, Copy)]
enum Hold {
    PriorRun,
    NeedsInput,
    Capability,
}

impl Hold {
    const ALL: [Hold; 3] = [Hold::PriorRun, Hold::NeedsInput, Hold::Capability];

    fn arrange(self, board: &Board, id: &str) {
        let sql = match self {
            Hold::PriorRun => "UPDATE tasks SET started_at = created_at WHERE id = ?1",
            Hold::NeedsInput => "UPDATE tasks SET block_kind = 'needs_input' WHERE id = ?1",
            Hold::Capability => "UPDATE tasks SET block_kind = 'capability' WHERE id = ?1",
        };
        assert_eq!(
            board.simulate_other_writer(sql, [id]),
            1,
            "{self:?} arranged on {id}"
        );
    }
}

#[rstest]
fn sweep_leaves_human_holds_alone(board: Board) {
    let aux = board.aux();
    let fresh = board.create("a fresh idea", &["--triage"]);
    let holds: Vec<(Hold, String)> = Hold::ALL
        .into_iter()
        .map(|hold| {
            let id = board.create(&format!("a hold: {hold:?}"), &["--triage"]);
            hold.arrange(&board, &id);
            (hold, id)
        })
        .collect();
    aux.reply(&fresh, Reply::graph(2, &[]));

    let sweep = decompose_all(&board);

    assert_eq!(
        aux.billed_for(&fresh),
        1,
        "the fresh card is attempted once\n{}",
        sweep.output
    );
    assert_eq!(board.children_of(&fresh).len(), 2, "{}", board.diag(&fresh));
    let fresh_line = sweep.line_for(&fresh);
    assert!(
        fresh_line.is_some_and(|line| line["ok"] == true),
        "one ok line for the fresh card\n{}",
        sweep.output
    );
    let hold_bills: usize = holds.iter().map(|(_, id)| aux.billed_for(id)).sum();
    observe::record("bills_for_holds", hold_bills, Some(0));
    // Billing a hold, moving it out of triage and reporting it attempted are one failure seen
    // three ways; the message leads with the bills.
    let touched: Vec<String> = holds
        .iter()
        .filter_map(|(hold, id)| {
            let bills = aux.billed_for(id);
            let status = board.task(id).status;
            let reported = sweep.line_for(id).is_some();
            (bills > 0 || status != "triage" || reported).then(|| {
                format!("{hold:?} {id}: {bills} bills, status {status}, reported {reported}")
            })
        })
        .collect();
    known_gate("sweep_skips_human_holds", || {
        if touched.is_empty() {
            return Ok(());
        }
        Err(Gap::new(
            GapKind::HoldDecomposed,
            format!(
                "decompose --all billed {hold_bills} calls for human holds: {touched:#?}\n{}",
                sweep.output
            ),
        ))
    });
    let mut watched = vec![fresh.as_str()];
    watched.extend(holds.iter().map(|(_, id)| id.as_str()));
    assert_rows_snapshot!(
        "sweep_with_holds",
        "`decompose --all` over a fresh card and three human holds: only the fresh card is decomposed",
        BoardRows::capture(&board, &watched)
    );
}

#[rstest]
#[case::prior_run(Hold::PriorRun)]
#[case::needs_input(Hold::NeedsInput)]
#[case::capability(Hold::Capability)]
fn explicit_decompose_of_a_hold_makes_one_request(#[case] hold: Hold, board: Board) {
    let aux = board.aux();
    let card = board.create("a card a person holds", &["--triage"]);
    hold.arrange(&board, &card);
    aux.reply(&card, Reply::graph(2, &[]));

    let run = decompose_card(&board, &card);

    let bills = aux.billed_for(&card);
    observe::record("bills", bills, Some(1));
    assert_eq!(
        bills, 1,
        "an explicit decompose is one request\n{}",
        run.output
    );
    assert_eq!(run.ok(), Some(true), "{}", run.output);
    assert_eq!(board.children_of(&card).len(), 2, "{}", board.diag(&card));
}
