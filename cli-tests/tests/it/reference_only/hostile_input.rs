//! Hostile input and the operator's own commands (issue 22), through the real CLI: provider text
//! full of terminal controls, token counts of 2^64 − 1, rows another tool wrote with absurd
//! values, `unpark` while an attempt is in flight, every form of `Retry-After`, a `.env` with a
//! bad line, a 900 KB provider error, `auto-decompose off`/`on` during a backoff, and a person's
//! `decompose ID` under the board-wide guards.

use std::time::{Duration, SystemTime};

use fixtures::aux_model::graph_value;
use fixtures::cli::CliOutput;
use fixtures::rows::unix_ms_ago;
use judge::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};

use crate::{
    decompose_all, decompose_card, decompose_forced, no_raw_controls, one_per_line, Decomposition,
    HOSTILE,
};

/// A 200 reply whose body is a provider error object with `message`.
fn provider_error(message: &str) -> Reply {
    Reply::raw(
        200,
        "application/json",
        json!({"error": {"message": message, "type": "server_error"}}).to_string(),
    )
}

fn unix_ms_now() -> i64 {
    unix_ms_ago(Duration::ZERO)
}

#[rstest]
fn provider_and_card_text_full_of_controls_reaches_no_terminal_raw(board: Board) {
    let aux = board.aux();
    let title = format!("plan the launch {HOSTILE}");
    let card = board.create(
        &title,
        &["--triage", "--body", &format!("line one\n{HOSTILE}")],
    );
    aux.reply(
        &card,
        provider_error(&format!("quota gone {HOSTILE}\nforged line")),
    );
    let swept = board.create(&format!("a second {HOSTILE}"), &["--triage"]);
    aux.reply(&swept, provider_error(&format!("also gone {HOSTILE}")));

    let by_hand_text = board.cli_unchecked(["kanban", "decompose", card.as_str()]);
    let by_hand_json = decompose_card(&board, &card).output;
    let sweep = board.cli_unchecked(["kanban", "decompose", "--all"]);
    let outputs: Vec<CliOutput> = [
        vec!["kanban", "show", card.as_str()],
        vec!["kanban", "show", card.as_str(), "--json"],
        vec!["kanban", "list"],
        vec!["kanban", "list", "--json"],
        vec!["kanban", "usage"],
        vec!["kanban", "usage", "--json"],
        vec!["kanban", "usage", "--calls"],
        vec!["kanban", "usage", "--calls", "--json"],
    ]
    .into_iter()
    .map(|args| board.cli_unchecked(args))
    .chain([by_hand_text, by_hand_json, sweep])
    .collect();

    bound("requests of the two cards", aux.bills())
        .exactly(3)
        .context(|| board.diag(&card))
        .gap(GapKind::NotOneRequest);
    let mut findings = Findings::new();
    for output in &outputs {
        findings = no_raw_controls(findings, output);
        findings = findings.that(output.code.is_some(), || {
            format!("{} crashed", output.command)
        });
    }
    findings
        .verdict("no control character of a card or a provider reaches stdout or stderr raw")
        .context(|| one_per_line(&outputs))
        .gap(GapKind::RawControlOutput);
    // JSON escapes the text itself: it decodes to exactly what was stored, not to a mangled copy.
    let shown: Value = serde_json::from_str(&outputs[1].stdout).unwrap_or(Value::Null);
    let stored_error = board
        .rows()
        .decompose_state(&card)
        .and_then(|state| state.columns.get("last_error").cloned())
        .unwrap_or(Value::Null);
    Findings::new()
        .equal("show --json title", &shown["task"]["title"], &json!(title))
        .equal(
            "show --json last error, as stored",
            &shown["task"]["decompose"]["last_error"],
            &stored_error,
        )
        .that(
            stored_error.as_str().is_some_and(|e| e.contains(HOSTILE)),
            || format!("the board keeps the provider's text as it came: {stored_error}"),
        )
        .verdict("JSON output carries the text exactly, escaped by JSON itself")
        .context(|| outputs[1].to_string())
        .gap(GapKind::WrongJsonLine);
}

