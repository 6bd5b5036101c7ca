//! One worker session: turns on the main model until a terminal tool call, or until something
//! ends the run, each end recorded once (`Store::close_run`, fenced by the run's lease).
//!
//! Every request is recorded before it leaves and closed after (`Store::worker_ledger_open`,
//! under the board's pause and hourly ceiling, S4, S9); the session takes at most
//! `agent.max_turns` turns, each of at most `1 + auxiliary.transient_retries` tries (S1). A
//! provider's refusal (401/402/403/429) pauses the whole board, decompose calls included, in the
//! transaction that ends the run; so does a provider that cannot be reached. SIGTERM stops the
//! session at once: a request on its way is dropped and its row closed `aborted`, and the run's
//! end is left to the gateway that stopped it.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use super::tools::{self, Called, RunScope};
use crate::aux_client::{AgentTurn, AuxClient, AuxError};
use crate::config::Config;
use crate::core::time::after;
use crate::core::{LedgerOutcome, ProviderFault, RetryDelay, RunOutcome, MAX_RETRY_AFTER};
use crate::output;
use crate::store::{
    now_ms, BoardError, BoardHandle, LedgerClose, PauseRecord, RunClose, UnreachableRecord,
    WorkerRefusal, WorkerRequestOpen,
};

/// How a session ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// The run's end is recorded, as `outcome`; `fault` when the provider refused.
    Recorded {
        outcome: RunOutcome,
        fault: Option<ProviderFault>,
    },
    /// The run was no longer this worker's (stopped, timed out, taken over): nothing recorded.
    Lost,
    /// SIGTERM or SIGINT: the session stopped; its run's end is the stopper's to record.
    Stopped,
}

/// Everything one session works with.
pub struct Session {
    pub board: BoardHandle,
    pub client: AuxClient,
    pub scope: RunScope,
    pub config: Config,
    /// The conversation so far: system prompt, the gateway's message, then each turn.
    pub messages: Vec<Value>,
    pub stop: watch::Receiver<bool>,
    /// Requests of this run that may have reached the provider.
    pub delivered: u32,
}

/// What one turn's tries came to.
enum Sent {
    Reply(AgentTurn),
    /// The session is over (recorded, lost or stopped).
    Over(Finish),
}

impl Session {
    /// Runs turns until the session ends.
    pub async fn run(mut self) -> Result<Finish, BoardError> {
        let tools = tools::schemas();
        for turn in 1..=self.config.agent.max_turns {
            let reply = match self.turn(turn, &tools).await? {
                Sent::Reply(reply) => reply,
                Sent::Over(finish) => return Ok(finish),
            };
            if let Some(finish) = self.answer(reply).await? {
                return Ok(finish);
            }
        }
        let reason = format!(
            "{} turns (agent.max_turns) without kanban_complete or kanban_block",
            self.config.agent.max_turns
        );
        self.end(RunOutcome::MaxTurns, reason, None, None).await
    }

