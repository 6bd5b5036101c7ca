//! After CLI verbs, `kanban.db` alone is the whole board: a copy of that one file (a backup,
//! rsync, a sync tool) holds every row the verbs wrote, with no `-wal` beside it.

use fixtures::snapshot::BoardRows;
use judge::prelude::*;
use rstest::rstest;

/// Cards a scenario of CLI verbs leaves: created, linked, archived, decomposed, failed.
pub struct Verbs {
    pub decomposed: String,
    pub failed: String,
    pub watched: Vec<String>,
}

/// Runs one of each verb that writes on `board`.
pub fn run_verbs(board: &Board) -> Verbs {
    let aux = board.aux();
    let decomposed = board.create("a feature to split", &["--triage"]);
    aux.reply(&decomposed, Reply::graph(3, &[(1, &[0])]));
    let failed = board.create("an idea nobody can split", &["--triage"]);
    aux.reply(&failed, Reply::malformed());
    let parent = board.create("a parent", &[]);
    let child = board.create("a child", &[]);
    board.cli(["kanban", "link", parent.as_str(), child.as_str()]);
    let archived = board.create("done with", &[]);
    board.cli(["kanban", "archive", archived.as_str()]);
    for card in [&decomposed, &failed] {
        // Judged elsewhere; here they only write.
        let _ = board.cli_unchecked(["kanban", "decompose", card.as_str(), "--json"]);
    }
    Verbs {
        watched: vec![decomposed.clone(), failed.clone(), parent, child, archived],
        decomposed,
        failed,
    }
}

#[rstest]
fn a_copy_of_kanban_db_alone_after_cli_verbs_holds_every_row(board: Board) {
    let verbs = run_verbs(&board);
    let watched: Vec<&str> = verbs.watched.iter().map(String::as_str).collect();
    let original = BoardRows::capture(&board, &watched);
    let copy = Board::new(Config::plain());
    copy.restore_board_file_from(&board);
    let copied = BoardRows::capture(&copy, &watched);

    Findings::new()
        .equal("tasks in the copy", &copied.tasks, &original.tasks)
        .equal(
            "links in the copy",
            &copied.task_links,
            &original.task_links,
        )
        .equal(
            "events of the cards in the copy",
            &copied.events,
            &original.events,
        )
        .that(copy.rows().status(&verbs.decomposed) != "triage", || {
            "the decomposition is in the copy".to_owned()
        })
        .verdict("a copy of kanban.db alone after CLI verbs holds every row")
        .gap(GapKind::BudgetNotPersisted);
}
