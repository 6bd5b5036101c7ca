//! No output of a whole run shows the provider key or the password of a base URL's userinfo:
//! a gateway (text and `--json` logs) and every CLI verb, while the provider echoes both in its
//! error text, and then with a base URL that carries them and cannot be parsed. The board itself
//! keeps neither. The provider's text also carries terminal controls, which no log line shows
//! raw.

use std::ffi::OsString;
use std::time::Duration;

use fixtures::cli::CliOutput;
use fixtures::gateway::Gateway;
use fixtures::target::Readiness;
use judge::prelude::*;
use rstest::rstest;
use serde_json::json;

/// The decomposer's key.
const KEY: &str = "sk-hermes-0022-never-shown";
/// The password in the base URL's userinfo.
const PASSWORD: &str = "hunter2-0022-pw";

/// The decomposer's settings, routed to `base_url` with the key.
fn decomposer_at(base_url: &str) -> String {
    format!(
        "auxiliary:\n  kanban_decomposer:\n    provider: custom\n    base_url: '{base_url}'\n    api_key: '{KEY}'\n"
    )
}

/// Terminal controls in the provider's text: CSI, OSC ended by BEL, a C1 CSI, a line break.
const CONTROLS: &str = "\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\nforged log line";

/// A 200 reply whose provider error echoes the key and the URL the call went to.
fn echoing(url: &str) -> Reply {
    Reply::raw(
        200,
        "application/json",
        json!({"error": {"message": format!(
            "Incorrect API key provided: {KEY} (Authorization: Bearer {KEY}) for {url} {CONTROLS}"
        )}})
        .to_string(),
    )
}

/// Control characters in `log` that a terminal would act on (line breaks between lines aside).
fn raw_controls(log: &str) -> Vec<String> {
    log.char_indices()
        .filter(|(_, c)| c.is_control() && *c != '\n')
        .map(|(at, c)| format!("{c:?} at byte {at}"))
        .collect()
}

