//! Cards a person is holding are never decomposed by the gateway, while a fresh card beside them
//! is. (The `--no-auto-decompose` opt-out is the reference's own flag: see `reference_only`.)

use fixtures::rows::Hold;
use judge::prelude::*;
use rstest::rstest;

use crate::PROBE_TICKS;

#[rstest]
fn human_holds_are_never_auto_decomposed_while_a_fresh_card_is(
    #[with(Config::gateway())] board: Board,
) {
    let aux = board.aux();
    let holds: Vec<(Hold, String)> = Hold::ALL
        .into_iter()
        .map(|hold| {
            let id = board.create(&format!("a hold: {}", hold.describe()), &["--triage"]);
            board.arrange_hold(&id, hold);
            (hold, id)
        })
        .collect();
    let fresh = board.create("a fresh idea", &["--triage"]);

    let mut run = board.scenario();
    run.start()
        .until_left_triage(&fresh, "the fresh card auto-decomposed")
        .prove_ticks(PROBE_TICKS);
    let seen = run.stop();

    let rows = board.rows();
    let touched: Vec<String> = holds
        .iter()
        .filter_map(|(hold, id)| {
            let bills = aux.billed_for(id);
            let status = rows.status(id);
            (bills > 0 || status != "triage").then(|| {
                format!(
                    "{} card billed {bills} aux calls, status={status}",
                    hold.describe()
                )
            })
        })
        .collect();
    bound("human holds touched by the dispatcher", touched.len())
        .at_most(0)
        .over(&seen)
        .note(|| touched.join("; "))
        .gap(GapKind::HoldDecomposed);
    bound(
        "bills for the fresh card beside the holds",
        aux.billed_for(&fresh),
    )
    .exactly(1)
    .over(&seen)
    .context(|| board.diag(&fresh))
    .gap(GapKind::RebilledAfterDecompose);
}
