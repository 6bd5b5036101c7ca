//! Row-level board operations. Writers take the caller's `&Transaction` so several of them
//! (say, the decompose apply: children, links, events, promotion) commit or vanish together;
//! readers take `&Connection`, which a transaction also derefs to.

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};
use serde_json::{json, Value};

use super::decompose::{state_cells, transition, write_step};
use super::lenient;
use super::pyjson::to_payload_text;
use super::{
    ArchiveReport, Comment, Event, ListFilter, NewTask, SqlResultExt, Status, StoreError, Task,
};
use crate::core::CardRules;

pub(crate) use crate::clock::{now_ms, now_secs};

/// How many fresh ids to try before concluding something other than bad luck is wrong.
const ID_ATTEMPTS: usize = 8;

/// `t_` + 8 lowercase hex digits from the OS random source.
pub(crate) fn new_task_id() -> Result<String, StoreError> {
    let n = getrandom::u32().map_err(StoreError::Entropy)?;
    Ok(format!("t_{n:08x}"))
}

/// The columns of a new `tasks` row that callers choose; the rest take upstream's defaults.
#[derive(Debug, Clone)]
pub(crate) struct TaskRow<'a> {
    pub title: &'a str,
    pub body: Option<&'a str>,
    pub assignee: Option<&'a str>,
    pub status: Status,
    pub priority: i64,
    pub created_by: Option<&'a str>,
    pub tenant: Option<&'a str>,
    /// Unix seconds.
    pub created_at: i64,
}

/// Inserts a `tasks` row under a fresh id (retrying on the rare id collision) and returns the id.
/// Writes no event: the caller knows which `created` payload fits.
pub(crate) fn insert_task_row(
    tx: &Transaction<'_>,
    row: &TaskRow<'_>,
) -> Result<String, StoreError> {
    for _ in 0..ID_ATTEMPTS {
        let id = new_task_id()?;
        let inserted = tx.execute(
            "INSERT INTO tasks (id, title, body, assignee, status, priority, created_by, created_at, tenant) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                id,
                row.title,
                row.body,
                row.assignee,
                row.status.as_str(),
                row.priority,
                row.created_by,
                row.created_at,
                row.tenant
            ],
        );
        match inserted {
            Ok(_) => return Ok(id),
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
            {
                continue
            }
            Err(source) => {
                return Err(StoreError::Sql {
                    context: "inserting a task".into(),
                    source,
                })
            }
        }
    }
    Err(StoreError::Invalid(format!(
        "could not find an unused task id in {ID_ATTEMPTS} tries"
    )))
}

/// Appends an event (no run). An absent or empty-object payload is stored as NULL, as upstream
/// does. Returns the event id.
pub(crate) fn add_event(
    tx: &Transaction<'_>,
    task_id: &str,
    kind: &str,
    payload: Option<&Value>,
) -> Result<i64, StoreError> {
    add_event_in_run(tx, task_id, None, kind, payload)
}

pub(crate) fn add_event_in_run(
    tx: &Transaction<'_>,
    task_id: &str,
    run_id: Option<i64>,
    kind: &str,
    payload: Option<&Value>,
) -> Result<i64, StoreError> {
    let text = payload
        .filter(|p| !matches!(p, Value::Null) && p.as_object().is_none_or(|o| !o.is_empty()))
        .map(to_payload_text);
    tx.execute(
        "INSERT INTO task_events (task_id, run_id, kind, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![task_id, run_id, kind, text, now_secs()],
    )
    .sql(format!("recording a {kind} event"))?;
    Ok(tx.last_insert_rowid())
}

/// Trims and lowercases a profile name, as upstream canonicalises assignees.
pub(crate) fn canonical_assignee(raw: &str) -> Result<String, StoreError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(StoreError::Invalid("assignee cannot be empty".into()));
    }
    Ok(trimmed.to_lowercase())
}