    /// Carries out one reply's tool calls; `Some` when the session is over.
    async fn answer(&mut self, reply: AgentTurn) -> Result<Option<Finish>, BoardError> {
        let calls: Vec<_> = reply
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(i, mut call)| {
                if call.id.is_empty() {
                    call.id = format!("call_{}_{i}", self.messages.len());
                }
                call
            })
            .collect();
        self.messages.push(json!({
            "role": "assistant",
            "content": reply.content,
            "tool_calls": calls.iter().map(|c| json!({
                "id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })).collect::<Vec<_>>(),
        }));
        if calls.is_empty() {
            let reason = "the model answered with text and no kanban_complete or kanban_block";
            return self
                .end(RunOutcome::ProtocolViolation, reason.into(), None, None)
                .await
                .map(Some);
        }
        for call in calls {
            let scope = self.scope.clone();
            let (id, name) = (call.id.clone(), call.name.clone());
            let called = self
                .board
                .call(move |s| tools::call(s, &scope, &call, now_ms()))
                .await?;
            match called {
                Called::Answer(answer) => {
                    self.messages.push(json!({
                        "role": "tool", "tool_call_id": id, "name": name,
                        "content": answer.to_string(),
                    }));
                }
                Called::Ended { outcome, .. } => {
                    output::note(&format!("{name}: the run ended as {outcome}"));
                    return Ok(Some(Finish::Recorded {
                        outcome,
                        fault: None,
                    }));
                }
                Called::RunLost => return Ok(Some(Finish::Lost)),
            }
        }
        Ok(None)
    }

    /// Sends turn `turn`, retrying what is transient.
    async fn turn(&mut self, turn: u32, tools: &[Value]) -> Result<Sent, BoardError> {
        let tries = 1 + self
            .config
            .auxiliary
            .transient_retries
            .min(crate::core::budget::MAX_RETRIES);
        let mut last: Option<AuxError> = None;
        let mut try_no = 1;
        loop {
            if try_no > 1 {
                let wait = retry_wait(try_no - 1, last.as_ref());
                if self.wait_or_stop(wait).await {
                    return Ok(Sent::Over(Finish::Stopped));
                }
            }
            if *self.stop.borrow() {
                // Nothing leaves once a stop was asked for.
                return Ok(Sent::Over(Finish::Stopped));
            }
            let row = match self.open_row(turn, try_no).await? {
                Ok(row) => row,
                Err(WorkerRefusal::RunClosed) => return Ok(Sent::Over(Finish::Lost)),
                Err(WorkerRefusal::Guard(refusal)) => {
                    let reason = format!("a request was held back: {refusal}");
                    return self
                        .end(RunOutcome::Held, reason, None, None)
                        .await
                        .map(Sent::Over);
                }
            };
            let started = now_ms();
            let Some(result) = self.send(tools).await else {
                self.close_row(row, aborted()).await?;
                return Ok(Sent::Over(Finish::Stopped));
            };
            match result {
                Ok(reply) => {
                    self.delivered += 1;
                    self.close_row(row, answered(&reply)).await?;
                    return Ok(Sent::Reply(reply));
                }
                Err(err) => {
                    if !err.is_undelivered() {
                        self.delivered += 1;
                    }
                    self.close_row(row, failed(&err)).await?;
                    if err.is_transient() && try_no < tries {
                        last = Some(err);
                        try_no += 1;
                        continue;
                    }
                    return self.failed(err, started).await.map(Sent::Over);
                }
            }
        }
    }

    /// Ends the run after a request that failed for good.
    async fn failed(&mut self, err: AuxError, started_ms: i64) -> Result<Finish, BoardError> {
        let reason = output::summary(&format!("provider call failed: {err}"));
        if let Some(fault) = err.provider_fault() {
            let lasts = fault.pause_for(self.config.kanban.provider_cooldown);
            let pause = PauseRecord {
                until_ms: after(now_ms(), lasts),
                reason: fault.describe(),
                request_started_ms: Some(started_ms),
            };
            let finish = self
                .end(RunOutcome::Refused, reason, Some(pause), None)
                .await?;
            return Ok(match finish {
                Finish::Recorded { outcome, .. } => Finish::Recorded {
                    outcome,
                    fault: Some(fault),
                },
                other => other,
            });
        }
        if err.is_undelivered() {
            let unreachable = UnreachableRecord {
                reason: output::summary(&err.to_string()),
                backoff_base: self.config.kanban.spawn_backoff,
            };
            // Nothing of the run reached the provider: it cost nothing (`held`); later, it did.
            let outcome = if self.delivered == 0 {
                RunOutcome::Held
            } else {
                RunOutcome::ProviderFailed
            };
            return self.end(outcome, reason, None, Some(unreachable)).await;
        }
        self.end(RunOutcome::ProviderFailed, reason, None, None)
            .await
    }

    /// Records the run's end (fenced by its lease).
    async fn end(
        &self,
        outcome: RunOutcome,
        reason: String,
        pause: Option<PauseRecord>,
        unreachable: Option<UnreachableRecord>,
    ) -> Result<Finish, BoardError> {
        let scope = &self.scope;
        let close = RunClose {
            fence: Some(scope.lease.clone()),
            pause,
            unreachable,
            ..RunClose::new(
                scope.run_id,
                outcome,
                reason,
                "worker",
                scope.rules,
                now_ms(),
            )
        };
        let closed = self.board.call(move |s| s.close_run(&close)).await?;
        Ok(match closed {
            Some(closed) => {
                output::note(&format!("the run ended as {}", closed.outcome));
                Finish::Recorded {
                    outcome: closed.outcome,
                    fault: None,
                }
            }
            None => Finish::Lost,
        })
    }

    async fn open_row(
        &self,
        turn: u32,
        try_no: u32,
    ) -> Result<Result<i64, WorkerRefusal>, BoardError> {
        let open = WorkerRequestOpen {
            run_id: self.scope.run_id,
            task_id: self.scope.task_id.clone(),
            lease: self.scope.lease.clone(),
            turn,
            try_no,
            started_at_ms: now_ms(),
            model: self.client.model().to_owned(),
            calls_per_hour: self.config.kanban.decompose_calls_per_hour,
        };
        self.board.call(move |s| s.worker_ledger_open(&open)).await
    }

    async fn close_row(&self, row: i64, close: LedgerClose) -> Result<(), BoardError> {
        self.board.call(move |s| s.ledger_close(row, &close)).await
    }

    /// One request; `None` when a stop came first (the request is dropped).
    async fn send(&mut self, tools: &[Value]) -> Option<Result<AgentTurn, AuxError>> {
        let request = self.client.send_turn(&self.messages, tools);
        tokio::pin!(request);
        let mut stop = self.stop.clone();
        tokio::select! {
            biased;
            result = &mut request => Some(result),
            _ = stop.wait_for(|stop| *stop) => None,
        }
    }

    /// Waits `wait`; true when a stop came first.
    async fn wait_or_stop(&mut self, wait: Duration) -> bool {
        let mut stop = self.stop.clone();
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => true,
            _ = tokio::time::sleep(wait) => false,
        }
    }
}

/// The wait before retry number `retry` of a turn: a jittered, doubling delay, or the
/// provider's `Retry-After` when longer (capped).
fn retry_wait(retry: u32, last: Option<&AuxError>) -> Duration {
    let jitter = f64::from(getrandom::u32().unwrap_or(u32::MAX / 2)) / f64::from(u32::MAX);
    let own = RetryDelay::default().before(retry, jitter);
    let asked = last
        .and_then(AuxError::retry_after)
        .map(|asked| asked.min(MAX_RETRY_AFTER));
    asked.map_or(own, |asked| asked.max(own))
}

fn answered(reply: &AgentTurn) -> LedgerClose {
    LedgerClose {
        http_status: Some(reply.http_status),
        prompt_tokens: reply.usage.prompt_tokens,
        completion_tokens: reply.usage.completion_tokens,
        ..LedgerClose::new(now_ms(), LedgerOutcome::Ok)
    }
}

fn failed(err: &AuxError) -> LedgerClose {
    LedgerClose {
        http_status: err.http_status(),
        detail: Some(output::stored(&err.to_string())),
        ..LedgerClose::new(now_ms(), err.outcome())
    }
}

fn aborted() -> LedgerClose {
    LedgerClose {
        detail: Some("the worker was stopped with this request on its way".to_owned()),
        ..LedgerClose::new(now_ms(), LedgerOutcome::Aborted)
    }
}
