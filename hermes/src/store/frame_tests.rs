//! One time model across processes (contract §7, "Time"): readers whose wall clocks disagree
//! with the writer's, on the writer's boot and on another, and rows another build wrote by the
//! wall clock alone. Each process is a `Store` on the one board file with a frame of its own.

use std::collections::HashSet;
use std::time::Duration;

use rusqlite::params;

use super::tests::{ledger_of_attempt, other_process, scratch, triage_card};
use super::*;
use crate::clock::Frame;
use crate::core::{Backoff, CardBudget, CardRules, LedgerOutcome};

const HOUR: i64 = 3_600_000;
/// The wall time of the writer's moments in these tests.
const T: i64 = 1_800_000_000_000;
/// The writer's boot clock at `T`.
const BOOT_AT_T: i64 = 50_000_000;
/// The backoff of the card in backoff, as the hostile pass had it.
const BACKOFF: Duration = Duration::from_secs(600);
const CEILING: u32 = 4;

/// A process on boot `boot` whose wall clock reads `wall` when the boot's clock reads
/// [`BOOT_AT_T`]: wall minus boot is its offset.
fn frame(boot: &'static str, wall_at_boot_t: i64) -> Frame {
    Frame {
        boot: Some(boot),
        offset_ms: wall_at_boot_t - BOOT_AT_T,
    }
}

fn open_as(store: &Store, frame: Frame) -> Store {
    let mut other = Store::open(store.path()).unwrap();
    other.use_frame(frame);
    other
}

fn rules() -> CardRules {
    CardRules {
        budget: CardBudget::new(10),
        backoff: Backoff::new(BACKOFF),
    }
}

/// A gateway on boot `a`, its wall clock right, at its hourly ceiling of [`CEILING`] and with
/// one card failed at `T` (due again after [`BACKOFF`]).
fn gateway_at_its_ceiling(store: &mut Store) -> String {
    store.use_frame(frame("boot-a", T));
    let waiting = triage_card(store, "failed, in its backoff");
    let ticket = store
        .begin_attempt(
            &waiting,
            &BeginPolicy {
                origin: Origin::Gateway,
                force: false,
                now_ms: T,
                rules: rules(),
                calls_per_hour: 100,
                claim_until_ms: T + 60_000,
            },
        )
        .unwrap()
        .unwrap();
    for _ in 0..CEILING {
        let row = ledger_of_attempt(store, &waiting, 1, T);
        store
            .ledger_close(row, &LedgerClose::new(T + 500, LedgerOutcome::Malformed))
            .unwrap();
    }
    let recorded = store
        .record_failure(
            &waiting,
            &FailureRecord {
                attempt: ticket.attempt,
                fence: Some(ticket.lease),
                origin: Origin::Gateway,
                reason: "malformed".into(),
                fault: None,
                rules: rules(),
                now_ms: T + 1_000,
                pause: Some(PauseRecord {
                    until_ms: T + 1_000 + 900_000,
                    reason: "HTTP 401".into(),
                    request_started_ms: Some(T),
                }),
            },
        )
        .unwrap();
    assert_eq!(recorded, Some(false));
    waiting
}

