//! The operator's recovery verbs through the real CLI: `kanban unpark ID`, `kanban resume`,
//! `kanban usage --calls [--card ID] [--since WHEN]` and `kanban auto-decompose ID on|off`. Each
//! is judged by what it changes for billing (a sweep after it bills again, or never), by its
//! exit codes, and by the shape of its `--json` output (reviewed as snapshots).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fixtures::rows::unix_ms_ago;
use fixtures::snapshot::Redactor;
use rstest::rstest;
use serde_json::{json, Map, Value};

use fixtures::cli::CliOutput;
use judge::prelude::*;

use crate::{decompose_all, decompose_card, json_lines, judge_exit_code, one_per_line};

/// A card id no board has.
const UNKNOWN_ID: &str = "t_00000000";

/// Who the verbs are run by in these tests.
const OPERATOR: &str = "ops";

/// A type a `--json` field must have.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Id,
    Bool,
    Integer,
    Number,
    Text,
    IntegerOrNull,
    NumberOrNull,
    TextOrNull,
    ObjectOrNull,
}

impl Kind {
    fn accepts(self, value: &Value) -> bool {
        let id = |v: &Value| {
            v.as_str().is_some_and(|id| {
                id.len() == 10
                    && id.starts_with("t_")
                    && id[2..].bytes().all(|b| b.is_ascii_hexdigit())
            })
        };
        match self {
            Kind::Id => id(value),
            Kind::Bool => value.is_boolean(),
            Kind::Integer => value.is_i64() || value.is_u64(),
            Kind::Number => value.is_number(),
            Kind::Text => value.is_string(),
            Kind::IntegerOrNull => value.is_null() || value.is_i64() || value.is_u64(),
            Kind::NumberOrNull => value.is_null() || value.is_number(),
            Kind::TextOrNull => value.is_null() || value.is_string(),
            Kind::ObjectOrNull => value.is_null() || value.is_object(),
        }
    }
}

