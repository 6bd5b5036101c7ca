//! The gateway's workers (S1–S5, S7–S9): one worker process per ready card with an assignee, as
//! upstream starts them (`hermes -p <assignee> chat -q "work kanban task <id>"`, argv[0] from
//! `$HERMES_BIN` when set, else this executable), each in a session and process group of its
//! own, its output in `<board dir>/logs/<id>.log`.
//!
//! Every tick, in order:
//! 1. **watch** what runs: a worker whose processes are all gone (its leader reaped, its lock
//!    free) has its run closed as its exit says, unless it recorded its end itself, and frees
//!    its place; a worker past its runtime is closed `timed_out` and stopped; a worker whose
//!    run closed while it runs on (it completed and kept going, say) is stopped, so no card ever
//!    has two live workers (S2);
//! 2. **adopt** workers this process did not start (a gateway killed before, a `kanban
//!    dispatch`): a held lock is a live worker, watched and counted from now on; a free one is
//!    a worker that ended unseen, closed as such;
//! 3. **cap**: a `kanban.max_spawn` lowered under the live workers stops the newest beyond it
//!    (closed `interrupted`, not charged);
//! 4. **spawn** the due cards into the free places, each run recorded before its fork under the
//!    cap, the pause and the ceiling (`Store::claim_run`).
//!
//! At SIGTERM or SIGINT every live worker's run is closed `interrupted` (not charged), its
//! process group gets SIGTERM, then SIGKILL after [`STOP_GRACE`] (S7).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::notice::Notice;
use crate::config::{Config, Home};
use crate::core::time::after;
use crate::core::{
    error_chain, rate_limit_pause, RunOutcome, EXIT_PROVIDER_REFUSED, EXIT_RATE_LIMITED,
};
use crate::liveness::{self, HeldLock, Holder};
use crate::store::{
    now_ms, AutoGate, BoardError, BoardHandle, ClaimRefusal, Closed, Gone, LiveSpawn, PauseRecord,
    RunClose, RunTicket, SpawnPolicy, StoreError,
};
use crate::worker::prompt::task_message;

/// How long a stopped worker's process group gets between SIGTERM and SIGKILL. With the kill's
/// own wait it fits the gateway's shutdown grace, which the 5 s stop must hold.
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long the processes get to go once SIGKILLed.
pub const KILL_WAIT: Duration = Duration::from_secs(1);
/// How long a stop waits for the board to record its workers' runs as interrupted before it
/// signals them anyway: a board that cannot be written (locked, a frozen filesystem) must not
/// keep a worker running past the gateway's stop.
pub const RECORD_WAIT: Duration = Duration::from_millis(500);
/// How often a stop looks at its workers.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Who spawns, as the board records it: the gateway's ticks, or `kanban dispatch`.
pub const GATEWAY: &str = "gateway";
/// See [`GATEWAY`].
pub const DISPATCH: &str = "dispatch";

/// A worker one pass spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawned {
    pub task_id: String,
    pub run_id: i64,
    pub pid: u32,
}

/// What trying one card came to.
enum Tried {
    Spawned(Spawned),
    /// Not this card (its own guard, or its worker could not be started); the pass goes on.
    Skipped,
    /// The board holds every card back now (the cap, the pause, the ceiling): the pass stops.
    Stop,
}

/// What one spawn pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpawnPass {
    pub spawned: Vec<Spawned>,
    /// Why it spawned nothing more, when the board held it back (the pause, the ceiling).
    pub held: Option<String>,
    /// Live workers on the board when it looked, and the cap.
    pub live: usize,
    pub cap: u32,
}

