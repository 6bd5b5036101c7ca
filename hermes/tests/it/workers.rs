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
        assert_eq!(
            first["messages"][1]["content"],
            format!("work kanban task {card}")
        );
        assert_eq!(first["model"], "worker-model");
        let tools: Vec<&str> = first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            tools,
            [
                "kanban_show",
                "kanban_complete",
                "kanban_block",
                "kanban_heartbeat",
                "kanban_comment",
                "kanban_create"
            ]
        );
        assert_eq!(board.run_outcomes(card), ["completed"]);
        assert_eq!(board.events(card, "spawned"), 1);
    }
    // The spawn ledger: one row per worker, closed once its processes were gone, with the
    // run's requests and tokens; one worker-half ledger row per request.
    wait_until_or(
        || board.live_rows() == 0,
        WAIT,
        "the workers to be reaped",
        || gateway.tail(),
    );
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
    assert!(
        rows.iter().all(|(outcome, requests, tokens, charged)| {
            outcome == "completed" && *requests == 1 && *tokens > 0 && !charged
        }),
        "{rows:?}"
    );
    let purposes: Vec<String> = board.column("SELECT purpose FROM hermes_aux_ledger", &[]);
    assert_eq!(purposes, ["worker", "worker"]);
    assert!(
        census.alive().is_empty(),
        "no worker process outlives its run"
    );
    assert!(gateway.stop().clean());
}

/// How many WARN lines of `log` announce a spawn park of `card`.
fn spawn_park_warnings(log: &str, card: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(" WARN ") && l.contains("event=\"spawn_parked\""))
        .filter(|l| l.contains(&format!("card={card}")))
        .count()
}

#[test]
fn a_card_whose_workers_never_complete_is_spawned_failure_limit_times_waiting_longer_each_time() {
    let board =
        WorkerBoard::new("  max_spawn: 2\n  failure_limit: 3\n  spawn_backoff_seconds: 0.3\n");
    let card = board.ready_card("never finishes");
    // Text and no tool call: each session ends without completing (a protocol violation).
    board.provider.reply(
        &card,
        fixtures::aux_model::Reply::text("I think it is done."),
    );
    let _census = board.census(None);
    let gateway = board.gateway(&[]);
    wait_until_or(
        || board.events(&card, "spawn_parked") == 1,
        WAIT,
        "the card to be parked",
        || gateway.tail(),
    );
    // Proven ticks after the park: a fresh card is spawned and completed meanwhile.
    let probe = board.ready_card("probe");
    board.provider.reply(&probe, complete());
    wait_until_or(
        || board.status(&probe) == "done",
        WAIT,
        "the probe",
        || gateway.tail(),
    );

    assert_eq!(board.sessions(&card), 3, "failure_limit spawns in all");
    assert_eq!(board.run_outcomes(&card), ["protocol_violation"; 3]);
    assert_eq!(board.events(&card, "spawn_failed"), 3);
    assert_eq!(board.status(&card), "blocked");
    // The backoff doubles: 0.3 s, then 0.6 s between sessions (their first turns).
    let starts: Vec<Instant> = board
        .provider
        .received()
        .into_iter()
        .filter(|r| {
            r.json().is_ok_and(|body| {
                fixtures::aux_model::worker_task_of(&body).as_deref() == Some(card.as_str())
                    && body["messages"].as_array().is_some_and(|m| m.len() == 2)
            })
        })
        .map(|r| r.arrived)
        .collect();
    let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps[0] >= Duration::from_millis(300), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(600), "{gaps:?}");
    assert_eq!(
        spawn_park_warnings(&gateway.log(), &card),
        1,
        "one WARN per park"
    );

    let parked = board
        .scratch
        .json(&["kanban", "list", "--parked", "--json"]);
    let ids: Vec<&str> = parked
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [card.as_str()]);
    assert_eq!(parked[0]["spawn"]["failures"], 3);

    // A person's unpark buys a fresh budget: spawned again.
    let unparked = board.scratch.json(&["kanban", "unpark", &card, "--json"]);
    assert_eq!(
        (unparked["half"].as_str(), unparked["status"].as_str()),
        (Some("spawn"), Some("ready"))
    );
    wait_until_or(
        || board.sessions(&card) == 4,
        WAIT,
        "a spawn after the unpark",
        || gateway.tail(),
    );
    assert!(gateway.stop().clean());
}
