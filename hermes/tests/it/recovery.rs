//! The operator's verbs end to end, through the real binary against a real fake provider and a
//! real board: `unpark`, `resume`, `auto-decompose ID on|off` and `usage --calls`.

use fixtures::aux_model::AuxModel;
use serde_json::Value;

use crate::support::{chat_reply, fake_provider, single_task_reply, status_reply, Scratch};

/// A board whose automatic paths bill at most one attempt per card, with no backoff.
fn board(provider: &AuxModel, extra: &str) -> Scratch {
    let s = Scratch::new();
    s.write_config(&format!(
        "model:\n  base_url: {}\n  default: fake-model\n\
         auxiliary:\n  transient_retries: 0\n  timeout_seconds: 10\n\
         kanban:\n  decompose_max_attempts: 1\n  decompose_backoff_seconds: 0\n{extra}",
        provider.base_url()
    ));
    s
}

fn event_kinds(s: &Scratch, id: &str) -> Vec<String> {
    s.json(&["kanban", "show", id, "--json"])["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn decompose_state(s: &Scratch, id: &str) -> Value {
    s.json(&["kanban", "show", id, "--json"])["task"]["decompose"].clone()
}

/// `decompose --all`, the automatic sweep; its exit code is not the point here.
fn sweep(s: &Scratch) {
    s.run(&["kanban", "decompose", "--all", "--json"]);
}

#[test]
fn unpark_gives_a_parked_card_one_more_budget_and_nothing_else() {
    let provider = fake_provider(status_reply(500));
    let s = board(&provider, "");
    let id = s.create("poison", &["--triage"]);
    sweep(&s);
    sweep(&s);
    assert_eq!(provider.billed_for(&id), 1, "parked after its one attempt");
    assert_eq!(decompose_state(&s, &id)["parked"], true);

    let out = s.run(&["kanban", "unpark", &id, "--by", "ops", "--json"]);
    assert!(out.success(), "{out:?}");
    let done = out.json();
    assert_eq!(done["task_id"], id.as_str());
    assert_eq!(done["unparked"], true);
    assert_eq!(done["attempts_before"], 1);
    assert!(done["next_attempt_at"].as_i64().unwrap() > 1_600_000_000);
    let state = decompose_state(&s, &id);
    assert_eq!(state["parked"], false);
    assert_eq!(state["attempts"], 0);
    assert_eq!(event_kinds(&s, &id).last().unwrap(), "decompose_unparked");

    // Exactly one more automatic attempt, then parked again.
    provider.reply_default(status_reply(500));
    sweep(&s);
    sweep(&s);
    assert_eq!(provider.billed_for(&id), 2);
    assert_eq!(decompose_state(&s, &id)["parked"], true);

    // After a fresh budget a working provider decomposes it.
    s.ok(&["kanban", "unpark", &id]);
    provider.reply_default(single_task_reply());
    sweep(&s);
    assert_eq!(provider.billed_for(&id), 3);
    let shown = s.json(&["kanban", "show", &id, "--json"]);
    assert_eq!(shown["task"]["status"], "ready");
}

#[test]
fn parked_cards_are_listed_marked_and_shown_with_their_fix() {
    let provider = fake_provider(status_reply(500));
    let s = board(&provider, "");
    let parked = s.create("poison", &["--triage"]);
    sweep(&s);
    let waiting = s.create("waiting", &["--triage", "--no-auto-decompose"]);
    let ready = s.create("ready", &[]);

    let listed = s.json(&["kanban", "list", "--parked", "--json"]);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [parked.as_str()], "{listed:#}");
    assert_eq!(listed[0]["decompose"]["parked"], true);

    let text = s.ok(&["kanban", "list"]).stdout;
    for line in text.lines() {
        let marked = line.contains("[parked] ");
        assert_eq!(marked, line.starts_with(&parked), "{text}");
    }
    assert!(text.contains(&waiting) && text.contains(&ready), "{text}");
    let only = s.ok(&["kanban", "list", "--parked"]).stdout;
    assert_eq!(only.lines().count(), 1, "{only}");
    assert!(only.contains("[parked] poison"), "{only}");

    let shown = s.ok(&["kanban", "show", &parked]).stdout;
    assert!(
        shown.contains(&format!(
            "decompose: 1 attempt on the current budget; parked: automatic budget spent \
             (`hermes kanban unpark {parked}` gives a fresh one)"
        )),
        "{shown}"
    );

    let usage = s.ok(&["kanban", "usage"]).stdout;
    assert!(usage.starts_with("1 paid call (0 ok, 1 failed)"), "{usage}");
    assert!(
        usage.contains("\nby model: fake-model 1 call, 0+0 tokens\n"),
        "{usage}"
    );
    assert!(!usage.contains("unknown model"), "{usage}");
    assert!(
        usage.contains(
            "1 call (0 ok, 1 failed)  1 attempt on the current budget, PARKED  fake-model  poison"
        ),
        "{usage}"
    );
    assert!(
        usage.contains("`hermes kanban unpark` starts a fresh one"),
        "{usage}"
    );
    assert!(
        usage.contains("`hermes kanban unpark ID` gives it a fresh one"),
        "{usage}"
    );

    // After an unpark the card has more calls than attempts on its current budget.
    s.ok(&["kanban", "unpark", &parked]);
    sweep(&s);
    let usage = s.ok(&["kanban", "usage"]).stdout;
    assert!(
        usage.contains("2 calls (0 ok, 2 failed)  1 attempt on the current budget, PARKED"),
        "{usage}"
    );
    let calls = s.ok(&["kanban", "usage", "--calls"]);
    assert_eq!(calls.stdout.lines().count(), 2, "{calls:?}");
    assert!(
        calls.stdout.lines().all(|l| l.ends_with("  fake-model")),
        "{calls:?}"
    );
    // Every call has its model and no prices are configured: nothing to explain.
    assert_eq!(calls.stderr, "", "{calls:?}");
}

