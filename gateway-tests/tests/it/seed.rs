//! The original pytest suite's gateway tests, with the same bounds: a card whose decomposition
//! always fails is not re-billed on every tick, and a valid graph bills once and links its
//! children.

use std::collections::HashMap;

use fixtures::observe;
use fixtures::prelude::*;
use rstest::rstest;
use serde_json::json;

use crate::support::{
    assert_no_graph, await_first_bill, await_left_triage, rebilled_every_tick, start_gateway,
};
use crate::{MAX_FAILED_ATTEMPTS, PROBE_TICKS};

/// Children in the green control's graph.
const SEED_CHILDREN: usize = 3;

/// Probes proven after the green control's root was decomposed.
const CONTROL_PROBES: usize = 2;

#[rstest]
#[case::malformed("malformed", Reply::malformed())]
#[case::http_500("http_500", Reply::http_error(500, "upstream exploded"))]
fn failing_triage_card_is_not_rebilled_every_tick(
    #[case] failure: &str,
    #[case] reply: Reply,
    #[with(GATEWAY_CONFIG)] board: Board,
) {
    let aux = board.aux();
    let doomed = board.create("an idea the decomposer can never split", &["--triage"]);
    aux.reply(&doomed, reply);

    let gateway = start_gateway(&board);
    await_first_bill(&board, &gateway, &doomed);
    prove_ticks(&board, &gateway, PROBE_TICKS);
    let bills = aux.billed_for(&doomed);
    drop(gateway);
    observe::record("bills_for_doomed_card", bills, Some(MAX_FAILED_ATTEMPTS));

    // Harness invariants, hard on every target: the failure produced no graph.
    assert_no_graph(&board, &doomed);
    known_gate(failure, || {
        rebilled_every_tick(bills, &board.task(&doomed).status)
    });
}

#[rstest]
fn valid_three_child_graph_bills_once_and_links_children(#[with(GATEWAY_CONFIG)] board: Board) {
    let aux = board.aux();
    let root = board.create("ship the feature", &["--triage"]);
    aux.reply(&root, Reply::graph(SEED_CHILDREN, &[(2, &[0])]));

    let gateway = start_gateway(&board);
    await_left_triage(
        &board,
        &gateway,
        std::slice::from_ref(&root),
        board.target().first_bill_timeout(),
        "the root to be auto-decomposed",
    );
    let probes = prove_ticks(&board, &gateway, CONTROL_PROBES);
    let bills = aux.billed_for(&root);
    drop(gateway);
    observe::record("bills_for_valid_root", bills, Some(1));

    assert_eq!(
        bills,
        1,
        "a decomposed root must be billed exactly once, never again over {} proven ticks\n{}",
        probes.len(),
        board.diag(&root)
    );
    let kids = board.children_of(&root);
    assert_eq!(kids.len(), SEED_CHILDREN, "{}", board.diag(&root));
    let status = board.task(&root).status;
    assert!(
        status != "triage" && status != "archived",
        "the decomposed root must leave triage and stay live, got {status:?}\n{}",
        board.diag(&root)
    );
    assert_eq!(
        board.task_count(),
        1 + SEED_CHILDREN + probes.len(),
        "root + children + the tick probes, and no other row\n{}",
        board.diag(&root)
    );
    let by_title: HashMap<String, String> = kids
        .iter()
        .map(|kid| (board.task(kid).title, kid.clone()))
        .collect();
    let mut titles: Vec<&String> = by_title.keys().collect();
    titles.sort();
    assert_eq!(titles, ["child 0", "child 1", "child 2"]);
    assert!(
        board.has_link(&by_title["child 0"], &by_title["child 2"]),
        "declared dependency child 0 -> child 2 was not persisted\n{}",
        board.diag(&root)
    );
    let decomposed = board.events(&root, "decomposed");
    let child_ids: Vec<&serde_json::Value> = decomposed
        .iter()
        .map(|event| &event.payload["child_ids"])
        .collect();
    assert_eq!(
        child_ids,
        [&json!([
            by_title["child 0"],
            by_title["child 1"],
            by_title["child 2"]
        ])],
        "one `decomposed` event naming the children in reply order\n{}",
        board.diag(&root)
    );
}