fn status_of(conn: &Connection, id: &str) -> Result<Option<Status>, StoreError> {
    let raw: Option<String> = conn
        .query_row("SELECT status FROM tasks WHERE id = ?1", [id], |r| r.get(0))
        .optional()
        .sql(format!("reading the status of {id}"))?;
    raw.map(|s| parse_status(id, &s)).transpose()
}

fn parse_status(id: &str, raw: &str) -> Result<Status, StoreError> {
    raw.parse().map_err(|e| StoreError::Schema {
        detail: format!("task {id}: {e}"),
    })
}

/// Whether `child` already (transitively) leads to `parent`, i.e. whether `parent -> child`
/// would close a loop.
pub(crate) fn would_cycle(
    conn: &Connection,
    parent: &str,
    child: &str,
) -> Result<bool, StoreError> {
    if parent == child {
        return Ok(true);
    }
    // UNION (not UNION ALL) keeps the walk finite even on a board that already has a loop.
    let hit: Option<i64> = conn
        .query_row(
            "WITH RECURSIVE below(id) AS (
                 SELECT ?1
                 UNION
                 SELECT l.child_id FROM task_links l JOIN below b ON l.parent_id = b.id
             )
             SELECT 1 FROM below WHERE id = ?2 LIMIT 1",
            params![child, parent],
            |r| r.get(0),
        )
        .optional()
        .sql("checking the dependency graph")?;
    Ok(hit.is_some())
}

/// Adds `parent -> child` after checking both ids exist and no cycle results. Returns whether a
/// new row was written. Writes no event and changes no status.
pub(crate) fn add_link(
    tx: &Transaction<'_>,
    parent: &str,
    child: &str,
) -> Result<bool, StoreError> {
    if parent == child {
        return Err(StoreError::Cycle {
            parent: parent.into(),
            child: child.into(),
        });
    }
    for id in [parent, child] {
        if status_of(tx, id)?.is_none() {
            return Err(StoreError::NoSuchTask(id.to_owned()));
        }
    }
    if would_cycle(tx, parent, child)? {
        return Err(StoreError::Cycle {
            parent: parent.into(),
            child: child.into(),
        });
    }
    let n = tx
        .execute(
            "INSERT OR IGNORE INTO task_links (parent_id, child_id) VALUES (?1, ?2)",
            params![parent, child],
        )
        .sql("writing a link")?;
    Ok(n == 1)
}

/// `kanban link`: [`add_link`], then a `linked` event on the child, and a `ready` child of an
/// open parent goes back to `todo`.
pub(crate) fn link_with_event(
    tx: &Transaction<'_>,
    parent: &str,
    child: &str,
) -> Result<bool, StoreError> {
    let added = add_link(tx, parent, child)?;
    if !added {
        return Ok(false);
    }
    let parent_open = status_of(tx, parent)?.is_some_and(Status::is_open);
    if parent_open {
        tx.execute(
            "UPDATE tasks SET status = 'todo' WHERE id = ?1 AND status = 'ready'",
            [child],
        )
        .sql("moving the child back to todo")?;
    }
    add_event(
        tx,
        child,
        "linked",
        Some(&json!({"parent": parent, "child": child})),
    )?;
    Ok(true)
}

/// Moves each of `candidates` that is `todo` and whose parents are all closed (`done`/`archived`,
/// or gone) to `ready`, with a `promoted` event each. Returns the promoted ids, oldest first.
///
/// Only the cards a change can have freed are candidates (a decomposition's children, an
/// archived card's children), so the cost follows the change, not the size of the board.
pub(crate) fn promote_ready(
    tx: &Transaction<'_>,
    candidates: &[String],
) -> Result<Vec<String>, StoreError> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let list = serde_json::to_string(candidates).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let ids: Vec<String> = {
        let mut stmt = tx
            .prepare(
                // CROSS JOIN drives the lookup from the candidates (primary-key probes); left
                // to itself SQLite would scan every todo card through idx_tasks_status.
                "SELECT t.id FROM json_each(?1) c CROSS JOIN tasks t ON t.id = c.value
                 WHERE t.status = 'todo'
                   AND NOT EXISTS (
                       SELECT 1 FROM task_links l JOIN tasks p ON p.id = l.parent_id
                       WHERE l.child_id = t.id AND p.status NOT IN ('done', 'archived'))
                 ORDER BY t.created_at, t.rowid",
            )
            .sql("finding cards to promote")?;
        let rows = stmt
            .query_map([list], |r| r.get(0))
            .sql("finding cards to promote")?;
        rows.collect::<Result<_, _>>()
            .sql("finding cards to promote")?
    };
    for id in &ids {
        tx.execute(
            "UPDATE tasks SET status = 'ready' WHERE id = ?1 AND status = 'todo'",
            [id],
        )
        .sql("promoting a card")?;
        add_event(tx, id, "promoted", None)?;
    }
    Ok(ids)
}

