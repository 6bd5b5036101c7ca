//! `kanban decompose --all` and human holds (contract §7 B7): the sweep never bills a card with prior
//! runs or a `needs_input` / `capability` block, while an explicit `kanban decompose ID` on such a
//! card is a person's choice and makes exactly one request.

use fixtures::rows::Hold;
use fixtures::snapshot::BoardRows;
use judge::prelude::*;
use rstest::rstest;

use crate::{applied_with_two_children, decompose_all, decompose_card};

#[rstest]
fn sweep_leaves_human_holds_alone(board: Board) {
    let aux = board.aux();
    let fresh = board.create("a fresh idea", &["--triage"]);
    let holds: Vec<(Hold, String)> = Hold::ALL
        .into_iter()
        .map(|hold| {
            let id = board.create(&format!("a hold: {hold:?}"), &["--triage"]);
            board.arrange_hold(&id, hold);
            (hold, id)
        })
        .collect();
    aux.reply(&fresh, Reply::graph(2, &[]));

    let sweep = decompose_all(&board);
    // Holds left alone tell something only of a sweep that went to the provider at all.
    let swept = if aux.bills() > 0 {
        Ok(())
    } else {
        Err("the sweep sent no request at all, not even for the fresh card".to_owned())
    };

    let rows = board.rows();
    // Billing a hold, moving it out of triage and reporting it attempted are one failure seen
    // three ways; the message leads with the bills.
    let touched: Vec<String> = holds
        .iter()
        .filter_map(|(hold, id)| {
            let bills = aux.billed_for(id);
            let status = rows.status(id);
            let reported = sweep.line_for(id).is_some();
            (bills > 0 || status != "triage" || reported).then(|| {
                format!("{hold:?} {id}: {bills} bills, status {status}, reported {reported}")
            })
        })
        .collect();
    bound("human holds touched by the sweep", touched.len())
        .at_most(0)
        .note(|| touched.join("; "))
        .context(|| sweep.output.to_string())
        .provided(&swept)
        .gap(GapKind::HoldDecomposed);
    Findings::new()
        .equal("bills for the fresh card", &aux.billed_for(&fresh), &1)
        .equal("its children", &rows.children_of(&fresh).len(), &2)
        .that(
            sweep
                .line_for(&fresh)
                .is_some_and(|line| line["ok"] == true),
            || "no ok line for the fresh card".to_owned(),
        )
        .verdict("the sweep decomposes the fresh card beside the holds")
        .context(|| format!("{}\n{}", sweep.output, board.diag(&fresh)))
        .gap(GapKind::ReplyNotApplied);
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
    board.arrange_hold(&card, hold);
    aux.reply(&card, Reply::graph(2, &[]));

    let run = decompose_card(&board, &card);

    bound("requests for one decompose", aux.billed_for(&card))
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    applied_with_two_children(&board, &card, &run)
        .verdict("a person's decompose of a hold is applied")
        .context(|| format!("{}\n{}", run.output, board.diag(&card)))
        .gap(GapKind::ReplyNotApplied);
}

/// `decompose --all` is a bulk path a cron job may run: with `kanban.auto_decompose: false` it
/// sends nothing, exits 1 and says why, while an explicit `decompose ID` still decomposes a card.
#[rstest]
fn sweep_sends_nothing_while_the_kill_switch_is_off(
    #[with(Config::plain().kill_switch(false))] board: Board,
) {
    let aux = board.aux();
    let cards: Vec<String> = (0..3)
        .map(|i| board.create(&format!("idea {i} while switched off"), &["--triage"]))
        .collect();
    for card in &cards {
        aux.reply(card, Reply::graph(2, &[]));
    }

    let sweep = decompose_all(&board);
    let bills_of_the_sweep = aux.bills();
    let by_hand = decompose_card(&board, &cards[0]);
    // A sweep that bills nothing shows the switch at work only if the provider was there to
    // bill: the sweep reached it, or the decompose by hand after it did.
    let reachable = if bills_of_the_sweep > 0 || aux.bills() > bills_of_the_sweep {
        Ok(())
    } else {
        Err("neither the sweep nor the decompose by hand reached the provider".to_owned())
    };

    bound(
        "bills of a sweep with the kill switch off",
        bills_of_the_sweep,
    )
    .exactly(0)
    .note(|| board.setting(Setting::KillSwitch))
    .context(|| sweep.output.to_string())
    .provided(&reachable)
    .gap(GapKind::KillSwitchIgnored);
    Findings::new()
        .equal(
            "exit code of the switched-off sweep",
            &sweep.output.code,
            &Some(1),
        )
        .equal("lines of the switched-off sweep", &sweep.lines.len(), &0)
        .that(
            sweep.output.stderr.contains("kanban.auto_decompose"),
            || "the sweep does not say the kill switch stopped it".to_owned(),
        )
        .verdict("a switched-off sweep refuses, naming kanban.auto_decompose")
        .context(|| sweep.output.to_string())
        .gap(GapKind::UnclearRefusal);
    bound(
        "requests of a decompose by hand with the kill switch off",
        aux.billed_for(&cards[0]),
    )
    .exactly(1)
    .context(|| by_hand.output.to_string())
    .gap(GapKind::NotOneRequest);
}