/// A completion of `content` whose usage reports `tokens` prompt and completion tokens.
fn reporting_tokens(content: &str, tokens: u64) -> Reply {
    let body = format!(
        r#"{{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":{}}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{tokens},"completion_tokens":{tokens}}}}}"#,
        serde_json::to_string(&content).unwrap_or_default()
    );
    Reply::raw(200, "application/json", body)
}

/// The reference's largest token count: SQLite's largest integer, where every sum saturates.
const MAX_TOKENS: u64 = i64::MAX as u64;

#[rstest]
fn token_counts_of_2_64_minus_1_twice_saturate_in_every_reader(board: Board) {
    let aux = board.aux();
    // One card, two paid calls reporting 2^64 - 1 tokens each: the first answer is unusable,
    // the second is applied.
    let cards = [board.create("a costly idea", &["--triage"])];
    aux.reply_in_turn(
        &cards[0],
        vec![
            reporting_tokens("no graph here", u64::MAX),
            reporting_tokens(&graph_value(2, &[]).to_string(), u64::MAX),
        ],
    );
    let runs: Vec<Decomposition> = (0..2).map(|_| decompose_card(&board, &cards[0])).collect();

    let readers: Vec<CliOutput> = [
        vec!["kanban", "usage"],
        vec!["kanban", "usage", "--json"],
        vec!["kanban", "usage", "--calls"],
        vec!["kanban", "usage", "--calls", "--json"],
        vec!["kanban", "show", cards[0].as_str(), "--json"],
    ]
    .into_iter()
    .map(|args| board.cli_unchecked(args))
    .collect();

    let transcript = || {
        runs.iter()
            .map(|r| r.output.to_string())
            .chain(readers.iter().map(ToString::to_string))
            .collect::<Vec<_>>()
            .join("\n")
    };
    holds(
        "the second call, with absurd token counts, is applied",
        runs.iter().map(Decomposition::ok).collect::<Vec<_>>() == [Some(false), Some(true)],
    )
    .context(transcript)
    .gap(GapKind::ReplyNotApplied);
    let mut findings = Findings::new();
    for reader in &readers {
        findings = findings.that(reader.success(), || {
            format!("`{}` exited {}", reader.command, reader.code_text())
        });
    }
    let usage: Value = serde_json::from_str(&readers[1].stdout).unwrap_or(Value::Null);
    findings = findings
        .equal(
            "total prompt tokens",
            &usage["totals"]["prompt_tokens"],
            &json!(MAX_TOKENS),
        )
        .equal(
            "total completion tokens",
            &usage["totals"]["completion_tokens"],
            &json!(MAX_TOKENS),
        )
        .equal("total calls", &usage["totals"]["calls"], &json!(2))
        .that(readers[0].stdout.contains(&MAX_TOKENS.to_string()), || {
            "usage shows the saturated total".to_owned()
        });
    let calls: Vec<Value> = readers[3]
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    findings = findings.equal(
        "prompt tokens of each call",
        &calls
            .iter()
            .map(|c| c["prompt_tokens"].clone())
            .collect::<Vec<_>>(),
        &vec![json!(MAX_TOKENS), json!(MAX_TOKENS)],
    );
    findings
        .verdict("token counts saturate, and every reader still answers")
        .context(transcript)
        .gap(GapKind::CallNotVisible);
}

