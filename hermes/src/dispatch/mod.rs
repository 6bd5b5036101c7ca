//! `hermes gateway run`: the long-running process whose embedded dispatcher auto-decomposes
//! triage cards, with every billing bound enforced.
//!
//! The tick loop never waits for a provider: attempts run as tasks beside it (B8), at most
//! `auto_decompose_per_tick` in flight, one per card. Each tick re-reads `config.yaml` (the kill
//! switch), checks that the board file is still the one it opened, closes attempts abandoned by
//! dead processes, and runs the automatic step of `auto`: the board-wide guards kept in the
//! board itself so they survive restarts (provider pause B5, hourly ceiling B6), then due cards
//! from an indexed query that never returns a card in backoff, parked, claimed or held (B1, B2,
//! B7). Logging never stops any of it: a condition is reported once until it clears.

mod lock;
mod notice;
pub mod spawn;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;
use tracing::{debug, info, warn};

pub use lock::{
    dispatcher_locks_held, DispatchGate, LockError, LockProbe, SingletonLock, UpstreamLockState,
    UpstreamLocks,
};
pub(crate) use lock::{may_access, may_create};
use notice::Notice;
use spawn::Workers;

use crate::auto::{self, Picked};
use crate::config::{Config, ConfigError, ConfigStamp, Home, WarningLog};
use crate::core::time::secs_between;
use crate::core::{
    ceiling_reached, error_chain, paused_for, AttemptOutcome, BeginRefusal, Origin, ParkCause,
};
use crate::decompose::attempt::{
    AttemptContext, AttemptError, AttemptSetupError, Billing, SHUTDOWN_ANSWER_WAIT,
};
use crate::decompose::roster;
use crate::store::{now_ms, BoardError, BoardFile, BoardHandle, Store};

/// How long SIGTERM waits for attempts in flight before the process exits anyway: a request on
/// its way gets [`SHUTDOWN_ANSWER_WAIT`] to answer, then its end is recorded.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(4);
const _: () = assert!(SHUTDOWN_ANSWER_WAIT.as_secs() < SHUTDOWN_GRACE.as_secs());

/// While the provider's health is unknown (at start, after a pause) only one request is sent at
/// a time, so a provider-wide refusal costs one call, not one per card (B5). A request that has
/// been in flight this long without a refusal is taken as proof the provider is answering: a
/// hung call must not hold the other cards back (B8).
///
/// The bound this gives: a refusal (401/402/403/429) that arrives within the window costs that
/// one call. One that arrives later costs at most the calls in flight when it lands, which is at
/// most `auto_decompose_per_tick` (and [`MAX_IN_FLIGHT`]): the pause is recorded in the same
/// transaction as the failure, every automatic request checks it before it leaves (retries
/// included), and the refusals of calls that were already in flight do not extend it.
const PROBE_WINDOW: Duration = Duration::from_secs(2);

/// The most attempts in flight at once, whatever `auto_decompose_per_tick` says: each holds a
/// board connection and a socket, and a per-tick value in the billions must not exhaust either.
const MAX_IN_FLIGHT: usize = 256;

/// How long a tick waits for `config.yaml` to be read. The read runs on the blocking pool, off
/// the loop that handles signals; a file on a stalled filesystem costs a tick this much at most
/// (a signal ends the tick at once), and the gateway keeps its last good config meanwhile.
const CONFIG_READ_TIMEOUT: Duration = Duration::from_millis(300);

/// How long the gateway's last act, copying the WAL into `kanban.db`, waits for other
/// processes' transactions: SIGTERM must end the gateway within 5 s, shutdown grace included.
const EXIT_CHECKPOINT_WAIT: Duration = Duration::from_millis(300);
/// Beyond [`EXIT_CHECKPOINT_WAIT`], how long the shutdown waits for the board to take that
/// checkpoint at all (another call of the gateway may still hold it, stuck on a locked file).
const EXIT_CHECKPOINT_SLACK: Duration = Duration::from_millis(100);
/// How long the shutdown waits for the board's connection and the locks to close.
const CLOSE_WAIT: Duration = Duration::from_millis(200);
/// The contract's bound on a stop (§6): from SIGTERM or SIGINT to the process's exit, the
/// runtime's own shutdown (`cli::gateway`) included.
pub const STOP_BOUND: Duration = Duration::from_secs(5);

/// The runtime's wait for its last blocking tasks once the gateway stopped (`cli::gateway`).
pub const RUNTIME_SHUTDOWN_WAIT: Duration = Duration::from_millis(200);

// Every wait between the signal and the exit, each bounded on its own: within the contract's
// bound with room for the process to end.
const _: () = assert!(
    SHUTDOWN_GRACE.as_millis()
        + EXIT_CHECKPOINT_WAIT.as_millis()
        + EXIT_CHECKPOINT_SLACK.as_millis()
        + CLOSE_WAIT.as_millis()
        + RUNTIME_SHUTDOWN_WAIT.as_millis()
        < STOP_BOUND.as_millis()
);
// Workers are stopped beside the attempts in flight, within the same grace (S7): their runs'
// ends recorded first (each wait bounded), then their groups signalled and given their time.
const _: () = assert!(
    spawn::RECORD_WAIT.as_millis() + spawn::STOP_GRACE.as_millis() + spawn::KILL_WAIT.as_millis()
        <= SHUTDOWN_GRACE.as_millis()
);

