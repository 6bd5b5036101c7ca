//! Billing bounds of auto-decompose, proven through a real `gateway run` process.
//!
//! Every test arranges a board and the fake provider's replies, runs the target's gateway, proves
//! that dispatcher ticks happened (probe cards decomposed one after another, gathered in a
//! `Window`), and then states each bound once, as a verdict on what the provider billed and on
//! the rows in `kanban.db`. Verdicts never come from log wording.
//!
//! One file per concern; `support` holds the plumbing the tests share. Tests of features only the
//! reference has live in `reference_only`, which the `external` nextest profile leaves out. Tests
//! that run an upstream hermes-agent gateway beside the target's live in `with_upstream`: only the
//! `with-upstream` profile runs them (they need upstream installed, see `fixtures::upstream`).

mod budget;
mod claims;
mod config_extremes;
mod config_file;
mod decomposer;
mod explore;
mod fairness;
mod faults;
mod hang;
mod holds;
mod kill_switch;
mod limits;
mod one_file;
mod provider_wide;
mod reference_only;
mod refusals;
mod restarts;
mod seed;
mod singleton;
mod stalls;
mod support;
mod timing;
mod with_upstream;
mod workers;
mod world;

/// K: dispatcher ticks proven to have run while a card that cannot be decomposed sits in triage.
pub const PROBE_TICKS: usize = 6;

/// A generous bound on the bills of one never-decomposable card, ever (and the reference's
/// default `kanban.decompose_max_attempts`).
pub const MAX_FAILED_ATTEMPTS: usize = 3;

/// The reference's default `kanban.decompose_max_children`: a fan-out with more children is
/// rejected whole.
pub const DEFAULT_MAX_CHILDREN: usize = 8;

/// How many paid calls a provider-wide refusal (401/402/403/429) may cost, however many cards
/// are waiting: the one call that discovered it.
pub const PROVIDER_FAULT_BOUND: usize = 1;

/// The first backoff, in seconds, of tests that prove "at most N, ever": short, so that a target
/// that reads it (the reference) spends its whole budget inside the window, where a broken
/// budget shows. Other targets back off as they do, and the window says what it proved.
pub const SHORT_BACKOFF: f64 = 0.05;
