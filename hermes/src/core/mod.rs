//! The floor every other module stands on: plain types and pure rules, no I/O and no imports
//! from the rest of the crate.
//!
//! What a decompose reply asks for ([`Plan`]), who asked for an attempt ([`Origin`]), why one was
//! not made ([`BeginRefusal`]), which failures concern the whole provider ([`ProviderFault`]), how
//! long a card or the board waits afterwards ([`Backoff`]), how many attempts a card gets
//! ([`CardBudget`]), how long one attempt may go on and so how long it claims its card
//! ([`AttemptBudget`]), how one attempt ended ([`AttemptOutcome`]) and how each of its requests
//! did ([`LedgerOutcome`]); and the one state machine every change to a card's attempts,
//! schedule and park goes through ([`CardRules`], in [`card`]); and its twin for workers, every
//! change to a card's spawn budget, backoff and park and where a run's end sends the card
//! ([`SpawnRules`], in [`spawn`]).

pub mod backoff;
pub mod budget;
pub mod card;
pub mod error;
pub mod extra_body;
pub mod fault;
pub mod origin;
pub mod outcome;
pub mod plan;
pub mod redact;
pub mod refusal;
pub mod spawn;
pub mod text;
pub mod time;

pub use backoff::{Backoff, MAX_BACKOFF};
pub use budget::{AttemptBudget, CardBudget, RetryDelay};
pub use card::{CardRules, DecomposeState, ParkCause};
pub use error::error_chain;
pub use fault::{
    describe_retry_after, paused_for, rate_limit_pause, unreachable_pause, FaultPause,
    ProviderFault, UnreachablePause, DEFAULT_RATE_LIMIT_PAUSE, MAX_RETRY_AFTER, MIN_RETRY_AFTER,
    UNREACHABLE_MIN_PAUSE,
};
pub use origin::Origin;
pub use outcome::{Applied, AttemptOutcome, Half, LedgerOutcome};
pub use plan::{ChildSpec, Plan};
pub use refusal::{ceiling_reached, BeginRefusal};
pub use spawn::{
    BlockKind, CardMove, RunOutcome, SpawnBudget, SpawnRefusal, SpawnRules, SpawnState,
    EXIT_PROVIDER_REFUSED, EXIT_RATE_LIMITED,
};
