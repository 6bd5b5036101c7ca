//! The worker's kanban tools: upstream's names and argument names (`kanban_show`,
//! `kanban_complete`, `kanban_block`, `kanban_heartbeat`, `kanban_comment`, `kanban_create`),
//! their JSON schemas as the requests offer them, and what each does to the board.
//!
//! A worker is scoped to its own card: the calls that change a run (`complete`, `block`,
//! `heartbeat`) refuse any other card, and every write is fenced by the run (see
//! `store::worker`): once the run is no longer the worker's, a call stops the session instead.
//! A call the tool refuses (bad arguments, another card) costs the model a turn, not the run:
//! the refusal goes back to it as the tool's answer.

use serde_json::{json, Map, Value};

use crate::aux_client::ToolCall;
use crate::core::{BlockKind, RunOutcome, SpawnRules};
use crate::store::{NewTask, RunClose, Store, StoreError};

/// The six tools, as every request offers them.
pub fn schemas() -> Vec<Value> {
    let own_task = json!({
        "type": "string",
        "description": "The card; your own card ($HERMES_KANBAN_TASK) when omitted.",
    });
    let tool = |name: &str, description: &str, properties: Value, required: &[&str]| {
        json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": properties, "required": required},
            },
        })
    };
    vec![
        tool(
            SHOW,
            "Read a card: its fields, parents, children, comments, runs and latest events.",
            json!({"task_id": own_task}),
            &[],
        ),
        tool(
            COMPLETE,
            "Finish your card: it becomes done. Give a summary (a few sentences) or a result.",
            json!({
                "task_id": own_task,
                "summary": {"type": "string", "description": "What was done, for people and later workers."},
                "result": {"type": "string", "description": "A one-line result, stored on the card."},
                "metadata": {"type": "object", "description": "Structured facts about this run."},
                "created_cards": {"type": "array", "items": {"type": "string"},
                                  "description": "Ids of cards you created with kanban_create."},
                "artifacts": {"type": "array", "items": {"type": "string"},
                              "description": "Paths of files you produced."},
            }),
            &[],
        ),
        tool(
            BLOCK,
            "Stop working on your card because you cannot go on; say why.",
            json!({
                "task_id": own_task,
                "reason": {"type": "string", "description": "What is needed, in a sentence or two."},
                "kind": {"type": "string",
                         "enum": BlockKind::ALL.map(BlockKind::as_str),
                         "description": "needs_input or capability: a person must act; dependency: \
                                         an open parent card must finish; transient: try later."},
            }),
            &["reason"],
        ),
        tool(
            HEARTBEAT,
            "Say you are still working on a long step.",
            json!({"task_id": own_task, "note": {"type": "string", "description": "Where you are."}}),
            &[],
        ),
        tool(
            COMMENT,
            "Leave a note on a card's thread.",
            json!({
                "task_id": {"type": "string", "description": "The card (yours or another)."},
                "body": {"type": "string", "description": "The note."},
            }),
            &["task_id", "body"],
        ),
        tool(
            CREATE,
            "Add a new card for work that is not your card's.",
            json!({
                "title": {"type": "string", "description": "A short title."},
                "assignee": {"type": "string", "description": "The profile that should do it."},
                "body": {"type": "string", "description": "What is to be done, and when it is done."},
                "parents": {"type": "array", "items": {"type": "string"},
                            "description": "Cards that must be done first."},
                "triage": {"type": "boolean", "description": "Leave it in triage to be specified first."},
                "priority": {"type": "integer", "description": "Higher is picked first."},
            }),
            &["title", "assignee"],
        ),
    ]
}

const SHOW: &str = "kanban_show";
const COMPLETE: &str = "kanban_complete";
const BLOCK: &str = "kanban_block";
const HEARTBEAT: &str = "kanban_heartbeat";
const COMMENT: &str = "kanban_comment";
const CREATE: &str = "kanban_create";

/// The run a worker's calls act for.
#[derive(Debug, Clone)]
pub struct RunScope {
    pub run_id: i64,
    pub task_id: String,
    pub lease: String,
    /// Who the worker runs as: the author of its comments and cards.
    pub profile: String,
    /// The spawn rules of the board, for a run end the call records.
    pub rules: SpawnRules,
}

/// What a tool call came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Called {
    /// The session goes on with this answer.
    Answer(Value),
    /// The call ended the run (a completion or a block), recorded as `outcome`.
    Ended { outcome: RunOutcome, answer: Value },
    /// The run is no longer this worker's: the session stops, recording nothing more.
    RunLost,
}

