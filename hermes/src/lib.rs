//! `hermes`: the reference kanban board, CLI and gateway.
//!
//! One module per concern; a card flows `cli` → `store` (rows) → `dispatch` (when it is due)
//! → `decompose` (one bounded attempt, through `aux_client`) → `store` (the graph, atomically).

pub mod aux_client;
pub mod cli;
pub mod clock;
pub mod config;
pub mod decompose;
pub mod dispatch;
pub mod store;