/// Why the gateway could not run.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Board(#[from] BoardError),
    #[error("cannot install the {0} handler: {1}")]
    Signal(&'static str, std::io::Error),
}

/// Runs the gateway in the foreground until SIGTERM or SIGINT.
pub async fn run_gateway(home: Home) -> Result<(), GatewayError> {
    // Taken before the read: an edit that lands in between shows as a change at the first tick.
    let config_stamp = ConfigStamp::of(&home.config_path());
    let config = Config::load(&home)?;
    let db_path = home.db_path();
    // Opening creates the board (and refuses a corrupt one) before anything else happens.
    drop(
        tokio::task::spawn_blocking({
            let db_path = db_path.clone();
            move || Store::open(&db_path)
        })
        .await
        .map_err(|e| BoardError::Join(e.to_string()))??,
    );

    // A board with more than one hard link was refused by the open above (`Store::open`), and
    // is refused again before every transaction, should a link be made later.
    let dispatching = config.kanban.dispatch_in_gateway;
    let lock = if dispatching {
        Some(SingletonLock::acquire(home.lock_dir(), &db_path)?)
    } else {
        None
    };

    let mut stop = stop_on_signals()?;

    let config = Arc::new(config);
    // Resolved before the start line, which says what the gateway bills; what resolving it has
    // to report (bad `.env` lines, no key) comes after.
    let setup = dispatching.then(|| build_context(&home, &config));
    // Printed only once the handlers are in place: a supervisor that waits for this line can
    // stop the gateway cleanly from then on.
    announce_start(&db_path, &config, setup.as_ref());
    if dispatching {
        spawn::announce(&config);
    }

    let Some(setup) = setup else {
        let signal = stopped(&mut stop).await;
        info!("{signal} received; gateway stopped");
        return Ok(());
    };
    // Even the open waits for a signal no longer than for itself (a locked or stalled board).
    let board = tokio::select! {
        biased;
        signal = stopped(&mut stop) => {
            info!("{signal} received while opening the board; gateway stopped");
            return Ok(());
        }
        board = BoardHandle::open_long_lived(&db_path) => board?,
    };
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut dispatcher = Dispatcher::new(home, config, setup, config_stamp, board, shutdown_rx);
    // At once, so that an upstream gateway starting a moment later finds them taken.
    dispatcher.upstream_locks.may_dispatch();
    let signal = dispatcher.run_until(&mut stop).await;
    info!("{signal} received; stopping");
    let _ = shutdown_tx.send(true);
    dispatcher.shut_down(lock).await;
    info!("gateway stopped");
    Ok(())
}

/// Which signal asked the gateway to stop, once one did.
type StopSignal = watch::Receiver<Option<&'static str>>;

/// Installs the SIGTERM and SIGINT handlers; the receiver says which came first. Its own task
/// waits for them, so every await of the gateway can be raced against a stop (see
/// [`stopped`]): no board work, however stuck, stands between a signal and the shutdown.
fn stop_on_signals() -> Result<StopSignal, GatewayError> {
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| GatewayError::Signal("SIGTERM", e))?;
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(|e| GatewayError::Signal("SIGINT", e))?;
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let which = tokio::select! {
            _ = sigterm.recv() => "SIGTERM",
            _ = sigint.recv() => "SIGINT",
        };
        let _ = tx.send(Some(which));
    });
    Ok(rx)
}

/// Resolves once a stop signal came (cancel-safe: a select may drop it and ask again).
async fn stopped(stop: &mut StopSignal) -> &'static str {
    match stop.wait_for(Option::is_some).await {
        Ok(signal) => signal.unwrap_or("a signal"),
        // The watcher task is gone (the runtime is shutting down): as good as a stop.
        Err(_) => "shutdown",
    }
}

/// The start line (see `docs/gateway.md`): what the gateway bills, and where.
fn announce_start(
    db_path: &std::path::Path,
    config: &Config,
    setup: Option<&Result<AttemptContext, AttemptSetupError>>,
) {
    let pid = std::process::id();
    let tick_seconds = config.kanban.dispatch_interval.as_secs_f64();
    match setup.map(|setup| setup.as_ref().map(AttemptContext::billing)) {
        Some(Ok(billing)) => info!(
            pid,
            board = %db_path.display(),
            tick_seconds,
            endpoint = billing.endpoint.as_str(),
            proxy = billing.proxy.as_str(),
            model = billing.model.as_str(),
            api_key_from = billing.key.as_str(),
            "gateway started (kanban dispatcher on)"
        ),
        Some(Err(_)) => info!(
            pid,
            board = %db_path.display(),
            tick_seconds,
            "gateway started (kanban dispatcher on; auto-decompose cannot run, see the next line)"
        ),
        None => info!(
            pid,
            board = %db_path.display(),
            tick_seconds,
            "gateway started (kanban dispatcher off: kanban.dispatch_in_gateway is false)"
        ),
    }
}

