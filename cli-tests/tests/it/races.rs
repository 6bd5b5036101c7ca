//! Two `kanban decompose` processes racing on one card: exactly one graph is applied, never two
//! (contract §7 B4: the apply transaction re-checks that the card is still in triage).

use fixtures::cli::CliOutput;
use judge::prelude::*;

use crate::{assert_no_crash, json_lines};

#[rstest::rstest]
fn two_racing_decomposes_apply_exactly_one_graph(board: Board) {
    let aux = board.aux();
    let root = board.create("one card, two hands", &["--triage"]);
    // The first call is answered only once both processes have sent theirs or ended: however
    // slow the target is to start them, neither decides after the first graph was applied.
    // Any later call is answered at once, so a target without a claim races on its own.
    let gate = Gate::new();
    aux.reply_in_turn(
        &root,
        vec![
            Reply::graph(3, &[(2, &[0])]).gated(&gate),
            Reply::graph(3, &[(2, &[0])]),
        ],
    );

    let args = ["kanban", "decompose", root.as_str(), "--json"];
    let (outputs, both_decided) = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| board.cli_unchecked(args)))
            .collect();
        let both_decided = try_wait_until(
            || {
                let ended = racers.iter().filter(|racer| racer.is_finished()).count();
                let calls = aux.billed_for(&root);
                calls > 0 && ended + calls >= 2
            },
            board.target().cli_timeout(&["decompose"]),
            "both decomposes to send their call or end",
        );
        gate.release();
        let outputs: Vec<CliOutput> = racers
            .into_iter()
            .map(|racer| match racer.join() {
                Ok(output) => output,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect();
        (outputs, both_decided)
    });
    let raced = match both_decided {
        Err(timeout) => Err(timeout.to_string()),
        Ok(()) => aux.open_until_released(&root, &gate).map(|_| ()),
    }
    .map_err(|seen| {
        format!("the second decompose did not decide while the first call was out: {seen}")
    });

    for output in &outputs {
        assert_no_crash(output);
    }
    let rows = board.rows();
    let successes = outputs
        .iter()
        .flat_map(json_lines)
        .filter(|line| line["ok"] == true)
        .count();
    let transcript = || format!("{}\n{}\n{}", outputs[0], outputs[1], board.diag(&root));
    bound(
        "graphs applied by two racing decomposes",
        rows.events(&root, "decomposed").len(),
    )
    .exactly(1)
    .context(transcript)
    .provided(&raced)
    .gap(GapKind::DoubleApply);
    Findings::new()
        .equal(
            "children linked under the root",
            &rows.children_of(&root).len(),
            &3,
        )
        .equal("task rows", &board.task_count(), &4)
        .equal("links", &rows.links().len(), &4)
        .equal("processes reporting success", &successes, &1)
        .verdict("one graph's rows, one success")
        .context(transcript)
        .provided(&raced)
        .gap(GapKind::DoubleApply);
    // Two requests mean both processes got past their triage check before either applied; one
    // means the target turned the second away earlier. Either is within the bound.
    bound("requests by two racing decomposes", aux.billed_for(&root))
        .at_most(2)
        .context(transcript)
        .gap(GapKind::NotOneRequest);
}

#[rstest::rstest]
#[case::todo("todo")]
#[case::ready("ready")]
#[case::blocked("blocked")]
fn a_card_moved_on_while_its_call_is_out_gets_none_of_the_reply(
    board: Board,
    #[case] status: &str,
) {
    let aux = board.aux();
    let root = board.create("moved on by a person while the model thinks", &["--triage"]);
    // The reply is let go only once the card was moved: however slow the target, the move
    // lands while the call is out.
    let gate = Gate::new();
    aux.reply(&root, Reply::graph(3, &[(2, &[0])]).gated(&gate));
    let (output, moved) = crate::while_decompose_is_out(&board, &root, &gate, |arrived| {
        // Moved by another tool while the request is out: only the apply's own re-check in its
        // transaction can see it.
        arrived
            .map_err(|timeout| timeout.to_string())
            .map(|()| board.rows().arrange_status(&root, status))
    });
    let moved_while_out = match moved {
        Ok(1) => aux.open_until_released(&root, &gate).map(|_| ()),
        Ok(rows) => Err(format!("moving the card to {status} changed {rows} rows")),
        Err(seen) => Err(seen),
    }
    .map_err(|seen| format!("the card was not moved to {status} while its call was out: {seen}"));
    let rows = board.rows();
    Findings::new()
        .equal("task rows (the card alone)", &board.task_count(), &1)
        .equal("children of the card", &rows.children_of(&root).len(), &0)
        .equal("the card's status", &rows.status(&root), &status.to_owned())
        .equal(
            "`decomposed` events",
            &rows.events(&root, "decomposed").len(),
            &0,
        )
        .verdict(format!(
            "a card moved to {status} during its call gets none of the reply"
        ))
        .context(|| format!("{}\n{}", output.output, board.diag(&root)))
        .provided(&moved_while_out)
        .gap(GapKind::DoubleApply);
}