#[test]
fn show_during_a_board_pause_names_the_pause_end_not_an_earlier_attempt() {
    let provider = fake_provider(status_reply(401));
    let s = board(&provider, "  provider_cooldown_seconds: 900\n");
    let cards = [
        s.create("first", &["--triage"]),
        s.create("second", &["--triage"]),
    ];
    sweep(&s);
    let until = s.json(&["kanban", "usage", "--json"])["pause"]["until"]
        .as_f64()
        .unwrap();
    let until_text = hermes::clock::utc(until.ceil() as i64);
    let mut due = 0;
    for id in &cards {
        let shown = s.ok(&["kanban", "show", id, "--utc"]).stdout;
        let Some(line) = shown.lines().find(|l| l.contains("next attempt from")) else {
            continue;
        };
        due += 1;
        assert!(
            line.contains(&format!(
                "next attempt from {until_text}: the board is paused until then ("
            )) && line.contains("HTTP 401")
                && line.ends_with("`hermes kanban resume` lifts it)"),
            "{shown}"
        );
    }
    assert!(due >= 1, "a card the refusal did not spend is still due");
}

#[test]
fn unpark_refuses_with_exit_1_and_writes_nothing() {
    let provider = fake_provider(status_reply(500));
    let s = board(&provider, "");
    let fresh = s.create("fresh", &["--triage"]);
    let ready = s.create("ready", &[]);
    for (id, reason) in [
        (
            fresh.as_str(),
            "is not parked (0 of 1 automatic attempts used)",
        ),
        (ready.as_str(), "is not in triage (status ready)"),
        ("t_00000000", "no such task: t_00000000"),
    ] {
        let before = s.json(&["kanban", "show", &fresh, "--json"]);
        for json in [true, false] {
            let mut args = vec!["kanban", "unpark", id];
            if json {
                args.push("--json");
            }
            let out = s.run(&args);
            assert_eq!(out.code, Some(1), "{id}: {out:?}");
            assert!(out.stdout.is_empty(), "{id}: {out:?}");
            if json {
                assert_eq!(crate::cli::json_error(&out)["code"], 1, "{id}: {out:?}");
            } else {
                assert!(out.stderr.starts_with("hermes: error: "), "{id}: {out:?}");
            }
            assert!(out.error().contains(reason), "{id}: {out:?}");
        }
        assert_eq!(s.json(&["kanban", "show", &fresh, "--json"]), before);
    }
    assert_eq!(s.run(&["kanban", "unpark"]).code, Some(2));
}