/// The longest tick period the loop uses, whatever the config says: a timer's deadline is
/// `now + period`, which must stay representable.
const MAX_TICK: Duration = Duration::from_secs(86_400);

fn new_interval(period: Duration) -> tokio::time::Interval {
    // The config guarantees a period > 0; the floor only keeps the timer valid regardless.
    let period = period.clamp(Duration::from_millis(1), MAX_TICK);
    let mut interval = tokio::time::interval(period);
    // A slow tick must not be followed by a burst of catch-up ticks.
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

/// What an attempt task hands back: its card and how the attempt went.
type AttemptResult = (String, Result<AttemptOutcome, AttemptError>);
type Joined = Result<(tokio::task::Id, AttemptResult), tokio::task::JoinError>;

/// Whether the provider has shown it is answering (see [`PROBE_WINDOW`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum ProviderHealth {
    Unknown,
    Answering,
}

struct Dispatcher {
    home: Home,
    config: Arc<Config>,
    board: BoardHandle,
    shutdown: watch::Receiver<bool>,
    context: Option<AttemptContext>,
    in_flight: JoinSet<AttemptResult>,
    in_flight_ids: HashSet<String>,
    /// The card of each attempt task, to know which one a failed task was running.
    task_cards: HashMap<tokio::task::Id, String>,
    /// When the oldest request sent while the provider's health was unknown left.
    probe_started: Option<Instant>,
    health: ProviderHealth,
    config_notice: Notice,
    switch_notice: Notice,
    gate_notice: Notice,
    setup_notice: Notice,
    /// No key for decompose calls: one WARN per endpoint, until a key is found.
    key_notice: Notice,
    /// What decompose calls bill, as last announced (the start line, or a change since).
    billing: Option<Billing>,
    /// The tick's own use of the board (reading due cards, closing abandoned attempts).
    tick_notice: Notice,
    /// Recording attempts: while it fails, no request is sent.
    record_notice: Notice,
    file_notice: Notice,
    /// Nothing was at the board's path at the last look (see `check_board_file`).
    board_gone: bool,
    /// Upstream's dispatcher locks: nothing is dispatched until they are held.
    upstream_locks: DispatchGate,
    /// Config warnings already logged (at start, or by an earlier edit).
    config_warnings: WarningLog,
    /// The version of `config.yaml` last read (good or bad): an unchanged file is not read again.
    config_stamp: Option<ConfigStamp>,
    /// A read of `config.yaml` that outlived its tick's wait; its result is taken when it ends.
    config_read: Option<tokio::task::JoinHandle<ConfigRead>>,
    /// Closing abandoned attempts (a write, so it fails while the board cannot be written).
    recover_notice: Notice,
    /// A request was sent but its end could not be recorded.
    end_notice: Notice,
    /// `-wal`/`-shm` swapped under the gateway.
    wal_files_notice: Notice,
    /// The workers this gateway started or adopted (the spawn half).
    workers: Workers,
    /// The parks this gateway has warned about, by card and the attempt that spent the budget:
    /// a park whose record was lost (a `kanban.db-wal` deleted before the commit reached
    /// `kanban.db`) is written again by recovery, and is still one park to the operator.
    announced_parks: HashSet<(String, u32)>,
}

/// What reading `config.yaml` found.
enum ConfigRead {
    /// The same version as last time: nothing was read.
    Unchanged,
    /// A new version, and what it says.
    Read {
        stamp: Option<ConfigStamp>,
        result: Box<Result<Config, ConfigError>>,
    },
}

impl ConfigRead {
    fn of(home: &Home, last: Option<ConfigStamp>) -> ConfigRead {
        let stamp = ConfigStamp::of(&home.config_path());
        if stamp == last {
            return ConfigRead::Unchanged;
        }
        ConfigRead::Read {
            stamp,
            result: Box::new(Config::load(home)),
        }
    }
}

/// The condition a config error is: one WARN each until a good config is read. A file refused
/// whole (not regular, too large) is one condition however it changes meanwhile.
fn config_condition(err: &ConfigError) -> String {
    match err {
        ConfigError::NotRegular { .. } => "config.yaml: not a regular file".to_owned(),
        ConfigError::TooLarge { .. } => "config.yaml: too large".to_owned(),
        ConfigError::Changing { .. } => "config.yaml: being written".to_owned(),
        other => other.to_string(),
    }
}

