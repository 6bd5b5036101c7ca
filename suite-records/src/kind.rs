//! The ways a verdict can fail: a listed gap excuses only a failure of its own kind, and each
//! kind belongs to one promise of the contract (`docs/contract.md`). Gap lists name kinds, the
//! verdicts record them, the report groups by them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The ways a verdict can fail. A listed gap excuses only a failure of its own kind, so a test
/// that starts failing for a *different* reason is never excused. Each kind belongs to one
/// promise ([`GapKind::promise`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GapKind {
    // B1: a failing card's budget
    /// A card whose decomposition keeps failing is paid for past its budget.
    RebilledEveryTick,
    /// Attempt counts were lost across a restart, so billing started over.
    BudgetNotPersisted,
    /// A call still in flight was sent again.
    InFlightRebilled,
    /// A card that cannot be decomposed (unknown, not in triage, archived) cost a request.
    BilledForNothing,
    // B2: backoff and fairness
    /// A fresh card never got a per-tick slot because failing cards took them.
    StarvedCard,
    /// A card in backoff was attempted again before its time.
    BackoffIgnored,
    /// More cards were attempted at once than `auto_decompose_per_tick` allows.
    PerTickExceeded,
    /// A card whose row another tool wrote with text that is not text (invalid UTF-8, a BLOB)
    /// blocked other cards, a sweep or the board's listing.
    UnreadableCardBlocks,
    // B3: whole-reply validation
    /// A reply that must be rejected whole (a bad parent index, …) was applied in part or full.
    InvalidGraphApplied,
    /// A fan-out past the child bound was applied.
    UnboundedFanout,
    /// A failed decomposition wrote rows (children, links, a `decomposed` event).
    FailureWroteRows,
    // B4: applied once, atomically
    /// A decomposed card was paid for again.
    RebilledAfterDecompose,
    /// Two graphs were applied to one card.
    DoubleApply,
    /// A crash left part of a graph behind.
    PartialGraph,
    // B5: provider-wide pauses
    /// A provider fault (401/402/403) did not pause auto-decompose board-wide.
    ProviderFaultNotPaused,
    /// A provider's `Retry-After` was not honoured.
    RetryAfterIgnored,
    /// Tries within one attempt went out without the spaced, growing delay between them.
    RetriesNotSpaced,
    /// Waiting cards were not decomposed once the pause ended.
    PauseNeverEnded,
    /// A provider that could not be reached spent cards' budgets (it costs nothing).
    UnreachableCharged,
    // B6
    /// More paid calls in an hour than the board-wide ceiling.
    HourlyCeilingExceeded,
    // B7
    /// An automatic path billed a human hold (prior runs, a typed block, an opt-out).
    HoldDecomposed,
    // B8
    /// The dispatcher stopped ticking (a hung call blocks the loop, a first bill never came).
    DispatcherBlocked,
    /// An oversized or otherwise hostile reply was read and applied.
    HostileReplyApplied,
    /// A call was not ended at the configured call timeout.
    CallTimeoutIgnored,
    // B9
    /// A paid call is missing from (or misreported by) the ledger and `usage`.
    CallNotVisible,
    /// An operator's recovery verb (`unpark`, `resume`, `auto-decompose ID on`) did not take
    /// effect: the card or the board was not billed again as the verb promised.
    RecoveryFailed,
    // cli: the CLI contract (contract §4)
    /// A command ended with another exit code than the documented one.
    WrongExitCode,
    /// The `--json` line lacks a documented key or has one of the wrong type.
    WrongJsonLine,
    /// One `kanban decompose ID` made other than exactly one request.
    NotOneRequest,
    /// A refusal did not say why, or changed rows.
    UnclearRefusal,
    /// A config key no implementation defines was ignored without a word, or a key upstream
    /// defines was warned about.
    SilentMisconfiguration,
    /// A control character (ESC, BEL, a C1 control, a bidirectional override) from a card's or a
    /// provider's text reached stdout, stderr or a log raw.
    RawControlOutput,
    /// An API key or a URL's password appeared in an output or on the board.
    SecretShown,
    /// A provider's text was stored on the board past its cap, or more than once.
    StoredTextUnbounded,
    /// A process panicked, printed a traceback, or ran past the bound its work allows (a CLI
    /// call the explorer ran, a board it could not arrange).
    ProcessCrashed,
    // reply: applying a valid reply (contract §5)
    /// A valid reply was not applied as the contract says.
    ReplyNotApplied,
    /// A decompose call did not carry what `auxiliary.kanban_decomposer` says (its model, its
    /// key, its extra body fields).
    DecomposerSettingIgnored,
    // gateway: the process (contract §6)
    /// The gateway did not stop within the grace period after SIGTERM.
    SlowShutdown,
    /// The gateway process exited while it was supposed to be running. Never listable.
    GatewayExited,
    /// A second gateway on the same board ran (or billed).
    SecondDispatcher,
    /// Reading `config.yaml` (a FIFO, a device, a huge file) blocked the gateway or cost it
    /// unbounded memory or CPU.
    UnboundedConfigRead,
    // switch
    /// `kanban.auto_decompose: false` did not stop paid calls (or `true` did not resume them).
    KillSwitchIgnored,
    // S1–S9: the spawn half (contract §7b)
    /// A card whose workers keep ending without completing was spawned past its spawn budget
    /// (or a run's turns past `agent.max_turns`).
    RespawnedPastBudget,
    /// Two workers of one card were live at once.
    StackedWorkers,
    /// A card was spawned again before its spawn backoff, or a failing card took a fresh one's
    /// place.
    SpawnBackoffIgnored,
    /// A worker's refusal (401/402/403/429, an exit 75 or 78) did not pause every automatic call
    /// board-wide: spawns, workers' requests and decompose calls went on.
    WorkerRefusalNotPaused,
    /// More live workers than `max_spawn` (or any where it is 0), from some path or moment.
    SpawnCapExceeded,
    /// A worker (or a descendant) outlived the gateway's stop, or made a request after it.
    WorkerOutlivedStop,
    /// After a gateway crash, the next gateway neither adopted nor ended its orphans, or charged
    /// them for having been found.
    OrphanNotAdopted,
    /// A card a worker handed to a person was spawned or decomposed again with no person's
    /// action.
    HandOffRespawned,
    /// A spawn or a worker request is missing from the board's rows (runs, events, ledger,
    /// `usage`).
    SpawnNotVisible,
    // the judge's own: invariants over a whole run
    /// A decompose request broke the call's contract: its model, `n`, `stream`, tools, the
    /// `Task id:` line first, its extra body fields or its key differ from what the config says.
    RequestOffContract,
    /// A link joins cards no decomposition and no person joined.
    StrayLink,
    /// A parked card has no `decompose_parked` event, or not its one WARN.
    ParkUnreported,
    /// An operator's verb about one card (unpark, auto-decompose, archive) changed another.
    VerbOverreached,
    /// A row is not readable in upstream's types and units (seconds in upstream's columns,
    /// JSON payloads, known statuses).
    RowsUnreadable,
}

