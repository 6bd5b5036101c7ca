//! Cards another tool wrote with text that is not text, as the reference answers them: set
//! aside without a request (parked, so `unpark` is the way back once the row is fixed), with one
//! WARN naming each card and saying why.

use judge::prelude::*;
use rstest::rstest;

use crate::PROBE_TICKS;

#[rstest]
fn cards_whose_text_is_not_text_are_set_aside_unpaid_with_one_warning_each(
    #[with(Config::gateway())] board: Board,
) {
    let aux = board.aux();
    let unreadable = board.arrange_cards_not_text();
    let mut run = board.scenario();
    run.start().prove_ticks(PROBE_TICKS);
    let log = run.log();
    let seen = run.stop();

    let rows = board.rows();
    for card in &unreadable {
        let warnings = fixtures::gateway::parked_warnings(&log)
            .iter()
            .filter(|warned| *warned == card)
            .count();
        bound(format!("WARN lines setting {card} aside"), warnings)
            .exactly(1)
            .over(&seen)
            .context(|| log.clone())
            .gap(GapKind::UnreadableCardBlocks);
        let parked = rows.events(card, "decompose_parked");
        Findings::new()
            .equal("requests", &aux.billed_for(card), &0)
            .equal("decompose_parked events", &parked.len(), &1)
            .that(
                parked
                    .first()
                    .and_then(|event| event.payload["reason"].as_str())
                    .is_some_and(|reason| {
                        reason.contains("not valid UTF-8") || reason.contains("BLOB")
                    }),
                || format!("the parked event says why: {parked:?}"),
            )
            .equal(
                "parked",
                &rows.decompose_state(card).map(|state| state.parked),
                &Some(true),
            )
            .verdict(format!("{card} is set aside without a request"))
            .over(&seen)
            .context(|| board.diag(card))
            .gap(GapKind::BilledForNothing);
    }
}