impl Dispatcher {
    fn new(
        home: Home,
        config: Arc<Config>,
        setup: Result<AttemptContext, AttemptSetupError>,
        config_stamp: Option<ConfigStamp>,
        board: BoardHandle,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let db_path = home.db_path();
        let workers = Workers::new(home.clone());
        let mut dispatcher = Self {
            home,
            config,
            board,
            shutdown,
            context: None,
            in_flight: JoinSet::new(),
            in_flight_ids: HashSet::new(),
            task_cards: HashMap::new(),
            probe_started: None,
            health: ProviderHealth::Unknown,
            config_notice: Notice::default(),
            switch_notice: Notice::default(),
            gate_notice: Notice::default(),
            setup_notice: Notice::default(),
            key_notice: Notice::default(),
            // The start line announced it.
            billing: setup.as_ref().ok().map(AttemptContext::billing),
            tick_notice: Notice::default(),
            record_notice: Notice::default(),
            file_notice: Notice::default(),
            board_gone: false,
            upstream_locks: DispatchGate::new(&db_path),
            config_warnings: WarningLog::default(),
            config_stamp,
            config_read: None,
            recover_notice: Notice::default(),
            end_notice: Notice::default(),
            wal_files_notice: Notice::default(),
            workers,
            announced_parks: HashSet::new(),
        };
        // The start-up warnings were logged with the gateway's first lines.
        let _ = dispatcher.config_warnings.fresh(&dispatcher.config);
        dispatcher.install_context(setup);
        dispatcher
    }

