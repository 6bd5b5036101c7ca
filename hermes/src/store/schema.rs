//! The on-disk schema: upstream's tables (same names, columns, types and defaults, so either
//! implementation reads the other's board) plus our own `hermes_*` tables.
//!
//! Migrations are strictly additive. Opening a board only ever adds what is missing (a table,
//! a column via `ALTER TABLE … ADD COLUMN`, an index, a trigger); it never drops, renames or
//! rewrites, and
//! it leaves `PRAGMA user_version` alone (upstream keeps it at 0).

use rusqlite::{Connection, OptionalExtension};

use super::{SqlResultExt, StoreError};
use crate::core::LedgerOutcome;

/// One column: its name and the declaration that follows the name in `CREATE TABLE`.
pub(crate) struct Column {
    pub name: &'static str,
    pub decl: &'static str,
}

/// One table, in column order.
pub(crate) struct Table {
    pub name: &'static str,
    pub columns: &'static [Column],
    /// Table constraints after the columns (a composite primary key).
    pub constraints: &'static [&'static str],
}

/// One index; created only after every column it covers exists.
pub(crate) struct Index {
    pub name: &'static str,
    pub table: &'static str,
    pub on: &'static str,
    pub partial: Option<&'static str>,
}

macro_rules! columns {
    ($($name:literal $decl:literal),* $(,)?) => {
        &[$(Column { name: $name, decl: $decl }),*]
    };
}