/// Whether `value` is an object with exactly `fields`, each of its kind; `Err` says what is not.
fn shape(value: &Value, fields: &[(&str, Kind)]) -> Result<(), String> {
    let Some(object) = value.as_object() else {
        return Err(format!("not a JSON object: {value}"));
    };
    let mut wrong = Vec::new();
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut expected: Vec<&str> = fields.iter().map(|(key, _)| *key).collect();
    expected.sort_unstable();
    if keys != expected {
        wrong.push(format!("keys {keys:?}, expected {expected:?}"));
    }
    for (key, kind) in fields {
        let field = object.get(*key).unwrap_or(&Value::Null);
        if !kind.accepts(field) {
            wrong.push(format!("{key} is {field}, expected {kind:?}"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("{} in {value}", wrong.join("; ")))
    }
}

/// The `--json` keys of `kanban usage --calls`, one object per paid call.
const CALL_FIELDS: [(&str, Kind); 13] = [
    ("id", Kind::Integer),
    ("started_at", Kind::Number),
    ("task_id", Kind::TextOrNull),
    ("origin", Kind::Text),
    ("attempt", Kind::IntegerOrNull),
    ("try", Kind::Integer),
    ("outcome", Kind::Text),
    ("http_status", Kind::IntegerOrNull),
    ("prompt_tokens", Kind::IntegerOrNull),
    ("completion_tokens", Kind::IntegerOrNull),
    ("duration_ms", Kind::IntegerOrNull),
    ("detail", Kind::TextOrNull),
    ("model", Kind::TextOrNull),
];

fn unix_secs_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// Everything on the board a refused verb must leave as it was: every task row, every link, and
/// each card's events, attempt record and ledger rows.
fn board_state(board: &Board) -> Value {
    let rows = board.rows();
    let cards: Vec<Value> = rows
        .tasks()
        .into_iter()
        .map(|task| {
            json!({
                "task": task.columns,
                "events": rows.all_events(&task.id),
                "decompose_state": rows.decompose_state(&task.id).map(|state| state.columns),
                "ledger": rows.ledger(&task.id).into_iter().map(|row| row.columns).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({"cards": cards, "links": rows.links()})
}

/// `kanban show ID --json` → `task.decompose`.
fn shown_decompose_state(board: &Board, card: &str) -> Value {
    board.cli_json(["kanban", "show", card, "--json"])["task"]["decompose"].clone()
}

/// `value` redacted for a snapshot, call durations included (they differ on every run).
fn redacted(redactor: &mut Redactor, value: &Value) -> Value {
    let mut value = redactor.value(value);
    if let Some(object) = value.as_object_mut() {
        if object.get("duration_ms").is_some_and(Value::is_number) {
            object.insert("duration_ms".to_owned(), Value::from("<ms>"));
        }
    }
    value
}

#[rstest]
fn unpark_gives_a_parked_card_a_fresh_budget_and_a_sweep_decomposes_it_with_one_bill(
    #[with(Config::plain().max_attempts(2).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea the model failed twice", &["--triage"]);
    // Parked beside it, and not named: an unpark is for one card only.
    let bystander = board.create("another idea the model failed twice", &["--triage"]);
    aux.reply(&card, Reply::malformed());
    aux.reply(&bystander, Reply::malformed());
    for _ in 0..3 {
        decompose_all(&board);
    }
    let parked = shown_decompose_state(&board, &card);
    let bystander_before = shown_decompose_state(&board, &bystander);
    aux.reply(&card, Reply::graph(2, &[]));

    let before = unix_secs_now();
    let unpark = board.cli_unchecked([
        "kanban",
        "unpark",
        card.as_str(),
        "--by",
        OPERATOR,
        "--json",
    ]);
    let after = unix_secs_now();
    let shown = shown_decompose_state(&board, &card);
    let bystander_after = shown_decompose_state(&board, &bystander);
    let unparked_events = board.rows().events(&card, "decompose_unparked");
    let bills_before_sweep = aux.billed_for(&card);
    let sweep = decompose_all(&board);

    judge_exit_code("`kanban unpark` of a parked card", &unpark, 0);
    let line = serde_json::from_str::<Value>(&unpark.stdout).unwrap_or(Value::Null);
    check(
        "`kanban unpark --json` prints task_id, unparked, attempts_before, next_attempt_at",
        shape(
            &line,
            &[
                ("task_id", Kind::Id),
                ("unparked", Kind::Bool),
                ("attempts_before", Kind::Integer),
                ("next_attempt_at", Kind::Integer),
            ],
        ),
    )
    .context(|| unpark.to_string())
    .gap(GapKind::WrongJsonLine);
    let due = line["next_attempt_at"].as_f64().unwrap_or(f64::NAN);
    Findings::new()
        .equal("parked before", &parked["parked"], &json!(true))
        .equal("task_id", &line["task_id"], &json!(card))
        .equal("unparked", &line["unparked"], &json!(true))
        .equal("attempts_before", &line["attempts_before"], &json!(2))
        .that(due >= before.floor() && due <= after.ceil() + 1.0, || {
            format!("next_attempt_at {due} is not now ({before:.3}..{after:.3})")
        })
        .equal("attempts shown after", &shown["attempts"], &json!(0))
        .equal("parked shown after", &shown["parked"], &json!(false))
        .equal("decompose_unparked events", &unparked_events.len(), &1)
        .that(
            unparked_events.first().is_some_and(|event| {
                event.payload["attempts"] == json!(2) && event.payload["by"] == json!(OPERATOR)
            }),
            || format!("the event names the spent budget and who: {unparked_events:?}"),
        )
        .equal(
            "the bystander parked before",
            &bystander_before["parked"],
            &json!(true),
        )
        .equal(
            "the bystander after (untouched)",
            &bystander_after,
            &bystander_before,
        )
        .verdict("unpark resets the budget and makes the card due now, with an event")
        .context(|| format!("{unpark}\n{}", board.diag(&card)))
        .gap(GapKind::RecoveryFailed);
    bound(
        "bills of the first sweep after unpark",
        aux.billed_for(&card) - bills_before_sweep,
    )
    .exactly(1)
    .note(|| format!("{bills_before_sweep} bills before it"))
    .context(|| sweep.output.to_string())
    .gap(GapKind::RecoveryFailed);
    holds(
        "the unparked card is decomposed by that sweep",
        board.rows().children_of(&card).len() == 2,
    )
    .context(|| format!("{}\n{}", sweep.output, board.diag(&card)))
    .gap(GapKind::RecoveryFailed);
    let mut redactor = Redactor::new();
    redactor.task(&card);
    assert_rows_snapshot!(
        "unpark_json",
        "`kanban unpark ID --by ops --json` of a card parked after 2 failed attempts",
        redactor.value(&line)
    );
}

/// A card that failed more often than the default budget allows, under a config that allows
/// more, has not spent its budget: `unpark` refuses and resets nothing. An unpark that judged by
/// the default budget (3) would hand it a fresh one, and with it more paid attempts (B1).
#[rstest]
fn unpark_judges_a_card_by_the_configured_budget(
    #[with(Config::plain().max_attempts(5).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea the model failed three times", &["--triage"]);
    aux.reply(&card, Reply::malformed());
    for _ in 0..3 {
        decompose_all(&board);
    }
    let before = shown_decompose_state(&board, &card);
    let unpark = board.cli_unchecked(["kanban", "unpark", card.as_str(), "--json"]);
    let after = shown_decompose_state(&board, &card);

    judge_exit_code(
        "`kanban unpark` of a card with budget left under the configured maximum",
        &unpark,
        1,
    );
    Findings::new()
        .equal(
            "attempts before (3 failed, of 5)",
            &before["attempts"],
            &json!(3),
        )
        .equal("attempts after", &after["attempts"], &before["attempts"])
        .equal("parked after", &after["parked"], &json!(false))
        .equal(
            "decompose_unparked events",
            &board.rows().events(&card, "decompose_unparked").len(),
            &0,
        )
        .verdict("unpark leaves the budget of a card that has not spent it")
        .context(|| format!("{unpark}\n{}", board.diag(&card)))
        .gap(GapKind::RecoveryFailed);
}

/// A card `unpark` must refuse: why, and the words its refusal names.
#[derive(Debug, Clone, Copy)]
enum Unparkable {
    /// In triage with its budget unspent.
    NotParked,
    /// Out of triage (`todo`/`ready`).
    NotInTriage,
    /// No such card.
    Unknown,
}

#[rstest]
#[case::not_parked(Unparkable::NotParked, "is not parked")]
#[case::not_in_triage(Unparkable::NotInTriage, "is not in triage")]
#[case::unknown(Unparkable::Unknown, "no such task")]
fn unpark_refuses_with_exit_1_and_writes_nothing(
    #[case] which: Unparkable,
    #[case] reason: &str,
    #[with(Config::plain().max_attempts(2).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    // A card that failed once: an attempt record a wrong unpark would reset.
    let tried = board.create("an idea the model failed once", &["--triage"]);
    aux.reply(&tried, Reply::malformed());
    decompose_all(&board);
    let ready = board.create("work already planned", &[]);
    let card = match which {
        Unparkable::NotParked => tried.clone(),
        Unparkable::NotInTriage => ready,
        Unparkable::Unknown => UNKNOWN_ID.to_owned(),
    };
    let before = board_state(&board);
    let bills_before = aux.bills();

    let runs: Vec<CliOutput> = [true, false]
        .into_iter()
        .map(|json| {
            let mut args = vec!["kanban", "unpark", card.as_str()];
            if json {
                args.push("--json");
            }
            board.cli_unchecked(args)
        })
        .collect();
    let usage_error = board.cli_unchecked(["kanban", "unpark"]);

    let transcript = || one_per_line(&runs);
    for (run, words) in runs.iter().zip(["with --json", "without --json"]) {
        judge_exit_code(
            &format!("`kanban unpark` of a card it refuses, {words}"),
            run,
            1,
        );
    }
    judge_exit_code("`kanban unpark` without an id", &usage_error, 2);
    let mut findings = Findings::new();
    for run in &runs {
        findings = findings
            .that(run.stdout.trim().is_empty(), || {
                format!("stdout of `{}` is not empty: {:?}", run.command, run.stdout)
            })
            .that(run.stderr.contains(reason), || {
                format!("stderr of `{}` does not say {reason:?}", run.command)
            });
    }
    findings = findings
        .equal(
            "the board after the refusals",
            &board_state(&board),
            &before,
        )
        .equal("requests", &aux.bills(), &bills_before);
    findings
        .verdict("a refused unpark says why on stderr and writes nothing")
        .context(transcript)
        .gap(GapKind::UnclearRefusal);
}

#[rstest]
fn resume_lifts_a_provider_pause_so_a_sweep_bills_again_and_usage_shows_it(
    #[with(Config::plain().cooldown(900.0).retries(0).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let idle = board.cli_unchecked(["kanban", "resume", "--json"]);
    let usage_before = board.cli_json(["kanban", "usage", "--json"]);
    let card = board.create("an idea behind a revoked key", &["--triage"]);
    aux.reply(&card, Reply::http_error(401, "invalid api key"));
    decompose_all(&board);
    let paused_sweep = decompose_all(&board);
    let bills_while_paused = aux.billed_for(&card);
    aux.reply(&card, Reply::graph(2, &[]));

    let resume = board.cli_unchecked(["kanban", "resume", "--by", OPERATOR, "--json"]);
    let usage_error = board.cli_unchecked(["kanban", "resume", "--until", "never"]);
    let usage = board.cli_json(["kanban", "usage", "--json"]);
    let usage_text = board.cli(["kanban", "usage"]).stdout;
    let sweep = decompose_all(&board);

    bound(
        "bills of two sweeps under a provider pause",
        bills_while_paused,
    )
    .exactly(1)
    .note(|| board.setting(Setting::Cooldown))
    .context(|| paused_sweep.output.to_string())
    .gap(GapKind::ProviderFaultNotPaused);
    judge_exit_code("`kanban resume` with no pause in force", &idle, 0);
    judge_exit_code("`kanban resume` of a paused board", &resume, 0);
    judge_exit_code("`kanban resume` with an unknown option", &usage_error, 2);
    let idle_line = serde_json::from_str::<Value>(&idle.stdout).unwrap_or(Value::Null);
    let line = serde_json::from_str::<Value>(&resume.stdout).unwrap_or(Value::Null);
    let fields = [
        ("resumed", Kind::Bool),
        ("by", Kind::Text),
        ("at", Kind::Number),
        ("cleared", Kind::ObjectOrNull),
    ];
    let cleared_shape = shape(
        &line["cleared"],
        &[("until", Kind::Number), ("reason", Kind::Text)],
    );
    check(
        "`kanban resume --json` prints resumed, by, at, cleared {until, reason}",
        shape(&idle_line, &fields)
            .and(shape(&line, &fields))
            .and(cleared_shape),
    )
    .context(|| format!("{idle}\n{resume}"))
    .gap(GapKind::WrongJsonLine);
    Findings::new()
        .equal(
            "resumed with no pause",
            &idle_line["resumed"],
            &json!(false),
        )
        .equal("cleared with no pause", &idle_line["cleared"], &Value::Null)
        .that(usage_before.get("last_resume").is_none(), || {
            format!("usage shows a resume before any: {usage_before}")
        })
        .equal("resumed", &line["resumed"], &json!(true))
        .equal("by", &line["by"], &json!(OPERATOR))
        .that(
            line["cleared"]["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("401")),
            || format!("the cleared pause names its 401: {line}"),
        )
        .equal("usage pause after resume", &usage["pause"], &Value::Null)
        .equal(
            "usage last_resume.by",
            &usage["last_resume"]["by"],
            &json!(OPERATOR),
        )
        .that(
            usage_text.contains(&format!("last resumed by {OPERATOR}")),
            || format!("`kanban usage` does not show the resume:\n{usage_text}"),
        )
        .verdict("resume lifts the pause and usage shows who did it")
        .context(|| format!("{resume}\n{usage}"))
        .gap(GapKind::CallNotVisible);
    bound(
        "bills of the first sweep after resume",
        aux.billed_for(&card) - bills_while_paused,
    )
    .exactly(1)
    .context(|| sweep.output.to_string())
    .gap(GapKind::RecoveryFailed);
    holds(
        "the card is decomposed by that sweep",
        board.rows().children_of(&card).len() == 2,
    )
    .context(|| format!("{}\n{}", sweep.output, board.diag(&card)))
    .gap(GapKind::RecoveryFailed);
    let mut redactor = Redactor::new();
    assert_rows_snapshot!(
        "resume_json",
        "`kanban resume --json` with no pause in force, then `--by ops` after a 401 paused the board",
        json!({"no_pause": redactor.value(&idle_line), "after_401": redactor.value(&line)})
    );
}

#[rstest]
fn usage_calls_lists_each_paid_call_once_and_filters_by_card(
    #[with(Config::plain().retries(0).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    let good = board.create("an idea that splits", &["--triage"]);
    aux.reply(&good, Reply::graph(2, &[]));
    decompose_card(&board, &good);
    let broken = board.create("an idea behind a broken provider", &["--triage"]);
    aux.reply(&broken, Reply::http_error(500, "upstream exploded"));
    let quiet = board.create(
        "an idea nobody paid for",
        &["--triage", "--no-auto-decompose"],
    );
    decompose_all(&board);

    let all = board.cli_unchecked(["kanban", "usage", "--calls", "--json"]);
    let all_text = board.cli_unchecked(["kanban", "usage", "--calls"]);
    let one = board.cli_unchecked([
        "kanban",
        "usage",
        "--calls",
        "--card",
        good.as_str(),
        "--json",
    ]);
    let one_text = board.cli_unchecked(["kanban", "usage", "--calls", "--card", good.as_str()]);
    let none = board.cli_unchecked([
        "kanban",
        "usage",
        "--calls",
        "--card",
        quiet.as_str(),
        "--json",
    ]);
    let unknown = board.cli_unchecked(["kanban", "usage", "--calls", "--card", UNKNOWN_ID]);
    let card_without_calls = board.cli_unchecked(["kanban", "usage", "--card", good.as_str()]);

    for (what, run, code) in [
        ("`kanban usage --calls --json`", &all, 0),
        ("`kanban usage --calls`", &all_text, 0),
        ("`kanban usage --calls --card ID`", &one, 0),
        (
            "`kanban usage --calls --card` of a card never billed",
            &none,
            0,
        ),
        (
            "`kanban usage --calls --card` of an unknown card",
            &unknown,
            1,
        ),
        (
            "`kanban usage --card` without --calls",
            &card_without_calls,
            2,
        ),
    ] {
        judge_exit_code(what, run, code);
    }
    let calls = json_lines(&all);
    let shapes: Result<(), String> = calls.iter().try_for_each(|call| shape(call, &CALL_FIELDS));
    check(
        "`kanban usage --calls --json` prints one object of the documented keys per call",
        shapes,
    )
    .context(|| all.to_string())
    .gap(GapKind::WrongJsonLine);
    bound("calls listed by `kanban usage --calls --json`", calls.len())
        .exactly(aux.bills())
        .note(|| format!("billed in order: {:?}", aux.billed_ids()))
        .context(|| all.to_string())
        .gap(GapKind::CallNotVisible);
    let listed: Vec<Value> = calls
        .iter()
        .map(|call| {
            json!([
                call["task_id"],
                call["origin"],
                call["outcome"],
                call["http_status"],
                call["attempt"],
                call["try"]
            ])
        })
        .collect();
    let text_lines: Vec<&str> = all_text
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    Findings::new()
        .equal(
            "calls (card, origin, outcome, status, attempt, try)",
            &listed,
            &vec![
                json!([good, "manual", "ok", 200, 1, 1]),
                json!([broken, "sweep", "server_error", 500, 1, 1]),
            ],
        )
        .equal("text lines", &text_lines.len(), &aux.bills())
        .that(
            text_lines
                .first()
                .is_some_and(|line| line.contains(&good) && line.contains("manual"))
                && text_lines
                    .get(1)
                    .is_some_and(|line| line.contains(&broken) && line.contains("sweep")),
            || {
                format!(
                    "each text line names its card and origin:\n{}",
                    all_text.stdout
                )
            },
        )
        .verdict("`kanban usage --calls` shows each paid call once, oldest first")
        .context(|| format!("{all}\n{all_text}"))
        .gap(GapKind::CallNotVisible);
    let only: Vec<Value> = json_lines(&one)
        .iter()
        .map(|call| call["task_id"].clone())
        .collect();
    Findings::new()
        .equal("cards of `--card ID --json`", &only, &vec![json!(good)])
        .equal(
            "lines of `--card ID`",
            &one_text
                .stdout
                .lines()
                .filter(|l| l.contains(&good))
                .count(),
            &1,
        )
        .equal(
            "lines of `--card` never billed",
            &json_lines(&none).len(),
            &0,
        )
        .that(
            unknown.stdout.trim().is_empty() && unknown.stderr.contains("no such task"),
            || format!("an unknown card is refused on stderr:\n{unknown}"),
        )
        .verdict("`--card` lists that card's calls and nothing else")
        .context(|| format!("{one}\n{one_text}\n{none}\n{unknown}"))
        .gap(GapKind::CallNotVisible);
    let mut redactor = Redactor::new();
    redactor.task(&good);
    redactor.task(&broken);
    let redacted_calls: Vec<Value> = calls
        .iter()
        .map(|call| redacted(&mut redactor, call))
        .collect();
    assert_rows_snapshot!(
        "usage_calls_json",
        "`kanban usage --calls --json` after a decompose by hand and a sweep answered with HTTP 500",
        redacted_calls
    );
}

/// The `--since` boundary of the `usage` test: 2024-03-01T12:00:00.250Z.
const SINCE_MS: i64 = 1_709_294_400_250;

#[rstest]
fn usage_since_counts_a_call_at_its_moment_and_none_a_millisecond_before(board: Board) {
    let card = board.create(
        "an idea paid for long ago",
        &["--triage", "--no-auto-decompose"],
    );
    let rows = board.rows();
    for at in [SINCE_MS - 1, SINCE_MS, SINCE_MS + 1] {
        rows.arrange_paid_call_at(&card, at);
    }
    // Either side of `--since 1h`, with room for the CLI's start-up.
    rows.arrange_paid_call_at(&card, unix_ms_ago(Duration::from_secs(3600 + 30)));
    rows.arrange_paid_call_at(&card, unix_ms_ago(Duration::from_secs(3600 - 30)));

    let runs: Vec<(&str, CliOutput)> = [
        ("2024-03-01T12:00:00.250Z", "a UTC moment"),
        (
            "2024-03-01T14:00:00.250+02:00",
            "the same moment with an offset",
        ),
        ("1h", "an hour back"),
    ]
    .into_iter()
    .map(|(since, words)| {
        (
            words,
            board.cli_unchecked(["kanban", "usage", "--calls", "--json", "--since", since]),
        )
    })
    .collect();
    let summary = board.cli_unchecked([
        "kanban",
        "usage",
        "--json",
        "--since",
        "2024-03-01 12:00:00.250",
    ]);
    let bad: Vec<CliOutput> = ["2024-02-30", "soon", "-3m"]
        .into_iter()
        .map(|since| board.cli_unchecked(["kanban", "usage", "--calls", "--since", since]))
        .collect();

    for (words, run) in &runs {
        judge_exit_code(&format!("`kanban usage --calls --since` {words}"), run, 0);
    }
    judge_exit_code("`kanban usage --since` a moment", &summary, 0);
    let started: Vec<Vec<i64>> = runs
        .iter()
        .map(|(_, run)| {
            json_lines(run)
                .iter()
                .map(|call| {
                    call["started_at"]
                        .as_f64()
                        .map_or(-1, |secs| (secs * 1000.0).round() as i64)
                })
                .collect()
        })
        .collect();
    let mut findings = Findings::new();
    let recent: Vec<i64> = started[0]
        .iter()
        .copied()
        .filter(|at| *at > SINCE_MS + 1)
        .collect();
    findings = findings
        .equal(
            "calls since 12:00:00.250Z, of those arranged around it",
            &started[0]
                .iter()
                .copied()
                .filter(|at| *at <= SINCE_MS + 1)
                .collect::<Vec<_>>(),
            &vec![SINCE_MS, SINCE_MS + 1],
        )
        .equal("calls since it, all told", &started[0].len(), &4)
        .equal(
            "calls since the same moment at +02:00",
            &started[1],
            &started[0],
        )
        .equal("calls in the last hour", &started[2].len(), &1)
        .that(
            recent.len() == 2 && started[2].first() == recent.last(),
            || {
                format!(
                    "the last hour holds only the newer of the two calls around it: {started:?}"
                )
            },
        )
        .equal(
            "summary calls since the moment",
            &serde_json::from_str::<Value>(&summary.stdout).unwrap_or(Value::Null)["totals"]
                ["calls"],
            &json!(4),
        );
    findings
        .verdict("`--since` counts a call at its moment and none a millisecond before")
        .context(|| {
            runs.iter()
                .map(|(_, run)| run.to_string())
                .chain([summary.to_string()])
                .collect::<Vec<_>>()
                .join("\n")
        })
        .gap(GapKind::CallNotVisible);
    let mut findings = Findings::new();
    for run in &bad {
        findings = findings.that(run.code == Some(2) && run.stdout.trim().is_empty(), || {
            format!("`{}` exited {}", run.command, run.code_text())
        });
    }
    findings
        .verdict("a `--since` that is neither a date nor a duration is a usage error (exit 2)")
        .context(|| one_per_line(&bad))
        .gap(GapKind::WrongExitCode);
}

#[rstest]
fn auto_decompose_off_keeps_sweeps_away_and_on_brings_them_back(board: Board) {
    let aux = board.aux();
    let card = board.create("an idea its owner wants to split", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let off = board.cli_unchecked([
        "kanban",
        "auto-decompose",
        card.as_str(),
        "off",
        "--by",
        OPERATOR,
        "--json",
    ]);
    let off_sweep = decompose_all(&board);
    let bills_while_off = aux.billed_for(&card);
    let off_again =
        board.cli_unchecked(["kanban", "auto-decompose", card.as_str(), "off", "--json"]);
    let on = board.cli_unchecked([
        "kanban",
        "auto-decompose",
        card.as_str(),
        "on",
        "--by",
        OPERATOR,
        "--json",
    ]);
    let on_sweep = decompose_all(&board);
    let unknown = board.cli_unchecked(["kanban", "auto-decompose", UNKNOWN_ID, "on"]);
    let bad_switch = board.cli_unchecked(["kanban", "auto-decompose", card.as_str(), "sometimes"]);

    bound("sweep bills for a card switched off", bills_while_off)
        .at_most(0)
        .context(|| format!("{off}\n{}", off_sweep.output))
        .gap(GapKind::HoldDecomposed);
    bound(
        "sweep bills once the card is switched on",
        aux.billed_for(&card) - bills_while_off,
    )
    .exactly(1)
    .context(|| format!("{on}\n{}", on_sweep.output))
    .gap(GapKind::RecoveryFailed);
    holds(
        "the switched-on card is decomposed",
        board.rows().children_of(&card).len() == 2,
    )
    .context(|| board.diag(&card))
    .gap(GapKind::RecoveryFailed);
    for (what, run, code) in [
        ("`kanban auto-decompose ID off`", &off, 0),
        (
            "`kanban auto-decompose ID off` when already off",
            &off_again,
            0,
        ),
        ("`kanban auto-decompose ID on`", &on, 0),
        ("`kanban auto-decompose` of an unknown card", &unknown, 1),
        ("`kanban auto-decompose ID sometimes`", &bad_switch, 2),
    ] {
        judge_exit_code(what, run, code);
    }
    let lines: Vec<Value> = [&off, &off_again, &on]
        .into_iter()
        .map(|run| serde_json::from_str::<Value>(&run.stdout).unwrap_or(Value::Null))
        .collect();
    let fields = [
        ("task_id", Kind::Id),
        ("auto_decompose", Kind::Bool),
        ("changed", Kind::Bool),
        ("next_attempt_at", Kind::NumberOrNull),
    ];
    check(
        "`kanban auto-decompose --json` prints task_id, auto_decompose, changed, next_attempt_at",
        lines.iter().try_for_each(|line| shape(line, &fields)),
    )
    .context(|| format!("{off}\n{off_again}\n{on}"))
    .gap(GapKind::WrongJsonLine);
    let events: Vec<(String, Value)> = board
        .rows()
        .all_events(&card)
        .into_iter()
        .filter(|event| event.kind.starts_with("auto_decompose_"))
        .map(|event| (event.kind, event.payload["by"].clone()))
        .collect();
    Findings::new()
        .equal(
            "(auto_decompose, changed) of off, off again, on",
            &lines
                .iter()
                .map(|line| (line["auto_decompose"].clone(), line["changed"].clone()))
                .collect::<Vec<_>>(),
            &vec![
                (json!(false), json!(true)),
                (json!(false), json!(false)),
                (json!(true), json!(true)),
            ],
        )
        .equal(
            "next_attempt_at when off",
            &lines[0]["next_attempt_at"],
            &Value::Null,
        )
        .that(lines[2]["next_attempt_at"].is_number(), || {
            format!("switched on, the card is due: {}", lines[2])
        })
        .equal(
            "events (kind, by)",
            &events,
            &vec![
                ("auto_decompose_disabled".to_owned(), json!(OPERATOR)),
                ("auto_decompose_enabled".to_owned(), json!(OPERATOR)),
            ],
        )
        .verdict("each switch is recorded once and says what it did")
        .context(|| board.diag(&card))
        .gap(GapKind::CallNotVisible);
    let mut redactor = Redactor::new();
    redactor.task(&card);
    let snapshot: Map<String, Value> = ["off", "off_again", "on"]
        .into_iter()
        .zip(&lines)
        .map(|(label, line)| (label.to_owned(), redactor.value(line)))
        .collect();
    assert_rows_snapshot!(
        "auto_decompose_json",
        "`kanban auto-decompose ID off --json`, `off` once more, then `on`",
        snapshot
    );
}

#[rstest]
fn an_operators_verb_on_one_card_leaves_every_other_card_as_it_was(
    #[with(Config::plain().max_attempts(2).backoff(0.0))] board: Board,
) {
    let aux = board.aux();
    // Two parked cards, two cards switched off with their budget half spent: each verb below
    // names one of each pair, and its twin must come out of it as it went in.
    let [named, twin] = ["a parked idea named by unpark", "its parked twin"]
        .map(|title| board.create(title, &["--triage"]));
    for card in [&named, &twin] {
        aux.reply(card, Reply::malformed());
    }
    for _ in 0..3 {
        decompose_all(&board);
    }
    let [switched, switched_twin] = ["an idea switched back on", "its twin, left off"]
        .map(|title| board.create(title, &["--triage"]));
    for card in [&switched, &switched_twin] {
        aux.reply(card, Reply::malformed());
    }
    decompose_all(&board);
    for card in [&switched, &switched_twin] {
        board.cli(["kanban", "auto-decompose", card.as_str(), "off"]);
    }
    let states_before: Vec<Value> = [&twin, &switched_twin]
        .map(|card| shown_decompose_state(&board, card))
        .to_vec();
    let bills_before = [&twin, &switched_twin].map(|card| aux.billed_for(card));

    board.cli(["kanban", "unpark", named.as_str(), "--by", OPERATOR]);
    board.cli(["kanban", "auto-decompose", switched.as_str(), "on"]);
    let sweeps: Vec<String> = (0..2)
        .map(|_| decompose_all(&board).output.to_string())
        .collect();

    let states_after: Vec<Value> = [&twin, &switched_twin]
        .map(|card| shown_decompose_state(&board, card))
        .to_vec();
    let bills_after = [&twin, &switched_twin].map(|card| aux.billed_for(card));
    Findings::new()
        .equal(
            "the twins' budgets and switches",
            &states_after,
            &states_before,
        )
        .equal("the twins' bills", &bills_after, &bills_before)
        .that(aux.billed_for(&named) > 2, || {
            format!(
                "the unparked card was not billed again ({} bills)",
                aux.billed_for(&named)
            )
        })
        .verdict("unpark and auto-decompose on touch only the card they name")
        .context(|| sweeps.join("\n"))
        .gap(GapKind::VerbOverreached);
}

#[rstest]
fn resume_lifts_the_pause_and_leaves_every_cards_backoff(
    #[with(Config::plain().backoff(600.0).cooldown(900.0))] board: Board,
) {
    let aux = board.aux();
    let waiting = board.create("an idea in its backoff", &["--triage"]);
    aux.reply(&waiting, Reply::http_error(500, "try later"));
    decompose_all(&board);
    let refused = board.create("an idea the provider refuses to bill", &["--triage"]);
    aux.reply(&refused, Reply::http_error(402, "payment required"));
    decompose_all(&board);
    let fresh = board.create("an idea written after the refusal", &["--triage"]);
    let bills_before = aux.billed_for(&waiting);

    let resume = board.cli_unchecked(["kanban", "resume", "--by", OPERATOR]);
    let bills_before_the_sweep = aux.bills();
    let sweep = decompose_all(&board);
    // A card in its backoff left alone tells something only of a sweep that billed at all: one
    // still held by the pause bills nothing for any card.
    let sweep_billed = if aux.bills() > bills_before_the_sweep {
        Ok(())
    } else {
        Err("the sweep after resume billed nothing, so the pause may still have held it".to_owned())
    };

    judge_exit_code("`kanban resume` of a paused board", &resume, 0);
    holds(
        "the sweep after resume bills the fresh card (the pause is lifted)",
        aux.billed_for(&fresh) == 1,
    )
    .context(|| sweep.output.to_string())
    .gap(GapKind::RecoveryFailed);
    bound(
        "bills of the sweep after resume for a card in its 600 s backoff",
        aux.billed_for(&waiting) - bills_before,
    )
    .exactly(0)
    .context(|| format!("{}\n{}", sweep.output, board.diag(&waiting)))
    .provided(&sweep_billed)
    .gap(GapKind::BackoffIgnored);
}