/// `kanban create` in the caller's transaction; returns the new id.
pub(crate) fn create_task(tx: &Transaction<'_>, new: &NewTask) -> Result<String, StoreError> {
    if new.title.trim().is_empty() {
        return Err(StoreError::Invalid("title cannot be empty".into()));
    }
    let assignee = new
        .assignee
        .as_deref()
        .map(canonical_assignee)
        .transpose()?;
    let mut parents: Vec<&str> = Vec::with_capacity(new.parents.len());
    for p in &new.parents {
        if !parents.contains(&p.as_str()) {
            parents.push(p);
        }
    }
    let mut any_parent_open = false;
    for p in &parents {
        match status_of(tx, p)? {
            None => return Err(StoreError::NoSuchTask((*p).to_owned())),
            Some(st) => any_parent_open |= st.is_open(),
        }
    }
    let status = match (new.triage, any_parent_open) {
        (true, _) => Status::Triage,
        (false, true) => Status::Todo,
        (false, false) => Status::Ready,
    };
    let created_ms = now_ms();
    let created_by = new.created_by.as_deref().unwrap_or("user");
    let id = insert_task_row(
        tx,
        &TaskRow {
            title: &new.title,
            body: new.body.as_deref(),
            assignee: assignee.as_deref(),
            status,
            priority: new.priority,
            created_by: Some(created_by),
            tenant: new.tenant.as_deref(),
            created_at: created_ms.div_euclid(1000),
        },
    )?;
    for p in &parents {
        // A brand-new card has no children, so no parent can close a loop through it.
        tx.execute(
            "INSERT OR IGNORE INTO task_links (parent_id, child_id) VALUES (?1, ?2)",
            params![p, id],
        )
        .sql("linking the new card to its parents")?;
    }
    let payload = json!({
        "assignee": assignee,
        "status": status.as_str(),
        "parents": parents,
        "tenant": new.tenant,
        "branch_name": null,
        "skills": null,
        "goal_mode": null,
    });
    add_event(tx, &id, "created", Some(&payload))?;
    let state = CardRules::created(new.triage, new.no_auto_decompose, created_ms);
    write_step(tx, &id, None, &state)?;
    Ok(id)
}

/// The cards that wait for any of `parents`.
fn children_of_cards(conn: &Connection, parents: &[String]) -> Result<Vec<String>, StoreError> {
    let mut children = Vec::new();
    for parent in parents {
        for child in child_ids(conn, parent)? {
            if !children.contains(&child) {
                children.push(child);
            }
        }
    }
    Ok(children)
}