impl GapKind {
    /// The promise this kind of failure breaks: `B1`…`B9`, `S1`…`S9` (the spawn bounds, §7b),
    /// `cli` (contract §4), `gateway` (§6), `reply` (§5) or `switch` (the kill switch).
    pub fn promise(self) -> &'static str {
        use GapKind::*;
        match self {
            RebilledEveryTick | BudgetNotPersisted | InFlightRebilled | BilledForNothing => "B1",
            StarvedCard | BackoffIgnored | PerTickExceeded | UnreadableCardBlocks => "B2",
            InvalidGraphApplied | UnboundedFanout | FailureWroteRows => "B3",
            RebilledAfterDecompose | DoubleApply | PartialGraph => "B4",
            ProviderFaultNotPaused
            | RetryAfterIgnored
            | RetriesNotSpaced
            | PauseNeverEnded
            | UnreachableCharged => "B5",
            HourlyCeilingExceeded => "B6",
            HoldDecomposed => "B7",
            DispatcherBlocked | HostileReplyApplied | CallTimeoutIgnored => "B8",
            CallNotVisible | RecoveryFailed => "B9",
            WrongExitCode
            | WrongJsonLine
            | NotOneRequest
            | UnclearRefusal
            | SilentMisconfiguration
            | RawControlOutput
            | SecretShown
            | StoredTextUnbounded
            | ProcessCrashed => "cli",
            ReplyNotApplied | DecomposerSettingIgnored => "reply",
            SlowShutdown | GatewayExited | SecondDispatcher | UnboundedConfigRead => "gateway",
            KillSwitchIgnored => "switch",
            RequestOffContract => "reply",
            StrayLink => "B3",
            ParkUnreported => "B9",
            VerbOverreached => "cli",
            RowsUnreadable => "board",
            RespawnedPastBudget => "S1",
            StackedWorkers => "S2",
            SpawnBackoffIgnored => "S3",
            WorkerRefusalNotPaused => "S4",
            SpawnCapExceeded => "S5",
            WorkerOutlivedStop | OrphanNotAdopted => "S7",
            HandOffRespawned => "S8",
            SpawnNotVisible => "S9",
        }
    }

    /// Whether a gap list may name this kind: a gateway that exits under the test is never a
    /// documented gap.
    pub fn listable(self) -> bool {
        self != GapKind::GatewayExited
    }
}

impl fmt::Display for GapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
