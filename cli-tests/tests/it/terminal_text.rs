//! A card's text on its way to a terminal: a title and a body full of escape sequences (CSI,
//! OSC ended by BEL, a C1 control, DEL, a carriage return, a right-to-left override) are shown
//! by `create`, `show` and `list` with no control character left raw, and their `--json` carries
//! the same text, escaped by JSON itself.

use fixtures::cli::CliOutput;
use judge::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};

use crate::{no_raw_controls, one_per_line, HOSTILE};

#[rstest]
fn a_cards_text_full_of_escape_sequences_reaches_no_terminal_raw(board: Board) {
    let title = format!("ship it {HOSTILE}");
    let body = format!("first line\n{HOSTILE}\nlast line");
    let created =
        board.cli_unchecked(["kanban", "create", title.as_str(), "--body", body.as_str()]);
    let id = board.create(&title, &["--triage", "--body", &body]);

    let outputs: Vec<CliOutput> = [
        vec!["kanban", "show", id.as_str()],
        vec!["kanban", "show", id.as_str(), "--json"],
        vec!["kanban", "list"],
        vec!["kanban", "list", "--json"],
    ]
    .into_iter()
    .map(|args| board.cli_unchecked(args))
    .chain([created])
    .collect();

    let mut findings = Findings::new();
    for output in &outputs {
        findings = no_raw_controls(findings, output);
    }
    findings
        .verdict("no control character of a card's text reaches stdout or stderr raw")
        .context(|| one_per_line(&outputs))
        .gap(GapKind::RawControlOutput);
    let shown: Value = serde_json::from_str(&outputs[1].stdout).unwrap_or(Value::Null);
    let listed: Value = serde_json::from_str(&outputs[3].stdout).unwrap_or(Value::Null);
    let listed_title = listed
        .as_array()
        .and_then(|cards| cards.iter().find(|card| card["id"] == json!(id)))
        .map(|card| card["title"].clone());
    Findings::new()
        .equal("show --json title", &shown["task"]["title"], &json!(title))
        .equal("show --json body", &shown["task"]["body"], &json!(body))
        .equal("list --json title", &listed_title, &Some(json!(title)))
        .verdict("--json carries a card's text exactly, escaped by JSON itself")
        .context(|| format!("{}\n{}", outputs[1], outputs[3]))
        .gap(GapKind::WrongJsonLine);
}