#[test]
fn a_reader_whose_wall_clock_is_behind_or_ahead_on_the_same_boot_shortens_nothing() {
    let (_dir, mut gateway) = scratch();
    let waiting = gateway_at_its_ceiling(&mut gateway);
    for skew in [-2 * HOUR, 2 * HOUR, 30 * 24 * HOUR] {
        // Two seconds later by the boot's clock; the reader's wall clock is `skew` off.
        let sweep = open_as(&gateway, frame("boot-a", T + skew));
        let now = T + skew + 2_000;
        assert!(
            matches!(
                sweep.auto_gate(now, CEILING).unwrap(),
                AutoGate::Paused { .. }
            ),
            "skew {skew}: the pause of 15 min holds"
        );
        let pause = sweep.pause_in_force(now).unwrap().unwrap();
        assert_eq!(
            pause.until_ms,
            T + skew + 901_000,
            "skew {skew}: seen in its frame"
        );
        assert_eq!(
            calls::count_last_hour(&sweep, now),
            u64::from(CEILING),
            "skew {skew}: every call of the last hour counts"
        );
        assert!(
            sweep.due_cards(now, 5, &HashSet::new()).unwrap().is_empty(),
            "skew {skew}: a card in a 600 s backoff is not due 2 s later"
        );
        let due = sweep.get(&waiting).unwrap().decompose.unwrap().due_at_ms;
        assert_eq!(due, Some(T + skew + 1_000 + 600_000), "skew {skew}");
        let calls = sweep.calls(&CallFilter::default()).unwrap();
        assert!(
            calls.iter().all(|c| c.started_at_ms == T + skew),
            "skew {skew}"
        );
        // Nothing was written by reading: the gateway still sees what it wrote.
        assert_eq!(
            gateway.get(&waiting).unwrap().decompose.unwrap().due_at_ms,
            Some(T + 601_000)
        );
        // The reader's own clock, measured by the boot: the backoff ends when it ends.
        let later = T + skew + 601_000;
        assert_eq!(
            sweep.due_cards(later, 5, &HashSet::new()).unwrap(),
            std::slice::from_ref(&waiting)
        );
    }
}

#[test]
fn a_reader_on_another_boot_compares_wall_times_and_never_writes_them() {
    let (_dir, mut gateway) = scratch();
    let waiting = gateway_at_its_ceiling(&mut gateway);
    // After a reboot (another boot id), the clock reads the same wall time as the writer's:
    // the rows are read by their wall times.
    let rebooted = open_as(&gateway, frame("boot-b", T + 10_000_000));
    let now = T + 2_000;
    assert_eq!(calls::count_last_hour(&rebooted, now), u64::from(CEILING));
    assert!(rebooted
        .due_cards(now, 5, &HashSet::new())
        .unwrap()
        .is_empty());
    assert_eq!(
        rebooted.get(&waiting).unwrap().decompose.unwrap().due_at_ms,
        Some(T + 601_000)
    );
    // A wall clock behind the writer's: the rows are in its future, so they count and wait
    // (a wrong clock can lengthen a wait here, never shorten one).
    let behind = T - 2 * HOUR;
    assert_eq!(
        calls::count_last_hour(&rebooted, behind),
        u64::from(CEILING)
    );
    assert!(rebooted
        .due_cards(behind, 5, &HashSet::new())
        .unwrap()
        .is_empty());
    // An hour and more later by the wall clock, the calls are out of the hour and the card due.
    let later = T + HOUR + 1_000;
    assert_eq!(calls::count_last_hour(&rebooted, later), 0);
    assert_eq!(
        rebooted.due_cards(later, 5, &HashSet::new()).unwrap(),
        std::slice::from_ref(&waiting)
    );
    // And a wall-clock reader on its own: the same.
    let no_boot = open_as(&gateway, Frame::WALL);
    assert_eq!(calls::count_last_hour(&no_boot, now), u64::from(CEILING));
}

#[test]
fn due_cards_of_several_boots_come_in_the_readers_order() {
    let (_dir, store) = scratch();
    let mut store = store;
    // Three cards scheduled by three writers: one on boot a (due by its clock 3 s after
    // BOOT_AT_T, written by a clock reading T then), one of boot b (due at the wall time
    // T + 1 s) and one of an older build (wall only, T + 2 s).
    let ours = triage_card(&mut store, "boot a's");
    let theirs = triage_card(&mut store, "boot b's");
    let older = triage_card(&mut store, "an older build's");
    let schedule = |id: &str, wall: i64, boot: Option<(&str, i64)>| {
        other_process(&store)
            .execute(
                "UPDATE hermes_decompose_state SET due_at_ms = ?2, due_boot = ?3, due_boot_ms = ?4
                 WHERE task_id = ?1",
                params![id, wall, boot.map(|b| b.0), boot.map(|b| b.1)],
            )
            .unwrap();
    };
    schedule(&ours, T + 3_000, Some(("boot-a", BOOT_AT_T + 3_000)));
    schedule(&theirs, T + 1_000, Some(("boot-b", 7)));
    schedule(&older, T + 2_000, None);
    // A reader on a third boot: all by wall time.
    let third = open_as(&store, frame("boot-c", T));
    let order = third.due_cards(T + 10_000, 5, &HashSet::new()).unwrap();
    assert_eq!(order, [theirs.clone(), older.clone(), ours.clone()]);
    assert!(third
        .due_cards(T + 999, 5, &HashSet::new())
        .unwrap()
        .is_empty());
    // A reader on boot a whose wall clock is 5 h slow sees its boot's card due at its
    // T - 5 h + 3 s, long before the others (their wall times are 5 h in its future).
    let reader = open_as(&store, frame("boot-a", T - 5 * HOUR));
    let soon = T - 5 * HOUR + 3_000;
    assert_eq!(
        reader.due_cards(soon, 5, &HashSet::new()).unwrap(),
        std::slice::from_ref(&ours)
    );
    assert!(reader
        .due_cards(soon - 1, 5, &HashSet::new())
        .unwrap()
        .is_empty());
    let order = reader.due_cards(T + 10_000, 5, &HashSet::new()).unwrap();
    assert_eq!(order, [ours.clone(), theirs.clone(), older.clone()]);
    assert_eq!(
        reader.due_cards(T + 10_000, 2, &HashSet::new()).unwrap(),
        [ours, theirs]
    );
}