/// Runs one tool call against the board at `now_ms`.
pub fn call(
    store: &mut Store,
    scope: &RunScope,
    tool: &ToolCall,
    now_ms: i64,
) -> Result<Called, StoreError> {
    let args = match serde_json::from_str::<Value>(&tool.arguments) {
        Ok(Value::Object(args)) => args,
        Ok(other) => {
            return Ok(refused(format!(
                "arguments must be a JSON object, got {}",
                crate::aux_client::json_kind(&other)
            )))
        }
        Err(err) => return Ok(refused(format!("arguments are not JSON: {err}"))),
    };
    match tool.name.as_str() {
        SHOW => show(store, scope, &args),
        COMPLETE => complete(store, scope, &args, now_ms),
        BLOCK => block(store, scope, &args, now_ms),
        HEARTBEAT => heartbeat(store, scope, &args, now_ms),
        COMMENT => comment(store, scope, &args, now_ms),
        CREATE => create(store, scope, &args),
        other => Ok(refused(format!(
            "no tool named {other:?}; the tools are {SHOW}, {COMPLETE}, {BLOCK}, {HEARTBEAT}, \
             {COMMENT} and {CREATE}"
        ))),
    }
}

fn refused(error: String) -> Called {
    Called::Answer(json!({"ok": false, "error": error}))
}

fn text<'a>(args: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The card a call names, or the worker's own.
fn card<'a>(args: &'a Map<String, Value>, scope: &'a RunScope) -> &'a str {
    text(args, "task_id").unwrap_or(&scope.task_id)
}

/// `Some(refusal)` when a call that changes a run names another card than the worker's.
fn foreign(args: &Map<String, Value>, scope: &RunScope) -> Option<Called> {
    let named = card(args, scope);
    (named != scope.task_id).then(|| {
        refused(format!(
            "this worker is scoped to card {}; it cannot change {named} (use kanban_comment to \
             leave it a note, or kanban_create for new work)",
            scope.task_id
        ))
    })
}

fn show(
    store: &mut Store,
    scope: &RunScope,
    args: &Map<String, Value>,
) -> Result<Called, StoreError> {
    let id = card(args, scope);
    let Some(task) = store.task(id)? else {
        return Ok(refused(format!("no such card: {id}")));
    };
    let mut events = store.events_of(id)?;
    let skip = events.len().saturating_sub(SHOWN_EVENTS);
    let events: Vec<Value> = events
        .drain(skip..)
        .map(|e| json!({"kind": e.kind, "payload": e.payload, "created_at": e.created_at}))
        .collect();
    let comments: Vec<Value> = store
        .comments_of(id)?
        .into_iter()
        .map(|c| json!({"author": c.author, "body": c.body, "created_at": c.created_at}))
        .collect();
    Ok(Called::Answer(json!({
        "ok": true,
        "task": {
            "id": task.id, "title": task.title, "body": task.body, "assignee": task.assignee,
            "status": task.status.as_str(), "priority": task.priority, "tenant": task.tenant,
            "created_by": task.created_by, "created_at": task.created_at,
            "started_at": task.started_at, "completed_at": task.completed_at,
            "result": task.result, "block_kind": task.block_kind,
        },
        "parents": store.parents_of(id)?,
        "children": store.children_of(id)?,
        "comments": comments,
        "runs": store.runs_of(id)?,
        "events": events,
    })))
}

/// The latest events `kanban_show` answers with: enough to orient, bounded however long the
/// card's history.
const SHOWN_EVENTS: usize = 20;

