//! A fake HTTP/1.1 server in wiremock's shape, for the faults wiremock cannot stage.
//!
//! A test starts a [`Server`] with a [`Responder`] (any `Fn(&Request) -> Reply`), points its
//! client at [`Server::url`], and reads the typed journal afterwards ([`Server::received`]):
//! every request with its headers, body and arrival on both clocks, and its answer as planned
//! and as observed (when the head left, how many body bytes went out, when and how the answer
//! ended). Dropping the server stops it at once, stalled and delayed answers included.
//!
//! wiremock answers with a `Content-Length` and the whole body in one write, and keeps no record
//! of when a byte left. A client's timeouts and caps are proven only by answers it cannot stage:
//! so here a [`Reply`] says how it is framed and paced, and the server writes exactly that, byte
//! for byte ([`server`](crate::Server) parses requests with `httparse` and writes answers by
//! hand):
//!
//! - framed with a `Content-Length`, or chunked ([`Reply::chunked`]) with no length at all;
//! - a body of an exact size, padding included, that costs no memory however large
//!   ([`Body::then_repeat`]);
//! - held back before the head ([`Reply::delayed`]), or until the test releases a [`Gate`];
//! - stalled after the head, mid-body or after N bytes, then sent on or cut
//!   ([`Reply::stall`]);
//! - a client that hangs up during a delay or a stall is seen at once, and journaled as
//!   [`AnswerEnd::ClientClosed`](suite_records::journal::AnswerEnd).
//!
//! It knows nothing of boards, cards or targets: the suite's fake provider (`fixtures::aux_model`)
//! is one responder built on it.
//!
//! ```
//! use fake_server::{Reply, Request, Server};
//! use fake_server::client;
//!
//! let server = Server::start(|request: &Request| {
//!     Reply::new(200)
//!         .header("content-type", "text/plain")
//!         .body(format!("you sent {}", request.path))
//!         .chunked(4)
//! })?;
//! let response = client::request("GET", &server.url(), "/hello", None, None)?;
//! assert_eq!(response.text(), "you sent /hello");
//! assert_eq!(response.header("transfer-encoding"), Some("chunked"));
//! let journal = server.received();
//! assert_eq!((journal[0].method.as_str(), journal[0].path.as_str()), ("GET", "/hello"));
//! assert_eq!(journal[0].answer.body_bytes, 15);
//! # Ok::<(), std::io::Error>(())
//! ```

#![warn(missing_docs)]

mod body;
pub mod client;
mod gate;
mod reply;
mod server;

pub use body::{Body, Segment};
pub use gate::Gate;
pub use reply::Reply;
pub use server::{Request, Responder, Server};
