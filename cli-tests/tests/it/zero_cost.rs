//! Cards that must cost nothing: `kanban decompose ID` on an unknown id, a card not in triage or
//! an archived card sends no request, changes no row, and says clearly why.

use fixtures::snapshot::BoardRows;
use fixtures::verdict::case_label;
use judge::prelude::*;
use regex::Regex;
use rstest::rstest;

use crate::{decompose, judge_exit_code};

/// A card `decompose` must refuse before paying anything.
#[derive(Debug, Clone, Copy)]
enum Refused {
    /// An id no card has.
    UnknownId,
    /// A card created without `--triage` (so in todo/ready).
    NotInTriage,
    /// A triage card that was archived.
    Archived,
}

impl Refused {
    /// Creates the card (or makes up the id) and returns the id.
    fn arrange(self, board: &Board) -> String {
        match self {
            Refused::UnknownId => "t_0badc0de".to_owned(),
            Refused::NotInTriage => board.create("already specified", &[]),
            Refused::Archived => {
                let id = board.create("dropped idea", &["--triage"]);
                board.cli(["kanban", "archive", id.as_str()]);
                id
            }
        }
    }

    /// What the message must say, every pattern.
    fn message_patterns(self) -> &'static [&'static str] {
        match self {
            Refused::UnknownId => &[r"(?i)(no such|unknown) task"],
            Refused::NotInTriage => &[r"(?i)triage", r"(?i)\b(todo|ready)\b"],
            Refused::Archived => &[r"(?i)archived"],
        }
    }
}

#[rstest]
#[case::unknown_id(Refused::UnknownId)]
#[case::not_in_triage(Refused::NotInTriage)]
#[case::archived(Refused::Archived)]
fn cards_that_cannot_be_decomposed_cost_nothing(#[case] refused: Refused, board: Board) {
    let aux = board.aux();
    let bystander = board.create("a bystander in triage", &["--triage"]);
    let card = refused.arrange(&board);
    let rows_before = BoardRows::capture(&board, &[&card, &bystander]);

    let plain = board.cli_unchecked(["kanban", "decompose", card.as_str()]);
    crate::assert_no_crash(&plain);
    let json = decompose(&board, &[&card]);

    bound("requests for a card that cannot be decomposed", aux.bills())
        .at_most(0)
        .context(|| format!("{plain}\n{}", json.output))
        .gap(GapKind::BilledForNothing);
    let rows_after = BoardRows::capture(&board, &[&card, &bystander]);
    let message = format!("{}\n{}", plain.stdout, plain.stderr);
    let mut findings = Findings::new()
        .that(rows_after == rows_before, || {
            "the refused decompose changed rows".to_owned()
        })
        .that(
            !matches!(refused, Refused::UnknownId) || message.contains(&card),
            || "the message does not name the id it could not find".to_owned(),
        );
    for pattern in refused.message_patterns() {
        let regex = Regex::new(pattern).expect("valid pattern");
        findings = findings.that(regex.is_match(&message), || {
            format!("the message does not say why ({pattern})")
        });
    }
    for line in &json.lines {
        findings = findings.that(line["ok"] == false, || {
            format!("a refusal is not ok: {line}")
        });
    }
    findings
        .verdict("the refusal changes no row and says why")
        .context(|| format!("{plain}\n{}", json.output))
        .gap(GapKind::UnclearRefusal);
    judge_exit_code("`kanban decompose ID` of a refused card", &plain, 1);
    judge_exit_code(
        "`kanban decompose ID --json` of a refused card",
        &json.output,
        1,
    );
    let label = case_label().unwrap_or_default();
    assert_rows_snapshot!(
        format!("zero_cost_{label}"),
        format!("{refused:?}: `kanban decompose ID` refused before any request; no row changed"),
        rows_after
    );
}
