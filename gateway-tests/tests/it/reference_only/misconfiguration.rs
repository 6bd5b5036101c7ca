//! Silent misconfiguration, as the reference's gateway answers it: a misspelt key gets one WARN
//! at start naming the key meant (upstream's own keys beside it none), `gateway run --json`
//! logs JSON lines only, a value out of its range stops the gateway at start naming the key and
//! the range, and a bad edit mid-run keeps the last good config, with one WARN, and with its
//! bounds: the bills say so, not only the log.

use std::path::Path;
use std::time::Duration;

use fixtures::gateway::Gateway;
use fixtures::gateway::GatewayError;
use fixtures::ticks::Window;
use fixtures::upstream::{DEFAULT_KEYS, DEFAULT_KEYS_YAML};
use judge::prelude::*;
use rstest::rstest;
use serde_json::Value;

use crate::support::{span_of_ticks, STOP_GRACE};
use crate::PROBE_TICKS;

/// Two typos, one per section the reference checks, and the keys they were meant to be.
const TYPOS: [(&str, &str); 2] = [
    (
        "kanban.dispatch_interval_secs",
        "kanban.dispatch_interval_seconds",
    ),
    (
        "auxiliary.kanban_decomposer.modle",
        "auxiliary.kanban_decomposer.model",
    ),
];

/// The YAML of [`TYPOS`].
const TYPOS_YAML: &str = "\
kanban:
  dispatch_interval_secs: 5
auxiliary:
  kanban_decomposer:
    modle: cheap-small-model
";

/// How long the gateway may take to notice an edit of `config.yaml`: many ticks.
const EDIT_NOTICED: Duration = Duration::from_secs(10);

/// The lines of `log` that warn (plain `WARN` or a JSON `"level":"WARN"`) and name `key`.
fn warnings_naming(log: &str, key: &str) -> Vec<String> {
    log.lines()
        .filter(|line| line.contains("WARN") && line.contains(key))
        .map(str::to_owned)
        .collect()
}

/// Judges that each of [`TYPOS`] got exactly one warning in `log`, naming the key meant, and
/// that no warning names one of upstream's own keys.
fn judge_typo_warnings(log: &str, window: &Window) {
    for (typo, meant) in TYPOS {
        let warned = warnings_naming(log, typo);
        let naming_meant = warned
            .iter()
            .filter(|line| line.contains(&format!("did you mean {meant}?")))
            .count();
        bound(
            format!("WARN lines naming {typo} and {meant}"),
            naming_meant,
        )
        .exactly(1)
        .over(window)
        .note(|| format!("{} WARN lines name {typo}: {warned:?}", warned.len()))
        .context(|| log.to_owned())
        .gap(GapKind::SilentMisconfiguration);
    }
    let about_upstream_keys: Vec<String> = DEFAULT_KEYS
        .iter()
        .flat_map(|key| warnings_naming(log, key))
        .filter(|line| !TYPOS.iter().any(|(typo, _)| line.contains(typo)))
        .collect();
    bound(
        "WARN lines about one of upstream's own keys",
        about_upstream_keys.len(),
    )
    .at_most(0)
    .over(window)
    .note(|| about_upstream_keys.join(" | "))
    .gap(GapKind::SilentMisconfiguration);
}

/// Starts the board's gateway with `extra` arguments, lets it decompose `card` and tick twice
/// more, and stops it: what the run saw, its whole log included.
fn run_until_decomposed(board: &Board, extra: &[&str], card: &str) -> Seen {
    let mut run = board.scenario().with_spec(|mut spec| {
        spec.args.extend(extra.iter().map(Into::into));
        spec
    });
    run.start()
        .left_triage(
            &[card.to_owned()],
            board.target().first_bill_timeout(),
            "the card auto-decomposed",
        )
        .prove_ticks(2);
    run.stop()
}

#[rstest]
fn a_misspelt_key_warns_once_at_start_and_upstreams_keys_stay_silent(
    #[with(Config::gateway().yaml(DEFAULT_KEYS_YAML).yaml(TYPOS_YAML))] board: Board,
) {
    let card = board.create("an idea on a board with typos", &["--triage"]);
    board.aux().reply(&card, Reply::graph(2, &[]));

    let seen = run_until_decomposed(&board, &[], &card);
    let log = seen.log();

    judge_typo_warnings(&log, &seen.window);
    bound(
        "bills for the card under typos",
        board.aux().billed_for(&card),
    )
    .exactly(1)
    .over(&seen)
    .context(|| board.diag(&card))
    .gap(GapKind::ReplyNotApplied);
}

/// Whether `line` is a JSON object with a text `timestamp`, `level` and `message`.
fn is_json_log_line(line: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|event| {
        ["timestamp", "level", "message"]
            .iter()
            .all(|field| event[*field].is_string())
    })
}

