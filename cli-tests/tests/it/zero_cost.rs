//! Cards that must cost nothing: `kanban decompose ID` on an unknown id, a card not in triage or
//! an archived card sends no request, changes no row, and says clearly why.

use fixtures::observe;
use fixtures::prelude::*;
use fixtures::snapshot::BoardRows;
use regex::Regex;
use rstest::rstest;

use crate::{decompose, exit_code_is};

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
#[case::unknown_id("zero_cost_unknown_id", Refused::UnknownId)]
#[case::not_in_triage("zero_cost_not_in_triage", Refused::NotInTriage)]
#[case::archived("zero_cost_archived", Refused::Archived)]
fn cards_that_cannot_be_decomposed_cost_nothing(
    #[case] name: &str,
    #[case] refused: Refused,
    board: Board,
) {
    let aux = board.aux();
    let bystander = board.create("a bystander in triage", &["--triage"]);
    let card = refused.arrange(&board);
    let rows_before = BoardRows::capture(&board, &[&card, &bystander]);

    let plain = board.cli_unchecked(["kanban", "decompose", card.as_str()]);
    crate::assert_no_crash(&plain);
    let json = decompose(&board, &[&card]);

    let bills = aux.bills();
    observe::record("bills", bills, Some(0));
    assert_eq!(
        bills, 0,
        "a card that cannot be decomposed must cost nothing\n{plain}\n{}",
        json.output
    );
    let rows_after = BoardRows::capture(&board, &[&card, &bystander]);
    assert_eq!(
        rows_after, rows_before,
        "a refused decompose changes no row"
    );
    let message = format!("{}\n{}", plain.stdout, plain.stderr);
    if matches!(refused, Refused::UnknownId) {
        assert!(
            message.contains(&card),
            "the message names the id it could not find\n{plain}"
        );
    }
    for pattern in refused.message_patterns() {
        let regex = Regex::new(pattern).expect("valid pattern");
        assert!(
            regex.is_match(&message),
            "the message says why ({pattern}):\n{plain}"
        );
    }
    for line in &json.lines {
        assert_eq!(line["ok"], false, "a refusal is not ok: {line}");
    }
    known_gate("decompose_failure_exit_code", || {
        exit_code_is(&plain, &format!("`kanban decompose` of {name}"), 1)?;
        exit_code_is(
            &json.output,
            &format!("`kanban decompose --json` of {name}"),
            1,
        )
    });
    assert_rows_snapshot!(
        name,
        format!("{refused:?}: `kanban decompose ID` refused before any request; no row changed"),
        rows_after
    );
}
