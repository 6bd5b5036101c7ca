//! The reference's own integration tests, in one test binary: the library's HTTP client, one
//! decompose attempt and the reply parser against a fake provider, and the `hermes` binary as a
//! real process (CLI verbs, the gateway, the board file shared with upstream).
//!
//! The fake provider is the conformance suite's own (`fixtures::aux_model::AuxModel`): one
//! HTTP/1.1 server per test with per-card replies, recorded requests and arrival times. It runs
//! on its own runtime, so the tests here are plain `#[test]`s that drive the async library
//! through `support::block_on`, and read the provider's record between those calls. The scratch
//! home, its environment (an allowlist), the CLI runner, the gateway guard and the waits are the
//! suite's own (`fixtures::{home, env, cli, gateway, wait}`).
//!
//! | module | concern |
//! |---|---|
//! | `support` | the scratch home on fixtures' `Home` and its calls on fixtures' CLI runner, the runtime, provider helpers |
//! | `aux_client` | `AuxClient`: JSON and SSE replies, status mapping, timeouts, body cap, unreachable hosts |
//! | `decompose_reply` | `parse_reply`: every rejection, accepted shapes, a property test |
//! | `decompose_attempt` | `run_attempt` end to end: what one attempt pays for and records |
//! | `decompose_atomic` | the whole graph or nothing, as a property over corrupted replies |
//! | `dispatch_lock` | the gateway's singleton lock as another process sees it |
//! | `cli` | the `hermes` binary's board verbs and bad input |
//! | `cli_edges` | help pages, exit statuses, `show`'s events, aligned columns, `completion`, an empty `list` |
//! | `gateway_process` | the gateway as a real process when the world misbehaves around it |
//! | `gateway_check` | `gateway check`: what run would bill and whether it would start, nothing billed or written |
//! | `gateway_billing` | what the gateway says it bills: endpoint, model, key source, no key, the URL a failed connection tried |
//! | `gateway_dropin` | the gateway as a user coming from upstream meets it: logs, warnings, decomposer settings, locks |
//! | `recovery` | the operator's verbs: `unpark`, `resume`, `auto-decompose ID on\|off`, `usage --calls` |
//! | `store_open` | what closing a board leaves on disk (the WAL) |
//! | `interop` | a board written by upstream 0.19.0 and read back by it |
//! | `worker_kit` | the worker tests' board, provider answers (tool calls), stand-ins and census |
//! | `workers` | the gateway's workers end to end: the spawn bounds S1–S5, S7–S9 |

mod support;

mod aux_client;
mod cli;
mod cli_edges;
mod decompose_atomic;
mod decompose_attempt;
mod decompose_reply;
mod dispatch_lock;
mod gateway_billing;
mod gateway_check;
mod gateway_dropin;
mod gateway_process;
mod interop;
mod recovery;
mod store_open;
mod worker_kit;
mod workers;
