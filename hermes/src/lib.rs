//! `hermes`: the reference kanban board, CLI and gateway.
//!
//! One floor per concern, each using only the floors below it:
//!
//! - `core`: I/O-free types and rules (plan, origin, refusal, provider fault, backoff, outcome);
//! - `store`: the board in SQLite (an attempt, its failure and a provider pause are recorded in
//!   one transaction each);
//! - `aux_client`: the HTTP call to the provider;
//! - `decompose`: prompt, reply parsing, one bounded attempt;
//! - `auto`: the one automatic step (sync, guards, due cards, attempts) that the gateway tick
//!   and `kanban decompose --all` share;
//! - `worker`: one worker's agent loop on the main model with the kanban tools (`hermes chat`);
//! - `dispatch`: the gateway's loop, lock and signals, and its workers; `cli`: one file per verb;
//! - `output`: what leaves the process as text (redacted, escaped).
//!
//! `tools/tests/layers.rs` holds the crate to this: no module imports one that imports it back,
//! among the floors or among the rooms of one.
//!
//! Comments cite the contract by section (`contract §7 B5`): `docs/contract.md`.

pub mod auto;
pub mod aux_client;
pub mod cli;
pub mod clock;
pub mod config;
pub mod core;
pub mod decompose;
pub mod dispatch;
pub mod liveness;
pub mod output;
pub mod process;
pub mod proxy;
pub mod store;
pub mod worker;
