//! Plain records of the conformance suite, shared by every crate above them: the fake server
//! writes the request [`journal`], the fixtures write a run's [`history`] and its [`window`],
//! the judge and the explorer read them all. Nothing here starts a process, opens a socket or
//! reads a board: a record is data, and this crate imports nothing of the suite's own.
//!
//! | module | record |
//! |---|---|
//! | [`clock`] | a moment on the monotonic clock and the wall clock at once |
//! | [`journal`] | every request a fake server received, and what it observed of its answer |
//! | [`history`] | what a test did to its board: CLI calls, gateways, configs, rows as another tool wrote them |
//! | [`stop`] | how a guarded process's stop went |
//! | [`window`] | the span a gateway test's counts cover, and why it was cut short |
//! | [`kind`] | the ways a verdict can fail, each belonging to one promise of the contract |
//! | [`verdict`] | the verdict records `cargo conformance` reports from, and the test keys they are keyed by |

#![warn(missing_docs)]

pub mod clock;
pub mod history;
pub mod journal;
pub mod kind;
pub mod stop;
pub mod verdict;
pub mod window;