#[rstest]
fn gateway_run_json_logs_json_lines_only_and_still_bills(
    #[with(Config::gateway().yaml(DEFAULT_KEYS_YAML).yaml(TYPOS_YAML))] board: Board,
) {
    let card = board.create("an idea under a JSON log", &["--triage"]);
    board.aux().reply(&card, Reply::graph(2, &[]));

    let seen = run_until_decomposed(&board, &["--json"], &card);
    let log = seen.log();

    let lines: Vec<&str> = log.lines().filter(|line| !line.trim().is_empty()).collect();
    let not_json: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|line| !is_json_log_line(line))
        .collect();
    bound(
        "log lines of `gateway run --json` that are not JSON log objects",
        not_json.len(),
    )
    .at_most(0)
    .over(&seen)
    .note(|| format!("{} of {} lines: {not_json:?}", not_json.len(), lines.len()))
    .gap(GapKind::WrongJsonLine);
    bound("lines of `gateway run --json`", lines.len())
        .at_least(3)
        .over(&seen)
        .context(|| log.clone())
        .gap(GapKind::WrongJsonLine);
    judge_typo_warnings(&log, &seen.window);
    bound(
        "bills for the card under a JSON log",
        board.aux().billed_for(&card),
    )
    .exactly(1)
    .over(&seen)
    .context(|| board.diag(&card))
    .gap(GapKind::ReplyNotApplied);
}

/// Values just past a range's end, one per kind of key and section, and the range in words.
const OUT_OF_RANGE: [(&str, &str, &str); 5] = [
    ("kanban.auto_decompose_per_tick", "1001", "from 1 to 1000"),
    (
        "kanban.provider_cooldown_seconds",
        "0.999",
        "from 1 to 86400",
    ),
    (
        "kanban.dispatch_interval_seconds",
        "0.009",
        "from 0.01 to 86400",
    ),
    (
        "auxiliary.kanban_decomposer.timeout",
        "3600.001",
        "from 0.01 to 3600",
    ),
    ("auxiliary.transient_retries", "-1", "from 0 to 6"),
];

#[rstest]
fn an_out_of_range_value_stops_the_gateway_at_start_naming_the_key_and_the_range(
    #[with(Config::gateway())] board: Board,
) {
    let card = board.create("an idea waiting on a broken config", &["--triage"]);
    let mut wrong = Vec::new();
    let mut transcript = Vec::new();
    for (index, (key, value, range)) in OUT_OF_RANGE.into_iter().enumerate() {
        board.reconfigure(Config::gateway().yaml_at(key, value));
        let mut spec = board.gateway_spec().stop_grace(STOP_GRACE);
        // A log per start, so each refusal is read on its own.
        spec.log = board.root().join(format!("start-{index}.log"));
        let log_path = spec.log.clone();
        match Gateway::try_spawn(spec) {
            Err(GatewayError::ExitedEarly { exit, .. }) => {
                let log = read_log(&log_path);
                if exit.code != Some(1) || !log.contains(key) || !log.contains(range) {
                    wrong.push(format!(
                        "{key}: {value} ended the gateway with {exit} without naming {key} {range}"
                    ));
                }
                transcript.push(format!("[{key}: {value}] {exit}\n{log}"));
            }
            Ok(gateway) => {
                wrong.push(format!("{key}: {value} did not stop the gateway"));
                drop(gateway);
                transcript.push(format!("[{key}: {value}] started\n{}", read_log(&log_path)));
            }
            Err(error) => wrong.push(format!("{key}: {value}: {error}")),
        }
    }

    bound(
        "out-of-range values a gateway did not refuse at start with exit 1, the key and the range",
        wrong.len(),
    )
    .at_most(0)
    .note(|| wrong.join("; "))
    .context(|| transcript.join("\n"))
    .gap(GapKind::UnclearRefusal);
    bound("bills under out-of-range configs", board.aux().bills())
        .at_most(0)
        .note(|| format!("billed {:?}", board.aux().billed_ids()))
        .context(|| board.diag(&card))
        .gap(GapKind::BilledForNothing);
}

/// The whole log at `path`; empty when there is none.
fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Cards waiting while the config is edited.
const WAITING_CARDS: usize = 3;