    /// Ticks and collects finished attempts until a stop signal comes, and says which. A tick
    /// is raced against the signal, so one stuck on the board (a locked or frozen file) never
    /// holds the stop back: it is dropped where it waits, its blocking call left to end alone.
    async fn run_until(&mut self, stop: &mut StopSignal) -> &'static str {
        // The first tick comes at once: it closes what dead processes left in flight and brings
        // cards written by other tools (upstream's CLI, an older board) under the budget.
        let mut interval = new_interval(self.config.kanban.dispatch_interval);
        loop {
            tokio::select! {
                signal = stopped(stop) => return signal,
                Some(joined) = self.in_flight.join_next_with_id(), if !self.in_flight.is_empty() => {
                    self.finished(joined).await;
                }
                _ = interval.tick() => {
                    let before = self.config.kanban.dispatch_interval;
                    tokio::select! {
                        biased;
                        signal = stopped(stop) => return signal,
                        () = self.tick() => {}
                    }
                    if self.config.kanban.dispatch_interval != before {
                        interval = new_interval(self.config.kanban.dispatch_interval);
                        interval.reset();
                    }
                }
            }
        }
    }

    /// After the stop signal, within [`STOP_BOUND`] whatever the board does. The attempts in
    /// flight get [`SHUTDOWN_GRACE`] to end: a request on its way may still answer for a moment
    /// (its graph is applied, its refusal pauses the board), otherwise it is aborted; each
    /// records its end (the attempt was counted before its request left) and none can leave half
    /// a graph, since a graph is written in one transaction or not at all. Then the WAL is folded
    /// into `kanban.db` and the board closed, each given a bounded wait: on a board that cannot
    /// be written (locked past the grace, a frozen filesystem) they are left undone, and every
    /// commit is still in the WAL.
    async fn shut_down(mut self, lock: Option<SingletonLock>) {
        // Workers stop beside the attempts (S7): their runs closed `interrupted`, their groups
        // ended, within the same grace whatever the board does (`Workers::stop_all`).
        let mut workers = std::mem::replace(&mut self.workers, Workers::new(self.home.clone()));
        let (board, config) = (self.board.clone(), self.config.clone());
        let (drained, _) = tokio::join!(
            tokio::time::timeout(SHUTDOWN_GRACE, async {
                while let Some(joined) = self.in_flight.join_next_with_id().await {
                    self.finished(joined).await;
                }
            }),
            tokio::time::timeout(SHUTDOWN_GRACE, workers.stop_all(&board, &config))
        );
        if drained.is_err() {
            warn!(
                left = self.in_flight.len(),
                "attempts still running after {}s; exiting without them",
                SHUTDOWN_GRACE.as_secs()
            );
        }
        self.fold_wal_into_board().await;
        // The board's connection closes before any lock descriptor does (see `BoardLock`), on
        // the blocking pool: closing checkpoints, which a stalled disk could hold for good.
        let closed = tokio::task::spawn_blocking(move || {
            drop(self);
            drop(lock);
        });
        if tokio::time::timeout(CLOSE_WAIT, closed).await.is_err() {
            warn!(
                "the board did not close within {:.1}s (locked by another process, or a stalled \
                 filesystem); exiting without it: every commit is in kanban.db-wal",
                CLOSE_WAIT.as_secs_f64()
            );
        }
    }

    /// Closes attempts whose process is gone (or whose end this process could not record).
    async fn recover(&mut self) {
        let ours = self.in_flight_ids.clone();
        let budget = self.config.card_rules().budget;
        match auto::recover(&self.board, &ours, budget, Origin::Gateway).await {
            Ok(recovered) => {
                if self.recover_notice.clear() {
                    info!("abandoned attempts can be closed again");
                }
                let mut recovered = recovered;
                let parked = std::mem::take(&mut recovered.parked);
                if let Some(line) = auto::describe_recovered(&recovered) {
                    warn!("{line}");
                }
                for card in &parked {
                    if !self.first_announcement(&card.task_id, card.attempt) {
                        info!(
                            card = %card.task_id,
                            "parked {} again at attempt {}: the record of the park this gateway \
                             warned about was lost from the board",
                            card.task_id,
                            card.attempt
                        );
                        continue;
                    }
                    warn_parked(&card.task_id, &ParkCause::Abandoned);
                }
            }
            // Its own condition, apart from picking cards: a board that takes no writes fails
            // here and may still be read, and one line each is all either deserves.
            Err(err) => self.recover_notice.warn_keyed(
                &error_chain(&err),
                &format!("cannot close abandoned attempts: {}", error_chain(&err)),
            ),
        }
    }

    /// Reopens the board when another file was put at its path since it was opened: writing on
    /// through the old handle would go to a file nobody reads. When nothing is at the path (the
    /// board was moved to another home, or deleted), no board is created in its place: the
    /// gateway dispatches nothing, with one WARN, until a board is back at the path; its lock
    /// on the old file was let go (`BoardLock`), so a gateway at the board's new home can
    /// dispatch it. Returns whether the tick may go on with the board.
    async fn check_board_file(&mut self) -> bool {
        let what = match self.board.file() {
            BoardFile::Same if !self.board_gone => {
                self.file_notice.clear();
                self.check_wal_files().await;
                return true;
            }
            // Moved back: its old connection was closed when it went.
            BoardFile::Same => "was put back",
            BoardFile::Missing => {
                // The old connection closes at once (every later call is refused, see
                // `Store::refresh`); attempts in flight on it record nothing more.
                let _ = self.board.call(|_| Ok(())).await;
                self.board_gone = true;
                self.upstream_locks.let_go_of_board();
                self.file_notice.warn_keyed(
                    "missing",
                    &format!(
                        "kanban.db is gone from {} (moved to another home, or deleted) while the \
                         gateway ran; dispatching nothing until a board is back at that path (a \
                         moved board is dispatched by a gateway in its new home)",
                        self.home.db_path().display()
                    ),
                );
                return false;
            }
            BoardFile::Replaced => "was replaced by another file",
        };
        // The old connection is closed before the new one opens (the store refuses every later
        // call, see `Store::refresh`): two connections of one process on a WAL index that the
        // path no longer pairs with the file would not see each other's locks. Attempts still in
        // flight on it record nothing more; the claims they left are closed on the new board if
        // it holds them.
        let _ = self.board.call(|_| Ok(())).await;
        let path = self.home.db_path();
        match BoardHandle::reopen_long_lived(&path).await {
            Ok(board) => {
                warn!(
                    board = %path.display(),
                    "kanban.db {what} while the gateway ran; reopened it (attempts in flight finish on the old file)"
                );
                self.file_notice.clear();
                self.board_gone = false;
                // The rest of this tick closes abandoned attempts on the new file, and its first
                // pick brings every triage card there under the budget.
                self.board = board;
                true
            }
            Err(err) => {
                self.file_notice.warn_keyed(
                    &format!("reopen-{}", error_chain(&err)),
                    &format!(
                        "kanban.db {what} while the gateway ran, and cannot be reopened: {}",
                        error_chain(&err)
                    ),
                );
                false
            }
        }
    }

    /// Logs the `-wal`/`-shm` swaps the board's connection noticed (and reopened the board for)
    /// since the last tick: one WARN per change until a tick finds none.
    async fn check_wal_files(&mut self) {
        let changes = self
            .board
            .call(|s| Ok(s.take_file_changes()))
            .await
            .unwrap_or_default();
        if changes.is_empty() {
            self.wal_files_notice.clear();
            return;
        }
        let what: Vec<String> = changes.iter().map(ToString::to_string).collect();
        let what = what.join(" and ");
        self.wal_files_notice.warn_keyed(
            &what,
            &format!(
                "{what} while the gateway ran (a sync, backup or restore tool?); reopened the \
                 board through the files now at its path. Keep kanban.db-wal and kanban.db-shm \
                 out of such tools: after a clean stop kanban.db alone is the whole board"
            ),
        );
    }

    /// The gateway's last act: every commit copied into `kanban.db` and the WAL emptied, so that
    /// `kanban.db` alone is the whole board once the gateway is gone.
    async fn fold_wal_into_board(&mut self) {
        let folded = tokio::time::timeout(
            EXIT_CHECKPOINT_WAIT + EXIT_CHECKPOINT_SLACK,
            self.board.call(|s| s.checkpoint(EXIT_CHECKPOINT_WAIT)),
        )
        .await;
        let Ok(folded) = folded else {
            warn!(
                "the board did not answer within {:.1}s (locked by another process, or a \
                 stalled filesystem): kanban.db-wal keeps every commit, and the next hermes \
                 command to close the board folds it in; until then copy kanban.db together with \
                 kanban.db-wal",
                (EXIT_CHECKPOINT_WAIT + EXIT_CHECKPOINT_SLACK).as_secs_f64()
            );
            return;
        };
        match folded {
            Ok(true) => {}
            Ok(false) => warn!(
                "could not copy the WAL into kanban.db within {:.1}s (another process is using \
                 the board): every commit is safe in kanban.db-wal, and the next hermes command \
                 to close the board copies it; until then copy kanban.db together with \
                 kanban.db-wal",
                EXIT_CHECKPOINT_WAIT.as_secs_f64()
            ),
            Err(err) => warn!(
                "could not copy the WAL into kanban.db: {}; every commit is safe in \
                 kanban.db-wal: copy kanban.db together with it",
                error_chain(&err)
            ),
        }
    }

    /// Records that this gateway warns about `task_id`'s park at `attempt`; false when it
    /// already has.
    fn first_announcement(&mut self, task_id: &str, attempt: u32) -> bool {
        self.announced_parks.insert((task_id.to_owned(), attempt))
    }

    fn rebuild_context(&mut self) {
        let setup = build_context(&self.home, &self.config);
        self.install_context(setup);
    }

    /// Takes the context attempts run with, and says what changed: the `.env` lines skipped,
    /// where calls now go (when that differs from what was last announced), and, once per
    /// endpoint, that no key was found.
    fn install_context(&mut self, setup: Result<AttemptContext, AttemptSetupError>) {
        match setup {
            Ok(ctx) => {
                for warning in ctx.warnings.iter() {
                    warn!("{warning}");
                }
                let billing = ctx.billing();
                if self.billing.as_ref() != Some(&billing) {
                    info!(
                        endpoint = billing.endpoint.as_str(),
                        proxy = billing.proxy.as_str(),
                        model = billing.model.as_str(),
                        api_key_from = billing.key.as_str(),
                        "decompose calls now go to {}",
                        billing.endpoint
                    );
                }
                if let Some(warning) = billing.no_key_warning() {
                    self.key_notice.warn_keyed(&billing.endpoint, &warning);
                } else {
                    self.key_notice.clear();
                }
                self.billing = Some(billing);
                self.context = Some(ctx);
                self.setup_notice.clear();
            }
            Err(err) => {
                self.context = None;
                self.setup_notice.warn(err.cannot_run());
            }
        }
    }

    /// Re-reads `config.yaml` when it changed, on the blocking pool and for at most
    /// [`CONFIG_READ_TIMEOUT`]; a bad edit (or a file that cannot be read in time) keeps the last
    /// good config, with one WARN per condition.
    async fn reload_config(&mut self) {
        let mut pending = match self.config_read.take() {
            Some(pending) => pending,
            None => {
                let home = self.home.clone();
                let last = self.config_stamp;
                tokio::task::spawn_blocking(move || ConfigRead::of(&home, last))
            }
        };
        let read = match tokio::time::timeout(CONFIG_READ_TIMEOUT, &mut pending).await {
            Ok(Ok(read)) => read,
            Ok(Err(err)) => {
                self.config_notice.warn(format!(
                    "reading config.yaml failed ({err}); keeping the last good configuration"
                ));
                return;
            }
            Err(_) => {
                // No second read starts while this one hangs: the next tick waits for it again.
                self.config_read = Some(pending);
                self.config_notice.warn_keyed(
                    "config.yaml: slow",
                    &format!(
                        "{}: still not read after {:.1}s (a stalled filesystem?); keeping the \
                         last good configuration",
                        self.home.config_path().display(),
                        CONFIG_READ_TIMEOUT.as_secs_f64()
                    ),
                );
                return;
            }
        };
        let ConfigRead::Read { stamp, result } = read else {
            return;
        };
        self.config_stamp = stamp;
        match (*result).and_then(|fresh| self.keeping_dropped_keys(fresh)) {
            Ok(fresh) => self.apply_config(fresh),
            Err(err) => self.config_notice.warn_keyed(
                &config_condition(&err),
                &format!("{err}; keeping the last good configuration"),
            ),
        }
    }

    /// `fresh` with the keys the running config sets and it does not kept at their running
    /// values (see `Config::keeping`), with one WARN naming them.
    fn keeping_dropped_keys(&self, fresh: Config) -> Result<Config, ConfigError> {
        let dropped = self.dropped_keys(&fresh);
        if dropped.is_empty() {
            return Ok(fresh);
        }
        let kept = self
            .config
            .keeping(&fresh, &dropped, &self.home.config_path())?;
        warn!(
            "config.yaml no longer sets {}: keeping the running value of each (an edit caught \
             mid-write drops keys too); a key left out is back at its default when the gateway \
             restarts",
            dropped.join(", ")
        );
        Ok(kept)
    }

    /// The keys the running config sets that `fresh` does not: a reload would drop each to its
    /// default.
    fn dropped_keys(&self, fresh: &Config) -> Vec<String> {
        self.config
            .raw
            .set_keys
            .difference(&fresh.raw.set_keys)
            .cloned()
            .collect()
    }

    /// Runs with `fresh` from now on.
    fn apply_config(&mut self, fresh: Config) {
        crate::output::register_config(&fresh);
        if self.config_notice.clear() {
            info!("config.yaml is valid again; using it");
        }
        for warning in self.config_warnings.fresh(&fresh) {
            warn!(key = %warning.key, "{warning}");
        }
        if *self.config != fresh {
            self.config = Arc::new(fresh);
            self.rebuild_context();
        }
    }

    async fn tick(&mut self) {
        self.reload_config().await;
        if !self.check_board_file().await {
            return;
        }
        // Closing abandoned attempts is a dispatcher's work too: another dispatcher's attempts
        // in flight are not this gateway's to close.
        if !self.upstream_locks.may_dispatch() {
            return;
        }
        self.recover().await;
        // The spawn half, beside auto-decompose and apart from its switch: `max_spawn` is its.
        self.workers.tick(&self.board, &self.config).await;
        let kanban = &self.config.kanban;
        if !kanban.auto_decompose {
            self.switch_notice
                .info(format!("{}: no paid calls", auto::SWITCHED_OFF));
            return;
        }
        if self.switch_notice.clear() {
            info!("auto-decompose is on again");
        }
        let Some(context) = self.context.clone() else {
            return;
        };

        let per_tick = usize::try_from(kanban.auto_decompose_per_tick.max(1))
            .unwrap_or(usize::MAX)
            .min(MAX_IN_FLIGHT);
        let mut slots = per_tick.saturating_sub(self.in_flight.len());
        if self.health == ProviderHealth::Unknown {
            match self.probe_started {
                Some(started) if started.elapsed() >= PROBE_WINDOW => {
                    debug!("provider answered no refusal within the probe window");
                    self.health = ProviderHealth::Answering;
                }
                Some(_) => slots = 0,
                None => slots = slots.min(1),
            }
        }
        if slots == 0 {
            return;
        }

        let now = now_ms();
        let calls_per_hour = kanban.decompose_calls_per_hour;
        let exclude = self.in_flight_ids.clone();
        let picked = self
            .board
            .call(move |s| {
                auto::pick(
                    s,
                    now,
                    calls_per_hour,
                    slots,
                    &exclude,
                    false,
                    Origin::Gateway,
                )
            })
            .await;
        let due = match picked {
            Err(err) => {
                self.tick_notice.warn_keyed(
                    &error_chain(&err),
                    &format!("cannot pick due cards: {}", error_chain(&err)),
                );
                return;
            }
            Ok(Picked::Paused { until_ms, reason }) => {
                self.gate_notice.warn_keyed(
                    &format!("paused-until-{until_ms}"),
                    &format!(
                        "auto-decompose paused for {:.0}s more: {reason}",
                        secs_between(now, until_ms)
                    ),
                );
                self.await_probe();
                return;
            }
            Ok(Picked::Ceiling { calls, limit }) => {
                self.gate_notice.warn_keyed(
                    "hourly-ceiling",
                    &format!("auto-decompose waiting: {}", ceiling_reached(calls, limit)),
                );
                self.await_probe();
                return;
            }
            Ok(Picked::Due { cards, set_aside }) => {
                // Each is parked now, so this is its one WARN.
                for card in &set_aside {
                    warn_parked(&card.task_id, &ParkCause::SetAside { why: &card.why });
                }
                cards
            }
        };
        if self.tick_notice.clear() {
            info!("the board is usable again");
        }
        if due.is_empty() {
            return;
        }
        self.gate_notice.clear();
        for task_id in due {
            self.spawn_attempt(&context, task_id);
        }
    }

    /// A closed gate ends in an unknown state: probe with one call before fanning out.
    fn await_probe(&mut self) {
        self.health = ProviderHealth::Unknown;
        self.probe_started = None;
    }

    fn spawn_attempt(&mut self, context: &AttemptContext, task_id: String) {
        if !self.in_flight_ids.insert(task_id.clone()) {
            return;
        }
        // While the health is unknown a tick sends a request only when no probe is being timed
        // (see `tick`), so this one is the probe.
        if self.health == ProviderHealth::Unknown {
            self.probe_started = Some(Instant::now());
        }
        let context = context.sharing(&self.board);
        let shutdown = self.shutdown.clone();
        let card = task_id.clone();
        let handle = self.in_flight.spawn(async move {
            let result = auto::attempt(&context, &task_id, Origin::Gateway, shutdown).await;
            (task_id, result)
        });
        self.task_cards.insert(handle.id(), card);
    }

    async fn finished(&mut self, joined: Joined) {
        let (task_id, result) = match joined {
            Ok((id, done)) => {
                self.task_cards.remove(&id);
                done
            }
            Err(err) => {
                // The next tick finds the card's claim held by no running attempt of ours, and
                // closes that attempt.
                let card = self.task_cards.remove(&err.id()).unwrap_or_default();
                self.in_flight_ids.remove(&card);
                warn!(card = %card, "an attempt task failed: {err}");
                return;
            }
        };
        self.in_flight_ids.remove(&task_id);
        if self.in_flight.is_empty() && self.health == ProviderHealth::Unknown {
            // The probe ended without proving anything (refused, or no request): probe again.
            self.probe_started = None;
        }
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(err) => {
                // One WARN per condition (a full disk, a locked board), not one per card and
                // tick. What it says depends on whether a request had left: one that left may be
                // billed, and its claim is closed as `unknown` once the board takes writes.
                let chain = error_chain(&err);
                if err.requests_sent == 0 {
                    self.record_notice.warn_keyed(
                        &chain,
                        &format!(
                            "cannot record an attempt on card {task_id}: {chain}; no request was \
                             sent, and none is while attempts cannot be recorded"
                        ),
                    );
                } else {
                    self.end_notice.warn_keyed(
                        &chain,
                        &format!(
                            "a request for card {task_id} was sent (it may be billed) but its end \
                             could not be recorded: {chain}; the attempt stays counted, and its \
                             ledger row is closed as `unknown` once the board can be written"
                        ),
                    );
                }
                return;
            }
        };
        if !matches!(outcome, AttemptOutcome::Refused { .. })
            && (self.record_notice.clear() | self.end_notice.clear())
        {
            info!("attempts can be recorded again");
        }
        if let Some(fault) = outcome.fault() {
            self.gate_notice.warn_keyed(
                &format!("paused-until-{}", fault.until_ms),
                &format!(
                    "{}: {} (card {task_id})",
                    paused_for(fault.lasts),
                    fault.fault.describe()
                ),
            );
            self.await_probe();
        } else if let Some(pause) = outcome.unreachable() {
            self.gate_notice.warn_keyed(
                &format!("paused-until-{}", pause.until_ms),
                &format!(
                    "{}: provider unreachable ({} request(s) in a row never reached it; no card's \
                     budget was spent): {}",
                    paused_for(pause.lasts),
                    pause.streak,
                    pause.reason
                ),
            );
            self.await_probe();
        } else if outcome.requests() > 0 {
            self.health = ProviderHealth::Answering;
            self.probe_started = None;
        }
        match &outcome {
            AttemptOutcome::Applied { .. } => match outcome.child_ids() {
                Some(children) => {
                    info!(card = %task_id, "decomposed into {} children", children.len())
                }
                None => info!(card = %task_id, "specified as a single task"),
            },
            AttemptOutcome::Failed {
                parked: true,
                attempt,
                reason,
                ..
            } => {
                self.first_announcement(&task_id, *attempt);
                warn_parked(
                    &task_id,
                    &ParkCause::Failed {
                        attempt: *attempt,
                        last: reason,
                    },
                );
            }
            AttemptOutcome::Refused {
                refusal: BeginRefusal::Parked { attempts },
                ..
            } => {
                // The due query never offers a parked card, so this card's budget was spent
                // by an attempt that never finished, or the budget was lowered; it was parked
                // just now.
                warn_parked(
                    &task_id,
                    &ParkCause::Spent {
                        budget: self.config.card_rules().budget,
                        attempts: *attempts,
                    },
                );
            }
            AttemptOutcome::Refused {
                refusal: BeginRefusal::Unreadable { why },
                ..
            } => {
                // The due query sets unreadable cards aside, so this row changed since it was
                // picked, and the attempt's start parked it just now.
                warn_parked(&task_id, &ParkCause::SetAside { why });
            }
            AttemptOutcome::Refused { .. } => {
                debug!(card = %task_id, "not attempted: {}", outcome.reason());
            }
            AttemptOutcome::NothingSent { .. } => {
                info!(card = %task_id, "decompose attempt not counted: {}", outcome.reason());
            }
            AttemptOutcome::Superseded { .. } => {
                warn!(card = %task_id, attempt = outcome.attempt(), "{}", outcome.reason());
            }
            AttemptOutcome::Failed { .. } | AttemptOutcome::LeftTriage { .. } => {
                info!(card = %task_id, attempt = outcome.attempt(), "decompose attempt failed: {}", outcome.reason());
            }
        }
    }
}

