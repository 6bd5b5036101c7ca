//! The gateway as a user coming from upstream hermes-agent meets it: JSON logs on request, one
//! warning per misspelt key, upstream's decomposer settings, and upstream's dispatcher locks.

use std::time::Duration;

use fixtures::aux_model::AuxModel;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

use fixtures::wait::try_wait_until;

use crate::support::{fake_provider, single_task_reply, status_reply, Scratch};

#[test]
fn gateway_run_json_writes_one_json_object_per_log_line() {
    let s = Scratch::new();
    s.write_config("kanban:\n  dispatch_interval_seconds: 0.1\n  dispatch_interval_secs: 1\n");
    let gateway = s.gateway(&["--json"], &[]);
    let code = gateway.stop().exit_code;
    let log = gateway.log();
    assert_eq!(code, Some(0), "{log:#?}");
    assert!(log.lines().count() >= 3, "{log:#?}");
    let events: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for event in &events {
        assert!(event["timestamp"].is_string(), "{event}");
        assert!(event["level"].is_string(), "{event}");
        assert!(event["message"].is_string(), "{event}");
    }
    let started = events
        .iter()
        .find(|e| {
            e["message"]
                .as_str()
                .unwrap()
                .starts_with("gateway started")
        })
        .expect("a started event");
    assert_eq!(started["level"], "INFO");
    assert!(started["pid"].as_u64().is_some(), "{started}");
    let warned: Vec<&Value> = events
        .iter()
        .filter(|e| e["level"] == "WARN" && e["key"].is_string())
        .collect();
    assert_eq!(warned.len(), 1, "{log:#?}");
    assert_eq!(warned[0]["key"], "kanban.dispatch_interval_secs");
    assert!(warned[0]["message"]
        .as_str()
        .unwrap()
        .ends_with("did you mean kanban.dispatch_interval_seconds?"));
}

#[test]
fn gateway_run_logs_plain_lines_by_default_and_warns_once_at_start() {
    let s = Scratch::new();
    s.write_config(
        "kanban:\n  dispatch_interval_seconds: 0.1\n  auto_decompose_per_tik: 2\n\
         auxiliary:\n  kanban_decomposer:\n    modle: cheap\n",
    );
    let gateway = s.gateway(&[], &[]);
    let code = gateway.stop().exit_code;
    let log = gateway.log();
    assert_eq!(code, Some(0), "{log:#?}");
    assert!(
        log.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_err()),
        "{log:#?}"
    );
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("not a key"))
        .collect();
    assert_eq!(warnings.len(), 2, "{log:#?}");
    assert!(
        warnings[0].contains("did you mean auxiliary.kanban_decomposer.model?"),
        "{log:#?}"
    );
    assert!(
        warnings[1].contains("did you mean kanban.auto_decompose_per_tick?"),
        "{log:#?}"
    );
}

