//! Absurd numbers in `config.yaml` (contract §2): a key's value far outside any sensible range is a
//! clear error naming the key, at start, with exit 1 — so a `decompose` under such a config
//! pays for nothing — and no verb ever answers one with a crash.
//!
//! Each value gets a card of its own and both decompose verbs; the verdicts count, over every
//! value, the runs that crashed, the runs that did not refuse naming the key, and the requests
//! made. The one documented exception is a retry count past its range, which means the most
//! retries there are (as upstream reads it): a config written for upstream keeps working.

use fixtures::cli::CliOutput;
use judge::prelude::*;
use rstest::rstest;

/// A setting and the config that sets it to an absurd value.
pub type Absurd = (Setting, Config);

/// Crash markers: a panic or a traceback is never an answer to a bad config.
const CRASHES: [&str; 3] = [
    "panicked at",
    "RUST_BACKTRACE",
    "Traceback (most recent call last)",
];

fn crashed(output: &CliOutput) -> bool {
    output.timed_out
        || output.code.is_none()
        || CRASHES.iter().any(|crash| output.stderr.contains(crash))
}

/// Runs `kanban show`, `kanban decompose ID` and `kanban decompose --all` on a board whose config
/// sets each setting of `absurd` to its absurd value in turn, and judges them all: no crash, every
/// decompose refused with exit 1 and a message naming the key, and no request at all.
pub fn judge_absurd_configs(absurd: Vec<Absurd>) {
    let board = Board::new(Config::plain());
    let aux = board.aux();
    let mut runs: Vec<(String, CliOutput)> = Vec::new();
    let mut unrefused: Vec<String> = Vec::new();
    for (setting, config) in absurd {
        let card = board.create("a card on a misconfigured board", &["--triage"]);
        aux.reply(&card, Reply::graph(2, &[]));
        board.reconfigure(config);
        let named = Config::key_for(board.target(), setting).unwrap_or(setting.row().words);
        let value = board.setting(setting);
        let show = board.cli_unchecked(["kanban", "show", card.as_str(), "--json"]);
        runs.push((value.clone(), show));
        for args in [
            vec!["kanban", "decompose", card.as_str(), "--json"],
            vec!["kanban", "decompose", "--all", "--json"],
        ] {
            let output = board.cli_unchecked(args);
            if crashed(&output) || output.code != Some(1) || !output.stderr.contains(named) {
                unrefused.push(format!(
                    "{value}: `{}` exited {} without naming {named}",
                    output.command,
                    output.code_text()
                ));
            }
            runs.push((value.clone(), output));
        }
        board.reconfigure(Config::plain());
    }

    let transcript = || {
        runs.iter()
            .map(|(value, output)| format!("[{value}]\n{output}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let crashes: Vec<String> = runs
        .iter()
        .filter(|(_, output)| crashed(output))
        .map(|(value, output)| format!("{value}: `{}`", output.command))
        .collect();
    bound("verbs that crashed on an absurd config", crashes.len())
        .at_most(0)
        .note(|| crashes.join("; "))
        .context(transcript)
        .gap(GapKind::UnclearRefusal);
    bound(
        "decompose runs that did not refuse an absurd config naming its key",
        unrefused.len(),
    )
    .at_most(0)
    .note(|| unrefused.join("; "))
    .context(transcript)
    .gap(GapKind::UnclearRefusal);
    bound("requests under absurd configs", aux.bills())
        .at_most(0)
        .note(|| format!("billed cards {:?}", aux.billed_ids()))
        .context(transcript)
        .gap(GapKind::BilledForNothing);
}

#[rstest]
fn absurd_numbers_in_config_are_refused_naming_the_key() {
    judge_absurd_configs(vec![
        (Setting::PerTick, Config::plain().per_tick(4_000_000_000)),
        (Setting::CallTimeout, Config::plain().call_timeout(1e300)),
        (Setting::CallTimeout, Config::plain().call_timeout(-5.0)),
        (Setting::CallTimeout, Config::plain().call_timeout(f64::NAN)),
        (Setting::Tick, Config::plain().tick(1e-300)),
    ]);
}

#[rstest]
fn an_absurd_retry_count_is_read_as_the_most_there_are(
    #[with(Config::plain().retries(4_000_000_000))] board: Board,
) {
    let aux = board.aux();
    let card = board.create("a card under a greedy retry count", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let run = board.cli_unchecked(["kanban", "decompose", card.as_str(), "--json"]);

    holds(
        "a decompose under an absurd retry count answers without a crash",
        !crashed(&run),
    )
    .note(|| board.setting(Setting::Retries))
    .context(|| run.to_string())
    .gap(GapKind::UnclearRefusal);
    bound(
        "requests of a decompose answered at once",
        aux.billed_for(&card),
    )
    .exactly(1)
    .note(|| board.setting(Setting::Retries))
    .context(|| run.to_string())
    .gap(GapKind::NotOneRequest);
    holds(
        "the decompose is applied",
        board.rows().children_of(&card).len() == 2,
    )
    .context(|| format!("{run}\n{}", board.diag(&card)))
    .gap(GapKind::ReplyNotApplied);
}
