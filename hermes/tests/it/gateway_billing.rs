//! What the gateway says it bills: its start line names the endpoint, the model and where the
//! key came from (never the key, nor a URL's credentials); no key at all gets one WARN; and a
//! connection that fails names the URL it tried.

use std::time::Duration;

use serde_json::Value;

use fixtures::gateway::Gateway;
use fixtures::wait::wait_until_or;

use crate::support::Scratch;

const TICK: &str = "kanban:\n  dispatch_interval_seconds: 0.1\n";

/// `config.yaml` sending decompose calls to `base_url` with `model`.
fn config(base_url: &str, model: &str, extra: &str) -> String {
    format!("model:\n  base_url: {base_url}\n  default: {model}\n{extra}{TICK}")
}

fn events(log: &str) -> Vec<Value> {
    log.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

/// The start event of a gateway run with `--json` and `env`, and every line it logged.
fn start_event(s: &Scratch, env: &[(&str, &str)]) -> (Value, String) {
    let gateway = s.gateway(&["--json"], env);
    let code = gateway.stop().exit_code;
    let log = gateway.log();
    assert_eq!(code, Some(0), "{log:#?}");
    let started = events(&log)
        .into_iter()
        .find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("gateway started"))
        })
        .unwrap_or_else(|| panic!("no start line: {log:#?}"));
    (started, log)
}

/// A start the first test makes: the base URL, the rest of `config.yaml`, the environment on
/// top of the scratch one, and where the key must be said to come from.
type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], String);

fn no_key_warnings(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" WARN ") && l.contains("no API key found"))
        .collect()
}

#[test]
fn the_start_line_names_the_endpoint_the_model_and_where_the_key_came_from() {
    let s = Scratch::new();
    let dotenv = s.hermes_home().join(".env");
    let cases: [Case; 4] = [
        (
            "http://127.0.0.1:9/v1/",
            "",
            &[],
            format!("OPENAI_API_KEY in {}", dotenv.display()),
        ),
        (
            "http://127.0.0.1:9/v1",
            "",
            &[("OPENAI_API_KEY", "sk-billing-env-0001")],
            "OPENAI_API_KEY in the environment".to_owned(),
        ),
        (
            "http://127.0.0.1:9/v1",
            "auxiliary:\n  kanban_decomposer:\n    base_url: http://127.0.0.1:9/v1\n    \
             api_key: sk-billing-config-0001\n",
            &[],
            "auxiliary.kanban_decomposer.api_key in config.yaml".to_owned(),
        ),
        (
            "http://ops:pw-billing-0001@127.0.0.1:9/v1",
            "",
            &[],
            "the base URL's userinfo (sent as Basic auth)".to_owned(),
        ),
    ];
    for (index, (base_url, extra, env, key_from)) in cases.iter().enumerate() {
        // The first case alone has a key in `.env`.
        if index == 0 {
            std::fs::create_dir_all(s.hermes_home()).unwrap();
            std::fs::write(&dotenv, "OPENAI_API_KEY=sk-billing-dotenv-0001\n").unwrap();
        } else {
            let _ = std::fs::remove_file(&dotenv);
        }
        s.write_config(&config(base_url, "billing-model", extra));
        let (started, log) = start_event(&s, env);
        assert_eq!(started["level"], "INFO", "{started}");
        assert_eq!(
            started["endpoint"], "http://127.0.0.1:9/v1/chat/completions",
            "{started}"
        );
        assert_eq!(started["model"], "billing-model", "{started}");
        assert_eq!(started["api_key_from"], key_from.as_str(), "{started}");
        let whole = log;
        for secret in [
            "sk-billing-dotenv-0001",
            "sk-billing-env-0001",
            "sk-billing-config-0001",
            "pw-billing-0001",
        ] {
            assert!(!whole.contains(secret), "{secret} shown: {whole}");
        }
        assert!(
            !whole.contains("no API key found"),
            "a key was found: {whole}"
        );
    }
}

#[test]
fn the_plain_start_line_names_the_endpoint_and_the_key_source_too() {
    let s = Scratch::new();
    s.write_config(&config("http://127.0.0.1:9/v1", "billing-model", ""));
    let gateway = s.gateway(&[], &[("OPENAI_API_KEY", "sk-billing-env-0002")]);
    gateway.stop();
    let log = gateway.log();
    let started = log
        .lines()
        .find(|l| l.contains("gateway started"))
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert!(
        started.contains(" INFO gateway started (kanban dispatcher on) ")
            && started.contains(" endpoint=\"http://127.0.0.1:9/v1/chat/completions\"")
            && started.contains(" model=\"billing-model\"")
            && started.contains(" api_key_from=\"OPENAI_API_KEY in the environment\""),
        "{started}"
    );
}