#[test]
fn an_out_of_range_value_stops_the_gateway_at_start() {
    let s = Scratch::new();
    s.write_config("kanban:\n  provider_cooldown_seconds: .inf\n");
    let out = s.run(&["gateway", "run"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains(
            "kanban.provider_cooldown_seconds: expected a number of seconds from 1 to 86400, got"
        ),
        "{out:?}"
    );
}

/// Upstream's default config, as `hermes setup` writes it, pointed at the fake provider: the
/// decomposer section names a cheap model, the main model is the expensive one.
fn upstream_style_config(provider: &AuxModel, decomposer: &str) -> String {
    format!(
        "model:\n  provider: custom\n  base_url: {}\n  default: expensive-frontier-model\n\
         auxiliary:\n  transient_retries: 0\n  kanban_decomposer:\n{decomposer}\
         kanban:\n  dispatch_interval_seconds: 0.1\n",
        provider.base_url()
    )
}

#[test]
fn the_decomposer_model_is_what_decompose_calls_carry() {
    let provider = fake_provider(single_task_reply());
    let s = Scratch::new();
    s.write_config(&upstream_style_config(
        &provider,
        "    provider: auto\n    model: cheap-small-model\n    base_url: ''\n    api_key: ''\n\
         \x20   timeout: 180\n    extra_body: {}\n",
    ));
    let by_hand = s.create("by hand", &["--triage", "--no-auto-decompose"]);
    s.ok(&["kanban", "decompose", &by_hand, "--json"]);
    let by_gateway = s.create("by the gateway", &["--triage"]);
    let gateway = s.gateway(&[], &[]);
    let billed = try_wait_until(
        || provider.billed_for(&by_gateway) > 0,
        Duration::from_secs(20),
        "the gateway's bill",
    );
    let code = gateway.stop().exit_code;
    let log = gateway.log();
    assert!(billed.is_ok(), "the gateway never billed the card:\n{log}");
    assert_eq!(code, Some(0));
    let models: Vec<Value> = provider
        .aux_requests()
        .iter()
        .map(|b| b["model"].clone())
        .collect();
    assert_eq!(models, ["cheap-small-model", "cheap-small-model"]);
}

#[test]
fn the_decomposer_endpoint_key_extra_body_and_timeout_apply() {
    let provider = fake_provider(single_task_reply());
    let s = Scratch::new();
    s.write_config(&format!(
        "model:\n  base_url: http://127.0.0.1:9/v1\n  default: expensive-frontier-model\n\
         auxiliary:\n  transient_retries: 0\n  kanban_decomposer:\n    provider: custom\n\
         \x20   base_url: {}\n    api_key: sk-decomposer\n    reasoning_effort: low\n\
         \x20   timeout: 0.5\n    extra_body:\n      provider: {{sort: price}}\n",
        provider.base_url()
    ));
    let id = s.create("card", &["--triage"]);
    let out = s.run_env(
        &["kanban", "decompose", &id, "--json"],
        &[],
        &[("OPENAI_API_KEY", "sk-from-the-environment")],
    );
    assert!(out.success(), "{out:?}");
    let requests = provider.received();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].header("authorization").unwrap(),
        "Bearer sk-decomposer",
        "api_key overrides the environment"
    );
    let body: Value = requests[0].json().unwrap();
    assert_eq!(body["model"], "expensive-frontier-model");
    assert_eq!(body["provider"], serde_json::json!({"sort": "price"}));
    assert_eq!(
        body["reasoning"],
        serde_json::json!({"enabled": true, "effort": "low"})
    );
    assert_eq!(body["stream"], false);
    assert!(body.get("tools").is_none());

    // `timeout: 0.5` bounds the request although auxiliary.timeout_seconds is 120 s.
    provider.reply_default(single_task_reply().delayed(Duration::from_secs(5)));
    let slow = s.create("slow", &["--triage"]);
    let out = s.run(&["kanban", "decompose", &slow, "--json"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.elapsed < Duration::from_secs(4),
        "took {:?}",
        out.elapsed
    );
    let line = out.json();
    assert!(
        line["reason"]
            .as_str()
            .unwrap()
            .contains("no complete reply within 0.5s"),
        "{line}"
    );
}