/// Every table, upstream's first. The order matters only for readability of `.schema`.
pub(crate) const TABLES: &[Table] = &[
    Table {
        name: "tasks",
        columns: columns![
            "id" "TEXT PRIMARY KEY",
            "title" "TEXT NOT NULL",
            "body" "TEXT",
            "assignee" "TEXT",
            "status" "TEXT NOT NULL",
            "priority" "INTEGER DEFAULT 0",
            "created_by" "TEXT",
            "created_at" "INTEGER NOT NULL",
            "started_at" "INTEGER",
            "completed_at" "INTEGER",
            "workspace_kind" "TEXT NOT NULL DEFAULT 'scratch'",
            "workspace_path" "TEXT",
            "branch_name" "TEXT",
            "project_id" "TEXT",
            "claim_lock" "TEXT",
            "claim_expires" "INTEGER",
            "tenant" "TEXT",
            "result" "TEXT",
            "idempotency_key" "TEXT",
            "consecutive_failures" "INTEGER NOT NULL DEFAULT 0",
            "worker_pid" "INTEGER",
            "last_failure_error" "TEXT",
            "max_runtime_seconds" "INTEGER",
            "last_heartbeat_at" "INTEGER",
            "current_run_id" "INTEGER",
            "workflow_template_id" "TEXT",
            "current_step_key" "TEXT",
            "skills" "TEXT",
            "model_override" "TEXT",
            "max_retries" "INTEGER",
            "goal_mode" "INTEGER NOT NULL DEFAULT 0",
            "goal_max_turns" "INTEGER",
            "session_id" "TEXT",
            "block_kind" "TEXT",
            "block_recurrences" "INTEGER NOT NULL DEFAULT 0",
        ],
        constraints: &[],
    },
    Table {
        name: "task_links",
        columns: columns![
            "parent_id" "TEXT NOT NULL",
            "child_id" "TEXT NOT NULL",
        ],
        constraints: &["PRIMARY KEY (parent_id, child_id)"],
    },
    Table {
        name: "task_comments",
        columns: columns![
            "id" "INTEGER PRIMARY KEY AUTOINCREMENT",
            "task_id" "TEXT NOT NULL",
            "author" "TEXT NOT NULL",
            "body" "TEXT NOT NULL",
            "created_at" "INTEGER NOT NULL",
        ],
        constraints: &[],
    },
    Table {
        name: "task_events",
        columns: columns![
            "id" "INTEGER PRIMARY KEY AUTOINCREMENT",
            "task_id" "TEXT NOT NULL",
            "run_id" "INTEGER",
            "kind" "TEXT NOT NULL",
            "payload" "TEXT",
            "created_at" "INTEGER NOT NULL",
        ],
        constraints: &[],
    },
    Table {
        name: "task_runs",
        columns: columns![
            "id" "INTEGER PRIMARY KEY AUTOINCREMENT",
            "task_id" "TEXT NOT NULL",
            "profile" "TEXT",
            "step_key" "TEXT",
            "status" "TEXT NOT NULL",
            "claim_lock" "TEXT",
            "claim_expires" "INTEGER",
            "worker_pid" "INTEGER",
            "max_runtime_seconds" "INTEGER",
            "last_heartbeat_at" "INTEGER",
            "started_at" "INTEGER NOT NULL",
            "ended_at" "INTEGER",
            "outcome" "TEXT",
            "summary" "TEXT",
            "metadata" "TEXT",
            "error" "TEXT",
        ],
        constraints: &[],
    },
    Table {
        name: "task_attachments",
        columns: columns![
            "id" "INTEGER PRIMARY KEY AUTOINCREMENT",
            "task_id" "TEXT NOT NULL",
            "filename" "TEXT NOT NULL",
            "stored_path" "TEXT NOT NULL",
            "content_type" "TEXT",
            "size" "INTEGER NOT NULL DEFAULT 0",
            "uploaded_by" "TEXT",
            "created_at" "INTEGER NOT NULL",
        ],
        constraints: &[],
    },
    Table {
        name: "kanban_notify_subs",
        columns: columns![
            "task_id" "TEXT NOT NULL",
            "platform" "TEXT NOT NULL",
            "chat_id" "TEXT NOT NULL",
            "thread_id" "TEXT NOT NULL DEFAULT ''",
            "user_id" "TEXT",
            "notifier_profile" "TEXT",
            "created_at" "INTEGER NOT NULL",
            "last_event_id" "INTEGER NOT NULL DEFAULT 0",
        ],
        constraints: &["PRIMARY KEY (task_id, platform, chat_id, thread_id)"],
    },
    // Per-card decompose bookkeeping. An attempt is counted here BEFORE its paid request is
    // sent, so a crash after paying cannot hand the card a fresh budget. `due_at_ms` NULL means
    // "never picked automatically" (decomposed, parked, or opted out).
    Table {
        name: "hermes_decompose_state",
        columns: columns![
            "task_id" "TEXT PRIMARY KEY",
            "attempts" "INTEGER NOT NULL DEFAULT 0",
            "last_attempt_at_ms" "INTEGER",
            "last_error" "TEXT",
            "due_at_ms" "INTEGER",
            "parked_at_ms" "INTEGER",
            "opt_out" "INTEGER NOT NULL DEFAULT 0",
            // `due_at_ms` on the writer's boot clock, and the boot's id (see `store::frame`).
            "due_boot" "TEXT",
            "due_boot_ms" "INTEGER",
        ],
        constraints: &[],
    },
    // One row per aux HTTP request, written whatever its outcome: the bill, itemised.
    Table {
        name: "hermes_aux_ledger",
        columns: columns![
            "id" "INTEGER PRIMARY KEY AUTOINCREMENT",
            "task_id" "TEXT",
            "purpose" "TEXT NOT NULL",
            "origin" "TEXT NOT NULL",
            "attempt" "INTEGER",
            "try" "INTEGER NOT NULL DEFAULT 1",
            "started_at_ms" "INTEGER NOT NULL",
            "ended_at_ms" "INTEGER",
            "outcome" "TEXT NOT NULL",
            "http_status" "INTEGER",
            "prompt_tokens" "INTEGER",
            "completion_tokens" "INTEGER",
            "detail" "TEXT",
            // The model the request named, recorded as it leaves; NULL on rows written before
            // this column existed (added to such boards in place, old rows left unknown).
            "model" "TEXT",
            // The worker run a `worker` row's request belongs to (`task_runs.id`); NULL on a
            // decompose call. `attempt` is then the run's turn, `try` the try within it.
            "run_id" "INTEGER",
            // The writer's boot, and the request's start and end on its clock (the end only when
            // the row was closed on the same boot): what the hourly ceiling counts by.
            "boot" "TEXT",
            "started_boot_ms" "INTEGER",
            "ended_boot_ms" "INTEGER",
        ],
        constraints: &[],
    },
    // Per-card spawn bookkeeping (S1, S3): a spawn is charged here BEFORE its worker is forked,
    // and given back only by a run end that is not a failure (`core::spawn`), so a crash of the
    // worker, the gateway or both cannot hand the card a fresh budget.
    Table {
        name: "hermes_spawn_state",
        columns: columns![
            "task_id" "TEXT PRIMARY KEY",
            "spawns" "INTEGER NOT NULL DEFAULT 0",
            "failures" "INTEGER NOT NULL DEFAULT 0",
            "due_at_ms" "INTEGER",
            "parked_at_ms" "INTEGER",
            "last_error" "TEXT",
            // `due_at_ms` on the writer's boot clock, and the boot's id (see `store::frame`).
            "due_boot" "TEXT",
            "due_boot_ms" "INTEGER",
        ],
        constraints: &[],
    },
    // The spawn ledger (S9): one row per worker, written with its run and its claim before the
    // fork. `exited_at_ms` stays NULL while any process of the worker's tree may still run (its
    // lock, `lock_path`, is held): such rows are the board's live workers, which `max_spawn`
    // caps (S5). `owner` names the process that spawned it (see `process::token`). The run's
    // end fills `outcome`, `charged` and the run's requests and tokens.
    Table {
        name: "hermes_spawn_ledger",
        columns: columns![
            "run_id" "INTEGER PRIMARY KEY",
            "task_id" "TEXT NOT NULL",
            "spawn" "INTEGER NOT NULL",
            "origin" "TEXT NOT NULL",
            "profile" "TEXT",
            "owner" "TEXT NOT NULL",
            "lock_path" "TEXT NOT NULL",
            "pid" "INTEGER",
            "started_at_ms" "INTEGER NOT NULL",
            "exited_at_ms" "INTEGER",
            "outcome" "TEXT",
            "charged" "INTEGER",
            "requests" "INTEGER NOT NULL DEFAULT 0",
            "prompt_tokens" "INTEGER",
            "completion_tokens" "INTEGER",
            "detail" "TEXT",
            // The spawner's boot, and the worker's start on its clock: what its runtime limit
            // is measured from (see `store::frame`).
            "boot" "TEXT",
            "started_boot_ms" "INTEGER",
        ],
        constraints: &[],
    },
    // The attempt in flight on a card, if any: recorded with the attempt, removed when its end
    // is recorded. Until then no other attempt may pay for the card (B1, B4). `owner` names the
    // process (see `process::token`), so a live holder keeps the card even if the clock jumps,
    // and a dead one's claim is void at once; `until_ms` bounds it when liveness is unknown.
    // `lease` is the attempt's own random token: every write the attempt makes afterwards (a
    // request's ledger row, its answer, its failure) commits only while the claim still carries
    // it, so a holder that wakes after its claim was taken over changes nothing.
    Table {
        name: "hermes_decompose_claims",
        columns: columns![
            "task_id" "TEXT PRIMARY KEY",
            "attempt" "INTEGER NOT NULL",
            "origin" "TEXT NOT NULL",
            "owner" "TEXT NOT NULL",
            "claimed_at_ms" "INTEGER NOT NULL",
            "until_ms" "INTEGER NOT NULL",
            "lease" "TEXT",
            "boot" "TEXT",
            "claimed_boot_ms" "INTEGER",
            "until_boot_ms" "INTEGER",
        ],
        constraints: &[],
    },
    // Board-wide switches with an optional expiry (provider cooldowns, rate-limit pauses).
    Table {
        name: "hermes_board_state",
        columns: columns![
            "key" "TEXT PRIMARY KEY",
            "value" "TEXT",
            "until_ms" "INTEGER",
            "updated_at_ms" "INTEGER NOT NULL",
            "boot" "TEXT",
            "until_boot_ms" "INTEGER",
            "updated_boot_ms" "INTEGER",
        ],
        constraints: &[],
    },
];

