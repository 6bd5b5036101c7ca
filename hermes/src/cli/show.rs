//! `hermes kanban show ID`.

use clap::Args;
use serde_json::{json, Value};

use super::render::{count, event_json, one_line, shown, task_json};
use super::{round_up_secs, CliError, Context, Outcome};

/// Arguments of `kanban show`.
#[derive(Debug, Args)]
#[command(after_help = "\
Events are told one a line, oldest first: when (local time, UTC with --utc) and what happened, \
in words for the events this board writes, as key=value pairs for another tool's. With --json \
each event's payload is printed as stored.")]
pub struct ShowArgs {
    /// The card.
    #[arg(value_name = "ID")]
    pub id: String,
}

/// Prints the card with its links, comments, events and runs.
pub fn run(ctx: &Context, args: &ShowArgs) -> Result<Outcome, CliError> {
    let store = ctx.open_store()?;
    let task = store.get(&args.id)?;
    let parents = store.parents_of(&task.id)?;
    let children = store.children_of(&task.id)?;
    let comments = store.comments_of(&task.id)?;
    let events = store.events_of(&task.id)?;
    let runs = store.runs_of(&task.id)?;
    let latest_summary = store.latest_summary(&task.id)?;
    let now = crate::clock::now_ms();
    let claim = store
        .claim(&task.id)?
        .filter(|claim| claim.holds(now, store.path()));
    let pause = store.pause_in_force(now)?;

    if ctx.json {
        ctx.print_json(&json!({
            "task": task_json(&task),
            "latest_summary": latest_summary,
            "parents": parents,
            "children": children,
            "comments": comments
                .iter()
                .map(|c| json!({"author": c.author, "body": c.body, "created_at": c.created_at}))
                .collect::<Vec<Value>>(),
            "events": events.iter().map(event_json).collect::<Vec<Value>>(),
            "runs": runs,
        }))?;
        return Ok(Outcome::Success);
    }

    let mut lines = vec![
        format!("Task {}: {}", task.id, one_line(&task.title)),
        format!("  status:    {}", task.status),
        format!(
            "  assignee:  {}",
            task.assignee
                .as_deref()
                .map(one_line)
                .unwrap_or_else(|| "-".into())
        ),
    ];
    if let Some(tenant) = &task.tenant {
        lines.push(format!("  tenant:    {}", one_line(tenant)));
    }
    lines.push(format!(
        "  created:   {} by {}",
        shown(task.created_at),
        task.created_by
            .as_deref()
            .map(one_line)
            .unwrap_or_else(|| "-".into())
    ));
    if let Some(started) = task.started_at {
        lines.push(format!("  started:   {}", shown(started)));
    }
    if let Some(completed) = task.completed_at {
        lines.push(format!("  completed: {}", shown(completed)));
    }
    if !parents.is_empty() {
        lines.push(format!("  parents:   {}", parents.join(", ")));
    }
    if !children.is_empty() {
        lines.push(format!("  children:  {}", children.join(", ")));
    }
    if let Some(d) = &task.decompose {
        let when = match (d.opt_out, d.parked_at_ms, d.due_at_ms) {
            (true, _, _) => "opted out of automatic attempts".to_owned(),
            (false, Some(_), _) => format!(
                "parked: automatic budget spent (`hermes kanban unpark {}` gives a fresh one)",
                task.id
            ),
            (false, None, Some(due)) => match &pause {
                // Nothing automatic runs before the pause ends, whatever the card's own date.
                Some(p) if p.until_ms > due => format!(
                    "next attempt from {}: the board is paused until then ({}; `hermes kanban \
                     resume` lifts it)",
                    shown(round_up_secs(p.until_ms)),
                    one_line(&p.reason)
                ),
                Some(p) => format!(
                    "next attempt from {} (the board is paused until {}: {})",
                    shown(round_up_secs(due)),
                    shown(round_up_secs(p.until_ms)),
                    one_line(&p.reason)
                ),
                None => format!("next attempt from {}", shown(round_up_secs(due))),
            },
            (false, None, None) => "no automatic attempt pending".to_owned(),
        };
        lines.push(format!(
            "  decompose: {} on the current budget; {when}",
            count(d.attempts, "attempt")
        ));
        if let Some(err) = &d.last_error {
            lines.push(format!("             last error: {}", one_line(err)));
        }
    }
    if let Some(spawn) = &task.spawn {
        lines.push(format!("  workers:   {}", spawn_line(&task.id, spawn)));
    }
    if let Some(claim) = &claim {
        lines.push(format!(
            "  in flight: attempt {} ({}), claimed until at least {}",
            claim.attempt,
            claim.holder(),
            shown(claim.until_ms.div_euclid(1000))
        ));
    }
    if let Some(body) = task.body.as_deref().filter(|b| !b.is_empty()) {
        lines.push(String::new());
        lines.push("Body:".into());
        lines.push(body.to_owned());
    }
    if let Some(summary) = &latest_summary {
        lines.push(String::new());
        lines.push(format!("Latest summary: {}", one_line(summary)));
    }
    if !comments.is_empty() {
        lines.push(String::new());
        lines.push(format!("Comments ({}):", comments.len()));
        for c in &comments {
            lines.push(format!(
                "  {} {}: {}",
                shown(c.created_at),
                one_line(&c.author),
                one_line(&c.body)
            ));
        }
    }
    lines.push(String::new());
    lines.push(format!("Events ({}):", events.len()));
    for e in &events {
        lines.push(format!(
            "  {}  {}",
            shown(e.created_at),
            one_line(&super::events::summary(&e.kind, e.payload.as_ref()))
        ));
    }
    if !runs.is_empty() {
        lines.push(String::new());
        lines.push(format!("Runs ({}):", runs.len()));
        for r in &runs {
            let field = |k: &str| {
                r.get(k)
                    .and_then(Value::as_str)
                    .map(one_line)
                    .unwrap_or_else(|| "-".into())
            };
            lines.push(format!(
                "  #{} {} {} {}",
                r["id"],
                field("profile"),
                field("status"),
                field("outcome")
            ));
        }
    }
    ctx.print(&lines.join("\n"))?;
    Ok(Outcome::Success)
}

/// A card's workers in one line: its spawns, its failed runs against the limit, and what comes
/// next (parked, its backoff).
fn spawn_line(task_id: &str, spawn: &crate::core::SpawnState) -> String {
    let next = match (spawn.parked_at_ms, spawn.due_at_ms) {
        (Some(_), _) => format!(
            "; parked: its failed runs spent kanban.failure_limit (`hermes kanban unpark {task_id}` \
             gives a fresh budget)"
        ),
        (None, Some(due)) => format!("; next worker from {}", shown(round_up_secs(due))),
        (None, None) => String::new(),
    };
    let last = spawn
        .last_error
        .as_deref()
        .map(|e| format!(" (last: {})", one_line(e)))
        .unwrap_or_default();
    format!(
        "{} spawned, {} charged{last}{next}",
        spawn.spawns,
        count(spawn.failures, "failed run")
    )
}
