//! Reply limits at their boundary (contract §7 B3), where an off-by-one hides: the last valid parent
//! index is accepted (the index equal to the number of tasks, one past it, is rejected in
//! `hostile_replies`), and a fan-out of exactly the child cap is applied while one child more is
//! rejected whole.

use fixtures::rows::Event;
use judge::prelude::*;
use rstest::rstest;

use crate::{decompose_card, graph_not_applied};

/// The reference's default `kanban.decompose_max_children`.
const DEFAULT_MAX_CHILDREN: u32 = 8;

/// A child cap chosen below the default, so a target that ignores the setting is seen.
const CONFIGURED_MAX_CHILDREN: u32 = 3;

#[rstest]
fn last_valid_parent_index_is_accepted(board: Board) {
    let aux = board.aux();
    let root = board.create("three steps, the first waits for the last", &["--triage"]);
    // Index 2 of 3 tasks: the largest index that names a task.
    aux.reply(&root, Reply::graph(3, &[(0, &[2])]));

    let run = decompose_card(&board, &root);

    bound("requests for one decompose", aux.billed_for(&root))
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    let rows = board.rows();
    let children = rows
        .events(&root, "decomposed")
        .first()
        .map(Event::child_ids)
        .unwrap_or_default();
    Findings::new()
        .equal("ok", &run.ok(), &Some(true))
        .equal("children", &children.len(), &3)
        .that(
            children.len() == 3 && rows.has_link(&children[2], &children[0]),
            || {
                "the edge to the last index (child 0 waits for child 2) was not persisted"
                    .to_owned()
            },
        )
        .equal("links (3 child->root, 1 sibling)", &rows.links().len(), &4)
        .verdict("a parent index of the last task is applied")
        .context(|| format!("{}\n{}", run.output, board.diag(&root)))
        .gap(GapKind::ReplyNotApplied);
}

/// How many children a fan-out has, relative to the cap in force.
#[derive(Debug, Clone, Copy)]
enum Size {
    /// Exactly the cap: applied.
    AtCap,
    /// One over: rejected whole.
    OverCap,
}

#[rstest]
#[case::at_default_cap(None, Size::AtCap)]
#[case::over_default_cap(None, Size::OverCap)]
#[case::at_configured_cap(Some(CONFIGURED_MAX_CHILDREN), Size::AtCap)]
#[case::over_configured_cap(Some(CONFIGURED_MAX_CHILDREN), Size::OverCap)]
fn fanout_at_the_child_cap_is_applied_and_one_more_is_rejected_whole(
    #[case] configured: Option<u32>,
    #[case] size: Size,
) {
    let config = match configured {
        Some(cap) => Config::plain().max_children(cap),
        None => Config::plain(),
    };
    let board = Board::new(config);
    let aux = board.aux();
    let cap = configured.unwrap_or(DEFAULT_MAX_CHILDREN) as usize;
    let children = match size {
        Size::AtCap => cap,
        Size::OverCap => cap + 1,
    };
    let root = board.create(
        &format!("a card that splits into {children} parts"),
        &["--triage", "--body", "the original body"],
    );
    let before = board.rows().task(&root);
    aux.reply(&root, Reply::graph(children, &[]));

    let run = decompose_card(&board, &root);

    bound("requests for one decompose", aux.billed_for(&root))
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    let cap_words = || {
        format!(
            "{children} children; {}",
            board.setting(Setting::MaxChildren)
        )
    };
    match size {
        Size::AtCap => {
            let rows = board.rows();
            Findings::new()
                .equal("ok", &run.ok(), &Some(true))
                .equal("children", &rows.children_of(&root).len(), &children)
                .equal("task rows", &board.task_count(), &(children + 1))
                .equal(
                    "decomposed events",
                    &rows.events(&root, "decomposed").len(),
                    &1,
                )
                .verdict("a fan-out of exactly the child cap is applied")
                .note(cap_words)
                .context(|| format!("{}\n{}", run.output, board.diag(&root)))
                .gap(GapKind::ReplyNotApplied);
        }
        Size::OverCap => {
            graph_not_applied(&board, &before, &run)
                .verdict("a fan-out one child over the cap is rejected whole")
                .note(cap_words)
                .context(|| format!("{}\n{}", run.output, board.diag(&root)))
                .gap(GapKind::UnboundedFanout);
            let reason = run.line()["reason"].as_str().unwrap_or_default();
            holds(
                "the rejection names the child cap",
                reason.contains(&cap.to_string()) || run.output.stderr.contains(&cap.to_string()),
            )
            .note(|| format!("reason {reason:?}"))
            .context(|| run.output.to_string())
            .gap(GapKind::UnclearRefusal);
        }
    }
}
