//! `hermes gateway check` as a real process against the suite's fake provider: it says what
//! `gateway run` would bill (route, bounds, board, lock, the provider's answer to a free
//! request), bills nothing, writes nothing, and exits 1 exactly when `run` would refuse.

use fixtures::aux_model::{AuxModel, Received};
use fixtures::cli::CliOutput;
use serde_json::Value;

use crate::support::{fake_provider, single_task_reply, Scratch};

const KEY: &str = "sk-check-dotenv-0001";

/// A scratch home routed to `provider` with the key in `.env`, and `extra` YAML after.
fn home(provider: &AuxModel, extra: &str) -> Scratch {
    let s = Scratch::new();
    s.write_config(&format!(
        "model:\n  base_url: {}\n  default: fake-model\n{extra}",
        provider.base_url()
    ));
    std::fs::write(
        s.hermes_home().join(".env"),
        format!("OPENAI_API_KEY={KEY}\n"),
    )
    .unwrap();
    s
}

fn check(s: &Scratch) -> (CliOutput, Value) {
    let out = s.run(&["gateway", "check", "--json"]);
    let report = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{out}"));
    (out, report)
}

/// The requests the provider received that were not chat completions.
fn free_requests(provider: &AuxModel) -> Vec<Received> {
    provider
        .received()
        .into_iter()
        .filter(|r| !r.path.ends_with("/chat/completions"))
        .collect()
}

fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn the_check_says_what_run_would_bill_and_bills_nothing() {
    let provider = fake_provider(single_task_reply());
    let s = home(
        &provider,
        "kanban:\n  decompose_max_attempts: 5\nauxiliary:\n  kanban_decomposer:\n    timeout: 30\n",
    );
    let due = s.create("due", &["--triage"]);
    s.create("opted out", &["--triage", "--no-auto-decompose"]);
    s.create("todo", &[]);
    let (out, report) = check(&s);
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(report["would_start"], true, "{report:#}");
    assert_eq!(report["refusals"], serde_json::json!([]));

    let route = &report["route"];
    assert_eq!(
        route["endpoint"],
        format!("{}/chat/completions", provider.base_url())
    );
    assert_eq!(route["model"], "fake-model");
    assert_eq!(
        route["api_key_from"],
        format!(
            "OPENAI_API_KEY in {}",
            s.hermes_home().join(".env").display()
        )
    );

    let answer = &report["provider"];
    assert_eq!(answer["outcome"], "answered", "{answer:#}");
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["models"], 1);
    assert_eq!(answer["model_listed"], true);

    let bound = |key: &str| -> Value {
        report["bounds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["key"] == key)
            .unwrap_or_else(|| panic!("no {key} in {report:#}"))
            .clone()
    };
    assert_eq!(bound("kanban.decompose_max_attempts")["value"], 5);
    assert_eq!(bound("kanban.decompose_max_attempts")["source"], "file");
    assert_eq!(bound("kanban.decompose_calls_per_hour")["value"], 120);
    assert_eq!(
        bound("kanban.decompose_calls_per_hour")["source"],
        "default"
    );
    let timeout = bound("auxiliary.timeout_seconds");
    assert_eq!(timeout["value"], 30.0);
    assert_eq!(timeout["source"], "upstream_key");
    assert_eq!(timeout["source_key"], "auxiliary.kanban_decomposer.timeout");

    let triage = &report["board"]["triage"];
    assert_eq!(
        (triage["due"].as_u64(), triage["held"].as_u64()),
        (Some(1), Some(1)),
        "{triage}"
    );
    assert_eq!(report["lock"]["state"], "free");

    // One free request, with the key a decompose call would carry; not one bill.
    assert_eq!(provider.bills(), 0);
    let free = free_requests(&provider);
    assert_eq!(free.len(), 1, "{free:#?}");
    assert_eq!(
        (free[0].method.as_str(), free[0].path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(free[0].bearer(), format!("Bearer {KEY}"));
    assert!(
        !out.stdout.contains(KEY) && !out.stderr.contains(KEY),
        "{out}"
    );

    // And the card is as it was: still due, never attempted.
    let card = s.json(&["kanban", "show", &due, "--json"]);
    assert_eq!(card["task"]["decompose"]["attempts"], 0, "{card:#}");
}

#[test]
fn a_missing_board_is_said_not_created_and_offline_asks_nothing() {
    let provider = fake_provider(single_task_reply());
    let s = home(&provider, "");
    let before = files_in(&s.hermes_home());
    let (out, report) = check_offline(&s);
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(report["board"]["exists"], false);
    assert_eq!(report["provider"], Value::Null);
    assert_eq!(
        files_in(&s.hermes_home()),
        before,
        "the check wrote into the home"
    );
    assert!(!s.root().join("locks").exists() || files_in(&s.root().join("locks")).is_empty());
    assert!(provider.received().is_empty(), "{:#?}", provider.received());

    let text = s.ok(&["gateway", "check", "--offline"]).stdout;
    assert!(
        text.starts_with("`hermes gateway run` would start."),
        "{text}"
    );
    assert!(
        text.contains("no board yet: `hermes gateway run` creates it"),
        "{text}"
    );
    assert!(!s.db().exists());
}

fn check_offline(s: &Scratch) -> (CliOutput, Value) {
    let out = s.run(&["gateway", "check", "--offline", "--json"]);
    let report = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    (out, report)
}

#[test]
fn a_running_gateway_holding_the_lock_makes_the_check_say_run_would_refuse() {
    let provider = fake_provider(single_task_reply());
    let s = home(&provider, "kanban:\n  dispatch_interval_seconds: 60\n");
    s.create("c", &[]);
    let gateway = s.gateway(&[], &[]);
    let (out, report) = check(&s);
    assert_eq!(out.code, Some(1), "{out}");
    assert_eq!(report["would_start"], false);
    assert_eq!(report["lock"]["state"], "held");
    let pid = gateway.pid();
    assert_eq!(report["lock"]["holder"], pid, "{report:#}");
    let refusals = report["refusals"].to_string();
    assert!(
        refusals.contains("another gateway") && refusals.contains(&format!("pid {pid}")),
        "{refusals}"
    );
    let text = s.run(&["gateway", "check", "--offline"]);
    assert_eq!(text.code, Some(1), "{text}");
    assert!(
        text.stdout
            .starts_with("`hermes gateway run` would refuse to start:\n  - another gateway"),
        "{text}"
    );
    drop(gateway);
    assert_eq!(check_offline(&s).0.code, Some(0));
}

#[test]
fn a_config_run_would_refuse_is_a_refusal_and_the_rest_is_still_said() {
    let provider = fake_provider(single_task_reply());
    let s = home(&provider, "kanban:\n  decompose_calls_per_hour: -1\n");
    let (out, report) = check(&s);
    assert_eq!(out.code, Some(1), "{out}");
    let refusal = report["refusals"][0].as_str().unwrap_or_default();
    assert!(
        refusal.contains("kanban.decompose_calls_per_hour"),
        "{report:#}"
    );
    assert_eq!(report["config"]["error"], refusal);
    assert_eq!(report["route"], Value::Null);
    assert_eq!(report["board"]["path"], s.db().display().to_string());
    assert!(provider.received().is_empty());
}

#[test]
fn a_refusing_provider_and_a_missing_key_are_warnings_not_refusals() {
    let provider = fake_provider(single_task_reply());
    let s = home(&provider, "");
    std::fs::remove_file(s.hermes_home().join(".env")).unwrap();
    let (out, report) = check(&s);
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(report["route"]["api_key_from"], "none");
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("no API key found"), "{warnings}");
    assert_eq!(free_requests(&provider)[0].bearer(), "<none>");

    // A provider that refuses the key: the check says what a decompose call would meet.
    let refusing = refusing_provider();
    let s = Scratch::new();
    s.write_config(&format!(
        "model:\n  base_url: {refusing}/v1\n  default: m\n"
    ));
    let (out, report) = check(&s);
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(report["provider"]["status"], 401, "{report:#}");
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("refuses these credentials (HTTP 401)"),
        "{warnings}"
    );
}