/// `kanban archive` in the caller's transaction.
pub(crate) fn archive(tx: &Transaction<'_>, ids: &[String]) -> Result<ArchiveReport, StoreError> {
    let mut report = ArchiveReport::default();
    let mut statuses = Vec::with_capacity(ids.len());
    for id in ids {
        match status_of(tx, id)? {
            None => return Err(StoreError::NoSuchTask(id.clone())),
            Some(st) => statuses.push((id, st)),
        }
    }
    for (id, status) in statuses {
        if status == Status::Archived {
            if !report.already_archived.contains(id) && !report.archived.contains(id) {
                report.already_archived.push(id.clone());
            }
            continue;
        }
        // A run still open on an archived card would look in flight forever; close it the way
        // upstream does and tie the event to it.
        let open_run: Option<i64> = tx
            .query_row(
                "SELECT id FROM task_runs WHERE task_id = ?1 AND ended_at IS NULL ORDER BY id DESC LIMIT 1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .sql("looking for an open run")?;
        let now = now_secs();
        if open_run.is_some() {
            tx.execute(
                "UPDATE task_runs SET status = 'reclaimed', outcome = 'reclaimed', ended_at = ?1, \
                 summary = COALESCE(summary, 'task archived with run still active') \
                 WHERE task_id = ?2 AND ended_at IS NULL",
                params![now, id],
            )
            .sql("closing the open run")?;
            tx.execute("UPDATE tasks SET current_run_id = NULL WHERE id = ?1", [id])
                .sql("closing the open run")?;
        }
        tx.execute(
            "UPDATE tasks SET status = 'archived', claim_lock = NULL, claim_expires = NULL, \
             worker_pid = NULL WHERE id = ?1",
            [id],
        )
        .sql("archiving a card")?;
        transition(tx, id, CardRules::retired)?;
        add_event_in_run(tx, id, open_run, "archived", None)?;
        report.archived.push(id.clone());
    }
    let children = children_of_cards(tx, &report.archived)?;
    report.promoted = promote_ready(tx, &children)?;
    Ok(report)
}

/// A card, its decompose state and its spawn state (their due times in the reader's frame, see
/// `store::frame`).
fn task_select() -> String {
    format!(
        "SELECT t.id, t.title, t.body, t.assignee, t.status, t.priority, t.tenant, \
         t.workspace_kind, t.workspace_path, t.branch_name, t.project_id, t.created_by, \
         t.created_at, t.started_at, t.completed_at, t.result, t.skills, t.max_retries, \
         t.session_id, t.workflow_template_id, t.current_step_key, t.block_kind, \
         d.task_id AS d_task_id, {}, s.task_id AS s_task_id, {} \
         FROM tasks t LEFT JOIN hermes_decompose_state d ON d.task_id = t.id \
         LEFT JOIN hermes_spawn_state s ON s.task_id = t.id",
        super::decompose::state_columns("d"),
        super::runs::spawn_state_columns("s")
    )
}

/// A card's text column as it would be sent to the provider, or why it cannot be: text that
/// is not valid UTF-8, or a BLOB, could only be sent mangled.
pub(crate) fn card_text(value: ValueRef<'_>, column: &str) -> Result<Option<String>, String> {
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => Ok(Some(text.to_owned())),
            Err(e) => Err(format!(
                "its {column} is not valid UTF-8 text (invalid byte at offset {})",
                e.valid_up_to()
            )),
        },
        ValueRef::Blob(bytes) => Err(format!(
            "its {column} is stored as a BLOB of {} bytes, not as text",
            bytes.len()
        )),
        ValueRef::Integer(n) => Ok(Some(n.to_string())),
        ValueRef::Real(x) => Ok(Some(x.to_string())),
    }
}

/// Why a card's title and body cannot be sent as they are, if they cannot.
pub(crate) fn unreadable(title: ValueRef<'_>, body: ValueRef<'_>) -> Option<String> {
    let title = match card_text(title, "title") {
        Err(why) => return Some(why),
        Ok(title) => title,
    };
    if title.is_none() {
        return Some("it has no title (NULL)".to_owned());
    }
    card_text(body, "body").err()
}

/// A task row before its status is checked.
struct RawTask {
    task: Task,
    status: String,
}