/// One worker this process watches.
#[derive(Debug)]
struct Live {
    task_id: String,
    /// Its process group (the worker's pid: it leads a session of its own). `None` for a
    /// worker adopted before its pid was recorded.
    pgid: Option<i32>,
    /// This process's child, until reaped; `None` for an adopted worker (not ours to reap).
    child: Option<Child>,
    /// How its leader exited, once reaped (`None` inside: a signal).
    exit: Option<Option<i32>>,
    lock_path: PathBuf,
    /// When it started, as its spawn-ledger row was last read in this process's frame (see
    /// `store::frame`): each tick reads it again, so no step of the wall clock moves its end.
    started_at_ms: i64,
    runtime: Duration,
    /// When its group was sent SIGTERM; SIGKILL follows after [`STOP_GRACE`].
    stopping: Option<Instant>,
}

impl Live {
    fn adopted(&self) -> bool {
        self.child.is_none() && self.exit.is_none()
    }

    /// Reaps the leader if it has exited (own children only).
    fn reap(&mut self) {
        if let Some(child) = &mut self.child {
            if let Ok(Some(status)) = child.try_wait() {
                self.exit = Some(status.code());
                self.child = None;
            }
        }
    }

    /// Whether every process of the worker is gone: its leader reaped (or not ours) and its
    /// lock free.
    fn gone(&mut self) -> bool {
        self.reap();
        self.child.is_none() && liveness::probe(&self.lock_path).gone()
    }

    /// Sends `signal` to the worker's process group while it may still have members: before
    /// its leader is reaped (its pid cannot be reused until then), or while its lock is held
    /// (a descendant that inherited it still runs, so the group's id is still taken).
    fn signal(&mut self, signal: i32) {
        let Some(pgid) = self.pgid else { return };
        let leader_unreaped = self.child.is_some();
        if leader_unreaped || liveness::probe(&self.lock_path) == Holder::Held {
            // SAFETY: killpg has no memory effects; a group that is already empty is ESRCH.
            unsafe {
                libc::killpg(pgid, signal);
            }
        }
    }

    /// SIGTERM now, SIGKILL once the grace has passed.
    fn stop(&mut self, now: Instant) {
        match self.stopping {
            None => {
                self.stopping = Some(now);
                self.signal(libc::SIGTERM);
            }
            Some(at) if now.saturating_duration_since(at) >= STOP_GRACE => {
                self.signal(libc::SIGKILL)
            }
            Some(_) => {}
        }
    }
}

/// The workers of one gateway.
pub(crate) struct Workers {
    home: Home,
    /// [`GATEWAY`] or [`DISPATCH`].
    origin: &'static str,
    live: HashMap<i64, Live>,
    /// Spawning held back (the pause, the ceiling).
    gate_notice: Notice,
    /// The board cannot be used for the spawn half (read or written).
    board_notice: Notice,
    /// A worker could not be started.
    spawn_notice: Notice,
    /// A lock that cannot be read (its worker is counted as live meanwhile).
    lock_notice: Notice,
    /// Parks warned about, by card and when they were recorded: one WARN per park.
    announced_parks: HashSet<String>,
}

impl Workers {
    pub(crate) fn new(home: Home) -> Workers {
        Workers::by(home, GATEWAY)
    }

    fn by(home: Home, origin: &'static str) -> Workers {
        Workers {
            home,
            origin,
            live: HashMap::new(),
            gate_notice: Notice::default(),
            board_notice: Notice::default(),
            spawn_notice: Notice::default(),
            lock_notice: Notice::default(),
            announced_parks: HashSet::new(),
        }
    }

    /// One tick of the spawn half (see the module docs).
    pub(crate) async fn tick(&mut self, board: &BoardHandle, config: &Config) {
        match self.tend(board, config).await {
            Ok(()) => {
                if self.board_notice.clear() {
                    info!("the workers' records can be written again");
                }
            }
            // The board file was swapped under the gateway: its own check reports that, once,
            // and reopens the board for the next tick.
            Err(BoardError::Store(StoreError::FilesChanged { .. })) => {
                debug!("the board's file changed; the workers are tended at the next tick");
            }
            Err(err) => self.board_notice.warn_keyed(
                &error_chain(&err),
                &format!(
                    "cannot record the workers' runs: {}; no worker is spawned meanwhile",
                    error_chain(&err)
                ),
            ),
        }
    }

