//! The reply body cap at its boundary (contract §7 B8): a body of exactly 1 MiB is read and applied,
//! one byte more is cut off and counted as a failed attempt, whether the body is one JSON
//! completion or an event stream.

use fixtures::aux_model::MODEL_NAME;
use fixtures::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};

use super::judge_failed_without_rows;
use crate::decompose_card;

/// The reference's cap on a reply body.
const CAP_BYTES: usize = 1024 * 1024;

/// How a reply body is framed.
#[derive(Debug, Clone, Copy)]
enum Framing {
    /// One `chat.completion` JSON document, padded with trailing whitespace.
    Json,
    /// Server-sent events, padded with a comment line before the finish chunk.
    EventStream,
}

/// A reply carrying `content` whose body is exactly `size` bytes.
///
/// # Panics
/// When `size` is too small for the content itself.
fn body_of_size(framing: Framing, content: &str, size: usize) -> Reply {
    match framing {
        Framing::Json => {
            let mut body = json!({
                "id": "chatcmpl-cap",
                "object": "chat.completion",
                "created": 0,
                "model": MODEL_NAME,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }],
            })
            .to_string();
            assert!(body.len() <= size, "the content alone is over {size} bytes");
            body.push_str(&" ".repeat(size - body.len()));
            Reply::raw(200, "application/json", body)
        }
        Framing::EventStream => {
            let chunk = |delta: Value, finish: Value| {
                let event = json!({
                    "id": "chatcmpl-cap",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": MODEL_NAME,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                });
                format!("data: {event}\n\n")
            };
            let head = chunk(
                json!({"role": "assistant", "content": content}),
                Value::Null,
            );
            let tail = format!("{}data: [DONE]\n\n", chunk(json!({}), json!("stop")));
            // A comment line: `:` + padding + `\n`, which a stream reader skips.
            let framing = head.len() + tail.len() + 2;
            assert!(framing <= size, "the content alone is over {size} bytes");
            let padding = "x".repeat(size - framing);
            Reply::raw(
                200,
                "text/event-stream",
                format!("{head}:{padding}\n{tail}"),
            )
        }
    }
}

#[rstest]
#[case::json_at_cap(Framing::Json, CAP_BYTES)]
#[case::json_one_byte_over(Framing::Json, CAP_BYTES + 1)]
#[case::stream_at_cap(Framing::EventStream, CAP_BYTES)]
#[case::stream_one_byte_over(Framing::EventStream, CAP_BYTES + 1)]
fn reply_body_at_the_cap_is_read_and_one_byte_more_is_refused(
    #[case] framing: Framing,
    #[case] size: usize,
    board: Board,
) {
    let aux = board.aux();
    let root = board.create("a reply that fills the cap", &["--triage"]);
    let before = board.rows().task(&root);
    aux.reply(
        &root,
        body_of_size(framing, &graph_value(2, &[]).to_string(), size),
    );

    let run = decompose_card(&board, &root);

    bound("requests for a body at the cap", aux.billed_for(&root))
        .exactly(1)
        .note(|| format!("{framing:?} body of {size} bytes"))
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    if size <= CAP_BYTES {
        let mut findings = Findings::new();
        findings.equal("ok", &run.ok(), &Some(true)).equal(
            "children",
            &board.rows().children_of(&root).len(),
            &2,
        );
        findings
            .verdict("a body of exactly the cap is read and applied")
            .note(|| format!("{framing:?} body of {size} bytes"))
            .context(|| format!("{}\n{}", run.output, board.diag(&root)))
            .gap(GapKind::ReplyNotApplied);
    } else {
        judge_failed_without_rows(&board, &before, &run);
    }
}