/// The context decompose attempts run with under `config`; nothing is logged or sent.
fn build_context(home: &Home, config: &Arc<Config>) -> Result<AttemptContext, AttemptSetupError> {
    AttemptContext::from_config(config.clone(), home, roster(home, config), home.db_path())
}

/// The one WARN a gateway gives each card it parks (contract §7, B9), with the fields the suite
/// counts it by (`event=decompose_parked card=ID`), and what a person does about it.
fn warn_parked(task_id: &str, cause: &ParkCause<'_>) {
    let why = cause.why();
    warn!(
        event = "decompose_parked",
        card = %task_id,
        "parked {task_id}: {why}; no automatic path bills it again. Once its cause is fixed, \
         `hermes kanban unpark {task_id}` gives it a fresh budget"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn any_configured_tick_period_gives_a_working_timer() {
        for period in [
            Duration::from_nanos(1),
            Duration::from_secs(86_401),
            Duration::MAX,
        ] {
            let mut interval = new_interval(period);
            // The first tick is immediate; a reset computes `now + period`, which must not
            // overflow.
            interval.tick().await;
            interval.reset();
            assert!(interval.period() <= MAX_TICK, "{period:?}");
            assert!(interval.period() >= Duration::from_millis(1), "{period:?}");
        }
    }
}
