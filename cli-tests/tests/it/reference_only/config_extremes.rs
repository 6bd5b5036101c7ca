//! Absurd numbers for the bound keys only the reference reads (see `crate::config_extremes`):
//! refused at start naming the key, nothing paid. Every documented range takes its ends, and a
//! value just past one is refused naming the key and the range (`from MIN to MAX`).

use judge::prelude::*;
use rstest::rstest;

use crate::config_extremes::judge_absurd_configs;

#[rstest]
fn absurd_bound_settings_are_refused_naming_the_key() {
    judge_absurd_configs(vec![
        (
            Setting::MaxAttempts,
            Config::plain().max_attempts(4_000_000_000),
        ),
        (
            Setting::MaxChildren,
            Config::plain().max_children(4_000_000_000),
        ),
        (
            Setting::CallsPerHour,
            Config::plain().calls_per_hour(4_000_000_000),
        ),
        (Setting::Backoff, Config::plain().backoff(1e300)),
        (Setting::Backoff, Config::plain().backoff(-5.0)),
        (Setting::Cooldown, Config::plain().cooldown(1e16)),
        (Setting::Cooldown, Config::plain().cooldown(f64::INFINITY)),
    ]);
}

/// What the reference does with a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Past {
    /// Refused, naming the key.
    Refused,
    /// Read: a value within the range, or one past an end that is documented to mean the end
    /// itself (the retry count above 6, the cards per tick below 1).
    Read,
}

/// Each numeric key the reference documents: its two ends, the values just past them, and
/// what happens there.
const RANGES: [(&str, &str, &str, &str, &str, Past, Past); 11] = [
    // key, below min, min, max, above max, below, above
    (
        "auxiliary.transient_retries",
        "-1",
        "0",
        "6",
        "7",
        Past::Refused,
        Past::Read,
    ),
    (
        "auxiliary.timeout_seconds",
        "0.009",
        "0.01",
        "3600",
        "3600.001",
        Past::Refused,
        Past::Refused,
    ),
    (
        "auxiliary.kanban_decomposer.timeout",
        "0.009",
        "0.01",
        "3600",
        "3600.001",
        Past::Refused,
        Past::Refused,
    ),
    (
        "kanban.dispatch_interval_seconds",
        "0.009",
        "0.01",
        "86400",
        "86400.001",
        Past::Refused,
        Past::Refused,
    ),
    (
        "kanban.max_spawn",
        "-1",
        "0",
        "1000",
        "1001",
        Past::Refused,
        Past::Refused,
    ),
    (
        "kanban.auto_decompose_per_tick",
        "0",
        "1",
        "1000",
        "1001",
        Past::Read,
        Past::Refused,
    ),
    (
        "kanban.decompose_max_attempts",
        "-1",
        "0",
        "100",
        "101",
        Past::Refused,
        Past::Refused,
    ),
    (
        "kanban.decompose_backoff_seconds",
        "-0.001",
        "0",
        "3600",
        "3600.001",
        Past::Refused,
        Past::Refused,
    ),
    (
        "kanban.decompose_max_children",
        "0",
        "1",
        "100",
        "101",
        Past::Refused,
        Past::Refused,
    ),
    (
        "kanban.decompose_calls_per_hour",
        "-1",
        "0",
        "100000",
        "100001",
        Past::Refused,
        Past::Refused,
    ),
    (
        "kanban.provider_cooldown_seconds",
        "0.999",
        "1",
        "86400",
        "86400.001",
        Past::Refused,
        Past::Refused,
    ),
];

#[rstest]
fn every_range_takes_its_ends_and_refuses_just_past_them(board: Board) {
    let mut wrong: Vec<String> = Vec::new();
    let mut runs: Vec<String> = Vec::new();
    for (key, below, min, max, above, past_min, past_max) in RANGES {
        for (value, expect) in [
            (min, Past::Read),
            (max, Past::Read),
            (below, past_min),
            (above, past_max),
        ] {
            board.reconfigure(Config::plain().yaml_at(key, value));
            let usage = board.cli_unchecked(["kanban", "usage", "--json"]);
            let range = format!("from {min} to {max}");
            let names_it = usage.stderr.contains(key) && usage.stderr.contains(&range);
            // `usage` bills nothing, so the reference reports a config it cannot use as a
            // warning and still shows the ledger (exit 0); the verbs that bill refuse it.
            let refused_naming_it = names_it
                && (usage.code == Some(1)
                    || (usage.code == Some(0) && usage.stderr.contains("hermes: warning: ")));
            let read = usage.code == Some(0) && !names_it;
            let right = match expect {
                Past::Refused => refused_naming_it,
                Past::Read => read,
            };
            if !right {
                wrong.push(format!(
                    "{key}: {value} should be {}, `kanban usage` exited {}",
                    if expect == Past::Refused {
                        "refused naming the key and its range"
                    } else {
                        "read"
                    },
                    usage.code_text()
                ));
            }
            runs.push(format!("[{key}: {value}]\n{usage}"));
        }
    }
    bound("range ends read wrong", wrong.len())
        .at_most(0)
        .note(|| wrong.join("; "))
        .context(|| runs.join("\n"))
        .gap(GapKind::UnclearRefusal);
}
