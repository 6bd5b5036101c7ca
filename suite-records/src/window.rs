//! The span a gateway test's counts cover: the ticks proven, the probe cards that proved them,
//! the clock watched, the time it took, and why it was cut short if it was. A scenario builds it
//! step by step (only the scenario waits); a verdict reads it (`.over(&seen)`), so a count is
//! always stated with what it covers, and a span cut short fails its verdict instead of
//! panicking before it.

use std::fmt;
use std::time::{Duration, Instant};

use crate::kind::GapKind;

/// Why a scenario was cut short before its verdict: a wait that timed out, ticks that could not
/// be proven, a gateway that exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interruption {
    /// One line: what did not happen in time.
    pub text: String,
    /// The kind of failure it implies, if any (otherwise the verdict's own kind).
    pub kind: Option<GapKind>,
    /// More to show on failure (a log tail, a diagnosis), never recorded.
    pub detail: Option<String>,
    /// The arrangement the verdict stands on was never reached (the card was not in flight when
    /// the second process decided, the restarted gateway never ticked): the count tells nothing
    /// either way, so the verdict is `FAIL (no verdict)` whatever the gap list says.
    pub unreached: bool,
}

impl Interruption {
    /// An interruption described by `text`, implying no kind of its own.
    pub fn new(text: impl Into<String>) -> Interruption {
        Interruption {
            text: text.into(),
            kind: None,
            detail: None,
            unreached: false,
        }
    }

    /// The arrangement a verdict stands on was not reached; `seen` says what happened instead.
    /// Unlike a wait that timed out (which may be the very failure a gap lists), this never
    /// counts as a known gap, a pass or a fix.
    pub fn unreached(seen: impl Into<String>) -> Interruption {
        Interruption {
            unreached: true,
            ..Interruption::new(format!("arrangement not reached: {}", seen.into()))
        }
    }

    /// The same interruption, implying `kind`.
    #[must_use]
    pub fn implying(mut self, kind: GapKind) -> Interruption {
        self.kind = Some(kind);
        self
    }

    /// The same interruption, with `detail` to show on failure.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Interruption {
        self.detail = Some(detail.into());
        self
    }
}

impl fmt::Display for Interruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The span a gateway test's count covers (see the module docs).
#[derive(Debug, Clone)]
pub struct Window {
    started: Instant,
    last: Instant,
    ticks: usize,
    watched: Duration,
    probes: Vec<String>,
    interruption: Option<Interruption>,
    notes: Vec<String>,
}

impl Default for Window {
    fn default() -> Window {
        Window::start()
    }
}

impl Window {
    /// A window opening now (open it before the gateway starts, so it covers the whole run).
    pub fn start() -> Window {
        let now = Instant::now();
        Window {
            started: now,
            last: now,
            ticks: 0,
            watched: Duration::ZERO,
            probes: Vec::new(),
            interruption: None,
            notes: Vec::new(),
        }
    }

    /// Whether no step was cut short so far.
    pub fn ok(&self) -> bool {
        self.interruption.is_none()
    }

    /// Why the window was cut short, if it was.
    pub fn interrupted(&self) -> Option<&Interruption> {
        self.interruption.as_ref()
    }

    /// Dispatcher ticks proven so far.
    pub fn ticks(&self) -> usize {
        self.ticks
    }

    /// The tick probes decomposed so far.
    pub fn probes(&self) -> &[String] {
        &self.probes
    }

    /// The clock watched so far, where nothing could prove a tick.
    pub fn watched(&self) -> Duration {
        self.watched
    }

    /// From the start to the end of the last step.
    pub fn elapsed(&self) -> Duration {
        self.last.duration_since(self.started)
    }

    /// Adds words to the window's description (`the cooldown was the target's own`).
    pub fn note(&mut self, note: impl Into<String>) -> &mut Window {
        self.notes.push(note.into());
        self
    }

    /// Cuts the window short with `cause` (unless it already was).
    pub fn interrupt(&mut self, cause: impl Into<Interruption>) -> &mut Window {
        if self.interruption.is_none() {
            self.interruption = Some(cause.into());
        }
        self.last = Instant::now();
        self
    }

    /// A step ended now, proving nothing.
    pub fn stepped(&mut self) -> &mut Window {
        self.last = Instant::now();
        self
    }

    /// A step ended now, proving one tick (a first bill, cards that left triage).
    pub fn ticked(&mut self) -> &mut Window {
        self.ticks += 1;
        self.stepped()
    }

    /// A tick probe left triage now: one more proven tick.
    pub fn probed(&mut self, probe: impl Into<String>) -> &mut Window {
        self.probes.push(probe.into());
        self.ticked()
    }

    /// The clock was watched for `span`, ending now.
    pub fn watched_for(&mut self, span: Duration) -> &mut Window {
        self.watched += span;
        self.stepped()
    }

    /// The window in words: `7 proven ticks, 8.2 s` (plus any watch and notes).
    pub fn describe(&self) -> String {
        let ticks = match self.ticks {
            1 => "1 proven tick".to_owned(),
            n => format!("{n} proven ticks"),
        };
        let mut out = if self.watched.is_zero() {
            ticks
        } else {
            format!("{ticks} + {:.1} s watched", self.watched.as_secs_f64())
        };
        out.push_str(&format!(", {:.1} s", self.elapsed().as_secs_f64()));
        for note in &self.notes {
            out.push_str(&format!("; {note}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_describes_its_ticks_watch_and_notes() {
        let mut window = Window::start();
        for probe in 0..7 {
            window.probed(format!("t_{probe:08x}"));
        }
        window.watched = Duration::from_millis(700);
        window.note("cooldown: the target's own");
        let text = window.describe();
        assert!(
            text.starts_with("7 proven ticks + 0.7 s watched, 0.0 s; cooldown: the target's own"),
            "{text}"
        );
        assert_eq!(window.probes().len(), 7);
        window.ticks = 1;
        window.watched = Duration::ZERO;
        assert!(window.describe().starts_with("1 proven tick, "));
    }

    #[test]
    fn a_window_keeps_its_first_interruption() {
        let mut window = Window::start();
        assert!(window.ok());
        window.interrupt(Interruption::new("first").implying(GapKind::DispatcherBlocked));
        window.interrupt(Interruption::new("second"));
        assert!(!window.ok());
        let cut = window.interrupted().expect("cut short");
        assert_eq!(
            (cut.text.as_str(), cut.kind),
            ("first", Some(GapKind::DispatcherBlocked))
        );
    }
}