    async fn tend(&mut self, board: &BoardHandle, config: &Config) -> Result<(), BoardError> {
        let spawns = board.call(|s| s.live_spawns()).await?;
        self.watch(board, config, &spawns).await?;
        self.adopt(board, config, &spawns).await?;
        self.cap(board, config).await?;
        self.spawn(board, config, None).await.map(|_| ())
    }

    /// Step 1: closes what ended, stops what ran too long or outlived its run.
    async fn watch(
        &mut self,
        board: &BoardHandle,
        config: &Config,
        spawns: &[LiveSpawn],
    ) -> Result<(), BoardError> {
        let open: HashMap<i64, bool> = spawns.iter().map(|s| (s.run_id, s.run_open)).collect();
        for spawn in spawns {
            if let Some(live) = self.live.get_mut(&spawn.run_id) {
                live.started_at_ms = spawn.started_at_ms;
            }
        }
        let now = Instant::now();
        let wall = now_ms();
        let runs: Vec<i64> = self.live.keys().copied().collect();
        for run_id in runs {
            let Some(live) = self.live.get_mut(&run_id) else {
                continue;
            };
            if live.gone() {
                if let Some(live) = self.live.remove(&run_id) {
                    self.ended(board, config, run_id, live).await?;
                }
                continue;
            }
            let run_open = open.get(&run_id).copied().unwrap_or(false);
            let overdue = wall >= after(live.started_at_ms, live.runtime);
            if run_open && overdue {
                let reason = format!(
                    "ran past its runtime limit ({}s) and was stopped",
                    live.runtime.as_secs()
                );
                // Closed first, so the worker's own writes stop counting, then stopped.
                let task_id = live.task_id.clone();
                close(board, config, run_id, RunOutcome::TimedOut, reason).await?;
                self.announce_park(board, &task_id).await?;
                if let Some(live) = self.live.get_mut(&run_id) {
                    live.stop(now);
                }
            } else if !run_open || live.stopping.is_some() || live.exit.is_some() {
                // Its run is over (or it is being stopped, or only descendants are left): no
                // process of it may outlive that.
                live.stop(now);
            }
        }
        Ok(())
    }

    /// Records a worker whose processes are gone and logs how its run went.
    async fn ended(
        &mut self,
        board: &BoardHandle,
        config: &Config,
        run_id: i64,
        live: Live,
    ) -> Result<(), BoardError> {
        let exit = if live.adopted() { None } else { live.exit };
        let gone = Gone {
            run_id,
            exit,
            rules: config.spawn_rules(),
            by: self.origin.to_owned(),
            now_ms: now_ms(),
            pause: exit.flatten().and_then(|code| exit_pause(code, config)),
        };
        let closed = board.call(move |s| s.worker_gone(&gone)).await?;
        liveness::remove_if_free(&live.lock_path);
        match closed {
            Some(closed) => self.report(run_id, &closed),
            None => debug!(card = %live.task_id, run = run_id, "worker gone; its run had ended"),
        }
        self.announce_park(board, &live.task_id).await
    }

    /// Logs a run's end as the gateway recorded it.
    fn report(&self, run_id: i64, closed: &Closed) {
        if closed.outcome.charged() {
            info!(
                card = %closed.task_id, run = run_id, outcome = closed.outcome.as_str(),
                failures = closed.failures, limit = closed.limit,
                "worker run ended without completing ({}): {} of {} allowed failures used",
                closed.outcome, closed.failures, closed.limit
            );
        } else {
            info!(card = %closed.task_id, run = run_id, outcome = closed.outcome.as_str(), "worker run ended");
        }
    }

