//! What a responder answers one request: a status, headers and a body, and how the body is
//! framed and paced on the wire. The server writes exactly that, byte for byte, and journals
//! what it planned beside what it observed ([`Answer`]).

use std::time::Duration;

use suite_records::journal::{Answer, Framing, Stall};

use crate::body::Body;
use crate::gate::Gate;

/// One answer, as it is to be written (see the module docs).
///
/// ```
/// use std::time::Duration;
/// use fake_server::{Body, Reply};
/// use suite_records::journal::{AfterStall, Stall};
///
/// // 1 MiB + 1 byte of padding in 16 KiB chunks, the head sent at once, then nothing for
/// // a minute after the first 100 bytes, then the connection cut.
/// let reply = Reply::new(200)
///     .header("content-type", "application/json")
///     .body(Body::bytes("{}").then_repeat(b' ', 1024 * 1024 - 1))
///     .chunked(16 * 1024)
///     .stall(Stall {
///         after_bytes: 100,
///         duration: Duration::from_secs(60),
///         then: AfterStall::Cut,
///     });
/// assert_eq!(reply.body_len(), 1024 * 1024 + 1);
/// ```
#[derive(Debug, Clone)]
pub struct Reply {
    pub(crate) status: u16,
    /// Every header but the framing one (`content-length` or `transfer-encoding`), in order.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Body,
    pub(crate) framing: Framing,
    pub(crate) delay: Duration,
    pub(crate) gate: Option<Gate>,
    pub(crate) stall: Option<Stall>,
}

impl Reply {
    /// An answer with `status`, no header, an empty body under a `Content-Length`, sent at once.
    pub fn new(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Body::default(),
            framing: Framing::ContentLength,
            delay: Duration::ZERO,
            gate: None,
            stall: None,
        }
    }

    /// Adds a header (the framing header, `content-length` or `transfer-encoding`, is the
    /// server's alone: see [`chunked`](Self::chunked)).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Body>) -> Reply {
        self.body = body.into();
        self
    }

    /// Sends the body with `Transfer-Encoding: chunked` and no `Content-Length`, in chunks of
    /// `chunk_bytes` (at least 1), then the zero-length last chunk.
    #[must_use]
    pub fn chunked(mut self, chunk_bytes: usize) -> Reply {
        self.framing = Framing::Chunked {
            chunk_bytes: chunk_bytes.max(1),
        };
        self
    }

    /// Sends nothing for `delay` before the head (a client that hangs up meanwhile is seen at
    /// once).
    #[must_use]
    pub fn delayed(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// Sends nothing until `gate` is released (after any [`delayed`](Self::delayed) wait).
    #[must_use]
    pub fn gated(mut self, gate: &Gate) -> Reply {
        self.gate = Some(gate.clone());
        self
    }

    /// Pauses mid-answer: the head and `stall.after_bytes` body bytes (at most the whole body:
    /// a chunked body then stalls before its last chunk), nothing for `stall.duration`, then the
    /// rest, or the connection closed ([`AfterStall::Cut`](suite_records::journal::AfterStall)).
    #[must_use]
    pub fn stall(mut self, stall: Stall) -> Reply {
        self.stall = Some(stall);
        self
    }

    /// The body's length in bytes.
    pub fn body_len(&self) -> u64 {
        self.body.len()
    }

    /// The journal's entry for this answer, as planned (nothing observed yet).
    pub(crate) fn planned(&self) -> Answer {
        let body_bytes = self.body.len();
        Answer {
            headers: self
                .headers
                .iter()
                .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
                .collect(),
            delay: self.delay,
            gated: self.gate.is_some(),
            framing: self.framing,
            stall: self.stall.map(|stall| Stall {
                after_bytes: stall.after_bytes.min(body_bytes),
                ..stall
            }),
            ..Answer::planned(self.status, body_bytes)
        }
    }
}