#[rstest]
fn readers_survive_extreme_values_another_tool_wrote(board: Board) {
    let card = board.create("an idea another tool touched", &["--triage"]);
    let rows = board.rows();
    // Ledger rows and a decompose state as no build of ours writes them: the largest integers,
    // negative counts, reals too large for an integer and text where numbers belong.
    let written = rows.arrange_odd_ledger_rows(&card);
    assert!(written > 0, "no odd rows arranged");
    assert_eq!(rows.arrange_odd_decompose_state(&card), 1);

    let readers: Vec<CliOutput> = [
        vec!["kanban", "usage"],
        vec!["kanban", "usage", "--json"],
        vec!["kanban", "usage", "--calls"],
        vec!["kanban", "usage", "--calls", "--json"],
        vec![
            "kanban",
            "usage",
            "--calls",
            "--card",
            card.as_str(),
            "--json",
        ],
        vec!["kanban", "show", card.as_str()],
        vec!["kanban", "show", card.as_str(), "--json"],
        vec!["kanban", "list", "--json"],
    ]
    .into_iter()
    .map(|args| board.cli_unchecked(args))
    .collect();

    let mut findings = Findings::new();
    for reader in &readers {
        findings = findings.that(reader.success(), || {
            format!("`{}` exited {}", reader.command, reader.code_text())
        });
        if reader.command.contains("--json") {
            let parsed = reader
                .stdout
                .lines()
                .filter(|l| !l.trim().is_empty())
                .all(|l| serde_json::from_str::<Value>(l).is_ok())
                || serde_json::from_str::<Value>(&reader.stdout).is_ok();
            findings = findings.that(parsed, || {
                format!("`{}` printed no valid JSON", reader.command)
            });
        }
    }
    let usage: Value = serde_json::from_str(&readers[1].stdout).unwrap_or(Value::Null);
    findings = findings
        .equal(
            "total prompt tokens (negatives and text as none, the rest saturated)",
            &usage["totals"]["prompt_tokens"],
            &json!(MAX_TOKENS),
        )
        .equal("calls counted", &usage["totals"]["calls"], &json!(written));
    findings
        .verdict("every reader survives absurd values another tool wrote")
        .context(|| one_per_line(&readers))
        .gap(GapKind::CallNotVisible);
}