    /// The one WARN a card parked by its spawn budget gets from this gateway (S9), whoever
    /// recorded the park (this gateway, its worker, a `kanban dispatch`).
    async fn announce_park(
        &mut self,
        board: &BoardHandle,
        task_id: &str,
    ) -> Result<(), BoardError> {
        let id = task_id.to_owned();
        let state = board.call(move |s| s.spawn_state(&id)).await?;
        let Some(state) = state else { return Ok(()) };
        let Some(at) = state.parked_at_ms else {
            return Ok(());
        };
        if self.announced_parks.insert(format!("{task_id}@{at}")) {
            warn_spawn_parked(
                task_id,
                state.last_error.as_deref().unwrap_or("its budget is spent"),
            );
        }
        Ok(())
    }

    /// Step 2: workers on the board this process does not watch.
    async fn adopt(
        &mut self,
        board: &BoardHandle,
        config: &Config,
        spawns: &[LiveSpawn],
    ) -> Result<(), BoardError> {
        let unwatched: Vec<&LiveSpawn> = spawns
            .iter()
            .filter(|s| !self.live.contains_key(&s.run_id))
            .collect();
        for spawn in unwatched {
            let lock = PathBuf::from(&spawn.lock_path);
            match liveness::probe(&lock) {
                Holder::Held => {
                    // The worker writes its pid into its lock before it runs anything, so one
                    // whose spawner died before recording it is still found.
                    let Some(pid) = spawn.pid.or_else(|| liveness::recorded_pid(&lock)) else {
                        // Its spawner holds the lock before the fork: not started yet.
                        continue;
                    };
                    warn!(
                        card = %spawn.task_id, run = spawn.run_id, pid,
                        "adopted a live worker this gateway did not start (left by a stopped \
                         gateway or a `kanban dispatch`): it counts against kanban.max_spawn and \
                         is watched from now on"
                    );
                    let mut live = adopted(spawn, lock);
                    live.pgid = i32::try_from(pid).ok();
                    self.live.insert(spawn.run_id, live);
                    if spawn.pid.is_none() {
                        let run_id = spawn.run_id;
                        board.call(move |s| s.record_spawned(run_id, pid)).await?;
                    }
                }
                Holder::Free | Holder::Missing => {
                    let live = adopted(spawn, lock);
                    self.ended(board, config, spawn.run_id, live).await?;
                }
                Holder::Unknown(why) => self.lock_notice.warn_keyed(
                    &why,
                    &format!(
                        "cannot tell whether the worker of run {} (card {}) still runs: {why}; it \
                         counts as live",
                        spawn.run_id, spawn.task_id
                    ),
                ),
            }
        }
        Ok(())
    }

    /// Step 3: a lowered cap stops the newest workers beyond it.
    async fn cap(&mut self, board: &BoardHandle, config: &Config) -> Result<(), BoardError> {
        let max = usize::try_from(config.kanban.max_spawn).unwrap_or(usize::MAX);
        let mut running: Vec<(i64, i64)> = self
            .live
            .iter()
            .filter(|(_, live)| live.stopping.is_none())
            .map(|(run, live)| (live.started_at_ms, *run))
            .collect();
        if running.len() <= max {
            return Ok(());
        }
        running.sort_unstable();
        let now = Instant::now();
        for (_, run_id) in running.split_off(max) {
            let reason = format!(
                "stopped: kanban.max_spawn is {} now, and this was one of the newest workers past it",
                config.kanban.max_spawn
            );
            close(board, config, run_id, RunOutcome::Interrupted, reason).await?;
            if let Some(live) = self.live.get_mut(&run_id) {
                live.stop(now);
            }
        }
        Ok(())
    }