#[rstest]
fn a_bad_edit_mid_run_keeps_the_last_good_config_and_its_bounds(
    #[with(Config::gateway().kill_switch(false))] board: Board,
) {
    let target = board.target();
    let aux = board.aux();
    let cards: Vec<String> = (0..WAITING_CARDS)
        .map(|i| {
            let card = board.create(&format!("waiting idea {i}"), &["--triage"]);
            aux.reply(&card, Reply::graph(2, &[]));
            card
        })
        .collect();
    let bad_key = "kanban.auto_decompose_per_tick";
    let kept = |log: &str| {
        warnings_naming(log, bad_key)
            .into_iter()
            .filter(|line| line.contains("keeping the last good configuration"))
            .count()
    };

    let mut run = board.scenario();
    run.start().watch(span_of_ticks(target, 2));
    // Switched on, but by a file the gateway must refuse: the last good one had it off.
    board.reconfigure(Config::gateway().kill_switch(true).yaml_at(bad_key, "1001"));
    let log_path = board.gateway_log_path();
    run.until(EDIT_NOTICED, "the gateway to refuse the edit", || {
        kept(&read_log(&log_path)) > 0
    })
    .watch(span_of_ticks(target, PROBE_TICKS));
    let bills_under_bad_edit = aux.bills();
    let warnings = kept(&run.log());
    let bad_window = run.so_far();
    board.reconfigure(Config::gateway());
    run.left_triage(
        &cards,
        target.first_bill_timeout(),
        "the waiting cards decomposed once the config is valid again",
    );
    let seen = run.stop();
    let bills: Vec<usize> = cards.iter().map(|card| aux.billed_for(card)).collect();

    bound(
        "bills while a bad edit switching auto-decompose on sits on disk",
        bills_under_bad_edit,
    )
    .at_most(0)
    .over(&bad_window)
    .note(|| format!("billed {:?}", aux.billed_ids()))
    .gap(GapKind::KillSwitchIgnored);
    bound("WARN lines about the bad edit", warnings)
        .exactly(1)
        .over(&bad_window)
        .note(|| format!("warned about {bad_key} keeping the last good configuration"))
        .context(|| read_log(&board.gateway_log_path()))
        .gap(GapKind::SilentMisconfiguration);
    bound(
        "bills per waiting card once the config is valid again",
        bills.iter().copied().max().unwrap_or(0),
    )
    .exactly(1)
    .over(&seen)
    .note(|| format!("bills per card: {bills:?}"))
    .gap(GapKind::KillSwitchIgnored);
}

#[rstest]
fn a_bad_dotenv_line_is_a_warning_naming_it_and_the_key_below_it_still_bills(
    #[with(Config::gateway())] board: Board,
) {
    let aux = board.aux();
    let bytes: &[u8] = b"BROKEN=\xc3\x28\nOPENAI_API_KEY=sk-gateway-dotenv-0022\n";
    board.write_dotenv(bytes);
    let card = board.create("an idea billed with the .env key", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let mut run = board.scenario();
    run.start().until_left_triage(&card, "the card decomposed");
    let log = run.log_since_start();
    let seen = run.stop();

    let bearers: Vec<String> = aux.billed_calls().iter().map(|c| c.bearer()).collect();
    holds(
        "the gateway's requests carry the key from the line below the bad one",
        !bearers.is_empty() && bearers.iter().all(|b| b == "Bearer sk-gateway-dotenv-0022"),
    )
    .note(|| format!("bearers: {bearers:?}"))
    .context(|| log.clone())
    .gap(GapKind::DecomposerSettingIgnored);
    let warnings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("WARN") && line.contains(".env: line 1: not valid UTF-8"))
        .collect();
    bound("WARN lines naming the bad .env line", warnings.len())
        .exactly(1)
        .over(&seen)
        .context(|| log.clone())
        .gap(GapKind::SilentMisconfiguration);
}

#[rstest]
fn a_config_that_cannot_be_read_as_text_stops_the_gateway_at_start_naming_the_file(
    #[with(Config::gateway())] board: Board,
) {
    let card = board.create("an idea waiting on an unreadable config", &["--triage"]);
    // The fixture's own config, whole and valid, with one byte that is not UTF-8 in a comment:
    // the file cannot be read as text, and must not be taken for a missing one (the defaults).
    let path = board.hermes_home().join("config.yaml");
    let mut bytes = std::fs::read(&path).expect("the fixture's config.yaml");
    bytes.extend_from_slice(b"\n# written by a tool in Latin-1: caf\xe9\n");
    std::fs::write(&path, &bytes).expect("rewriting config.yaml");
    let mut spec = board.gateway_spec().stop_grace(STOP_GRACE);
    spec.log = board.root().join("unreadable-config.log");
    let log_path = spec.log.clone();
    let started = Gateway::try_spawn(spec);
    let log = read_log(&log_path);
    let refused = match started {
        Err(GatewayError::ExitedEarly { exit, .. }) => {
            exit.code == Some(1) && log.contains("config.yaml")
        }
        Ok(gateway) => {
            drop(gateway);
            false
        }
        Err(_) => false,
    };
    holds(
        "a config.yaml that is not UTF-8 stops the gateway at start with exit 1, naming the file",
        refused,
    )
    .context(|| log.clone())
    .gap(GapKind::UnclearRefusal);
    bound("bills under an unreadable config", board.aux().bills())
        .at_most(0)
        .context(|| board.diag(&card))
        .gap(GapKind::BilledForNothing);
}