macro_rules! index {
    ($name:literal, $table:literal, $on:literal) => {
        Index {
            name: $name,
            table: $table,
            on: $on,
            partial: None,
        }
    };
    ($name:literal, $table:literal, $on:literal, where $cond:expr) => {
        Index {
            name: $name,
            table: $table,
            on: $on,
            partial: Some($cond),
        }
    };
}

/// Every index, under upstream's names for upstream's tables.
pub(crate) const INDEXES: &[Index] = &[
    index!("idx_tasks_assignee_status", "tasks", "assignee, status"),
    index!("idx_tasks_status", "tasks", "status"),
    index!("idx_links_child", "task_links", "child_id"),
    index!("idx_links_parent", "task_links", "parent_id"),
    index!("idx_comments_task", "task_comments", "task_id, created_at"),
    index!("idx_events_task", "task_events", "task_id, created_at"),
    index!("idx_runs_task", "task_runs", "task_id, started_at"),
    index!("idx_runs_status", "task_runs", "status"),
    index!(
        "idx_attachments_task",
        "task_attachments",
        "task_id, created_at"
    ),
    index!("idx_notify_task", "kanban_notify_subs", "task_id"),
    index!("idx_tasks_tenant", "tasks", "tenant"),
    index!("idx_tasks_idempotency", "tasks", "idempotency_key"),
    index!("idx_tasks_session_id", "tasks", "session_id"),
    index!("idx_events_run", "task_events", "run_id, id"),
    index!("hermes_idx_decompose_due", "hermes_decompose_state", "due_at_ms", where "due_at_ms IS NOT NULL"),
    index!(
        "hermes_idx_ledger_started",
        "hermes_aux_ledger",
        "started_at_ms"
    ),
    index!(
        "hermes_idx_ledger_task",
        "hermes_aux_ledger",
        "task_id, started_at_ms"
    ),
    index!("hermes_idx_ledger_in_flight", "hermes_aux_ledger", "task_id, attempt", where LEDGER_IN_FLIGHT),
    index!("hermes_idx_ledger_run", "hermes_aux_ledger", "run_id", where "run_id IS NOT NULL"),
    index!("hermes_idx_spawns_live", "hermes_spawn_ledger", "run_id", where "exited_at_ms IS NULL"),
    index!(
        "hermes_idx_spawns_task",
        "hermes_spawn_ledger",
        "task_id, started_at_ms"
    ),
    // The due cards of one boot, by its clock (a reader on that boot) and by the wall clock (a
    // reader on another); and the calls of one boot by its clock (the hourly ceiling).
    index!("hermes_idx_decompose_due_boot", "hermes_decompose_state", "due_boot, due_boot_ms", where "due_at_ms IS NOT NULL"),
    index!("hermes_idx_decompose_due_wall", "hermes_decompose_state", "due_boot, due_at_ms", where "due_at_ms IS NOT NULL"),
    index!(
        "hermes_idx_ledger_boot_started",
        "hermes_aux_ledger",
        "boot, started_boot_ms"
    ),
];

