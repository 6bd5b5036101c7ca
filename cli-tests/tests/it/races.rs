//! Two `kanban decompose` processes racing on one card: exactly one graph is applied, never two
//! (SPEC B4: the apply transaction re-checks that the card is still in triage).

use std::time::Duration;

use fixtures::observe;
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
    let successes = outputs
        .iter()
        .flat_map(json_lines)
        .filter(|line| line["ok"] == true)
        .count();
    let graphs = board.events(&root, "decomposed").len();
    observe::record("graphs_applied", graphs, Some(1));
    let transcript = format!("{}\n{}\n{}", outputs[0], outputs[1], board.diag(&root));
    assert_eq!(graphs, 1, "exactly one graph is applied\n{transcript}");
    assert_eq!(
        board.children_of(&root).len(),
        3,
        "one graph's children, linked under the root\n{transcript}"
    );
    assert_eq!(
        board.task_count(),
        1 + 3,
        "no second set of child rows\n{transcript}"
    );
    assert_eq!(
        board.links().len(),
        3 + 1,
        "one graph's links\n{transcript}"
    );
    assert_eq!(
        successes, 1,
        "exactly one process reports success\n{transcript}"
    );
    let bills = aux.billed_for(&root);
    // Two requests mean both processes got past their triage check before either applied; one
    // means the target turned the second away earlier. Either is within the bound.
    eprintln!("note: the racing processes made {bills} requests");
    assert!(
        (1..=2).contains(&bills),
        "each process makes at most its one attempt: {bills} requests\n{transcript}"
    );
}