/// A provider at the returned base URL (`http://127.0.0.1:PORT`) that answers every request
/// with 401, for as long as the test runs.
fn refusing_provider() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let _ = stream.write_all(
                b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    format!("http://{address}")
}

#[test]
fn verbose_decompose_shows_the_route_before_the_request() {
    let provider = fake_provider(single_task_reply());
    let s = home(&provider, "");
    let id = s.create("c", &["--triage"]);
    let out = s.ok(&["-v", "kanban", "decompose", &id]);
    let route = format!(
        "hermes: route: POST {}/chat/completions (model fake-model, key: OPENAI_API_KEY in {})",
        provider.base_url(),
        s.hermes_home().join(".env").display()
    );
    assert!(out.stderr.lines().any(|l| l == route), "{}", out.stderr);
    assert_eq!(provider.bills(), 1);
    assert!(!out.stderr.contains(KEY));
}

#[test]
fn the_text_report() {
    let provider = fake_provider(single_task_reply());
    let s = home(&provider, "kanban:\n  auto_decompose_per_tick: 2\n");
    s.create("c", &["--triage"]);
    let text = s.ok(&["gateway", "check"]).stdout;
    let root = s.root().display().to_string();
    let shown = text
        .replace(&provider.base_url(), "http://PROVIDER/v1")
        .replace(&root, "ROOT");
    let shown = regex::Regex::new(r"in \d+ ms")
        .unwrap()
        .replace_all(&shown, "in N ms");
    let shown = regex::Regex::new(r"gateway-[0-9a-f]{16}\.lock")
        .unwrap()
        .replace_all(&shown, "gateway-HASH.lock");
    insta::assert_snapshot!(shown);
}

#[test]
fn a_gateway_with_another_lock_directory_is_named_as_holding_the_board() {
    let provider = fake_provider(single_task_reply());
    let s = home(&provider, "kanban:\n  dispatch_interval_seconds: 60\n");
    s.create("c", &[]);
    let elsewhere = s.root().join("other-locks");
    let gateway = s.gateway(
        &[],
        &[("HERMES_GATEWAY_LOCK_DIR", elsewhere.to_str().unwrap())],
    );
    let (out, report) = check_offline(&s);
    // Its own lock is free here: `run` would start, and then dispatch nothing.
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(report["lock"]["state"], "free");
    let held = &report["lock"]["dispatcher_locks_held"];
    let board = s.db().display().to_string();
    assert!(
        held.as_array()
            .unwrap()
            .iter()
            .any(|h| h["path"] == board.as_str() && h["pid"] == gateway.pid()),
        "{report:#}"
    );
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains(&format!("process {} holds {board}", gateway.pid())),
        "{warnings}"
    );
}