/// One trigger: what it watches and what it does, after `CREATE TRIGGER IF NOT EXISTS name`.
pub(crate) struct Trigger {
    pub name: &'static str,
    pub body: &'static str,
}

/// A wall time changed without its boot clock (by an older build, or a person's `UPDATE`) would
/// leave the boot clock describing another moment, which a reader on that boot trusts first:
/// such a change drops the row's boot clock, and the time is read by its wall time (see
/// `store::frame`). This build always writes both together.
pub(crate) const TRIGGERS: &[Trigger] = &[
    Trigger {
        name: "hermes_trg_due_wall_only",
        body: "AFTER UPDATE OF due_at_ms ON hermes_decompose_state
               WHEN NEW.due_boot_ms IS OLD.due_boot_ms AND NEW.due_at_ms IS NOT OLD.due_at_ms
               BEGIN UPDATE hermes_decompose_state SET due_boot = NULL, due_boot_ms = NULL
                     WHERE task_id = NEW.task_id; END",
    },
    Trigger {
        name: "hermes_trg_ledger_wall_only",
        body: "AFTER UPDATE OF started_at_ms ON hermes_aux_ledger
               WHEN NEW.started_boot_ms IS OLD.started_boot_ms
                    AND NEW.started_at_ms IS NOT OLD.started_at_ms
               BEGIN UPDATE hermes_aux_ledger
                     SET boot = NULL, started_boot_ms = NULL, ended_boot_ms = NULL
                     WHERE id = NEW.id; END",
    },
    Trigger {
        name: "hermes_trg_claim_wall_only",
        body: "AFTER UPDATE OF claimed_at_ms, until_ms ON hermes_decompose_claims
               WHEN NEW.until_boot_ms IS OLD.until_boot_ms
                    AND (NEW.until_ms IS NOT OLD.until_ms
                         OR NEW.claimed_at_ms IS NOT OLD.claimed_at_ms)
               BEGIN UPDATE hermes_decompose_claims
                     SET boot = NULL, claimed_boot_ms = NULL, until_boot_ms = NULL
                     WHERE task_id = NEW.task_id; END",
    },
    Trigger {
        name: "hermes_trg_board_state_wall_only",
        body: "AFTER UPDATE OF until_ms, updated_at_ms ON hermes_board_state
               WHEN NEW.until_boot_ms IS OLD.until_boot_ms
                    AND NEW.updated_boot_ms IS OLD.updated_boot_ms
                    AND (NEW.until_ms IS NOT OLD.until_ms
                         OR NEW.updated_at_ms IS NOT OLD.updated_at_ms)
               BEGIN UPDATE hermes_board_state
                     SET boot = NULL, until_boot_ms = NULL, updated_boot_ms = NULL
                     WHERE key = NEW.key; END",
    },
    Trigger {
        name: "hermes_trg_spawn_due_wall_only",
        body: "AFTER UPDATE OF due_at_ms ON hermes_spawn_state
               WHEN NEW.due_boot_ms IS OLD.due_boot_ms AND NEW.due_at_ms IS NOT OLD.due_at_ms
               BEGIN UPDATE hermes_spawn_state SET due_boot = NULL, due_boot_ms = NULL
                     WHERE task_id = NEW.task_id; END",
    },
    Trigger {
        name: "hermes_trg_spawn_started_wall_only",
        body: "AFTER UPDATE OF started_at_ms ON hermes_spawn_ledger
               WHEN NEW.started_boot_ms IS OLD.started_boot_ms
                    AND NEW.started_at_ms IS NOT OLD.started_at_ms
               BEGIN UPDATE hermes_spawn_ledger SET boot = NULL, started_boot_ms = NULL
                     WHERE run_id = NEW.run_id; END",
    },
];