#[test]
fn a_wall_time_changed_without_its_boot_clock_is_read_by_the_wall_clock() {
    let (_dir, mut store) = scratch();
    store.use_frame(frame("boot-a", T));
    // Scheduled at its creation, by this process's clock, in the frame of boot a.
    let id = triage_card(&mut store, "edited by hand");
    let read_boot = |store: &Store| -> (Option<String>, Option<i64>) {
        other_process(store)
            .query_row(
                "SELECT due_boot, due_boot_ms FROM hermes_decompose_state WHERE task_id = ?1",
                [&id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
    };
    let (boot, boot_ms) = read_boot(&store);
    assert_eq!(boot.as_deref(), Some("boot-a"));
    assert!(boot_ms.is_some());
    // An older build, or a person, moves the due time a day on by the wall clock only.
    other_process(&store)
        .execute(
            "UPDATE hermes_decompose_state SET due_at_ms = ?2 WHERE task_id = ?1",
            params![id, T + 24 * HOUR],
        )
        .unwrap();
    assert_eq!(read_boot(&store), (None, None));
    assert!(store
        .due_cards(T + HOUR, 5, &HashSet::new())
        .unwrap()
        .is_empty());
    assert_eq!(
        store.get(&id).unwrap().decompose.unwrap().due_at_ms,
        Some(T + 24 * HOUR)
    );
}

#[test]
fn a_board_of_an_older_build_gains_the_boot_columns_and_reads_by_wall_time() {
    let (dir, mut store) = scratch();
    let id = triage_card(&mut store, "from before boot clocks");
    let path = store.path().to_owned();
    drop(store);
    // The older board: none of the boot columns, triggers or indexes.
    let conn = rusqlite::Connection::open(&path).unwrap();
    for sql in [
        "DROP TRIGGER hermes_trg_due_wall_only",
        "DROP INDEX hermes_idx_decompose_due_boot",
        "DROP INDEX hermes_idx_decompose_due_wall",
        "ALTER TABLE hermes_decompose_state DROP COLUMN due_boot",
        "ALTER TABLE hermes_decompose_state DROP COLUMN due_boot_ms",
        "DELETE FROM hermes_board_state WHERE key = 'schema_checked'",
    ] {
        conn.execute_batch(sql).unwrap();
    }
    conn.execute(
        "UPDATE hermes_decompose_state SET due_at_ms = ?2 WHERE task_id = ?1",
        params![id, T + 5_000],
    )
    .unwrap();
    drop(conn);
    let mut reopened = Store::open(&path).unwrap();
    reopened.use_frame(frame("boot-a", T));
    assert!(reopened
        .due_cards(T, 5, &HashSet::new())
        .unwrap()
        .is_empty());
    assert_eq!(
        reopened.due_cards(T + 5_000, 5, &HashSet::new()).unwrap(),
        [id]
    );
    drop(dir);
}

/// The spawn half's moments (contract §7b): a gateway on boot a spawned a worker at `T`, whose
/// requests reached the hourly ceiling, then saw it crash at `T + 1 s`: the card waits out a
/// 600 s spawn backoff. Returns the card, the crashed run's and another card.
mod spawns {
    use super::*;
    use crate::core::{RunOutcome, SpawnBudget, SpawnRules};
    use crate::store::{Gone, RunClose, SpawnPolicy, WorkerRequestOpen};

    pub(super) fn spawn_rules() -> SpawnRules {
        SpawnRules {
            budget: SpawnBudget::new(10),
            backoff: Backoff::new(BACKOFF),
        }
    }

    pub(super) fn policy(now_ms: i64, calls_per_hour: u32) -> SpawnPolicy {
        SpawnPolicy {
            origin: "gateway",
            owner: crate::process::token().to_owned(),
            rules: spawn_rules(),
            max_spawn: 10,
            calls_per_hour,
            runtime: Duration::from_secs(60),
            lock_path: "/nonexistent/worker.lock".to_owned(),
            now_ms,
        }
    }

    pub(super) fn ready_card(store: &mut Store, title: &str) -> String {
        store
            .create_task(&NewTask {
                title: title.into(),
                assignee: Some("coder".into()),
                ..NewTask::default()
            })
            .unwrap()
            .id
    }

    /// The card in its backoff, a card with a live worker started at `T`, and a fresh card.
    pub(super) fn gateway_with_workers(store: &mut Store) -> (String, String, String) {
        store.use_frame(frame("boot-a", T));
        let failed = ready_card(store, "its worker crashed");
        let running = ready_card(store, "its worker runs");
        let fresh = ready_card(store, "never spawned");
        let ticket = store.claim_run(&failed, &policy(T, 100)).unwrap().unwrap();
        store.claim_run(&running, &policy(T, 100)).unwrap().unwrap();
        for turn in 1..=CEILING {
            store
                .worker_ledger_open(&WorkerRequestOpen {
                    run_id: ticket.run_id,
                    task_id: failed.clone(),
                    lease: ticket.lease.clone(),
                    turn,
                    try_no: 1,
                    started_at_ms: T,
                    model: "m".into(),
                    calls_per_hour: 100,
                })
                .unwrap()
                .unwrap();
        }
        let closed = store
            .close_run(&RunClose::new(
                ticket.run_id,
                RunOutcome::Crashed,
                "crashed",
                "gateway",
                spawn_rules(),
                T + 1_000,
            ))
            .unwrap()
            .unwrap();
        assert!(closed.outcome.charged());
        // Its processes are gone too: nothing but the backoff holds the card back.
        store
            .worker_gone(&Gone {
                run_id: ticket.run_id,
                exit: Some(Some(1)),
                rules: spawn_rules(),
                by: "gateway".into(),
                now_ms: T + 1_000,
                pause: None,
            })
            .unwrap();
        (failed, running, fresh)
    }
}

#[test]
fn a_spawn_backoff_a_workers_start_and_its_requests_are_read_by_the_boot_clock() {
    let (_dir, mut gateway) = scratch();
    let (failed, running, fresh) = spawns::gateway_with_workers(&mut gateway);
    let due = T + 1_000 + 600_000;
    assert_eq!(
        gateway.spawn_state(&failed).unwrap().unwrap().due_at_ms,
        Some(due)
    );
    for skew in [-2 * HOUR, 2 * HOUR, 30 * 24 * HOUR] {
        let mut sweep = open_as(&gateway, frame("boot-a", T + skew));
        let now = T + skew + 2_000;
        // The backoff ends 600 s after the crash by the boot's clock, seen in the reader's frame:
        // a clock behind does not stretch it, a clock ahead does not shorten it.
        let seen = sweep.spawn_state(&failed).unwrap().unwrap().due_at_ms;
        assert_eq!(seen, Some(due + skew), "skew {skew}");
        assert_eq!(
            sweep.get(&failed).unwrap().spawn.unwrap().due_at_ms,
            Some(due + skew),
            "skew {skew}: show reads it the same way"
        );
        let spawnable = sweep.spawnable(now, 5, &HashSet::new()).unwrap();
        assert_eq!(spawnable, std::slice::from_ref(&fresh), "skew {skew}");
        let later = sweep.spawnable(due + skew, 5, &HashSet::new()).unwrap();
        assert_eq!(later, [fresh.clone(), failed.clone()], "skew {skew}");
        // The running worker started at `T` on the boot's clock: its runtime limit is measured
        // from there.
        let live = sweep.live_spawns().unwrap();
        let start = live.iter().find(|l| l.task_id == running).unwrap();
        assert_eq!(start.started_at_ms, T + skew, "skew {skew}");
        // The worker's requests of the last hour count against the shared ceiling.
        assert_eq!(calls::count_last_hour(&sweep, now), u64::from(CEILING));
        assert_eq!(
            sweep
                .claim_run(&fresh, &spawns::policy(now, CEILING))
                .unwrap(),
            Err(ClaimRefusal::Board(BeginRefusal::CeilingReached {
                calls: u64::from(CEILING),
                limit: CEILING
            })),
            "skew {skew}"
        );
    }
}

#[test]
fn a_spawn_backoff_on_another_boot_is_read_by_its_wall_time() {
    let (_dir, mut gateway) = scratch();
    let (failed, running, fresh) = spawns::gateway_with_workers(&mut gateway);
    let due = T + 601_000;
    let rebooted = open_as(&gateway, frame("boot-b", T + 10_000_000));
    assert_eq!(
        rebooted.spawn_state(&failed).unwrap().unwrap().due_at_ms,
        Some(due)
    );
    // A wall clock behind the writer's: the backoff is in its future, so it waits longer.
    for now in [T + 2_000, T - 2 * HOUR] {
        assert_eq!(
            rebooted.spawnable(now, 5, &HashSet::new()).unwrap(),
            std::slice::from_ref(&fresh)
        );
        assert_eq!(calls::count_last_hour(&rebooted, now), u64::from(CEILING));
    }
    assert_eq!(
        rebooted.spawnable(due, 5, &HashSet::new()).unwrap(),
        [fresh, failed]
    );
    let live = rebooted.live_spawns().unwrap();
    assert_eq!(live[0].task_id, running);
    assert_eq!(live[0].started_at_ms, T);
}

#[test]
fn a_spawn_time_changed_without_its_boot_clock_is_read_by_the_wall_clock() {
    let (_dir, mut gateway) = scratch();
    let (failed, running, _) = spawns::gateway_with_workers(&mut gateway);
    let boot_of = |sql: &str, id: &str| -> (Option<String>, Option<i64>) {
        other_process(&gateway)
            .query_row(sql, [id], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
    };
    let due_sql = "SELECT due_boot, due_boot_ms FROM hermes_spawn_state WHERE task_id = ?1";
    let start_sql = "SELECT boot, started_boot_ms FROM hermes_spawn_ledger WHERE task_id = ?1";
    assert_eq!(boot_of(due_sql, &failed).0.as_deref(), Some("boot-a"));
    assert_eq!(boot_of(start_sql, &running).0.as_deref(), Some("boot-a"));
    // An older build, or a person, moves both by the wall clock only: the boot clocks go.
    let raw = other_process(&gateway);
    raw.execute(
        "UPDATE hermes_spawn_state SET due_at_ms = ?2 WHERE task_id = ?1",
        params![failed, T + 24 * HOUR],
    )
    .unwrap();
    raw.execute(
        "UPDATE hermes_spawn_ledger SET started_at_ms = ?2 WHERE task_id = ?1",
        params![running, T + HOUR],
    )
    .unwrap();
    drop(raw);
    assert_eq!(boot_of(due_sql, &failed), (None, None));
    assert_eq!(boot_of(start_sql, &running), (None, None));
    let sweep = open_as(&gateway, frame("boot-a", T - 2 * HOUR));
    assert_eq!(
        sweep.spawn_state(&failed).unwrap().unwrap().due_at_ms,
        Some(T + 24 * HOUR)
    );
    assert_eq!(sweep.live_spawns().unwrap()[0].started_at_ms, T + HOUR);
}

/// The hourly ceiling's count, as the guards take it.
mod calls {
    use super::*;

    pub(super) fn count_last_hour(store: &Store, now: i64) -> u64 {
        store
            .read(|conn| super::super::guards::calls_since(conn, now - HOUR))
            .unwrap()
    }
}
