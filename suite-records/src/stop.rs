//! How a guarded process's stop went: what the process guard observed, kept in a run's history
//! and in what a scenario saw.

use std::time::Duration;

/// What stopping a guarded process observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopReport {
    /// The exit code, when the process exited by itself (after SIGTERM, usually).
    pub exit_code: Option<i32>,
    /// The signal that ended it (SIGKILL after an escalation).
    pub signal: Option<i32>,
    /// From the stop request to the reaped exit.
    pub elapsed: Duration,
    /// Whether SIGTERM was not enough and SIGKILL was needed.
    pub escalated: bool,
    /// Whether the process had already exited before the stop was requested.
    pub already_exited: bool,
}

impl StopReport {
    /// Whether the process handled the stop request: it exited with code 0 within the grace
    /// period (dying of the SIGTERM itself means no handler was installed).
    pub fn clean(&self) -> bool {
        !self.escalated && self.exit_code == Some(0)
    }
}