/// `outcome = 'in_flight'`, with the value spelt by [`LedgerOutcome`]: an index's condition
/// cannot take a bound parameter, and the ledger's values must have one spelling.
const LEDGER_IN_FLIGHT: &str = {
    const PARTS: [&str; 3] = ["outcome = '", LedgerOutcome::InFlight.as_str(), "'"];
    const BYTES: [u8; joined_len(&PARTS)] = joined(&PARTS);
    match std::str::from_utf8(&BYTES) {
        Ok(text) => text,
        Err(_) => panic!("the index condition is not UTF-8"),
    }
};

const fn joined_len(parts: &[&str]) -> usize {
    let mut len = 0;
    let mut p = 0;
    while p < parts.len() {
        len += parts[p].len();
        p += 1;
    }
    len
}

/// `parts` one after another, at compile time; `N` is [`joined_len`] of them.
const fn joined<const N: usize>(parts: &[&str]) -> [u8; N] {
    let mut out = [0; N];
    let mut at = 0;
    let mut p = 0;
    while p < parts.len() {
        let bytes = parts[p].as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            out[at] = bytes[i];
            at += 1;
            i += 1;
        }
        p += 1;
    }
    out
}

impl Table {
    fn create_sql(&self) -> String {
        let mut parts: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("    {:<20} {}", c.name, c.decl))
            .collect();
        parts.extend(self.constraints.iter().map(|c| format!("    {c}")));
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n{}\n)",
            self.name,
            parts.join(",\n")
        )
    }
}

impl Index {
    fn create_sql(&self) -> String {
        let partial = self
            .partial
            .map(|w| format!(" WHERE {w}"))
            .unwrap_or_default();
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {}({}){partial}",
            self.name, self.table, self.on
        )
    }
}

impl Column {
    /// SQLite can add a column to an existing table only when it is not a key and either
    /// nullable or defaulted.
    fn addable(&self) -> bool {
        let decl = self.decl.to_ascii_uppercase();
        !decl.contains("PRIMARY KEY") && (!decl.contains("NOT NULL") || decl.contains("DEFAULT"))
    }
}

/// Where a board remembers that its schema was found complete, so that later opens can skip
/// the column-by-column check: the value is `<schema cookie>:<fingerprint of our definition>`.
/// SQLite bumps the cookie on every schema change (ours, or another tool's `ALTER TABLE`), and a
/// new definition here changes the fingerprint, so either one sends the next open back to the
/// full check.
const CHECKED_KEY: &str = "schema_checked";

/// Whether the schema was already found complete at its current cookie by this definition.
pub(crate) fn known_current(conn: &Connection) -> Result<bool, StoreError> {
    // One statement for the marker and the cookie: this runs on every open.
    let found: Result<(Option<String>, i64), _> = conn.query_row(
        "SELECT value, (SELECT schema_version FROM pragma_schema_version)
         FROM hermes_board_state WHERE key = ?1",
        [CHECKED_KEY],
        |r| Ok((r.get(0)?, r.get(1)?)),
    );
    match found {
        Ok((marker, cookie)) => Ok(marker.as_deref() == Some(marker_text(cookie).as_str())),
        // No such table (a board written by another tool) or no marker yet.
        Err(_) => Ok(false),
    }
}

/// Records, inside the caller's write transaction, that the schema is now complete.
pub(crate) fn mark_current(conn: &Connection, now_ms: i64) -> Result<(), StoreError> {
    let cookie: i64 = conn
        .query_row("PRAGMA schema_version", [], |r| r.get(0))
        .sql("reading the schema version")?;
    conn.execute(
        "INSERT INTO hermes_board_state (key, value, updated_at_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms",
        rusqlite::params![CHECKED_KEY, marker_text(cookie), now_ms],
    )
    .sql("recording the schema check")?;
    Ok(())
}