/// Waits for the gateway's log to hold `count` lines for which `found` holds.
fn wait_for_lines(gateway: &Gateway, count: usize, found: impl Fn(&str) -> bool) {
    wait_until_or(
        || gateway.log().lines().filter(|l| found(l)).count() >= count,
        Duration::from_secs(20),
        format_args!("{count} such line(s)"),
        || gateway.log(),
    );
}

#[test]
fn no_key_warns_once_and_again_only_for_another_endpoint() {
    let s = Scratch::new();
    s.write_config(&config("http://127.0.0.1:9/v1", "billing-model", ""));
    let gateway = s.gateway(&[], &[]);
    wait_for_lines(&gateway, 1, |l| l.contains("no API key found"));
    let warned = no_key_warnings(&gateway.log())
        .first()
        .map(|l| l.to_string())
        .unwrap_or_default();
    assert!(
        warned.contains(
            "decompose requests to http://127.0.0.1:9/v1/chat/completions are sent without an \
             Authorization header"
        ) && warned.contains(&format!(
            "a key is read from OPENAI_API_KEY (a variable from the environment, else from {})",
            s.hermes_home().join(".env").display()
        )),
        "{warned}"
    );

    // An edit that changes nothing billed (a typo, which is logged) warns about nothing else.
    s.write_config(&config(
        "http://127.0.0.1:9/v1",
        "billing-model",
        "auxiliary:\n  kanban_decomposer:\n    modle: x\n",
    ));
    wait_for_lines(&gateway, 1, |l| l.contains("kanban_decomposer.modle"));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(no_key_warnings(&gateway.log()).len(), 1);
    assert!(!gateway
        .log()
        .lines()
        .any(|l| l.contains("decompose calls now go to")));

    // Another endpoint, still without a key: said once more, with where calls now go.
    s.write_config(&config("http://127.0.0.1:7/v1", "other-model", ""));
    wait_for_lines(&gateway, 2, |l| l.contains("no API key found"));
    let moved = gateway.wait_for_line(
        |l| l.contains("decompose calls now go to http://127.0.0.1:7/v1/chat/completions"),
        Duration::from_secs(5),
        "the new endpoint's line",
    );
    assert!(
        moved.contains(" INFO ")
            && moved.contains("model=\"other-model\"")
            && moved.contains("api_key_from=\"none\""),
        "{moved}"
    );

    // A key: announced, and no WARN.
    s.write_config(&config(
        "http://127.0.0.1:7/v1",
        "other-model",
        "auxiliary:\n  kanban_decomposer:\n    provider: custom\n    base_url: http://127.0.0.1:7/v1\n    \
         api_key: sk-billing-config-0003\n",
    ));
    gateway.wait_for_line(
        |l| l.contains("api_key_from=\"auxiliary.kanban_decomposer.api_key in config.yaml\""),
        Duration::from_secs(5),
        "the key's source",
    );
    std::thread::sleep(Duration::from_millis(500));
    let code = gateway.stop().exit_code;
    let log = gateway.log();
    assert_eq!(code, Some(0));
    assert_eq!(no_key_warnings(&log).len(), 2, "{log:#?}");
    assert!(!log.contains("sk-billing-config-0003"));
}

#[test]
fn a_refused_connection_names_the_url_it_tried_without_its_credentials() {
    let closed = fixtures::closed_port::closed_port_url();
    let shown = format!("{closed}/chat/completions");
    let with_credentials = closed.replace("http://", "http://ops:pw-billing-0004@");
    let s = Scratch::new();
    s.write_config(&config(
        &with_credentials,
        "billing-model",
        "auxiliary:\n  transient_retries: 0\n",
    ));

    // By hand: the attempt's line says where it went.
    let card = s.create(
        "never reaches the provider",
        &["--triage", "--no-auto-decompose"],
    );
    let out = s.run(&["kanban", "decompose", &card]);
    assert_eq!(out.code, Some(1), "{out:?}");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains(&format!("provider unreachable: {shown}: ")) && said.contains("refused"),
        "{said}"
    );
    assert!(
        !said.contains("pw-billing-0004") && !said.contains("ops:"),
        "{said}"
    );

    // The gateway: the pause it warns about names the URL too.
    s.create("for the gateway", &["--triage"]);
    let gateway = s.gateway(&[], &[]);
    let warned = gateway.wait_for_line(
        |l| l.contains(" WARN ") && l.contains("auto-decompose paused"),
        Duration::from_secs(20),
        "the pause's WARN",
    );
    gateway.stop();
    let log = gateway.log();
    assert!(warned.contains(&format!("{shown}: ")), "{warned}");
    assert!(!log.contains("pw-billing-0004"), "{log:#?}");
}
