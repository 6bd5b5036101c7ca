//! The reply body cap at its boundary (contract §7 B8): a body of exactly 1 MiB is read and applied,
//! one byte more is cut off and counted as a failed attempt, whether the body is one JSON
//! completion or an event stream, and whether it comes with a `Content-Length` or chunked
//! without one (so a cap checked only against the header is caught). A body far past the cap
//! is refused without being read: the client hangs up long before its end.

use std::time::Duration;

use fixtures::aux_model::graph_value;
use fixtures::aux_model::{AnswerEnd, Framing};
use judge::prelude::*;
use rstest::rstest;

use super::judge_failed_without_rows;
use crate::{applied_with_two_children, decompose_card};

/// The reference's cap on a reply body.
const CAP_BYTES: u64 = 1024 * 1024;

/// Body bytes per chunk of a chunked body here: a MiB spans 64 chunks.
const CHUNK_BYTES: usize = 16 * 1024;

/// Far more than a client that stopped reading at the cap can have taken in, loopback socket
/// buffers included (a few MiB each way).
const FAR_PAST_THE_CAP: u64 = 256 * CAP_BYTES;

/// What a reply body is.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// One `chat.completion` JSON document, padded with trailing whitespace.
    Json,
    /// Server-sent events, padded with a comment line before the finish chunk.
    EventStream,
}

/// How a reply body is delimited.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Delimited {
    ContentLength,
    Chunked,
}

/// A reply carrying a 2-child graph whose body is exactly `size` bytes.
fn body_of_size(shape: Shape, delimited: Delimited, size: u64) -> Reply {
    let content = graph_value(2, &[]).to_string();
    let reply = match shape {
        Shape::Json => Reply::padded_completion(content, size),
        Shape::EventStream => Reply::padded_stream(content, size),
    };
    match delimited {
        Delimited::ContentLength => reply,
        Delimited::Chunked => reply.chunked_by(CHUNK_BYTES),
    }
}

/// The precondition of every case: the fake sent the body framed as the case says.
fn assert_framed(board: &Board, card: &str, delimited: Delimited) {
    let framings: Vec<Framing> = board
        .aux()
        .billed_calls()
        .into_iter()
        .filter(|call| call.card().as_deref() == Some(card))
        .map(|call| call.answer.framing)
        .collect();
    let chunked = framings
        .iter()
        .all(|framing| matches!(framing, Framing::Chunked { .. }));
    assert_eq!(chunked, delimited == Delimited::Chunked, "{framings:?}");
}

#[rstest]
#[case::json_at_cap(Shape::Json, Delimited::ContentLength, CAP_BYTES)]
#[case::json_one_byte_over(Shape::Json, Delimited::ContentLength, CAP_BYTES + 1)]
#[case::stream_at_cap(Shape::EventStream, Delimited::ContentLength, CAP_BYTES)]
#[case::stream_one_byte_over(Shape::EventStream, Delimited::ContentLength, CAP_BYTES + 1)]
#[case::chunked_json_at_cap(Shape::Json, Delimited::Chunked, CAP_BYTES)]
#[case::chunked_json_one_byte_over(Shape::Json, Delimited::Chunked, CAP_BYTES + 1)]
#[case::chunked_stream_at_cap(Shape::EventStream, Delimited::Chunked, CAP_BYTES)]
#[case::chunked_stream_one_byte_over(Shape::EventStream, Delimited::Chunked, CAP_BYTES + 1)]
fn reply_body_at_the_cap_is_read_and_one_byte_more_is_refused(
    #[case] shape: Shape,
    #[case] delimited: Delimited,
    #[case] size: u64,
    board: Board,
) {
    let aux = board.aux();
    let root = board.create("a reply that fills the cap", &["--triage"]);
    let before = board.rows().task(&root);
    aux.reply(&root, body_of_size(shape, delimited, size));

    let run = decompose_card(&board, &root);

    assert_framed(&board, &root, delimited);
    bound("requests for a body at the cap", aux.billed_for(&root))
        .exactly(1)
        .note(|| format!("{shape:?} body of {size} bytes, {delimited:?}"))
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    if size <= CAP_BYTES {
        applied_with_two_children(&board, &root, &run)
            .verdict("a body of exactly the cap is read and applied")
            .note(|| format!("{shape:?} body of {size} bytes, {delimited:?}"))
            .context(|| format!("{}\n{}", run.output, board.diag(&root)))
            .gap(GapKind::ReplyNotApplied);
    } else {
        judge_failed_without_rows(&board, &before, &run);
    }
}

/// A valid reply padded far past the cap: the client stops reading at the cap (or refuses the
/// `Content-Length` outright) and hangs up, so the provider never gets to send the whole body.
/// A client that buffered the body to its end before measuring it would take it all in.
#[rstest]
#[case::chunked(Delimited::Chunked)]
#[case::content_length(Delimited::ContentLength)]
fn a_body_far_past_the_cap_is_refused_and_the_client_hangs_up_before_its_end(
    #[case] delimited: Delimited,
    board: Board,
) {
    let aux = board.aux();
    let root = board.create("a reply with no end in sight", &["--triage"]);
    let before = board.rows().task(&root);
    aux.reply(
        &root,
        body_of_size(Shape::Json, delimited, FAR_PAST_THE_CAP),
    );

    let run = decompose_card(&board, &root);

    assert_framed(&board, &root, delimited);
    bound(
        "requests for a body far past the cap",
        aux.billed_for(&root),
    )
    .exactly(1)
    .context(|| run.output.to_string())
    .gap(GapKind::NotOneRequest);
    judge_failed_without_rows(&board, &before, &run);
    // The provider sees the hang-up at its next write, a moment after the client has gone.
    let _ = try_wait_until(
        || {
            aux.billed_calls()
                .iter()
                .all(|call| call.answer.end.is_some())
        },
        Duration::from_secs(10),
        "the answer's end to be journaled",
    );
    let answers: Vec<_> = aux
        .billed_calls()
        .into_iter()
        .map(|call| call.answer)
        .collect();
    holds(
        "the client hung up before the whole body far past the cap was sent",
        answers.iter().all(|answer| {
            answer.end == Some(AnswerEnd::ClientClosed)
                && answer.body_bytes_sent < answer.body_bytes
        }),
    )
    .note(|| {
        answers
            .iter()
            .map(|answer| {
                format!(
                    "{} of {} bytes sent, ended {:?}",
                    answer.body_bytes_sent, answer.body_bytes, answer.end
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    })
    .gap(GapKind::HostileReplyApplied);
}