    /// Step 4: spawns the due cards into the free places (at most `limit` of them).
    async fn spawn(
        &mut self,
        board: &BoardHandle,
        config: &Config,
        limit: Option<u32>,
    ) -> Result<SpawnPass, BoardError> {
        let cap = config.kanban.max_spawn;
        let (calls_per_hour, now) = (config.kanban.decompose_calls_per_hour, now_ms());
        let (gate, live) = board
            .call(move |s| Ok((s.auto_gate(now, calls_per_hour)?, s.live_spawns()?.len())))
            .await?;
        let mut pass = SpawnPass {
            live,
            cap,
            ..SpawnPass::default()
        };
        if let Some(held) = self.held_by(gate) {
            pass.held = Some(held);
            return Ok(pass);
        }
        let slots = usize::try_from(cap.min(limit.unwrap_or(u32::MAX)))
            .unwrap_or(usize::MAX)
            .min(
                usize::try_from(cap)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(live),
            );
        if slots == 0 {
            return Ok(pass);
        }
        let busy: HashSet<String> = self.live.values().map(|l| l.task_id.clone()).collect();
        let due = board.call(move |s| s.spawnable(now, slots, &busy)).await?;
        for task_id in due {
            match self.spawn_one(board, config, &task_id).await? {
                Tried::Spawned(spawned) => pass.spawned.push(spawned),
                Tried::Skipped => {}
                Tried::Stop => break,
            }
        }
        Ok(pass)
    }

    /// Why the board's guards hold every spawn back now, once per condition in the log.
    fn held_by(&mut self, gate: AutoGate) -> Option<String> {
        let (key, why) = match gate {
            AutoGate::Open { .. } => {
                self.gate_notice.clear();
                return None;
            }
            AutoGate::Paused { until_ms, reason } => (
                format!("spawn-paused-{until_ms}"),
                format!("no worker is spawned while the board is paused: {reason}"),
            ),
            AutoGate::CeilingReached { calls, limit } => (
                "spawn-ceiling".to_owned(),
                format!(
                    "no worker is spawned: {}",
                    crate::core::ceiling_reached(calls, limit)
                ),
            ),
        };
        self.gate_notice.warn_keyed(&key, &why);
        Some(why)
    }

    /// Records a run for `task_id` and forks its worker.
    async fn spawn_one(
        &mut self,
        board: &BoardHandle,
        config: &Config,
        task_id: &str,
    ) -> Result<Tried, BoardError> {
        let lock = match new_lock(&board_dir(&self.home)) {
            Ok(lock) => lock,
            Err(err) => {
                self.spawn_notice.warn(format!(
                    "cannot create a worker's lock file: {err}; no worker spawned"
                ));
                return Ok(Tried::Stop);
            }
        };
        let policy = SpawnPolicy {
            origin: self.origin,
            owner: crate::process::token().to_owned(),
            rules: config.spawn_rules(),
            max_spawn: config.kanban.max_spawn,
            calls_per_hour: config.kanban.decompose_calls_per_hour,
            runtime: config.kanban.worker_max_runtime,
            lock_path: lock.path().to_string_lossy().into_owned(),
            now_ms: now_ms(),
        };
        let id = task_id.to_owned();
        let ticket = match board.call(move |s| s.claim_run(&id, &policy)).await? {
            Ok(ticket) => ticket,
            Err(refusal) => {
                lock.discard();
                return self.refused(board, task_id, refusal).await;
            }
        };
        self.fork(board, config, ticket, lock).await
    }

    async fn refused(
        &mut self,
        board: &BoardHandle,
        task_id: &str,
        refusal: ClaimRefusal,
    ) -> Result<Tried, BoardError> {
        debug!(card = %task_id, "no worker spawned: {refusal}");
        match refusal {
            ClaimRefusal::Cap { .. } | ClaimRefusal::Board(_) => Ok(Tried::Stop),
            ClaimRefusal::Card(crate::core::SpawnRefusal::Parked { .. })
            | ClaimRefusal::Unreadable { .. } => {
                self.announce_park(board, task_id).await?;
                Ok(Tried::Skipped)
            }
            _ => Ok(Tried::Skipped),
        }
    }