fn raw_task(r: &Row<'_>) -> rusqlite::Result<RawTask> {
    let skills_text = lenient::text(r, "skills")?;
    let skills = skills_text
        .and_then(|s| serde_json::from_str::<Vec<Value>>(&s).ok())
        .map(|items| {
            items
                .into_iter()
                .filter_map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let decompose = match r.get::<_, Option<String>>("d_task_id")? {
        None => None,
        // Our own columns, read leniently: another tool's odd cell shows as unknown.
        Some(_) => Some(state_cells(r)?),
    };
    let spawn = match r.get::<_, Option<String>>("s_task_id")? {
        None => None,
        Some(_) => Some(super::runs::spawn_cells(r)?),
    };
    Ok(RawTask {
        status: lenient::text(r, "status")?.unwrap_or_default(),
        task: Task {
            id: lenient::text(r, "id")?.unwrap_or_default(),
            title: lenient::text(r, "title")?.unwrap_or_default(),
            body: lenient::text(r, "body")?,
            assignee: lenient::text(r, "assignee")?,
            status: Status::Triage,
            priority: r.get::<_, Option<i64>>("priority")?.unwrap_or(0),
            tenant: lenient::text(r, "tenant")?,
            workspace_kind: lenient::text(r, "workspace_kind")?
                .unwrap_or_else(|| "scratch".to_owned()),
            workspace_path: lenient::text(r, "workspace_path")?,
            branch_name: lenient::text(r, "branch_name")?,
            project_id: lenient::text(r, "project_id")?,
            created_by: lenient::text(r, "created_by")?,
            created_at: r.get("created_at")?,
            started_at: r.get("started_at")?,
            completed_at: r.get("completed_at")?,
            result: lenient::text(r, "result")?,
            skills,
            max_retries: r.get("max_retries")?,
            session_id: lenient::text(r, "session_id")?,
            workflow_template_id: lenient::text(r, "workflow_template_id")?,
            current_step_key: lenient::text(r, "current_step_key")?,
            block_kind: lenient::text(r, "block_kind")?,
            decompose,
            spawn,
        },
    })
}

fn finish(raw: RawTask) -> Result<Task, StoreError> {
    let status = parse_status(&raw.task.id, &raw.status)?;
    Ok(Task { status, ..raw.task })
}

/// One card by id.
pub(crate) fn task_by_id(conn: &Connection, id: &str) -> Result<Option<Task>, StoreError> {
    let raw = conn
        .query_row(
            &format!("{} WHERE t.id = ?1", task_select()),
            [id],
            raw_task,
        )
        .optional()
        .sql(format!("reading task {id}"))?;
    raw.map(finish).transpose()
}

/// Cards matching the filter, oldest first.
pub(crate) fn list_tasks(conn: &Connection, filter: &ListFilter) -> Result<Vec<Task>, StoreError> {
    let mut sql = format!("{} WHERE 1 = 1", task_select());
    let mut args: Vec<String> = Vec::new();
    if let Some(status) = filter.status {
        args.push(status.as_str().to_owned());
        sql.push_str(&format!(" AND t.status = ?{}", args.len()));
    }
    if let Some(assignee) = &filter.assignee {
        args.push(canonical_assignee(assignee)?);
        sql.push_str(&format!(" AND t.assignee = ?{}", args.len()));
    }
    if !filter.include_archived && filter.status != Some(Status::Archived) {
        sql.push_str(" AND t.status != 'archived'");
    }
    sql.push_str(" ORDER BY t.created_at, t.rowid");
    let mut stmt = conn.prepare(&sql).sql("listing tasks")?;
    let raws = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), raw_task)
        .sql("listing tasks")?
        .collect::<Result<Vec<_>, _>>()
        .sql("listing tasks")?;
    raws.into_iter().map(finish).collect()
}

fn strings(
    conn: &Connection,
    sql: &str,
    id: &str,
    context: &str,
) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare(sql).sql(context)?;
    let rows = stmt.query_map([id], |r| r.get(0)).sql(context)?;
    rows.collect::<Result<Vec<String>, _>>().sql(context)
}

/// Ids `id` waits for, sorted.
pub(crate) fn parent_ids(conn: &Connection, id: &str) -> Result<Vec<String>, StoreError> {
    strings(
        conn,
        "SELECT parent_id FROM task_links WHERE child_id = ?1 ORDER BY parent_id",
        id,
        "reading parents",
    )
}

