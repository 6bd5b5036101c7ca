//! Two `kanban decompose` processes racing on one card: exactly one graph is applied, never two
//! (contract §7 B4: the apply transaction re-checks that the card is still in triage).

use std::time::Duration;

use fixtures::prelude::*;

use crate::{assert_no_crash, json_lines};

#[rstest::rstest]
fn two_racing_decomposes_apply_exactly_one_graph(board: Board) {
    let aux = board.aux();
    let root = board.create("one card, two hands", &["--triage"]);
    // Held back longer than a process takes to start (upstream's Python start-up is the slow
    // one), so both processes have read the card in triage and sent their call before either
    // reply arrives.
    let hold = if board.target().is_reference() {
        Duration::from_millis(800)
    } else {
        Duration::from_secs(3)
    };
    aux.reply(&root, Reply::graph(3, &[(2, &[0])]).delayed(hold));

    let args = ["kanban", "decompose", root.as_str(), "--json"];
    let outputs: Vec<CliOutput> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| board.cli_unchecked(args)))
            .collect();
        racers
            .into_iter()
            .map(|racer| match racer.join() {
                Ok(output) => output,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
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
    .gap(GapKind::DoubleApply);
    let mut findings = Findings::new();
    findings
        .equal(
            "children linked under the root",
            &rows.children_of(&root).len(),
            &3,
        )
        .equal("task rows", &board.task_count(), &4)
        .equal("links", &rows.links().len(), &4)
        .equal("processes reporting success", &successes, &1);
    findings
        .verdict("one graph's rows, one success")
        .context(transcript)
        .gap(GapKind::DoubleApply);
    // Two requests mean both processes got past their triage check before either applied; one
    // means the target turned the second away earlier. Either is within the bound.
    bound("requests by two racing decomposes", aux.billed_for(&root))
        .at_most(2)
        .context(transcript)
        .gap(GapKind::NotOneRequest);
}