fn marker_text(cookie: i64) -> String {
    format!("{cookie}:{DEFINITION_FINGERPRINT:016x}")
}

/// FNV-1a over every name and declaration of our schema definition, computed at compile time
/// (every open compares against it). Fields are separated by a NUL so that moving text from
/// one field to the next changes the hash.
const DEFINITION_FINGERPRINT: u64 = definition_fingerprint();

const fn fnv1a(mut hash: u64, text: &str) -> u64 {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        hash = (hash ^ bytes[i] as u64).wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    // The separator: a NUL byte, for which the XOR step is a no-op.
    hash.wrapping_mul(0x0000_0100_0000_01b3)
}

const fn definition_fingerprint() -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325;
    let mut t = 0;
    while t < TABLES.len() {
        let table = &TABLES[t];
        hash = fnv1a(hash, table.name);
        let mut c = 0;
        while c < table.columns.len() {
            hash = fnv1a(hash, table.columns[c].name);
            hash = fnv1a(hash, table.columns[c].decl);
            c += 1;
        }
        let mut k = 0;
        while k < table.constraints.len() {
            hash = fnv1a(hash, table.constraints[k]);
            k += 1;
        }
        t += 1;
    }
    let mut i = 0;
    while i < INDEXES.len() {
        let index = &INDEXES[i];
        hash = fnv1a(hash, index.name);
        hash = fnv1a(hash, index.table);
        hash = fnv1a(hash, index.on);
        if let Some(partial) = index.partial {
            hash = fnv1a(hash, partial);
        }
        i += 1;
    }
    let mut g = 0;
    while g < TRIGGERS.len() {
        hash = fnv1a(hash, TRIGGERS[g].name);
        hash = fnv1a(hash, TRIGGERS[g].body);
        g += 1;
    }
    hash
}

/// The statements that bring `conn`'s schema up to date, in a safe order: missing tables,
/// then missing columns of existing tables, then missing indexes, then missing triggers. Empty when nothing is
/// missing, so a current board is opened without taking a write lock.
pub(crate) fn pending_statements(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut statements = Vec::new();
    for table in TABLES {
        let existing = existing_columns(conn, table.name)?;
        if existing.is_empty() {
            statements.push(table.create_sql());
            continue;
        }
        for column in table.columns {
            if existing.iter().any(|c| c.eq_ignore_ascii_case(column.name)) {
                continue;
            }
            if !column.addable() {
                return Err(StoreError::Schema {
                    detail: format!(
                        "table {} has no column {}, and SQLite cannot add it to an existing table",
                        table.name, column.name
                    ),
                });
            }
            statements.push(format!(
                "ALTER TABLE {} ADD COLUMN {} {}",
                table.name, column.name, column.decl
            ));
        }
    }
    for index in INDEXES {
        let exists: Option<i64> = conn
            .query_row(
                "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?1",
                [index.name],
                |r| r.get(0),
            )
            .optional()
            .sql("reading the schema")?;
        if exists.is_none() {
            statements.push(index.create_sql());
        }
    }
    for trigger in TRIGGERS {
        let exists: Option<i64> = conn
            .query_row(
                "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?1",
                [trigger.name],
                |r| r.get(0),
            )
            .optional()
            .sql("reading the schema")?;
        if exists.is_none() {
            statements.push(format!(
                "CREATE TRIGGER IF NOT EXISTS {} {}",
                trigger.name, trigger.body
            ));
        }
    }
    Ok(statements)
}

fn existing_columns(conn: &Connection, table: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info(?1)")
        .sql("reading the schema")?;
    let names = stmt
        .query_map([table], |r| r.get::<_, String>(0))
        .sql("reading the schema")?
        .collect::<Result<Vec<_>, _>>()
        .sql("reading the schema")?;
    Ok(names)
}

/// Runs [`pending_statements`] inside the caller's write transaction, then marks the schema
/// current.
pub(crate) fn apply(conn: &Connection, now_ms: i64) -> Result<usize, StoreError> {
    let statements = pending_statements(conn)?;
    for sql in &statements {
        conn.execute_batch(sql)
            .sql(format!("updating the schema ({sql})"))?;
    }
    mark_current(conn, now_ms)?;
    Ok(statements.len())
}