/// Ids waiting for `id`, sorted.
pub(crate) fn child_ids(conn: &Connection, id: &str) -> Result<Vec<String>, StoreError> {
    strings(
        conn,
        "SELECT child_id FROM task_links WHERE parent_id = ?1 ORDER BY child_id",
        id,
        "reading children",
    )
}

/// Events of `id` in id order, payloads parsed.
pub(crate) fn events_of(conn: &Connection, id: &str) -> Result<Vec<Event>, StoreError> {
    let mut stmt = conn
        .prepare(
            "SELECT id, task_id, run_id, kind, payload, created_at FROM task_events \
             WHERE task_id = ?1 ORDER BY id",
        )
        .sql("reading events")?;
    let rows = stmt
        .query_map([id], |r| {
            let payload = lenient::text(r, "payload")?;
            Ok(Event {
                id: r.get("id")?,
                task_id: lenient::text(r, "task_id")?.unwrap_or_default(),
                run_id: r.get("run_id")?,
                kind: lenient::text(r, "kind")?.unwrap_or_default(),
                payload: payload
                    .filter(|p| !p.is_empty())
                    .map(|p| serde_json::from_str(&p).unwrap_or(Value::String(p))),
                created_at: r.get("created_at")?,
            })
        })
        .sql("reading events")?;
    rows.collect::<Result<_, _>>().sql("reading events")
}

/// Comments of `id`, oldest first.
pub(crate) fn comments_of(conn: &Connection, id: &str) -> Result<Vec<Comment>, StoreError> {
    let mut stmt = conn
        .prepare(
            "SELECT id, task_id, author, body, created_at FROM task_comments \
             WHERE task_id = ?1 ORDER BY created_at, id",
        )
        .sql("reading comments")?;
    let rows = stmt
        .query_map([id], |r| {
            Ok(Comment {
                id: r.get("id")?,
                task_id: lenient::text(r, "task_id")?.unwrap_or_default(),
                author: lenient::text(r, "author")?.unwrap_or_default(),
                body: lenient::text(r, "body")?.unwrap_or_default(),
                created_at: r.get("created_at")?,
            })
        })
        .sql("reading comments")?;
    rows.collect::<Result<_, _>>().sql("reading comments")
}

/// Runs of `id` with upstream's `show --json` keys; `metadata` parsed when it is JSON.
pub(crate) fn runs_of(conn: &Connection, id: &str) -> Result<Vec<Value>, StoreError> {
    let mut stmt = conn
        .prepare(
            "SELECT id, profile, step_key, status, outcome, summary, error, metadata, worker_pid, \
             started_at, ended_at FROM task_runs WHERE task_id = ?1 ORDER BY started_at, id",
        )
        .sql("reading runs")?;
    let rows = stmt
        .query_map([id], |r| {
            let metadata = lenient::text(r, "metadata")?;
            Ok(json!({
                "id": r.get::<_, i64>("id")?,
                "profile": lenient::text(r, "profile")?,
                "step_key": lenient::text(r, "step_key")?,
                "status": lenient::text(r, "status")?,
                "outcome": lenient::text(r, "outcome")?,
                "summary": lenient::text(r, "summary")?,
                "error": lenient::text(r, "error")?,
                "metadata": metadata.and_then(|m| serde_json::from_str::<Value>(&m).ok()),
                "worker_pid": r.get::<_, Option<i64>>("worker_pid")?,
                "started_at": r.get::<_, Option<i64>>("started_at")?,
                "ended_at": r.get::<_, Option<i64>>("ended_at")?,
            }))
        })
        .sql("reading runs")?;
    rows.collect::<Result<_, _>>().sql("reading runs")
}

/// The newest non-empty run summary of `id`.
pub(crate) fn latest_summary(conn: &Connection, id: &str) -> Result<Option<String>, StoreError> {
    conn.query_row(
        "SELECT summary FROM task_runs WHERE task_id = ?1 AND summary IS NOT NULL AND summary != '' \
         ORDER BY COALESCE(ended_at, started_at) DESC, id DESC LIMIT 1",
        [id],
        |r| r.get(0),
    )
    .optional()
    .sql("reading the latest summary")
}