fn complete(
    store: &mut Store,
    scope: &RunScope,
    args: &Map<String, Value>,
    now_ms: i64,
) -> Result<Called, StoreError> {
    if let Some(refusal) = foreign(args, scope) {
        return Ok(refusal);
    }
    let summary = text(args, "summary");
    let result = text(args, "result");
    let Some(said) = summary.or(result) else {
        return Ok(refused(
            "give a summary (or a result) of what was done".to_owned(),
        ));
    };
    let mut metadata = args
        .get("metadata")
        .filter(|m| m.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    for key in ["created_cards", "artifacts"] {
        if let Some(list) = args.get(key).filter(|v| v.is_array()) {
            metadata[key] = list.clone();
        }
    }
    let close = RunClose {
        fence: Some(scope.lease.clone()),
        result: result.map(str::to_owned),
        metadata: metadata
            .as_object()
            .is_some_and(|m| !m.is_empty())
            .then_some(metadata),
        ..RunClose::new(
            scope.run_id,
            RunOutcome::Completed,
            said,
            "worker",
            scope.rules,
            now_ms,
        )
    };
    ended(
        store.close_run(&close)?,
        json!({"ok": true, "task_id": scope.task_id, "status": "done"}),
    )
}

fn block(
    store: &mut Store,
    scope: &RunScope,
    args: &Map<String, Value>,
    now_ms: i64,
) -> Result<Called, StoreError> {
    if let Some(refusal) = foreign(args, scope) {
        return Ok(refusal);
    }
    let Some(reason) = text(args, "reason") else {
        return Ok(refused("say why the card is blocked (`reason`)".to_owned()));
    };
    let kind = match BlockKind::parse(args.get("kind").and_then(Value::as_str)) {
        Ok(kind) => kind,
        Err(err) => return Ok(refused(err)),
    };
    let close = RunClose {
        fence: Some(scope.lease.clone()),
        kind: Some(kind),
        ..RunClose::new(
            scope.run_id,
            RunOutcome::Blocked,
            reason,
            "worker",
            scope.rules,
            now_ms,
        )
    };
    let closed = store.close_run(&close)?;
    let status = closed.as_ref().map(|c| c.card.status());
    ended(
        closed,
        json!({"ok": true, "task_id": scope.task_id, "kind": kind.as_str(), "status": status}),
    )
}

fn ended(closed: Option<crate::store::Closed>, answer: Value) -> Result<Called, StoreError> {
    Ok(match closed {
        Some(closed) => Called::Ended {
            outcome: closed.outcome,
            answer,
        },
        None => Called::RunLost,
    })
}

fn heartbeat(
    store: &mut Store,
    scope: &RunScope,
    args: &Map<String, Value>,
    now_ms: i64,
) -> Result<Called, StoreError> {
    if let Some(refusal) = foreign(args, scope) {
        return Ok(refusal);
    }
    if !store.heartbeat(scope.run_id, &scope.lease, text(args, "note"), now_ms)? {
        return Ok(Called::RunLost);
    }
    Ok(Called::Answer(json!({"ok": true})))
}

fn comment(
    store: &mut Store,
    scope: &RunScope,
    args: &Map<String, Value>,
    now_ms: i64,
) -> Result<Called, StoreError> {
    let (Some(id), Some(body)) = (text(args, "task_id"), text(args, "body")) else {
        return Ok(refused(
            "give the card (`task_id`) and the note (`body`)".to_owned(),
        ));
    };
    if store.worker_run(scope.run_id, &scope.lease)?.is_none() {
        return Ok(Called::RunLost);
    }
    match store.comment(id, &scope.profile, body, now_ms) {
        Ok(comment_id) => Ok(Called::Answer(
            json!({"ok": true, "comment_id": comment_id}),
        )),
        Err(StoreError::NoSuchTask(id)) => Ok(refused(format!("no such card: {id}"))),
        Err(err) => Err(err),
    }
}

fn create(
    store: &mut Store,
    scope: &RunScope,
    args: &Map<String, Value>,
) -> Result<Called, StoreError> {
    let (Some(title), Some(assignee)) = (text(args, "title"), text(args, "assignee")) else {
        return Ok(refused(
            "give the new card a `title` and an `assignee`".to_owned(),
        ));
    };
    let parents = match args.get("parents") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) => ids
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        Some(_) => return Ok(refused("`parents` must be a list of card ids".to_owned())),
    };
    if store.worker_run(scope.run_id, &scope.lease)?.is_none() {
        return Ok(Called::RunLost);
    }
    let new = NewTask {
        title: title.to_owned(),
        body: text(args, "body").map(str::to_owned),
        assignee: Some(assignee.to_owned()),
        parents,
        triage: args.get("triage").and_then(Value::as_bool).unwrap_or(false),
        priority: args.get("priority").and_then(Value::as_i64).unwrap_or(0),
        created_by: Some(scope.profile.clone()),
        ..NewTask::default()
    };
    match store.create_task(&new) {
        Ok(task) => Ok(Called::Answer(
            json!({"ok": true, "task_id": task.id, "status": task.status.as_str()}),
        )),
        Err(StoreError::NoSuchTask(id)) => Ok(refused(format!("no such parent card: {id}"))),
        Err(StoreError::Invalid(why)) => Ok(refused(why)),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_six_tools_are_offered_under_upstreams_names() {
        let names: Vec<String> = schemas()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, [SHOW, COMPLETE, BLOCK, HEARTBEAT, COMMENT, CREATE]);
        for tool in schemas() {
            assert_eq!(tool["type"], "function");
            assert_eq!(tool["function"]["parameters"]["type"], "object");
        }
        let block = &schemas()[2];
        assert_eq!(
            block["function"]["parameters"]["required"],
            json!(["reason"])
        );
        assert_eq!(
            block["function"]["parameters"]["properties"]["kind"]["enum"],
            json!(["needs_input", "capability", "dependency", "transient"])
        );
    }
}
