//! The reference's workers end to end (contract §7, S1–S5, S7–S9): a real `hermes gateway run`
//! spawning real `hermes chat` workers (or stand-ins through `$HERMES_BIN`) against the suite's
//! fake provider, judged from the provider's record, the worker processes and `kanban.db`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::worker_kit::*;
use fixtures::wait::wait_until_or;

#[allow(
    clippy::too_many_lines,
    reason = "a test reads as one scenario, top to bottom"
)]
#[test]
fn a_ready_card_gets_one_worker_whose_turns_carry_the_tools_and_its_card() {
    let board = WorkerBoard::new("  max_spawn: 2\n");
    let json_card = board.ready_card("answered as JSON");
    let stream_card = board.ready_card("answered as a stream");
    board.answer(&json_card, complete());
    board.answer(
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
    // `kanban usage` shows the workers' half beside decompose's, and every turn in --calls.
    let usage = board.usage();
    assert_eq!(usage["halves"]["worker"]["calls"], 2, "{usage}");
    assert_eq!(usage["halves"]["worker"]["spawns"], 2);
    assert_eq!(usage["halves"]["worker"]["charged"], 0);
    assert_eq!(usage["halves"]["decompose"]["calls"], 0);
    assert_eq!(
        usage["totals"]["calls"], 2,
        "one ceiling counts both halves"
    );
    let text = board.scratch.ok(&["kanban", "usage"]).stdout;
    assert!(
        text.contains("workers 2 calls") && text.contains("in 2 runs"),
        "{text}"
    );
    let calls = board
        .scratch
        .ok(&["kanban", "usage", "--calls", "--json"])
        .stdout;
    assert_eq!(
        calls
            .lines()
            .filter(|l| l.contains("\"origin\":\"worker\""))
            .count(),
        2,
        "{calls}"
    );
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
    board.answer(
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
    board.answer(&probe, complete());
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
    // The WARN comes once the worker that recorded the park is reaped; then never again.
    wait_until_or(
        || spawn_park_warnings(&gateway.log(), &card) > 0,
        WAIT,
        "the park's WARN",
        || gateway.tail(),
    );
    board.prove_ticks(&gateway);
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

#[test]
fn live_workers_never_exceed_max_spawn_and_a_lowered_cap_stops_the_newest_at_the_next_tick() {
    let board = WorkerBoard::new("  max_spawn: 2\n");
    let stand_in = StandIn::new(board.scratch.root(), "exec sleep 60");
    let cards: Vec<String> = (0..5)
        .map(|i| board.ready_card(&format!("card {i}")))
        .collect();
    let census = board.census(Some(&stand_in));
    let gateway = board.gateway_with(&stand_in);
    wait_until_or(
        || census.alive().len() == 2,
        WAIT,
        "two live workers",
        || gateway.tail(),
    );
    // Every sample, processes and board alike, stays within the cap.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        assert!(census.alive().len() <= 2, "{:?}", census.alive());
        assert!(board.live_rows() <= 2);
        std::thread::sleep(Duration::from_millis(20));
    }
    let running: Vec<&String> = cards
        .iter()
        .filter(|c| board.status(c) == "running")
        .collect();
    assert_eq!(running.len(), 2);

    // The kill switch: from the next tick no worker runs, and stopping them charges nothing.
    board.configure("  max_spawn: 0\n");
    wait_until_or(
        || census.alive().is_empty(),
        WAIT,
        "every worker stopped",
        || gateway.tail(),
    );
    wait_until_or(
        || board.live_rows() == 0,
        WAIT,
        "their rows closed",
        || gateway.tail(),
    );
    for card in running {
        assert_eq!(board.run_outcomes(card), ["interrupted"]);
        assert_eq!(board.status(card), "ready");
        assert_eq!(
            board.events(card, "spawn_failed"),
            0,
            "a stopped run is not charged"
        );
    }
    let spawned = board.worker_pids().len();
    assert_eq!(spawned, 2);
    // `max_spawn: 0` holds on the next ticks: the board is still, proven by a decompose probe.
    let probe = board.scratch.create("tick probe", &["--triage"]);
    wait_until_or(
        || board.status(&probe) != "triage",
        WAIT,
        "the probe",
        || gateway.tail(),
    );
    assert_eq!(
        board.worker_pids().len(),
        spawned,
        "no worker spawned with max_spawn: 0"
    );
    assert!(gateway.stop().clean());
}

#[test]
fn stopping_the_gateway_ends_every_worker_group_within_the_stop_and_charges_nothing() {
    let board = WorkerBoard::new("  max_spawn: 2\n");
    // Deaf to SIGTERM, with a grandchild in its group (deaf too: an ignored signal is inherited).
    let stand_in = StandIn::new(
        board.scratch.root(),
        "trap '' TERM\nsleep 120 &\necho $! >> \"$PIDS\"\nwait",
    );
    let cards = [board.ready_card("one"), board.ready_card("two")];
    let census = board.census(Some(&stand_in));
    let gateway = board.gateway_with(&stand_in);
    wait_until_or(
        || stand_in.pids().len() == 4,
        WAIT,
        "two workers and their grandchildren",
        || gateway.tail(),
    );
    assert_eq!(census.alive().len(), 4);
    let report = gateway.stop();
    assert!(report.clean(), "{report:?}");
    assert!(report.elapsed < Duration::from_secs(5), "{report:?}");
    // No worker nor descendant survives (the grandchild was re-parented: give its reaper a moment).
    wait_until_or(
        || census.alive().is_empty(),
        Duration::from_secs(5),
        "no survivor",
        || format!("{:?}", census.alive()),
    );
    for card in &cards {
        assert_eq!(board.run_outcomes(card), ["interrupted"]);
        assert_eq!(board.status(card), "ready");
        assert_eq!(board.events(card, "spawn_failed"), 0);
    }
    assert_eq!(board.live_rows(), 0);
}

#[test]
fn after_a_gateway_sigkill_the_next_gateway_adopts_the_orphan_and_counts_it_against_the_cap() {
    let board = WorkerBoard::new("  max_spawn: 1\n");
    let release = board.scratch.root().join("release");
    let stand_in = StandIn::new(
        board.scratch.root(),
        &format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done\nexit 1",
            release.display()
        ),
    );
    let first = board.ready_card("first");
    let census = board.census(Some(&stand_in));
    let gateway = board.gateway_with(&stand_in);
    wait_until_or(
        || stand_in.pids().len() == 1,
        WAIT,
        "the first worker",
        || gateway.tail(),
    );
    gateway.kill9();
    let orphan = stand_in.pids()[0];
    assert!(
        alive(orphan),
        "a worker outlives a SIGKILLed gateway (its own session)"
    );

    let second = board.ready_card("second");
    board.answer(&second, complete());
    // Ticks are proven by a decompose probe the provider fails (it stays in triage, no worker
    // for it). Its reply is set while no gateway runs: a gateway ticking between the card's
    // creation and its reply would decompose it with the default answer.
    let probe = board.scratch.create("tick probe", &["--triage"]);
    board
        .provider
        .reply(&probe, fixtures::aux_model::Reply::malformed());
    // Real workers from here on: the orphan is the only stand-in.
    let gateway = board.gateway(&[]);
    wait_until_or(
        || gateway.log().contains("adopted a live worker"),
        WAIT,
        "the orphan to be adopted",
        || gateway.tail(),
    );
    // Adopted, not charged; holding the only place, so the second card waits.
    wait_until_or(
        || board.events(&probe, "decompose_failed") == 1,
        WAIT,
        "a tick after the adoption",
        || gateway.tail(),
    );
    assert_eq!(board.run_outcomes(&first), ["running"]);
    assert_eq!(board.events(&first, "spawn_failed"), 0);
    assert!(
        board.run_outcomes(&second).is_empty(),
        "the cap counts the orphan"
    );

    // Its end, seen by nobody (exit 1 after the release), is charged; its place frees up.
    std::fs::write(&release, "").unwrap();
    wait_until_or(
        || board.status(&second) == "done",
        WAIT,
        "the second card's worker",
        || gateway.tail(),
    );
    assert_eq!(board.run_outcomes(&first), ["crashed"]);
    assert_eq!(board.events(&first, "spawn_failed"), 1);
    assert!(gateway.stop().clean());
    assert!(census.alive().is_empty());
}

#[test]
fn a_worker_past_its_runtime_is_stopped_and_charged_as_timed_out() {
    let board =
        WorkerBoard::new("  max_spawn: 1\n  worker_max_runtime_seconds: 1\n  failure_limit: 1\n");
    let stand_in = StandIn::new(board.scratch.root(), "trap '' TERM\nexec sleep 60");
    let card = board.ready_card("too long");
    let census = board.census(Some(&stand_in));
    let gateway = board.gateway_with(&stand_in);
    wait_until_or(
        || board.events(&card, "spawn_parked") == 1,
        WAIT,
        "the timeout to park it",
        || gateway.tail(),
    );
    assert_eq!(board.run_outcomes(&card), ["timed_out"]);
    wait_until_or(
        || census.alive().is_empty(),
        WAIT,
        "the worker SIGKILLed",
        || gateway.tail(),
    );
    wait_until_or(
        || board.live_rows() == 0,
        WAIT,
        "its row closed",
        || gateway.tail(),
    );
    assert_eq!(spawn_park_warnings(&gateway.log(), &card), 1);
    assert!(gateway.stop().clean());
}

#[test]
fn exit_codes_no_run_recorded_are_charged_and_a_rate_limit_exit_pauses_every_spawn() {
    let board = WorkerBoard::new("  max_spawn: 1\n  failure_limit: 1\n");
    let stand_in = StandIn::new(
        board.scratch.root(),
        "case \"$HERMES_KANBAN_TASK\" in\n  \"$(cat \"$PIDS.limited\")\") exit 75;;\n  *) exit 1;;\nesac",
    );
    let crashing = board.ready_card("crashes");
    let census = board.census(Some(&stand_in));
    let gateway = board.gateway_with(&stand_in);
    wait_until_or(
        || board.events(&crashing, "spawn_parked") == 1,
        WAIT,
        "the crash to park it",
        || gateway.tail(),
    );
    assert_eq!(board.run_outcomes(&crashing), ["crashed"]);

    let limited = board.ready_card("rate limited");
    std::fs::write(stand_in.pids.with_extension("pids.limited"), &limited).unwrap();
    let waiting = board.ready_card("waits for the pause");
    wait_until_or(
        || !board.run_outcomes(&limited).is_empty() && board.live_rows() == 0,
        WAIT,
        "the rate-limited run",
        || gateway.tail(),
    );
    assert_eq!(board.run_outcomes(&limited), ["refused"]);
    let usage = board.usage();
    assert!(
        usage["pause"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("exited 75"),
        "{usage}"
    );
    // The pause holds every spawn: the gateway says so, and the waiting card never ran.
    wait_until_or(
        || {
            gateway
                .log()
                .contains("no worker is spawned while the board is paused")
        },
        WAIT,
        "the spawn gate to meet the pause",
        || gateway.tail(),
    );
    assert!(board.run_outcomes(&waiting).is_empty());
    assert!(gateway.stop().clean());
    assert!(census.alive().is_empty());
}

#[test]
fn a_workers_refusal_pauses_every_spawn_and_every_decompose_call() {
    let board = WorkerBoard::new("  max_spawn: 2\n  provider_cooldown_seconds: 600\n");
    let cards: Vec<String> = (0..6)
        .map(|i| board.ready_card(&format!("card {i}")))
        .collect();
    for card in &cards {
        board.answer(
            card,
            fixtures::aux_model::Reply::http_error(402, "insufficient credit"),
        );
    }
    let census = board.census(None);
    let gateway = board.gateway(&[]);
    wait_until_or(
        || !board.usage()["pause"].is_null(),
        WAIT,
        "the refusal to pause the board",
        || gateway.tail(),
    );
    // A decompose candidate appears during the pause: one provider key, one pause.
    let triage = board.scratch.create("to split", &["--triage"]);
    board.prove_ticks(&gateway);
    let sessions: usize = cards.iter().map(|c| board.sessions(c)).sum();
    assert!(
        (1..=2).contains(&sessions),
        "one refusal costs the workers in flight (at most max_spawn), not one per card: {sessions}"
    );
    assert_eq!(
        board.provider.billed_for(&triage),
        0,
        "no decompose call during the pause"
    );
    // Each worker that started either met the refusal (charged) or found the pause before its
    // first request left (`held`: nothing reached the provider, nothing charged).
    let mut refused = 0;
    for card in cards.iter().filter(|c| !board.run_outcomes(c).is_empty()) {
        match board.run_outcomes(card).as_slice() {
            [one] if one == "refused" => {
                refused += 1;
                assert_eq!(
                    board.events(card, "spawn_failed"),
                    1,
                    "a refusal is charged"
                );
            }
            [one] if one == "held" => assert_eq!(board.events(card, "spawn_failed"), 0),
            other => panic!("{card}: {other:?}"),
        }
    }
    assert_eq!(refused, sessions);
    assert!(board.usage()["pause"]["reason"]
        .as_str()
        .is_some_and(|r| r.contains("402")));
    assert!(gateway.stop().clean());
    assert!(census.alive().is_empty());
}

#[test]
fn a_card_a_worker_hands_to_a_person_is_never_spawned_again() {
    let board = WorkerBoard::new("  max_spawn: 2\n");
    let card = board.ready_card("needs an answer");
    board.answer(&card, block("needs_input"));
    let gateway = board.gateway(&[]);
    wait_until_or(
        || board.status(&card) == "blocked",
        WAIT,
        "the block",
        || gateway.tail(),
    );
    board.prove_ticks(&gateway);
    assert_eq!(board.sessions(&card), 1);
    assert_eq!(board.run_outcomes(&card), ["blocked"]);
    assert_eq!(
        board.column::<String>("SELECT block_kind FROM tasks WHERE id = ?1", &[&card]),
        ["needs_input"]
    );
    assert_eq!(
        board.events(&card, "spawn_failed"),
        0,
        "a hand-off is not a failure"
    );
    let parked = board
        .scratch
        .json(&["kanban", "list", "--parked", "--json"]);
    assert_eq!(parked, json!([]), "handed to a person, not parked");
    // The person answers: the card is spawned again (and blocks again: one more session).
    let answer = board.scratch.json(&["kanban", "unblock", &card, "--json"]);
    assert_eq!(answer["kind"], "needs_input");
    wait_until_or(
        || board.sessions(&card) == 2,
        WAIT,
        "a worker after the answer",
        || gateway.tail(),
    );
    assert!(gateway.stop().clean());
}

#[test]
fn a_dependency_block_on_no_open_parent_is_charged_not_looped() {
    let board =
        WorkerBoard::new("  max_spawn: 2\n  failure_limit: 2\n  spawn_backoff_seconds: 0\n");
    let card = board.ready_card("waits on nothing");
    board.answer(&card, block("dependency"));
    let gateway = board.gateway(&[]);
    wait_until_or(
        || board.events(&card, "spawn_parked") == 1,
        WAIT,
        "the park",
        || gateway.tail(),
    );
    board.prove_ticks(&gateway);
    assert_eq!(
        board.sessions(&card),
        2,
        "failure_limit spawns, not one per tick"
    );
    assert_eq!(board.run_outcomes(&card), ["requeued", "requeued"]);
    assert!(gateway.stop().clean());
}

#[test]
fn a_session_takes_at_most_max_turns_turns() {
    let board = WorkerBoard::new("  max_spawn: 1\n  failure_limit: 1\nagent:\n  max_turns: 3\n");
    let card = board.ready_card("keeps busy");
    board.answer(
        &card,
        tool_call("kanban_heartbeat", json!({"note": "still going"})),
    );
    let gateway = board.gateway(&[]);
    wait_until_or(
        || board.events(&card, "spawn_parked") == 1,
        WAIT,
        "the park",
        || gateway.tail(),
    );
    assert_eq!(board.turns(&card).len(), 3);
    assert_eq!(board.run_outcomes(&card), ["max_turns"]);
    assert_eq!(board.events(&card, "heartbeat"), 3);
    // Every turn carries the whole session so far, the gateway's message first.
    let last = board.turns(&card).pop().unwrap();
    assert_eq!(
        last["messages"][1]["content"],
        format!("work kanban task {card}")
    );
    assert_eq!(last["messages"].as_array().unwrap().len(), 2 + 2 * 2);
    let ledger: Vec<i64> = board.column(
        "SELECT attempt FROM hermes_aux_ledger WHERE task_id = ?1 ORDER BY id",
        &[&card],
    );
    assert_eq!(ledger, [1, 2, 3], "one ledger row per turn");
    assert!(gateway.stop().clean());
}

#[test]
fn an_unreachable_provider_costs_no_card_its_budget_and_pauses_the_spawns() {
    let board =
        WorkerBoard::new("  max_spawn: 2\n  failure_limit: 1\n  spawn_backoff_seconds: 60\n");
    board.scratch.write_config(&format!(
        "model:\n  base_url: {}\n  default: worker-model\nkanban:\n  dispatch_interval_seconds: 0.1\n  \
         max_spawn: 2\n  failure_limit: 1\n  decompose_backoff_seconds: 60\n",
        fixtures::closed_port::closed_port_url()
    ));
    let cards = [
        board.ready_card("one"),
        board.ready_card("two"),
        board.ready_card("three"),
    ];
    let gateway = board.gateway(&[]);
    wait_until_or(
        || cards.iter().any(|c| board.run_outcomes(c) == ["held"]),
        WAIT,
        "a held run",
        || gateway.tail(),
    );
    wait_until_or(
        || {
            gateway
                .log()
                .contains("no worker is spawned while the board is paused")
        },
        WAIT,
        "the spawn gate to meet the pause",
        || gateway.tail(),
    );
    wait_until_or(
        || board.live_rows() == 0,
        WAIT,
        "the workers to end",
        || gateway.tail(),
    );
    for card in &cards {
        assert_eq!(
            board.events(card, "spawn_failed"),
            0,
            "nothing reached the provider"
        );
        assert!(board.run_outcomes(card).iter().all(|o| o == "held"));
    }
    assert!(
        !board.usage()["unreachable"].is_null(),
        "the board waits for the provider"
    );
    assert!(gateway.stop().clean());
}

#[test]
fn a_worker_that_runs_on_after_its_run_ended_is_stopped_before_its_card_runs_again() {
    let board =
        WorkerBoard::new("  max_spawn: 2\n  failure_limit: 2\n  spawn_backoff_seconds: 0\n");
    // The real worker blocks `transient` (its run ends, the card is ready again at once), then
    // the stand-in around it runs on, as upstream's superseded workers did (#109747).
    let stand_in = StandIn::new(
        board.scratch.root(),
        "\"$REAL_HERMES\" \"$@\"\nexec sleep 60",
    );
    let card = board.ready_card("requeued");
    board.answer(&card, block("transient"));
    let census = board.census(Some(&stand_in));
    let bin = stand_in.path.to_string_lossy().into_owned();
    let gateway = board.gateway(&[
        ("HERMES_BIN", &bin),
        ("REAL_HERMES", env!("CARGO_BIN_EXE_hermes")),
    ]);
    wait_until_or(
        || board.events(&card, "spawn_parked") == 1,
        WAIT,
        "two runs and the park",
        || gateway.tail(),
    );
    // Never two live workers for the card: the second was forked only once every process of
    // the first was gone.
    let spans: Vec<(i64, Option<i64>)> = {
        let conn = board.db();
        let mut stmt = conn
            .prepare("SELECT started_at_ms, exited_at_ms FROM hermes_spawn_ledger ORDER BY run_id")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(spans.len(), 2, "{spans:?}");
    let first_gone = spans[0].1.expect("the first worker was stopped");
    assert!(spans[1].0 >= first_gone, "{spans:?}");
    wait_until_or(
        || census.alive().is_empty(),
        WAIT,
        "the last one stopped too",
        || gateway.tail(),
    );
    assert_eq!(board.run_outcomes(&card), ["requeued", "requeued"]);
    assert!(gateway.stop().clean());
}

#[test]
fn kanban_dispatch_keeps_the_cap_zero_means_none_and_a_gateway_adopts_what_it_spawned() {
    let board = WorkerBoard::new("  max_spawn: 0\n");
    let stand_in = StandIn::new(board.scratch.root(), "exec sleep 60");
    let cards: Vec<String> = (0..3)
        .map(|i| board.ready_card(&format!("card {i}")))
        .collect();
    let census = board.census(Some(&stand_in));
    let bin = stand_in.path.to_string_lossy().into_owned();
    let dispatch = |args: &[&str]| {
        let mut all = vec!["kanban", "dispatch", "--json"];
        all.extend_from_slice(args);
        board.scratch.run_env(&all, &[], &[("HERMES_BIN", &bin)])
    };
    // `max_spawn: 0` means none here as in the gateway (upstream's dispatch read it as no cap).
    let none = dispatch(&[]);
    assert!(none.success(), "{none}");
    assert_eq!(none.json()["spawned"], json!([]));
    board.configure("  max_spawn: 2\n");
    assert_eq!(dispatch(&["--max", "0"]).json()["spawned"], json!([]));
    let first = dispatch(&[]).json();
    assert_eq!(first["spawned"].as_array().unwrap().len(), 2, "{first}");
    wait_until_or(
        || census.alive().len() == 2,
        WAIT,
        "the two workers",
        String::new,
    );
    // They outlive the command, and count against the cap for the next one.
    let second = dispatch(&[]).json();
    assert_eq!(second["spawned"], json!([]));
    assert_eq!(second["live"], 2);
    assert_eq!(
        cards
            .iter()
            .filter(|c| board.status(c) == "running")
            .count(),
        2
    );

    // A gateway adopts them (the cap full, the third card waits), and a dispatch beside it is
    // refused: one dispatcher per board.
    let gateway = board.gateway_with(&stand_in);
    wait_until_or(
        || gateway.log().matches("adopted a live worker").count() == 2,
        WAIT,
        "both adopted",
        || gateway.tail(),
    );
    let refused = dispatch(&[]);
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(refused.stderr.contains("another dispatcher"), "{refused}");
    board.prove_ticks(&gateway);
    assert_eq!(census.alive().len(), 2);
    assert!(gateway.stop().clean());
    wait_until_or(
        || census.alive().is_empty(),
        WAIT,
        "the adopted workers stopped",
        String::new,
    );
}