    /// Forks the worker of a recorded run, or records that it could not be started.
    async fn fork(
        &mut self,
        board: &BoardHandle,
        config: &Config,
        ticket: RunTicket,
        lock: HeldLock,
    ) -> Result<Tried, BoardError> {
        let started_at_ms = now_ms();
        match worker_command(&self.home, &ticket, &lock).and_then(|mut c| c.spawn()) {
            Ok(child) => {
                let pid = child.id();
                // The child holds the lock now; this process's copy goes.
                let lock_path = lock.path().to_owned();
                drop(lock);
                info!(card = %ticket.task_id, run = ticket.run_id, pid, spawn = ticket.spawn, "spawned a worker");
                self.live.insert(
                    ticket.run_id,
                    Live {
                        task_id: ticket.task_id.clone(),
                        pgid: i32::try_from(pid).ok(),
                        child: Some(child),
                        exit: None,
                        lock_path,
                        started_at_ms,
                        runtime: ticket.runtime,
                        stopping: None,
                    },
                );
                let run_id = ticket.run_id;
                board.call(move |s| s.record_spawned(run_id, pid)).await?;
                Ok(Tried::Spawned(Spawned {
                    task_id: ticket.task_id,
                    run_id,
                    pid,
                }))
            }
            Err(err) => {
                lock.discard();
                self.spawn_notice.warn_keyed(
                    &err.kind().to_string(),
                    &format!("cannot start a worker for {}: {err}", ticket.task_id),
                );
                let reason = format!("the worker could not be started: {err}");
                close(
                    board,
                    config,
                    ticket.run_id,
                    RunOutcome::SpawnFailed,
                    reason,
                )
                .await?;
                let gone = Gone {
                    run_id: ticket.run_id,
                    exit: Some(None),
                    rules: config.spawn_rules(),
                    by: GATEWAY.to_owned(),
                    now_ms: now_ms(),
                    pause: None,
                };
                board.call(move |s| s.worker_gone(&gone)).await?;
                self.announce_park(board, &ticket.task_id).await?;
                Ok(Tried::Skipped)
            }
        }
    }

    /// Stops every live worker (S7): their runs closed `interrupted` (not charged), their groups
    /// SIGTERMed, SIGKILLed after [`STOP_GRACE`], each recorded once gone. The board is waited
    /// for at most [`RECORD_WAIT`] before the signals, and not at all between them: a board that
    /// cannot be written never keeps a worker running. Returns how many could not be made to go
    /// within [`KILL_WAIT`] more.
    pub(crate) async fn stop_all(&mut self, board: &BoardHandle, config: &Config) -> usize {
        let _ = tokio::time::timeout(RECORD_WAIT, self.close_all(board, config)).await;
        let mut gone = Vec::new();
        let started = Instant::now();
        while !self.live.is_empty() && started.elapsed() < STOP_GRACE + KILL_WAIT {
            let now = Instant::now();
            let runs: Vec<i64> = self.live.keys().copied().collect();
            for run_id in runs {
                let Some(live) = self.live.get_mut(&run_id) else {
                    continue;
                };
                if live.gone() {
                    gone.extend(self.live.remove(&run_id).map(|live| (run_id, live)));
                } else {
                    live.stop(now);
                }
            }
            tokio::time::sleep(STOP_POLL).await;
        }
        for (run_id, live) in &self.live {
            warn!(
                card = %live.task_id, run = run_id,
                "a worker's processes were still running after SIGKILL; the next start finds \
                 them by their lock"
            );
        }
        for (run_id, live) in gone {
            let _ = self.ended(board, config, run_id, live).await;
        }
        self.live.len()
    }

    /// Closes the run of every worker this process watches as `interrupted`, after taking in the
    /// runs it recorded but does not watch: a tick the stop cut short between recording a run
    /// and watching its worker (`Dispatcher::run_until` drops a tick at a signal). Such a run's
    /// worker is stopped if it started, and its run ends uncharged either way.
    async fn close_all(&mut self, board: &BoardHandle, config: &Config) {
        if let Ok(spawns) = board.call(|s| s.live_spawns()).await {
            let ours = crate::process::token();
            for spawn in spawns.iter().filter(|s| s.owner == ours) {
                if self.live.contains_key(&spawn.run_id) {
                    continue;
                }
                let mut live = adopted(spawn, PathBuf::from(&spawn.lock_path));
                if live.pgid.is_none() {
                    live.pgid = liveness::recorded_pid(&live.lock_path)
                        .and_then(|pid| i32::try_from(pid).ok());
                }
                self.live.insert(spawn.run_id, live);
            }
        }
        let runs: Vec<i64> = self.live.keys().copied().collect();
        for run_id in runs {
            let reason = "stopped: the gateway is shutting down".to_owned();
            let _ = close(board, config, run_id, RunOutcome::Interrupted, reason).await;
        }
    }
}