#[test]
fn a_decomposer_refused_by_the_config_bills_nothing() {
    let provider = fake_provider(single_task_reply());
    let s = Scratch::new();
    s.write_config(&upstream_style_config(
        &provider,
        "    provider: anthropic\n",
    ));
    let id = s.create("card", &["--triage"]);
    let out = s.run(&["kanban", "decompose", &id, "--json"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.error()
            .contains("auxiliary.kanban_decomposer.provider is \"anthropic\""),
        "{out:?}"
    );
    let gateway = s.gateway(&[], &[]);
    gateway.wait_for_line(
        |l| l.contains("auto-decompose cannot run") && l.contains("set base_url"),
        Duration::from_secs(10),
        "the refusal",
    );
    let code = gateway.stop().exit_code;
    assert_eq!(code, Some(0));
    assert!(provider.received().is_empty());
}

/// Rows of `sql` (one integer column) in the board, read without writing.
fn ints(s: &Scratch, sql: &str) -> Vec<i64> {
    let conn = Connection::open_with_flags(s.db(), OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    let rows = stmt.query_map([], |r| r.get(0)).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

#[test]
fn two_gateways_with_different_lock_dirs_never_both_dispatch() {
    let provider = fake_provider(status_reply(500).delayed(Duration::from_millis(150)));
    let s = Scratch::new();
    s.write_config(&format!(
        "model:\n  base_url: {}\n  default: fake-model\n\
         auxiliary:\n  transient_retries: 0\n  timeout_seconds: 10\n\
         kanban:\n  dispatch_interval_seconds: 0.1\n  auto_decompose_per_tick: 3\n\
         \x20 decompose_max_attempts: 3\n  decompose_backoff_seconds: 0.05\n",
        provider.base_url()
    ));
    let cards: Vec<String> = (0..4)
        .map(|i| s.create(&format!("poison {i}"), &["--triage"]))
        .collect();
    let lock_a = s.root().join("locks-a");
    let lock_b = s.root().join("locks-b");
    let first = s.gateway(
        &[],
        &[("HERMES_GATEWAY_LOCK_DIR", lock_a.to_str().unwrap())],
    );
    let second = s.gateway(
        &[],
        &[("HERMES_GATEWAY_LOCK_DIR", lock_b.to_str().unwrap())],
    );
    // The board itself is locked (a flock on kanban.db), whatever lock directory either uses.
    let busy = second.wait_for_line(
        |l| l.contains(" WARN ") && l.contains("dispatches this board"),
        Duration::from_secs(10),
        "the second gateway's WARN",
    );
    assert!(busy.contains(&format!("(pid {})", first.pid())), "{busy}");
    assert!(busy.contains("not dispatching until it stops"), "{busy}");

    let all_parked = try_wait_until(
        || {
            let parked = ints(
                &s,
                "SELECT count(*) FROM hermes_decompose_state WHERE parked_at_ms IS NOT NULL",
            );
            parked[0] == cards.len() as i64
        },
        Duration::from_secs(60),
        "every card parked",
    );
    assert!(
        all_parked.is_ok(),
        "not every card was parked:\n{}",
        first.log()
    );
    for card in &cards {
        let attempts = ints(
            &s,
            &format!("SELECT attempts FROM hermes_decompose_state WHERE task_id = '{card}'"),
        )[0];
        assert_eq!(attempts, 3, "{card}");
        assert_eq!(
            provider.billed_for(card),
            3,
            "{card}: one bill per attempt, no more"
        );
    }
    let ledger = ints(&s, "SELECT count(*) FROM hermes_aux_ledger")[0];
    assert_eq!(ledger, 12);
    let second_log = second.log();
    let dispatched_by_second = second_log
        .lines()
        .filter(|l| l.contains("attempt") || l.contains("parked"))
        .collect::<Vec<_>>();
    assert!(dispatched_by_second.is_empty(), "{dispatched_by_second:#?}");

    // When the first goes, the second takes over.
    let code = first.stop().exit_code;
    assert_eq!(code, Some(0));
    second.wait_for_line(
        |l| l.contains("dispatcher locks acquired"),
        Duration::from_secs(10),
        "the second gateway to take over",
    );
    provider.reply_default(single_task_reply());
    let fresh = s.create("fresh", &["--triage"]);
    let billed = try_wait_until(
        || provider.billed_for(&fresh) == 1,
        Duration::from_secs(20),
        "the fresh card's bill",
    );
    let code = second.stop().exit_code;
    let log = second.log();
    assert!(billed.is_ok(), "{log}");
    assert_eq!(code, Some(0));
}

#[test]
fn config_edits_mid_run_warn_once_each() {
    let s = Scratch::new();
    let base = "kanban:\n  dispatch_interval_seconds: 0.1\n  auto_decompose: false\n";
    s.write_config(base);
    let gateway = s.gateway(&[], &[]);
    let typo_warning = |l: &str| l.contains("did you mean kanban.decompose_max_attempts?");
    let range_warning = |l: &str| {
        l.contains(
            "kanban.auto_decompose_per_tick: expected a whole number of cards from 1 to 1000",
        ) && l.contains("keeping the last good configuration")
    };

    s.write_config(&format!("{base}  decompose_max_attempt: 2\n"));
    gateway.wait_for_line(typo_warning, Duration::from_secs(10), "the typo's warning");
    // Another edit that keeps the typo: no second warning for it.
    s.write_config(&format!(
        "{base}  decompose_max_attempt: 2\n  auto_promote_children: true\n"
    ));
    s.write_config(&format!(
        "{base}  decompose_max_attempt: 2\n  auto_decompose_per_tick: 4000000000\n"
    ));
    gateway.wait_for_line(range_warning, Duration::from_secs(10), "the range warning");
    // Ticks go on with the last good config; the fixed file is taken up again.
    s.write_config(base);
    gateway.wait_for_line(
        |l| l.contains("config.yaml is valid again"),
        Duration::from_secs(10),
        "the config to be valid again",
    );
    s.write_config(&format!("{base}  decompose_max_attempt: 2\n"));
    let count = |log: &str, f: &dyn Fn(&str) -> bool| log.lines().filter(|l| f(l)).count();
    let back = try_wait_until(
        || count(&gateway.log(), &typo_warning) == 2,
        Duration::from_secs(10),
        "the typo's second warning",
    );
    let code = gateway.stop().exit_code;
    let log = gateway.log();
    assert!(
        back.is_ok(),
        "the typo, back after a clean edit, warns again:\n{log}"
    );
    assert_eq!(code, Some(0));
    assert_eq!(count(&log, &typo_warning), 2, "{log}");
    assert_eq!(count(&log, &range_warning), 1, "{log}");
}