#[test]
fn resume_lifts_the_pause_and_usage_shows_who_did() {
    let provider = fake_provider(status_reply(401));
    let s = board(&provider, "  provider_cooldown_seconds: 900\n");
    let first = s.create("first", &["--triage"]);
    let second = s.create("second", &["--triage"]);

    // Nothing to resume yet: exit 0 with a note, nothing written.
    let out = s.run(&["kanban", "resume", "--json"]);
    assert!(out.success(), "{out:?}");
    let idle = out.json();
    assert_eq!(idle["resumed"], false);
    assert_eq!(idle["cleared"], Value::Null);
    assert!(s
        .json(&["kanban", "usage", "--json"])
        .get("last_resume")
        .is_none());

    sweep(&s);
    sweep(&s);
    let paid = provider.billed_for(&first) + provider.billed_for(&second);
    assert_eq!(paid, 1, "a 401 pauses the board after one call");
    let usage = s.json(&["kanban", "usage", "--json"]);
    assert!(
        usage["pause"]["reason"].as_str().unwrap().contains("401"),
        "{usage}"
    );

    let out = s.run(&["kanban", "resume", "--by", "alice", "--json"]);
    assert!(out.success(), "{out:?}");
    let lifted = out.json();
    assert_eq!(lifted["resumed"], true);
    assert_eq!(lifted["by"], "alice");
    assert!(lifted["cleared"]["reason"]
        .as_str()
        .unwrap()
        .contains("401"));
    let usage = s.json(&["kanban", "usage", "--json"]);
    assert_eq!(usage["pause"], Value::Null);
    assert_eq!(usage["last_resume"]["by"], "alice");
    assert!(usage["last_resume"]["at"].as_f64().unwrap() > 1.6e9);
    let text = s.ok(&["kanban", "usage"]).stdout;
    assert!(text.contains("last resumed by alice at "), "{text}");
    assert!(!text.contains("PAUSED"), "{text}");

    // The sweep probes again: one more call, for the card the refusal did not spend.
    provider.reply_default(single_task_reply());
    sweep(&s);
    assert_eq!(
        provider.billed_for(&first) + provider.billed_for(&second),
        2
    );
    let statuses: Vec<Value> = [&first, &second]
        .iter()
        .map(|id| s.json(&["kanban", "show", id, "--json"])["task"]["status"].clone())
        .collect();
    assert!(statuses.contains(&Value::from("ready")), "{statuses:?}");
    let text = s.ok(&["kanban", "resume"]).stdout;
    assert!(text.contains("No provider pause in force"), "{text}");
}

