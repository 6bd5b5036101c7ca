//! The reference's workers end to end (contract §7, S1–S5, S7–S9): a real `hermes gateway run`
//! spawning real `hermes chat` workers (or stand-ins through `$HERMES_BIN`) against the suite's
//! fake provider, judged from the provider's record, the worker processes and `kanban.db`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::worker_kit::*;
use fixtures::wait::wait_until_or;

#[test]
fn a_ready_card_gets_one_worker_whose_turns_carry_the_tools_and_its_card() {
    let board = WorkerBoard::new("  max_spawn: 2\n");
    let json_card = board.ready_card("answered as JSON");
    let stream_card = board.ready_card("answered as a stream");
    board.provider.reply(&json_card, complete());
    board.provider.reply(
        &stream_card,
        streamed_tool_call("kanban_complete", json!({"summary": "streamed"})),
    );
    let census = board.census(None);
    let gateway = board.gateway(&[]);
    wait_until_or(
        || board.status(&json_card) == "done" && board.status(&stream_card) == "done",
        WAIT,
        "both cards to be completed by their workers",
        || gateway.tail(),
    );
    for card in [&json_card, &stream_card] {
        let turns = board.turns(card);
        assert_eq!(turns.len(), 1, "one paid turn for {card}");
        let first = &turns[0];
        assert_eq!(first["messages"][1]["content"], format!("work kanban task {card}"));
        assert_eq!(first["model"], "worker-model");
        let tools: Vec<&str> = first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            tools,
            ["kanban_show", "kanban_complete", "kanban_block", "kanban_heartbeat",
             "kanban_comment", "kanban_create"]
        );
        assert_eq!(board.run_outcomes(card), ["completed"]);
        assert_eq!(board.events(card, "spawned"), 1);
    }
    // The spawn ledger: one row per worker, closed once its processes were gone, with the
    // run's requests and tokens; one worker-half ledger row per request.
    wait_until_or(|| board.live_rows() == 0, WAIT, "the workers to be reaped", || gateway.tail());
    let rows: Vec<(String, i64, i64, bool)> = {
        let conn = board.db();
        let mut stmt = conn
            .prepare("SELECT outcome, requests, prompt_tokens, charged FROM hermes_spawn_ledger ORDER BY run_id")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|(outcome, requests, tokens, charged)| {
        outcome == "completed" && *requests == 1 && *tokens > 0 && !charged
    }), "{rows:?}");
    let purposes: Vec<String> = board.column("SELECT purpose FROM hermes_aux_ledger", &[]);
    assert_eq!(purposes, ["worker", "worker"]);
    assert!(census.alive().is_empty(), "no worker process outlives its run");
    assert!(gateway.stop().clean());
}
