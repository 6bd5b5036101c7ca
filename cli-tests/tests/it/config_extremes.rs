//! Absurd numbers in `config.yaml` (SPEC §2): every CLI verb answers without a crash, a verb
//! that refuses the config names the key and sends nothing, and one that accepts it still pays
//! for at most the one request a decompose makes.
//!
//! Values far outside any sensible range, some of which the reference already refuses (a
//! duration of 1e300 s, a negative one, NaN) and some it still reads (4 000 000 000 retries).
//! Once every key has a documented range, all of them are refusals naming the key; this test
//! holds either way.

use fixtures::config::key;
use fixtures::prelude::*;
use rstest::rstest;

/// What one verb did under the absurd config.
struct Run {
    output: CliOutput,
    /// Requests the fake provider received while it ran.
    requests: usize,
}

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

/// Runs the CLI verbs a person uses on a board whose config sets `setting` to an absurd value
/// (`config`), and judges them: no crash, no request from a verb that refused the config, a
/// refusal that names the key, and at most one request in all (the one triage card, decomposed
/// by `decompose ID` before the sweep looks for it).
pub fn judge_absurd_config(setting: Setting, config: Config) {
    let board = Board::new(Config::plain());
    let aux = board.aux();
    let card = board.create("a card on a misconfigured board", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));
    board.reconfigure(config);
    let key_name = Config::key_for(board.target(), setting).unwrap_or(key(setting).words);
    let leaf = key_name.rsplit('.').next().unwrap_or(key_name);

    let verbs: [&[&str]; 3] = [
        &["kanban", "show", card.as_str(), "--json"],
        &["kanban", "decompose", card.as_str(), "--json"],
        &["kanban", "decompose", "--all", "--json"],
    ];
    let runs: Vec<Run> = verbs
        .iter()
        .map(|args| {
            let before = aux.bills();
            let output = board.cli_unchecked(args.iter().copied());
            Run {
                requests: aux.bills().saturating_sub(before),
                output,
            }
        })
        .collect();

    let transcript = || {
        runs.iter()
            .map(|run| run.output.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let value = || board.setting(setting);
    let crashes: Vec<&str> = runs
        .iter()
        .filter(|run| crashed(&run.output))
        .map(|run| run.output.command.as_str())
        .collect();
    bound("verbs that crashed on an absurd config", crashes.len())
        .at_most(0)
        .note(value)
        .note(|| crashes.join("; "))
        .context(transcript)
        .gap(GapKind::UnclearRefusal);
    let refused: Vec<&Run> = runs
        .iter()
        .filter(|run| !crashed(&run.output) && run.output.code != Some(0))
        // A decompose that ran and failed is not a refusal of the config: it printed its line.
        .filter(|run| !printed_a_line(&run.output))
        .collect();
    bound(
        "requests by verbs that refused the config",
        refused.iter().map(|run| run.requests).sum::<usize>(),
    )
    .at_most(0)
    .note(value)
    .context(transcript)
    .gap(GapKind::BilledForNothing);
    let unnamed: Vec<&str> = refused
        .iter()
        .filter(|run| !run.output.stderr.contains(leaf))
        .map(|run| run.output.command.as_str())
        .collect();
    bound("refusals that do not name the key", unnamed.len())
        .at_most(0)
        .note(|| format!("{}; none of {} says {leaf:?}", value(), unnamed.join("; ")))
        .context(transcript)
        .gap(GapKind::UnclearRefusal);
    bound("requests under an absurd config", aux.bills())
        .at_most(1)
        .note(value)
        .context(transcript)
        .gap(GapKind::NotOneRequest);
}

/// Whether the run printed a `--json` line (a decompose that ran and failed did; a verb that
/// refused the config prints nothing on stdout).
fn printed_a_line(output: &CliOutput) -> bool {
    output
        .stdout
        .lines()
        .any(|line| serde_json::from_str::<serde_json::Value>(line).is_ok())
}

#[rstest]
#[case::per_tick_4e9(Setting::PerTick, Config::plain().per_tick(4_000_000_000))]
#[case::retries_4e9(Setting::Retries, Config::plain().retries(4_000_000_000))]
#[case::call_timeout_1e300(Setting::CallTimeout, Config::plain().call_timeout(1e300))]
#[case::call_timeout_negative(Setting::CallTimeout, Config::plain().call_timeout(-5.0))]
#[case::call_timeout_nan(Setting::CallTimeout, Config::plain().call_timeout(f64::NAN))]
#[case::tick_1e_minus_300(Setting::Tick, Config::plain().tick(1e-300))]
fn absurd_numbers_in_config_are_refused_or_harmless(
    #[case] setting: Setting,
    #[case] config: Config,
) {
    judge_absurd_config(setting, config);
}