#[test]
fn auto_decompose_can_be_switched_off_and_on_after_creation() {
    let provider = fake_provider(single_task_reply());
    let s = board(&provider, "");
    let id = s.create("later", &["--triage"]);

    let off = s.json(&["kanban", "auto-decompose", &id, "off", "--json"]);
    assert_eq!(off["auto_decompose"], false);
    assert_eq!(off["changed"], true);
    assert_eq!(off["next_attempt_at"], Value::Null);
    assert_eq!(decompose_state(&s, &id)["opt_out"], true);
    sweep(&s);
    assert_eq!(
        provider.billed_for(&id),
        0,
        "an opted-out card is never billed automatically"
    );

    let again = s.json(&["kanban", "auto-decompose", &id, "off", "--json"]);
    assert_eq!(again["changed"], false);

    let on = s.json(&["kanban", "auto-decompose", &id, "on", "--json"]);
    assert_eq!(on["auto_decompose"], true);
    assert_eq!(on["changed"], true);
    assert!(on["next_attempt_at"].as_i64().is_some());
    assert_eq!(
        event_kinds(&s, &id),
        [
            "created",
            "auto_decompose_disabled",
            "auto_decompose_enabled"
        ]
    );
    sweep(&s);
    assert_eq!(provider.billed_for(&id), 1);

    // The same switch for a card created with --no-auto-decompose.
    let held = s.create("held", &["--triage", "--no-auto-decompose"]);
    sweep(&s);
    assert_eq!(provider.billed_for(&held), 0);
    s.ok(&["kanban", "auto-decompose", &held, "enable"]);
    sweep(&s);
    assert_eq!(provider.billed_for(&held), 1);

    let out = s.run(&["kanban", "auto-decompose", "t_00000000", "on"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("no such task: t_00000000"), "{out:?}");
    assert_eq!(
        s.run(&["kanban", "auto-decompose", &id, "sometimes"]).code,
        Some(2)
    );
}

#[test]
fn usage_calls_lists_every_paid_call() {
    let provider = fake_provider(status_reply(500));
    let s = board(&provider, "");
    let bad = s.create("bad", &["--triage"]);
    sweep(&s);
    provider.reply_default(chat_reply(
        r#"{"fanout": false, "rationale": "r", "title": "t", "body": "b", "assignee": "default"}"#,
    ));
    let good = s.create("good", &["--triage"]);
    s.ok(&["kanban", "decompose", &good, "--json"]);

    let out = s.run(&["kanban", "usage", "--calls", "--json"]);
    assert!(out.success(), "{out:?}");
    let calls: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(calls.len(), 2, "{}", out.stdout);
    assert_eq!(calls[0]["task_id"], bad.as_str());
    assert_eq!(calls[0]["origin"], "sweep");
    assert_eq!(calls[0]["outcome"], "server_error");
    assert_eq!(calls[0]["http_status"], 500);
    assert_eq!(calls[0]["attempt"], 1);
    assert_eq!(calls[0]["try"], 1);
    assert_eq!(calls[1]["task_id"], good.as_str());
    assert_eq!(calls[1]["origin"], "manual");
    assert_eq!(calls[1]["outcome"], "ok");
    assert_eq!(calls[1]["prompt_tokens"], 120);
    assert_eq!(calls[1]["completion_tokens"], 30);
    for call in &calls {
        assert!(call["duration_ms"].as_i64().unwrap() >= 0, "{call}");
        assert!(call["started_at"].as_f64().unwrap() > 1.6e9, "{call}");
    }

    let only_good = s
        .ok(&["kanban", "usage", "--calls", "--card", &good])
        .stdout;
    let lines: Vec<&str> = only_good.lines().collect();
    assert_eq!(lines.len(), 1, "{only_good}");
    assert!(lines[0].contains(&good), "{only_good}");
    assert!(
        lines[0].contains("manual") && lines[0].contains("HTTP 200"),
        "{only_good}"
    );
    assert!(lines[0].contains("120+30 tokens"), "{only_good}");

    let future = s.ok(&["kanban", "usage", "--calls", "--since", "2999-01-01"]);
    assert!(
        future.stdout.is_empty() && future.stderr.contains("no paid calls since 2999-01-01"),
        "{future:?}"
    );
    let recent = s.json(&["kanban", "usage", "--since", "1h", "--json"]);
    assert_eq!(recent["totals"]["calls"], 2);

    let out = s.run(&["kanban", "usage", "--calls", "--card", "t_00000000"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("no such task"), "{out:?}");
    for bad_args in [
        vec!["kanban", "usage", "--card", &good],
        vec!["kanban", "usage", "--calls", "--since", "2026-02-30"],
        vec!["kanban", "usage", "--since", "soon"],
    ] {
        let out = s.run(&bad_args);
        assert_eq!(out.code, Some(2), "{bad_args:?}: {out:?}");
    }
}

#[test]
fn usage_shows_each_calls_model_and_its_estimated_cost() {
    let provider = fake_provider(single_task_reply());
    // $2 per million prompt tokens and $10 per million completion tokens: a call of 120+30
    // tokens costs 0.00024 + 0.0003 = $0.00054.
    let s = board(
        &provider,
        "  prices:\n    fake-model: {input: 2, output: 10}\n    other: {input: 1, output: 1}\n",
    );
    let card = s.create("priced", &["--triage"]);
    s.ok(&["kanban", "decompose", &card, "--json"]);
    // A row an older build wrote: no model recorded.
    let conn = rusqlite::Connection::open(s.db()).unwrap();
    conn.execute(
        "INSERT INTO hermes_aux_ledger (task_id, purpose, origin, attempt, try, started_at_ms,
             ended_at_ms, outcome, http_status, prompt_tokens, completion_tokens)
         VALUES (?1, 'decompose', 'manual', 1, 1, 1000, 2000, 'ok', 200, 500, 50)",
        [&card],
    )
    .unwrap();
    drop(conn);

    let out = s.run(&["kanban", "usage", "--calls", "--json"]);
    assert!(out.success(), "{out:?}");
    let calls: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(calls.len(), 2, "{}", out.stdout);
    assert_eq!(calls[0]["model"], Value::Null);
    assert_eq!(calls[0]["estimated_cost_usd"], Value::Null);
    assert_eq!(calls[1]["model"], "fake-model");
    let cost = calls[1]["estimated_cost_usd"].as_f64().unwrap();
    assert!((cost - 0.000_54).abs() < 1e-12, "{cost}");

    let text = s.ok(&["kanban", "usage", "--calls"]);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(
        lines[0].ends_with("500+50 tokens  1.000s  unknown model  no price"),
        "{text:?}"
    );
    assert!(
        lines[1].contains("120+30 tokens")
            && lines[1].contains("  fake-model  ")
            && lines[1].ends_with("  est. $0.0005"),
        "{text:?}"
    );
    assert!(text.stderr.contains("hermes: (unknown model: "), "{text:?}");
    assert!(
        text.stderr.contains("estimated from kanban.prices"),
        "{text:?}"
    );

    let usage = s.ok(&["kanban", "usage"]).stdout;
    assert!(
        usage.starts_with(
            "2 paid calls (2 ok, 0 failed), 620 prompt + 80 completion tokens, est. $0.0005 \
             (+1 call with no price)"
        ),
        "{usage}"
    );
    assert!(
        usage.contains(
            "\nby model: unknown model 1 call, 500+50 tokens, no price; fake-model 1 call, \
             120+30 tokens, est. $0.0005\n"
        ),
        "{usage}"
    );
    assert!(
        usage.contains("  unknown model,fake-model  est. $0.0005 (+1 call with no price)  done"),
        "{usage}"
    );
    assert!(usage.contains("(unknown model: "), "{usage}");

    let json = s.json(&["kanban", "usage", "--json"]);
    assert_eq!(json["totals"]["unpriced_calls"], 1);
    assert!((json["totals"]["estimated_cost_usd"].as_f64().unwrap() - 0.000_54).abs() < 1e-12);
    let models = &json["cards"][0]["models"];
    assert_eq!(models[0]["model"], Value::Null);
    assert_eq!(models[0]["estimated_cost_usd"], Value::Null);
    assert_eq!(models[1]["model"], "fake-model");
    assert_eq!(models[1]["calls"], 1);
    assert_eq!(models[1]["prompt_tokens"], 120);

    // Without prices there is no cost anywhere.
    let plain = board(&provider, "");
    let card = plain.create("unpriced", &["--triage"]);
    plain.ok(&["kanban", "decompose", &card, "--json"]);
    let usage = plain.ok(&["kanban", "usage"]).stdout;
    assert!(
        !usage.contains("est.") && !usage.contains("no price"),
        "{usage}"
    );
    let calls = plain.ok(&["kanban", "usage", "--calls", "--json"]).stdout;
    let call: Value = serde_json::from_str(calls.trim()).unwrap();
    assert_eq!(call["model"], "fake-model");
    assert!(call.get("estimated_cost_usd").is_none(), "{call}");
}

#[test]
fn a_bad_price_is_named_and_usage_still_reads_the_ledger() {
    let provider = fake_provider(single_task_reply());
    let s = board(
        &provider,
        "  prices:\n    fake-model: {input: -2, output: 10}\n",
    );
    let card = s.create("priced", &["--triage"]);
    let out = s.run(&["kanban", "decompose", &card]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("kanban.prices.fake-model.input: expected a non-negative number"),
        "{out:?}"
    );
    assert_eq!(provider.billed_for(&card), 0);
    let usage = s.run(&["kanban", "usage"]);
    assert!(usage.success(), "{usage:?}");
    assert!(
        usage.stderr.contains("kanban.prices.fake-model.input"),
        "{usage:?}"
    );
}
