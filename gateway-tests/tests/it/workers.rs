//! The spawn bounds (contract §7b, S1–S5, S7–S9), proven through a real gateway that spawns
//! workers: the target's own (started by the real gateway, each a paid session on the fake
//! provider) or the suite's stand-in through `$HERMES_BIN`, for what a real worker cannot be
//! driven into (an exit code, a SIGKILL, SIGTERM ignored, a grandchild, running on).
//!
//! Each verdict comes from the fake provider's record (a session's first request is one spawn),
//! the census of worker processes (`fixtures::workers::census`: live workers per card at any
//! moment, every one ended when the test ends) and `kanban.db` (`task_runs`, events); never from
//! a log's wording. Every test here sets `max_spawn` itself; every other test keeps 0. The
//! reference's own promises (its ledger, `usage`, `unpark`) are `reference_only::workers`'.

mod backoff;
mod budget;
mod cap;
mod holds;
mod one_per_card;
mod pause;
mod reaping;
mod visible;

use std::time::Duration;

use judge::prelude::*;

/// The spawn budget every worker test sets (`kanban.failure_limit`, which every target reads).
pub const FAILURE_LIMIT: usize = 2;

/// The spawn backoff of tests that need a card's budget spent inside the window: short, so that
/// a target that reads it (the reference) spends it within a second; other targets back off as
/// they do, and the window says what it proved.
pub const SHORT_SPAWN_BACKOFF: f64 = 0.2;

/// A gateway that spawns up to `max_spawn` workers at once, with the spawn budget
/// [`FAILURE_LIMIT`] and a short spawn backoff.
pub fn worker_config(max_spawn: u32) -> Config {
    Config::workers(max_spawn).spawn_backoff(SHORT_SPAWN_BACKOFF)
}

/// A ready card assigned to `default`, the profile every board has (upstream spawns no card
/// whose assignee names no profile).
pub fn ready_card(board: &Board, title: &str) -> String {
    board.create(title, &["--assignee", "default"])
}

/// Who works a card in a test: a stand-in behaving so, or the target's own worker answered by a
/// script at the provider.
#[derive(Debug, Clone)]
pub enum Worker {
    /// The suite's stand-in (`$HERMES_BIN`).
    StandIn(Behaviour),
    /// The target's own worker, its turns answered by this script.
    Real(Vec<Reply>),
}

impl Worker {
    /// Makes `card`'s workers this one. A board with any stand-in gets its stand-ins before its
    /// gateway starts; its other cards get the target's own workers.
    pub fn arrange(&self, board: &Board, card: &str) {
        match self {
            Worker::StandIn(behaviour) => board.stand_ins(Behaviour::Real).set(card, *behaviour),
            Worker::Real(script) => board.aux().worker_reply(card, script.clone()),
        }
    }
}

/// How long a worker may take from its card's claim to its first request on this target: a
/// tick, and a process start-up (a CLI call's, measured), twice over for load that changes.
pub fn spawn_span(board: &Board) -> Duration {
    let pace = fixtures::pace::pace();
    (board.target().tick_interval() + pace.cli_call()).saturating_mul(2)
}

/// The ticks a worker test proves after its arrangement, with probe cards.
pub const PROBE_TICKS: usize = 3;
