//! What the reference's gateway says while its board cannot be written (a full disk, played
//! with a file size limit of one byte), read from its `--json` log lines: one warning per
//! condition until it clears, not one per tick, and words that say what happened: a request
//! that was sent but whose end could not be recorded is not a request that was not sent.

use std::time::Duration;

use fixtures::limits::set_file_size_limit;
use judge::prelude::*;
use rstest::rstest;
use serde_json::Value;

use crate::support::span_of_ticks;
use crate::PROBE_TICKS;

/// What a file size limit of one byte leaves writable of a board: nothing.
const NO_ROOM: Option<u64> = Some(1);

/// How long the provider takes to answer the card whose end cannot be recorded: long enough to
/// take the board's room away while its request is on its way.
const SLOW_ANSWER: Duration = Duration::from_millis(1_500);

/// The JSON log lines of `log` (anything else, such as a line cut by the pipe, is skipped).
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect()
}

/// The lines at `level` whose message contains `text`.
fn lines_at<'a>(lines: &'a [Value], level: &str, text: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|line| {
            line["level"] == level
                && line["message"]
                    .as_str()
                    .is_some_and(|message| message.contains(text))
        })
        .collect()
}

#[rstest]
fn a_board_that_cannot_be_written_is_reported_once_per_condition_in_words_that_say_what_happened(
    #[with(Config::gateway().backoff(0.0))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let mut run = board.scenario().with_spec(|mut spec| {
        spec.args.push("--json".into());
        spec.log_through_pipe().ignore_file_size_signal()
    });
    run.start().prove_ticks(1);

    let card = board.create("answered while the disk is full", &["--triage"]);
    aux.reply(&card, Reply::default_single().delayed(SLOW_ANSWER));
    run.first_bill(&card);
    // The request is on its way; its end cannot be recorded.
    if let Err(error) = set_file_size_limit(run.pid(), NO_ROOM) {
        panic!("{error}");
    }
    run.watch(SLOW_ANSWER + span_of_ticks(target, PROBE_TICKS));
    let while_full = json_lines(&run.log());
    if let Err(error) = set_file_size_limit(run.pid(), None) {
        panic!("{error}");
    }
    let window = run.close_window();
    run.until(
        target.first_bill_timeout(),
        "the unrecorded request closed as `unknown`",
        || {
            board
                .rows()
                .ledger(&card)
                .iter()
                .any(|row| row.outcome == "unknown")
        },
    )
    .prove_ticks(1);
    let after = json_lines(&run.log());
    let writable = run.stop();

    let sent = lines_at(&while_full, "WARN", "was sent (it may be billed)");
    holds(
        "one WARN says the request was sent and its end could not be recorded",
        sent.len() == 1
            && sent[0]["message"].as_str().is_some_and(|message| {
                message.contains(&card) && message.contains("end could not be recorded")
            }),
    )
    .over(&window)
    .note(|| format!("{sent:#?}"))
    .gap(GapKind::CallNotVisible);
    let not_sent: Vec<&Value> = lines_at(&while_full, "WARN", "no request was sent")
        .into_iter()
        .filter(|line| line["message"].as_str().is_some_and(|m| m.contains(&card)))
        .collect();
    bound(
        "WARN lines saying no request was sent for the card whose request was sent",
        not_sent.len(),
    )
    .at_most(0)
    .over(&window)
    .note(|| format!("{not_sent:#?}"))
    .gap(GapKind::CallNotVisible);
    bound(
        "WARN lines about closing abandoned attempts while the board cannot be written",
        lines_at(&while_full, "WARN", "cannot close abandoned attempts").len(),
    )
    .at_most(1)
    .over(&window)
    .gap(GapKind::CallNotVisible);
    bound(
        "INFO lines saying the board is usable again while it cannot be written",
        lines_at(&while_full, "INFO", "usable again").len(),
    )
    .at_most(0)
    .over(&window)
    .gap(GapKind::CallNotVisible);
    let warnings = while_full
        .iter()
        .filter(|line| line["level"] == "WARN")
        .count();
    bound("WARN lines while the board cannot be written", warnings)
        .at_most(3)
        .over(&window)
        .note(|| format!("{:#?}", lines_at(&while_full, "WARN", "")))
        .gap(GapKind::CallNotVisible);
    bound(
        "INFO lines saying abandoned attempts can be closed again",
        lines_at(&after, "INFO", "abandoned attempts can be closed again").len(),
    )
    .exactly(1)
    .over(&writable)
    .gap(GapKind::CallNotVisible);
}