#[rstest]
fn unpark_of_a_card_in_flight_is_refused_until_its_attempt_ends(
    #[with(Config::plain().max_attempts(1).retries(0))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea on its last attempt", &["--triage"]);
    // The attempt's reply is let go only once the early unpark is done and its events read,
    // however long that takes; any later call is answered at once.
    let gate = Gate::new();
    aux.reply_in_turn(
        &card,
        vec![Reply::malformed().gated(&gate), Reply::malformed()],
    );

    let (sweep, early, unparked_by_refusal, arrived) = std::thread::scope(|scope| {
        let sweep = scope.spawn(|| decompose_all(&board));
        let arrived = try_wait_until(
            || aux.billed_for(&card) > 0,
            board.target().cli_timeout(&["decompose"]),
            "the sweep's request",
        );
        let early = board.cli_unchecked(["kanban", "unpark", card.as_str()]);
        let unparked = board.rows().events(&card, "decompose_unparked").len();
        gate.release();
        let sweep = match sweep.join() {
            Ok(run) => run,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (sweep, early, unparked, arrived)
    });
    let in_flight = match &arrived {
        Err(timeout) => Err(timeout.to_string()),
        Ok(()) => aux.open_until_released(&card, &gate).map(|_| ()),
    }
    .map_err(|seen| format!("the card was not in flight while the early unpark ran: {seen}"));
    let state_after_attempt = board.rows().decompose_state(&card);
    let later = board.cli_unchecked(["kanban", "unpark", card.as_str(), "--json"]);

    let transcript = || format!("{}\n{early}\n{later}", sweep.output);
    holds(
        "`kanban unpark` of a card in flight exits 1 and says until when it is claimed",
        early.code == Some(1)
            && early
                .stderr
                .contains("claimed by a decompose attempt in flight")
            && early.stderr.contains("until at least")
            && !early.stdout.contains("unparked"),
    )
    .context(transcript)
    .provided(&in_flight)
    .gap(GapKind::UnclearRefusal);
    Findings::new()
        .equal(
            "decompose_unparked events the refused unpark wrote",
            &unparked_by_refusal,
            &0,
        )
        .equal(
            "(attempts, parked) once the attempt failed",
            &state_after_attempt.map(|s| (s.attempts, s.parked)),
            &Some((1, true)),
        )
        .that(
            later.success() && later.stdout.contains("\"unparked\": true"),
            || "once the attempt ended, unpark succeeds".to_owned(),
        )
        .verdict("the attempt's end is recorded as it was, and unpark works after it")
        .context(|| format!("{}\n{}", transcript(), board.diag(&card)))
        .provided(&in_flight)
        .gap(GapKind::RecoveryFailed);
}

/// An HTTP date `offset` seconds from now (negative: in the past).
fn http_date(offset: i64) -> String {
    let now = SystemTime::now();
    let at = if offset >= 0 {
        now + Duration::from_secs(offset.unsigned_abs())
    } else {
        now - Duration::from_secs(offset.unsigned_abs())
    };
    httpdate::fmt_http_date(at)
}

/// The pause a `Retry-After` must set, with the slack its form allows (an HTTP date has whole
/// seconds).
struct ExpectedPause {
    secs: f64,
    slack: f64,
}

/// The floor, the cap and the default of the reference's `Retry-After` pause.
const FLOOR: ExpectedPause = ExpectedPause {
    secs: 1.0,
    slack: 0.5,
};
const CAP: ExpectedPause = ExpectedPause {
    secs: 3600.0,
    slack: 0.5,
};
const DEFAULT: ExpectedPause = ExpectedPause {
    secs: 60.0,
    slack: 0.5,
};

#[rstest]
#[case::seconds("30".to_owned(), ExpectedPause { secs: 30.0, slack: 0.5 })]
#[case::http_date(http_date(120), ExpectedPause { secs: 120.0, slack: 2.0 })]
#[case::http_date_past(http_date(-120), FLOOR)]
#[case::too_large_to_represent("99999999999999999999".to_owned(), CAP)]
#[case::past_the_cap("86400".to_owned(), CAP)]
#[case::tiny("0.001".to_owned(), FLOOR)]
#[case::zero("0".to_owned(), FLOOR)]
#[case::negative("-5".to_owned(), DEFAULT)]
#[case::garbage("soon, maybe".to_owned(), DEFAULT)]
fn retry_after_in_any_form_pauses_between_the_floor_and_the_cap(
    #[case] retry_after: String,
    #[case] expected: ExpectedPause,
    #[with(Config::plain().retries(0))] board: Board,
) {
    let aux = board.aux();
    let limited = board.create("an idea sent while rate limited", &["--triage"]);
    aux.reply(
        &limited,
        Reply::http_error(429, "slow down").header("retry-after", retry_after.clone()),
    );
    let refused = decompose_card(&board, &limited);
    let usage = board.cli_json(["kanban", "usage", "--json"]);
    let waiting = board.create("an idea waiting out the pause", &["--triage"]);
    aux.reply(&waiting, Reply::graph(2, &[]));
    let sweep_started_ms = unix_ms_now();
    let sweep = decompose_all(&board);

    let ended_ms = board
        .rows()
        .ledger(&limited)
        .first()
        .and_then(|row| row.columns.get("ended_at_ms").and_then(Value::as_i64));
    let until_ms = usage["pause"]["until"]
        .as_f64()
        .map(|secs| (secs * 1000.0).round() as i64);
    let pause_secs = match (ended_ms, until_ms) {
        (Some(ended), Some(until)) => Some((until - ended) as f64 / 1000.0),
        _ => None,
    };
    let transcript = || format!("{}\n{usage}\n{}", refused.output, sweep.output);
    holds(
        format!(
            "Retry-After {retry_after:?} pauses the board for {} s (± {} s)",
            expected.secs, expected.slack
        ),
        pause_secs.is_some_and(|secs| (secs - expected.secs).abs() <= expected.slack),
    )
    .note(|| format!("the pause lasts {pause_secs:?} s from the refusal"))
    .context(transcript)
    .gap(GapKind::RetryAfterIgnored);
    holds(
        "the pause lasts at least the 1 s floor and at most the 3600 s cap",
        pause_secs.is_some_and(|secs| (FLOOR.secs - 0.05..=CAP.secs + 0.5).contains(&secs)),
    )
    .note(|| format!("the pause lasts {pause_secs:?} s"))
    .context(transcript)
    .gap(GapKind::RetryAfterIgnored);
    // A sweep that started inside the pause sends nothing. The floor's one second is too short
    // to start one inside it for sure on a loaded machine, so those cases rest on the length.
    if expected.secs > FLOOR.secs {
        let inside = match until_ms {
            None => Err("`kanban usage` showed no pause".to_owned()),
            Some(until) if sweep_started_ms >= until => {
                Err("the sweep started after the pause had ended".to_owned())
            }
            Some(_) => Ok(()),
        };
        bound(
            "bills of a sweep inside the pause",
            aux.billed_for(&waiting),
        )
        .exactly(0)
        .context(transcript)
        .provided(&inside)
        .gap(GapKind::RetryAfterIgnored);
    }
}

#[rstest]
fn a_bad_dotenv_line_is_skipped_with_its_number_and_the_key_below_it_is_used(board: Board) {
    let aux = board.aux();
    let bytes: &[u8] =
        b"# the provider key\nBROKEN=\xff\xfe\nnot a pair\nOPENAI_API_KEY=sk-from-dotenv-0022\n";
    board.write_dotenv(bytes);
    let card = board.create("an idea billed with the .env key", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let run = decompose_card(&board, &card);

    let bearers: Vec<String> = aux.billed_calls().iter().map(|c| c.bearer()).collect();
    bound("requests of the decompose", bearers.len())
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    holds(
        "the request carries the key from the line after the bad ones",
        bearers.first().map(String::as_str) == Some("Bearer sk-from-dotenv-0022"),
    )
    .note(|| format!("bearers sent: {bearers:?}"))
    .context(|| run.output.to_string())
    .gap(GapKind::DecomposerSettingIgnored);
    let stderr = &run.output.stderr;
    Findings::new()
        .that(
            stderr.contains("warning:") && stderr.contains(".env: line 2: not valid UTF-8"),
            || "no warning names line 2 (invalid UTF-8)".to_owned(),
        )
        .that(stderr.contains(".env: line 3: no `=`"), || {
            "no warning names line 3 (no `=`)".to_owned()
        })
        .that(!stderr.contains("line 4"), || {
            "the good line 4 was warned about".to_owned()
        })
        .equal("decomposed", &run.ok(), &Some(true))
        .verdict("each bad .env line is skipped with a warning naming it; the rest is read")
        .context(|| run.output.to_string())
        .gap(GapKind::SilentMisconfiguration);
}

/// The size of the hostile provider's error message.
const HUGE_ERROR_BYTES: usize = 900 * 1024;
/// What the reference keeps of provider text in its one full copy (the ledger row).
const STORED_CAP: usize = 4 * 1024;
/// What it keeps where the text is only a summary (the event, the card's last error).
const SUMMARY_CAP: usize = 300;
/// A bound on what the call adds to the board's files (the WAL's pages of its few commits
/// included): far below one copy of the message.
const BOARD_GROWTH: u64 = 128 * 1024;

/// The bytes of `kanban.db` and its WAL.
fn board_bytes(board: &Board) -> u64 {
    let db = board.rows().path().to_owned();
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", db.display())).ok())
        .map(|meta| meta.len())
        .sum()
}

#[rstest]
fn a_900_kb_provider_error_is_stored_once_and_capped(board: Board) {
    let aux = board.aux();
    let card = board.create("an idea a verbose provider fails", &["--triage"]);
    aux.reply(&card, provider_error(&"x".repeat(HUGE_ERROR_BYTES)));
    let bytes_before = board_bytes(&board);

    let run = decompose_card(&board, &card);

    let ledger = board.rows().ledger(&card);
    let detail = ledger
        .first()
        .and_then(|row| row.columns.get("detail").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    let reasons = board.rows().failure_reasons(&card);
    let last_error = board
        .rows()
        .decompose_state(&card)
        .and_then(|state| {
            state
                .columns
                .get("last_error")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let growth = board_bytes(&board).saturating_sub(bytes_before);

    Findings::new()
        .that(detail.len() <= STORED_CAP, || {
            format!("the ledger detail holds {} bytes", detail.len())
        })
        .that(detail.contains(&format!("{}", HUGE_ERROR_BYTES)), || {
            format!("the ledger detail does not note the original size: {detail:.120}")
        })
        .equal("decompose_failed events", &reasons.len(), &1)
        .that(reasons.iter().all(|r| r.len() <= SUMMARY_CAP), || {
            format!(
                "event reasons of {:?} bytes",
                reasons.iter().map(String::len).collect::<Vec<_>>()
            )
        })
        .that(reasons.iter().all(|r| r.contains("in the ledger")), || {
            "the event's summary does not say where the text is".to_owned()
        })
        .that(last_error.len() <= SUMMARY_CAP, || {
            format!("the card's last error holds {} bytes", last_error.len())
        })
        .that(growth <= BOARD_GROWTH, || {
            format!("kanban.db and its WAL grew by {growth} bytes")
        })
        .that(
            run.line()["reason"]
                .as_str()
                .is_some_and(|r| r.len() <= SUMMARY_CAP),
            || format!("the --json line's reason: {:.200}", run.line()["reason"]),
        )
        .verdict("a provider's 900 KB error is kept once, capped at 4 KB with its size noted")
        .context(|| format!("{:.2000}", run.output.to_string()))
        .gap(GapKind::StoredTextUnbounded);
}

/// A backoff far longer than the test: a card in it must not be billed while the test runs.
const LONG_BACKOFF_SECS: f64 = 600.0;

#[rstest]
fn auto_decompose_off_and_on_keeps_the_cards_backoff_and_budget(
    #[with(Config::plain().backoff(LONG_BACKOFF_SECS).retries(0))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea that failed once", &["--triage"]);
    aux.reply_in_turn(&card, vec![Reply::malformed(), Reply::graph(2, &[])]);
    let failed = decompose_all(&board);
    let due_before = board.cli_json(["kanban", "show", card.as_str(), "--json"])["task"]
        ["decompose"]["next_attempt_at"]
        .clone();

    let off = board.cli_unchecked(["kanban", "auto-decompose", card.as_str(), "off"]);
    let on = board.cli_unchecked(["kanban", "auto-decompose", card.as_str(), "on", "--json"]);
    let sweep = decompose_all(&board);
    let shown =
        board.cli_json(["kanban", "show", card.as_str(), "--json"])["task"]["decompose"].clone();

    let transcript = || format!("{}\n{off}\n{on}\n{}", failed.output, sweep.output);
    bound(
        "bills of a sweep after off and on, inside the backoff",
        aux.billed_for(&card).saturating_sub(1),
    )
    .exactly(0)
    .note(|| board.setting(Setting::Backoff))
    .context(|| format!("{}\n{}", transcript(), board.diag(&card)))
    .gap(GapKind::BackoffIgnored);
    let on_line: Value = serde_json::from_str(&on.stdout).unwrap_or(Value::Null);
    Findings::new()
        .equal("attempts after off and on", &shown["attempts"], &json!(1))
        .equal(
            "next attempt after off and on",
            &shown["next_attempt_at"],
            &due_before,
        )
        .equal(
            "`auto-decompose on --json` next_attempt_at",
            &on_line["next_attempt_at"],
            &due_before,
        )
        .that(
            due_before.as_f64().is_some_and(|due| {
                due * 1000.0 > unix_ms_now() as f64 + (LONG_BACKOFF_SECS - 60.0) * 1000.0
            }),
            || format!("the card was in its backoff: due at {due_before}"),
        )
        .verdict("switching auto-decompose off and on keeps the backoff and the attempt count")
        .context(|| format!("{}\n{}", transcript(), board.diag(&card)))
        .gap(GapKind::BackoffIgnored);
}

/// How a board-wide guard is put in force before a person's decompose.
#[derive(Debug, Clone, Copy)]
enum BoardGuard {
    /// A 402 pauses the board for the cooldown.
    Pause,
    /// The hour's one allowed call is spent.
    Ceiling,
}

#[rstest]
#[case::pause(BoardGuard::Pause)]
#[case::ceiling(BoardGuard::Ceiling)]
fn a_decompose_by_hand_keeps_to_the_board_guards_unless_forced(#[case] guard: BoardGuard) {
    let config = Config::plain().cooldown(900.0).retries(0);
    let board = Board::new(match guard {
        BoardGuard::Pause => config,
        BoardGuard::Ceiling => config.calls_per_hour(1),
    });
    let aux = board.aux();
    let first = board.create("the idea that set the guard", &["--triage"]);
    aux.reply(
        &first,
        match guard {
            BoardGuard::Pause => Reply::http_error(402, "payment required"),
            BoardGuard::Ceiling => Reply::graph(2, &[]),
        },
    );
    let setting = decompose_card(&board, &first);
    let card = board.create("an idea a person wants split now", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let held = decompose_card(&board, &card);
    let bills_held = aux.billed_for(&card);
    let attempts_held = board.rows().attempts(&card);
    let forced = decompose_forced(&board, &card);

    let (words, name) = match guard {
        BoardGuard::Pause => ("auto-decompose is paused until", "pause"),
        BoardGuard::Ceiling => ("kanban.decompose_calls_per_hour", "ceiling"),
    };
    let transcript = || format!("{}\n{}\n{}", setting.output, held.output, forced.output);
    bound(
        "requests of a decompose by hand under the guard",
        bills_held,
    )
    .exactly(0)
    .context(transcript)
    .gap(match guard {
        BoardGuard::Pause => GapKind::ProviderFaultNotPaused,
        BoardGuard::Ceiling => GapKind::HourlyCeilingExceeded,
    });
    Findings::new()
        .equal("exit code under the guard", &held.output.code, &Some(1))
        .equal("attempts counted under the guard", &attempts_held, &0)
        .equal("ok under the guard", &held.ok(), &Some(false))
        .that(
            held.output.stderr.contains(words) && held.output.stderr.contains("--force"),
            || "the refusal names neither the guard nor --force".to_owned(),
        )
        .verdict("a refused decompose by hand says which guard and how to go past it")
        .context(transcript)
        .gap(GapKind::UnclearRefusal);
    bound("requests of the forced decompose", aux.billed_for(&card))
        .exactly(1)
        .context(transcript)
        .gap(GapKind::NotOneRequest);
    let overrode = forced.line()["overrode"].clone();
    Findings::new()
        .equal("forced decompose ok", &forced.ok(), &Some(true))
        .equal(
            "guards the --json line says it went past",
            &overrode.as_array().map(|guards| {
                guards
                    .iter()
                    .map(|g| g["guard"].clone())
                    .collect::<Vec<_>>()
            }),
            &Some(vec![json!(name)]),
        )
        .that(
            forced.output.stderr.contains("--force: went past")
                && forced.output.stderr.contains(words),
            || "stderr does not say which guard --force went past".to_owned(),
        )
        .verdict("a forced decompose says which guard it went past, on stderr and in --json")
        .context(transcript)
        .gap(GapKind::UnclearRefusal);
}