#[rstest]
fn no_output_of_a_whole_run_shows_the_key_or_the_urls_password(
    #[with(Config::gateway().backoff(0.0).retries(0))] board: Board,
) {
    let aux = board.aux();
    let with_userinfo = aux
        .base_url()
        .replacen("://", &format!("://ops:{PASSWORD}@"), 1);
    board.reconfigure(board.config().yaml(&decomposer_at(&with_userinfo)));
    let echoed = board.create("an idea the provider answers badly", &["--triage"]);
    let good = board.create("an idea the provider splits", &["--triage"]);
    let by_hand = board.create("an idea a person sends", &["--triage"]);
    for card in [&echoed, &by_hand] {
        aux.reply(card, echoing(&with_userinfo));
    }
    aux.reply(&good, Reply::graph(2, &[]));

    let mut outputs: Vec<(String, String)> = Vec::new();
    let mut keep = |output: CliOutput| {
        outputs.push((
            output.command.clone(),
            format!("{}\n{}", output.stdout, output.stderr),
        ));
    };
    let mut run = board.scenario();
    run.start();
    let seen = try_wait_until(
        || {
            !board.rows().events(&echoed, "decompose_failed").is_empty()
                && board.rows().status(&good) != "triage"
        },
        board.target().first_bill_timeout(),
        "the gateway's two attempts",
    );
    for args in [
        vec!["kanban", "decompose", by_hand.as_str()],
        vec!["kanban", "decompose", by_hand.as_str(), "--json"],
        vec!["kanban", "show", echoed.as_str()],
        vec!["kanban", "show", echoed.as_str(), "--json"],
        vec!["kanban", "list", "--json"],
        vec!["kanban", "usage"],
        vec!["kanban", "usage", "--json"],
        vec!["kanban", "usage", "--calls"],
        vec!["kanban", "usage", "--calls", "--json"],
    ] {
        keep(board.cli_unchecked(args));
    }
    // A base URL with the same userinfo that cannot be parsed: every verb that uses it says so.
    let broken = format!("http://ops:{PASSWORD}@[::1/v1");
    board.reconfigure(board.config().yaml(&decomposer_at(&broken)));
    let noticed = try_wait_until(
        || run.log().contains("auto-decompose cannot run"),
        board.target().first_bill_timeout(),
        "the gateway's word on the broken base URL",
    );
    let late = board.create("an idea after the config broke", &["--triage"]);
    for args in [
        vec!["kanban", "decompose", late.as_str()],
        vec!["kanban", "decompose", late.as_str(), "--json"],
        vec!["kanban", "decompose", "--all", "--json"],
        vec!["kanban", "usage", "--json"],
    ] {
        keep(board.cli_unchecked(args));
    }
    // Read once stopped: the shutdown's lines are held to the same rules.
    let text_log = run.stop().log();
    let forged = text_log
        .lines()
        .filter(|line| line.starts_with("forged log line"))
        .count();
    let json_log_path = board.root().join("gateway-json.log");
    let mut json_spec = board
        .gateway_spec()
        .readiness(Readiness::Immediate, Duration::ZERO);
    json_spec.args.push(OsString::from("--json"));
    json_spec.log = json_log_path;
    let json_gateway = Gateway::spawn(json_spec);
    let json_noticed = try_wait_until(
        || json_gateway.log().contains("auto-decompose cannot run"),
        board.target().first_bill_timeout(),
        "the --json gateway's word on the broken base URL",
    );
    let json_log = json_gateway.log();
    drop(json_gateway);
    let log_controls: Vec<String> = [&text_log, &json_log]
        .into_iter()
        .flat_map(|log| raw_controls(log))
        .collect();
    outputs.push(("gateway run (text log)".to_owned(), text_log));
    outputs.push(("gateway run --json (log)".to_owned(), json_log));
    let db = board.rows().path().to_owned();
    for suffix in ["", "-wal"] {
        let path = format!("{}{suffix}", db.display());
        if let Ok(bytes) = std::fs::read(&path) {
            outputs.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }

    let transcript = || {
        outputs
            .iter()
            .map(|(what, text)| format!("=== {what}\n{text:.3000}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut in_play = holds(
        "the provider was called with the key and echoed it (the scenario ran)",
        aux.billed_for(&echoed) >= 1
            && aux.billed_for(&by_hand) >= 2
            && outputs.iter().any(|(what, text)| {
                what.contains("gateway run") && text.contains("auto-decompose cannot run")
            }),
    )
    .context(transcript);
    for wait in [&seen, &noticed, &json_noticed] {
        if let Err(timeout) = wait {
            in_play = in_play.interrupted_by(Interruption::from(timeout));
        }
    }
    in_play.gap(GapKind::CallNotVisible);
    let shown: Vec<String> = outputs
        .iter()
        .flat_map(|(what, text)| {
            [("the key", KEY), ("the URL's password", PASSWORD)]
                .into_iter()
                .filter(|(_, secret)| text.contains(secret))
                .map(move |(which, _)| format!("{which} in {what}"))
        })
        .collect();
    holds(
        "no output and no board file shows the key or the URL's password",
        shown.is_empty(),
    )
    .note(|| shown.join("; "))
    .context(transcript)
    .gap(GapKind::SecretShown);
    holds(
        "no gateway log line shows a control character raw or forges another line",
        log_controls.is_empty() && forged == 0,
    )
    .note(|| format!("{}; forged lines: {forged}", log_controls.join(", ")))
    .context(transcript)
    .gap(GapKind::RawControlOutput);
}

/// A key carried in the base URL's query (some providers take it there).
const QUERY_KEY: &str = "sk-query-0035-never-shown";
/// A URL password with a character that must be percent-encoded: `@`.
const DECODED_PASSWORD: &str = "hunter@0035-pw";
/// The same password as the URL carries it.
const ENCODED_PASSWORD: &str = "hunter%400035-pw";
/// A key pasted into config.yaml as a `.env` line.
const PASTED_KEY: &str = "sk-proj-Pasted0035Into4Yaml9";

/// The provider echoes the secrets in the forms a provider would: the query's key as sent and
/// percent-encoded, the password decoded, and the basic-auth header it would have got.
fn echoing_every_form() -> Reply {
    // base64("ops:hunter@0035-pw")
    let basic = "b3BzOmh1bnRlckAwMDM1LXB3";
    // A 200 whose body is a provider's error: its message is what the ledger keeps.
    Reply::raw(
        200,
        "application/json",
        json!({"error": {"message": format!(
            "bad request for key={QUERY_KEY} (as sent: key%3D{}) from ops:{DECODED_PASSWORD} \
             (Authorization: Basic {basic})",
            QUERY_KEY.replace('-', "%2D")
        )}})
        .to_string(),
    )
}

/// Secrets in every form a provider or a person's config gives them leave no trace: a key in
/// the base URL's query and a percent-encoded password, echoed by the provider in other forms,
/// are in no output (the gateway's log, every verb, `--json`) and not in `kanban.db`; and the
/// start line shows the real path with the query's values redacted.
#[rstest]
fn a_secret_in_any_form_is_in_no_output_and_not_in_the_board(
    #[with(Config::gateway().backoff(0.0).retries(0))] board: Board,
) {
    let aux = board.aux();
    let base = aux
        .base_url()
        .replacen("://", &format!("://ops:{ENCODED_PASSWORD}@"), 1);
    let base = format!("{base}?api-version=2024-06-01&key={QUERY_KEY}");
    board.reconfigure(board.config().yaml(&format!(
        "auxiliary:\n  kanban_decomposer:\n    provider: custom\n    base_url: '{base}'\n"
    )));
    let card = board.create(
        "an idea the provider answers with every secret",
        &["--triage"],
    );
    let by_hand = board.create("an idea a person sends", &["--triage"]);
    aux.reply_default(echoing_every_form());
    let mut run = board.scenario();
    run.start().first_bill(&card).until(
        board.target().first_bill_timeout(),
        "the failure recorded",
        || !board.rows().events(&card, "decompose_failed").is_empty(),
    );
    let mut outputs: Vec<(String, String)> = Vec::new();
    for args in [
        vec!["kanban", "decompose", by_hand.as_str()],
        vec!["kanban", "decompose", by_hand.as_str(), "--json"],
        vec!["kanban", "show", card.as_str(), "--json"],
        vec!["kanban", "usage", "--calls"],
        vec!["kanban", "usage", "--calls", "--json"],
    ] {
        let output = board.cli_unchecked(args);
        outputs.push((
            output.command.clone(),
            format!("{}\n{}", output.stdout, output.stderr),
        ));
    }
    let log = run.stop().log();
    outputs.push(("gateway run (log)".to_owned(), log.clone()));
    let db = board.rows().path().to_owned();
    for suffix in ["", "-wal"] {
        let path = format!("{}{suffix}", db.display());
        if let Ok(bytes) = std::fs::read(&path) {
            outputs.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    let forms = [
        QUERY_KEY.to_owned(),
        QUERY_KEY.replace('-', "%2D"),
        DECODED_PASSWORD.to_owned(),
        ENCODED_PASSWORD.to_owned(),
        "b3BzOmh1bnRlckAwMDM1LXB3".to_owned(),
    ];
    let shown: Vec<String> = outputs
        .iter()
        .flat_map(|(what, text)| {
            forms
                .iter()
                .filter(|form| text.contains(form.as_str()))
                .map(move |form| format!("{form} in {what}"))
        })
        .collect();
    let transcript = || {
        outputs
            .iter()
            .map(|(what, text)| format!("=== {what}\n{text:.2000}"))
            .collect::<Vec<_>>()
            .join("\n")
    };

    holds(
        "the provider was called and echoed the secrets (the scenario ran)",
        aux.billed_for(&card) >= 1 && aux.billed_for(&by_hand) >= 2,
    )
    .context(transcript)
    .gap(GapKind::CallNotVisible);
    holds(
        "no output and no board file shows a secret in any form",
        shown.is_empty(),
    )
    .note(|| shown.join("; "))
    .context(transcript)
    .gap(GapKind::SecretShown);
    holds(
        "the start line shows the real path, with the query's values redacted, and names the \
         proxy (none for this machine)",
        log.contains("/v1/chat/completions?api-version=<redacted>&key=<redacted>")
            && log.contains("proxy=\"none (direct)\""),
    )
    .context(|| log.clone())
    .gap(GapKind::UnclearRefusal);
}

/// A key pasted into config.yaml in `.env` syntax makes the config unreadable; every verb that
/// reads the config says so, and the gateway refuses to start, without printing the key.
#[rstest]
fn a_key_pasted_into_config_in_env_syntax_is_in_no_config_error(
    #[with(Config::gateway())] board: Board,
) {
    let config = board.config_path();
    let text = match std::fs::read_to_string(&config) {
        Ok(text) => text,
        Err(error) => panic!("cannot read {}: {error}", config.display()),
    };
    let card = board.create("an idea under a broken config", &["--triage"]);
    // The `.env` line as the whole file, and as the value of a key the gateway reads: each an
    // error that quotes the value it found.
    let whole_file = format!("OPENAI_API_KEY={PASTED_KEY}\n");
    let as_a_value: String = text
        .lines()
        .map(|line| match line.split_once("dispatch_interval_seconds:") {
            Some((indent, _)) => {
                format!("{indent}dispatch_interval_seconds: OPENAI_API_KEY={PASTED_KEY}\n")
            }
            None => format!("{line}\n"),
        })
        .collect();
    let arranged = if as_a_value.contains(PASTED_KEY) {
        Ok(())
    } else {
        Err(format!(
            "the config has no dispatch_interval_seconds to paste over:\n{text}"
        ))
    };
    let mut outputs: Vec<(String, String)> = Vec::new();
    for broken in [whole_file, as_a_value] {
        if let Err(error) = std::fs::write(&config, &broken) {
            panic!("cannot write {}: {error}", config.display());
        }
        for args in [
            vec!["kanban", "decompose", card.as_str()],
            vec!["kanban", "decompose", "--all", "--json"],
            vec!["kanban", "usage"],
            vec!["kanban", "unpark", card.as_str(), "--json"],
        ] {
            let output = board.cli_unchecked(args);
            outputs.push((output.command.clone(), output.stderr.clone()));
        }
        let gateway = Gateway::spawn(
            board
                .gateway_spec()
                .readiness(Readiness::Immediate, Duration::ZERO),
        );
        let _ = try_wait_until(
            || !gateway.running(),
            board.target().readiness_timeout(),
            "the gateway to refuse the config",
        );
        outputs.push(("gateway run".to_owned(), gateway.log()));
    }
    let said = outputs
        .iter()
        .filter(|(_, text)| text.contains("config.yaml"))
        .count();
    let shown: Vec<&str> = outputs
        .iter()
        .filter(|(_, text)| text.contains(PASTED_KEY) || text.contains("Pasted0035"))
        .map(|(what, _)| what.as_str())
        .collect();
    let transcript = || {
        outputs
            .iter()
            .map(|(what, text)| format!("=== {what}\n{text}"))
            .collect::<Vec<_>>()
            .join("\n")
    };

    holds(
        "every verb and the gateway report the broken config.yaml",
        said == outputs.len(),
    )
    .context(transcript)
    .gap(GapKind::SilentMisconfiguration);
    holds("no config error shows the pasted key", shown.is_empty())
        .note(|| format!("shown by: {shown:?}"))
        .context(transcript)
        .provided(&arranged)
        .gap(GapKind::SecretShown);
}
