//! Silent misconfiguration, as the reference answers it on a verb's stderr: a key under `kanban:`
//! or `auxiliary.kanban_decomposer:` that no implementation defines gets one warning naming the
//! closest known key, on every verb that reads the config, while upstream's own keys beside it
//! stay silent, and the verb still does its work.

use fixtures::cli::CliOutput;
use fixtures::upstream::{DEFAULT_KEYS, DEFAULT_KEYS_YAML};
use judge::prelude::*;
use rstest::rstest;

use crate::misconfiguration::lines_naming;
use crate::{assert_no_crash, json_lines, one_per_line};

#[rstest]
#[case::kanban_section("kanban", "dispatch_interval_secs", "5", "dispatch_interval_seconds")]
#[case::decomposer_section(
    "auxiliary:\n  kanban_decomposer",
    "modle",
    "cheap-small-model",
    "model"
)]
fn a_misspelt_key_gets_one_warning_naming_the_key_meant_on_each_verb(
    #[case] section: &str,
    #[case] typo: &str,
    #[case] value: &str,
    #[case] meant: &str,
) {
    let indent = "  ".repeat(section.matches(':').count() + 1);
    let dotted = section.replace(":\n  ", ".");
    let typo_key = format!("{dotted}.{typo}");
    let meant_key = format!("{dotted}.{meant}");
    let board = Board::new(
        Config::plain()
            .yaml(DEFAULT_KEYS_YAML)
            .yaml(&format!("{section}:\n{indent}{typo}: {value}\n")),
    );
    let aux = board.aux();
    let card = board.create("an idea on a board with a typo", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));
    let other = board.create("another idea", &["--triage"]);

    let runs: Vec<CliOutput> = [
        vec!["kanban", "decompose", card.as_str(), "--json"],
        vec!["kanban", "decompose", "--all", "--json"],
        vec!["kanban", "usage", "--json"],
        vec!["kanban", "unpark", other.as_str()],
    ]
    .into_iter()
    .map(|args| board.cli_unchecked(args))
    .collect();
    for run in &runs {
        assert_no_crash(run);
    }

    let transcript = || one_per_line(&runs);
    let wrong: Vec<String> = runs
        .iter()
        .filter_map(|run| {
            let warned = lines_naming(run, &[typo_key.as_str()]);
            let right = warned.len() == 1
                && warned[0].contains("warning")
                && warned[0].contains(&format!("did you mean {meant_key}?"));
            (!right).then(|| format!("`{}` warned {warned:?}", run.command))
        })
        .collect();
    bound(
        "verbs without exactly one warning naming the misspelt key and the key meant",
        wrong.len(),
    )
    .at_most(0)
    .note(|| wrong.join("; "))
    .context(transcript)
    .gap(GapKind::SilentMisconfiguration);
    // The typo's own warning names the key meant, which may be one of upstream's.
    let named: Vec<String> = runs
        .iter()
        .flat_map(|run| lines_naming(run, &DEFAULT_KEYS))
        .filter(|line| !line.contains(&typo_key))
        .collect();
    bound(
        "stderr lines naming one of upstream's own keys beside a typo",
        named.len(),
    )
    .at_most(0)
    .note(|| named.join(" | "))
    .context(transcript)
    .gap(GapKind::SilentMisconfiguration);
    let mut findings = Findings::new()
        .equal("requests", &aux.billed_for(&card), &1)
        .equal(
            "children of the decomposed card",
            &board.rows().children_of(&card).len(),
            &2,
        )
        .equal("exit code of the decompose", &runs[0].code, &Some(0))
        .equal("exit code of usage", &runs[2].code, &Some(0))
        .equal("exit code of the refused unpark", &runs[3].code, &Some(1));
    // With --json stdout stays JSON: the warning goes to stderr.
    for run in &runs[..2] {
        findings = findings.that(!json_lines(run).is_empty(), || {
            format!("`{}` printed no JSON", run.command)
        });
    }
    findings = findings.that(
        serde_json::from_str::<serde_json::Value>(&runs[2].stdout).is_ok(),
        || format!("`{}` printed no JSON", runs[2].command),
    );
    findings
        .verdict("a warning changes nothing else the verbs do")
        .context(transcript)
        .gap(GapKind::ReplyNotApplied);
}