/// `kanban dispatch`: one spawn pass from the command line, under the same cap, budget, pause
/// and ceiling as the gateway's. It first closes what ended unseen (it counts the live workers
/// it finds, whoever started them), then spawns at most `limit` workers and leaves them
/// running: each holds its lock, and a gateway started later adopts it.
pub async fn dispatch_once(
    home: Home,
    board: &BoardHandle,
    config: &Config,
    limit: Option<u32>,
) -> Result<SpawnPass, BoardError> {
    let mut workers = Workers::by(home, DISPATCH);
    let spawns = board.call(|s| s.live_spawns()).await?;
    workers.adopt(board, config, &spawns).await?;
    let pass = workers.spawn(board, config, limit).await?;
    // The workers go on by themselves; dropping their handles neither stops nor waits for them.
    workers.live.clear();
    Ok(pass)
}

/// A worker this process did not start, as its spawn-ledger row describes it.
fn adopted(spawn: &LiveSpawn, lock_path: PathBuf) -> Live {
    Live {
        task_id: spawn.task_id.clone(),
        pgid: spawn.pid.and_then(|pid| i32::try_from(pid).ok()),
        child: None,
        exit: None,
        lock_path,
        // As the row reads in this process's frame: on the spawner's boot by its clock.
        started_at_ms: spawn.started_at_ms,
        runtime: spawn.runtime,
        stopping: None,
    }
}

/// Closes a run as the gateway ends it (the worker is stopped after).
async fn close(
    board: &BoardHandle,
    config: &Config,
    run_id: i64,
    outcome: RunOutcome,
    reason: String,
) -> Result<(), BoardError> {
    let close = RunClose::new(
        run_id,
        outcome,
        reason,
        GATEWAY,
        config.spawn_rules(),
        now_ms(),
    );
    let closed = board.call(move |s| s.close_run(&close)).await?;
    if let Some(closed) = closed {
        info!(card = %closed.task_id, run = run_id, outcome = closed.outcome.as_str(), "stopping a worker: {}", closed.outcome);
    }
    Ok(())
}

/// The start's word on workers: that they are paid sessions, and how many may run.
pub fn announce(config: &Config) {
    let max_spawn = config.kanban.max_spawn;
    if max_spawn > 0 {
        info!(
            max_spawn,
            "workers: up to {max_spawn} at once (kanban.max_spawn), each a paid agent session on \
             model.default for a ready card with an assignee; `kanban.max_spawn: 0` spawns none"
        );
    }
}

/// The board-wide pause a worker's exit code calls for (S4): upstream's rate-limit code pauses
/// as a 429 without `Retry-After`, its refused-for-good code as a 401/402/403.
pub fn exit_pause(code: i32, config: &Config) -> Option<PauseRecord> {
    let (lasts, reason) = match code {
        EXIT_RATE_LIMITED => (
            rate_limit_pause(None),
            format!("a worker exited {EXIT_RATE_LIMITED} (the provider rate-limited it)"),
        ),
        EXIT_PROVIDER_REFUSED => (
            config.kanban.provider_cooldown,
            format!("a worker exited {EXIT_PROVIDER_REFUSED} (the provider refused it for good)"),
        ),
        _ => return None,
    };
    Some(PauseRecord {
        until_ms: after(now_ms(), lasts),
        reason,
        request_started_ms: None,
    })
}

