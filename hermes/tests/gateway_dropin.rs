//! The gateway as a user coming from upstream hermes-agent meets it: JSON logs on request, one
//! warning per misspelt key, upstream's decomposer settings, and upstream's dispatcher locks.

mod common;

use common::Scratch;
use serde_json::Value;

#[test]
fn gateway_run_json_writes_one_json_object_per_log_line() {
    let s = Scratch::new();
    s.write_config("kanban:\n  dispatch_interval_seconds: 0.1\n  dispatch_interval_secs: 1\n");
    let gateway = s.gateway(&["--json"], &[]);
    let (code, log) = gateway.stop();
    assert_eq!(code, Some(0), "{log:#?}");
    assert!(log.len() >= 3, "{log:#?}");
    let events: Vec<Value> = log
        .iter()
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
    let (code, log) = gateway.stop();
    assert_eq!(code, Some(0), "{log:#?}");
    assert!(
        log.iter()
            .all(|l| serde_json::from_str::<Value>(l).is_err()),
        "{log:#?}"
    );
    let warnings: Vec<&String> = log
        .iter()
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
