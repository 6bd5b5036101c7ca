//! S9 and S1's recovery on the reference's own tables: every worker request a ledger row, every
//! spawn a spawn-ledger row, `kanban usage` splitting the two halves, and a card parked by its
//! spawn budget listed, warned about once, and spawned again after `unpark`.

use judge::prelude::*;
use rstest::rstest;
use serde_json::Value;

use crate::workers::{ready_card, worker_config, Worker, FAILURE_LIMIT};

/// The hourly ceiling of the ceiling test: a few turns of a session.
const CEILING: u32 = 3;

#[rstest]
fn kanban_usage_splits_the_halves_and_lists_every_worker_request(
    #[with(worker_config(2))] board: Board,
) {
    let aux = board.aux();
    let card = ready_card(&board, "finished in one turn");
    Worker::Real(vec![Reply::complete(), Reply::text("Done.")]).arrange(&board, &card);
    let idea = board.create("an idea to split", &["--triage"]);

    let mut run = board.scenario();
    // The idea, once specified, is a ready card too: its worker is counted with the card's.
    run.start().first_session(&card).first_bill(&idea).until(
        std::time::Duration::from_secs(10),
        "both cards done, no worker left",
        || {
            [&card, &idea]
                .iter()
                .all(|id| board.rows().status(id) == "done")
                && board.census().live_total() == 0
        },
    );
    let seen = run.stop();
    let usage = board.cli_json(["kanban", "usage", "--json"]);
    let calls = board.cli(["kanban", "usage", "--calls", "--json"]).stdout;
    let worker_lines = calls
        .lines()
        .filter(|line| line.contains("\"origin\":\"worker\""))
        .count();
    let worker_requests = aux.worker_requests().len();

    Findings::new()
        .equal(
            "usage: the workers' calls",
            &usage["halves"]["worker"]["calls"],
            &Value::from(worker_requests),
        )
        .equal(
            "usage: the workers' runs",
            &usage["halves"]["worker"]["spawns"],
            &Value::from(aux.sessions()),
        )
        .equal(
            "usage: the decompose calls",
            &usage["halves"]["decompose"]["calls"],
            &Value::from(aux.bills()),
        )
        .equal(
            "usage: both halves in the totals",
            &usage["totals"]["calls"],
            &Value::from(worker_requests + aux.bills()),
        )
        .equal(
            "usage --calls: worker lines",
            &worker_lines,
            &worker_requests,
        )
        .verdict("kanban usage shows both halves' spend")
        .over(&seen)
        .context(|| format!("{usage}\n{calls}\n{}", board.diag(&card)))
        .gap(GapKind::SpawnNotVisible);
}

#[rstest]
fn a_card_parked_by_its_spawn_budget_is_listed_warned_about_once_and_unparked(
    #[with(worker_config(2))] board: Board,
) {
    let aux = board.aux();
    let card = ready_card(&board, "crashes every time");
    Worker::StandIn(Behaviour::Exits(1)).arrange(&board, &card);

    let mut run = board.scenario();
    run.start()
        .sessions(&card, FAILURE_LIMIT)
        .until(
            std::time::Duration::from_secs(10),
            "the card parked",
            || !board.rows().events(&card, "spawn_parked").is_empty(),
        )
        .prove_ticks(crate::workers::PROBE_TICKS);
    let parked = board.cli_json(["kanban", "list", "--parked", "--json"]);
    let before_unpark = aux.sessions_for(&card);
    let unparked = board.cli_unchecked(["kanban", "unpark", card.as_str()]);
    run.sessions(&card, before_unpark + 1);
    let seen = run.stop();
    let warnings = seen
        .log()
        .lines()
        .filter(|line| line.contains(" WARN ") && line.contains("event=\"spawn_parked\""))
        .filter(|line| line.contains(&format!("card={card}")))
        .count();
    let listed: Vec<&str> = parked
        .as_array()
        .map(|cards| cards.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default();

    Findings::new()
        .equal("parked cards listed", &listed, &vec![card.as_str()])
        .equal(
            "spawn_parked events",
            &board.rows().events(&card, "spawn_parked").len(),
            &1,
        )
        .equal("spawn_parked WARN lines", &warnings, &1)
        .that(unparked.success(), || format!("unpark failed:\n{unparked}"))
        .verdict("a parked card is visible and unparked")
        .over(&seen)
        .context(|| board.diag(&card))
        .gap(GapKind::SpawnNotVisible);
}

/// A worker request still unanswered when the gateway stops may be billed by the provider all
/// the same: its ledger row stays (closed `unknown`, not left in flight), one per request the
/// provider received.
#[rstest]
fn a_worker_request_in_flight_at_the_stop_keeps_its_ledger_row(
    #[with(worker_config(1))] board: Board,
) {
    let aux = board.aux();
    let card = ready_card(&board, "its worker's request is never answered");
    Worker::Real(vec![Reply::hang(std::time::Duration::from_secs(120))]).arrange(&board, &card);

    let mut run = board.scenario();
    run.start().first_session(&card);
    let unanswered = aux.worker_requests_for(&card).len();
    let seen = run.stop();
    let requests = aux.worker_requests_for(&card).len();
    let rows: Vec<String> = board
        .rows()
        .ledger(&card)
        .into_iter()
        .filter(|row| row.purpose == "worker")
        .map(|row| row.outcome)
        .collect();

    let arranged = if unanswered >= 1 {
        Ok(())
    } else {
        Err("no worker request reached the provider before the stop".to_owned())
    };
    Findings::new()
        .equal("worker ledger rows of the card", &rows.len(), &requests)
        .that(!rows.iter().any(|outcome| outcome == "in_flight"), || {
            format!("a row still in flight after the stop: {rows:?}")
        })
        .verdict("a worker request in flight at the stop keeps its ledger row")
        .provided(&arranged)
        .over(&seen)
        .context(|| board.diag(&card))
        .gap(GapKind::SpawnNotVisible);
}

/// The hourly ceiling counts each of a worker's requests as it leaves (S4): a session spawned
/// under the ceiling stops asking once the board reaches it, rather than running its turns past.
#[rstest]
fn a_workers_turns_stop_at_the_hourly_ceiling(
    #[with(worker_config(1).calls_per_hour(CEILING))] board: Board,
) {
    let aux = board.aux();
    let card = ready_card(&board, "a long session of heartbeats");
    let heartbeat = Reply::streamed_tool_call("kanban_heartbeat", serde_json::json!({}));
    let mut script = vec![heartbeat; 2 * CEILING as usize];
    script.push(Reply::complete());
    Worker::Real(script).arrange(&board, &card);

    let mut run = board.scenario();
    run.start().first_session(&card).until(
        std::time::Duration::from_secs(20),
        "the worker gone",
        || board.census().live_total() == 0,
    );
    let seen = run.stop();
    let requests = aux.worker_requests_for(&card).len();

    let arranged = if requests >= CEILING as usize {
        Ok(())
    } else {
        Err(format!(
            "the worker asked {requests} time(s): the ceiling of {CEILING} was never reached"
        ))
    };
    bound("worker requests within the hour", requests)
        .at_most(CEILING as usize)
        .provided(&arranged)
        .over(&seen)
        .note(|| format!("runs {:?}", board.rows().runs(&card)))
        .context(|| board.diag(&card))
        .gap(GapKind::HourlyCeilingExceeded);
}