/// The one WARN a card parked by its spawn budget gets (S9), with the fields the suite counts
/// it by (`event=spawn_parked card=ID`) and what a person does about it.
pub fn warn_spawn_parked(task_id: &str, why: &str) {
    warn!(
        event = "spawn_parked",
        card = %task_id,
        "parked {task_id}: {why}; no worker is spawned for it again. Once its cause is fixed, \
         `hermes kanban unpark {task_id}` gives it a fresh budget"
    );
}

/// The directory the board lives in: workers' logs and locks go beside it.
pub fn board_dir(home: &Home) -> PathBuf {
    let db = home.db_path();
    db.parent()
        .map_or_else(|| home.root().to_owned(), Path::to_owned)
}

/// A fresh lock file for a worker: `<board dir>/workers/<random>.lock`.
pub fn new_lock(dir: &Path) -> std::io::Result<HeldLock> {
    let name = crate::store::new_lease().map_err(std::io::Error::other)?;
    HeldLock::create(&dir.join("workers").join(format!("{name}.lock")))
}

/// The program workers run: `$HERMES_BIN` (a path, or a name looked up on `PATH`) when set, as
/// upstream honours it, else this very executable.
pub fn worker_program() -> std::io::Result<OsString> {
    match std::env::var_os("HERMES_BIN").filter(|bin| !bin.is_empty()) {
        Some(bin) => Ok(bin),
        None => std::env::current_exe().map(PathBuf::into_os_string),
    }
}

/// The worker's command: upstream's argv and environment, a session of its own (so its group
/// can be stopped whole), the run's lock inherited, its output appended to its card's log.
fn worker_command(home: &Home, ticket: &RunTicket, lock: &HeldLock) -> std::io::Result<Command> {
    let dir = board_dir(home);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("{}.log", ticket.task_id)))?;
    let mut command = Command::new(worker_program()?);
    command
        .args(["-p", &ticket.profile, "chat", "-q"])
        .arg(task_message(&ticket.task_id))
        .current_dir(home.root())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .env("HERMES_KANBAN_TASK", &ticket.task_id)
        .env("HERMES_KANBAN_RUN_ID", ticket.run_id.to_string())
        .env("HERMES_KANBAN_CLAIM_LOCK", &ticket.lease)
        .env("HERMES_KANBAN_DB", home.db_path())
        .env("HERMES_KANBAN_BOARD", "default")
        .env("HERMES_HOME", home.root())
        .env("HERMES_PROFILE", &ticket.profile);
    let fd = lock.raw_fd();
    // SAFETY: setsid, fcntl, getpid and pwrite only, between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            liveness::inherit_in_child(fd)?;
            liveness::write_pid_in_child(fd)
        });
    }
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_upstreams_two_exit_codes_pause_the_board_each_as_its_refusal_would() {
        let config = Config::default();
        let now = now_ms();
        let limited = exit_pause(EXIT_RATE_LIMITED, &config).unwrap();
        assert!(limited.until_ms >= now + 59_000 && limited.until_ms <= now_ms() + 60_000);
        assert!(limited.reason.contains("exited 75"));
        let refused = exit_pause(EXIT_PROVIDER_REFUSED, &config).unwrap();
        assert!(refused.until_ms >= now + 899_000, "the provider cooldown");
        assert!(refused.reason.contains("exited 78"));
        for other in [0, 1, 2, 74, 76, 77, 79, 137, -1] {
            assert_eq!(exit_pause(other, &config), None, "{other}");
        }
    }

    #[test]
    fn a_workers_logs_and_locks_live_beside_its_board() {
        let home = Home::at("/srv/board");
        assert_eq!(board_dir(&home), PathBuf::from("/srv/board"));
        let dir = tempfile::tempdir().unwrap();
        let lock = new_lock(dir.path()).unwrap();
        assert_eq!(
            lock.path().parent(),
            Some(dir.path().join("workers").as_path())
        );
        assert_eq!(liveness::probe(lock.path()), Holder::Held);
        let other = new_lock(dir.path()).unwrap();
        assert_ne!(lock.path(), other.path(), "one lock file per run");
    }
}
