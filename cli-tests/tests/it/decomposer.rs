//! Upstream's decomposer settings (`auxiliary.kanban_decomposer.*`) shape the call a `kanban
//! decompose` pays for, on every target: upstream honours its own keys, and the reference honours
//! them with upstream's precedence (contract §2). Each is judged by what the fake provider received:
//! the model the body names (the price of the call), the bearer it was sent with, its fields.

use fixtures::aux_model::{Received, MODEL_NAME};
use fixtures::home::FAKE_API_KEY;
use fixtures::verdict::Verdict;
use judge::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};

use crate::decompose_card;

/// The model a user sets for decomposition: cheaper than the main model ([`MODEL_NAME`]).
const DECOMPOSER_MODEL: &str = "cheap-small-model";

/// The decomposer's own key, unlike the environment's [`FAKE_API_KEY`].
const DECOMPOSER_KEY: &str = "sk-decomposer-only-not-real";

/// Provider routing fields a user merges into every decompose call.
fn extra_body() -> Value {
    json!({"provider": {"order": ["cheap-host"], "sort": "price"}, "top_k": 20})
}

/// A verdict that some call was billed and every billed call satisfies `ok`; `seen` describes a
/// call for the note.
fn every_call<'a>(
    what: &str,
    calls: &'a [Received],
    ok: impl Fn(&Received) -> bool,
    seen: impl Fn(&Received) -> String + 'a,
) -> Verdict<'a> {
    holds(what, !calls.is_empty() && calls.iter().all(ok)).note(move || {
        let seen: Vec<String> = calls.iter().map(seen).collect();
        format!("{} billed calls: {}", calls.len(), seen.join(" | "))
    })
}

/// Decomposes one card by hand, judging that it cost one request and was applied (a setting
/// must not cost the decomposition), and returns the calls billed.
fn decompose_one(board: &Board) -> Vec<Received> {
    let aux = board.aux();
    let card = board.create("an idea for the decomposer's own model", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let run = decompose_card(board, &card);

    bound("requests for one decompose", aux.billed_for(&card))
        .exactly(1)
        .context(|| run.output.to_string())
        .gap(GapKind::NotOneRequest);
    holds(
        "the decompose is applied",
        board.rows().children_of(&card).len() == 2,
    )
    .context(|| format!("{}\n{}", run.output, board.diag(&card)))
    .gap(GapKind::ReplyNotApplied);
    aux.billed_calls()
}

#[rstest]
fn the_decomposer_model_is_the_model_billed(
    #[with(Config::plain().decomposer_model(DECOMPOSER_MODEL))] board: Board,
) {
    let calls = decompose_one(&board);

    every_call(
        "every billed call names the decomposer's model, not the main one",
        &calls,
        |call| call.model() == DECOMPOSER_MODEL,
        Received::model,
    )
    .note(|| {
        format!(
            "main model {MODEL_NAME}; {}",
            board.setting(Setting::DecomposerModel)
        )
    })
    .gap(GapKind::DecomposerSettingIgnored);
}

#[rstest]
fn the_decomposer_extra_body_reaches_the_request_body(
    #[with(Config::plain().decomposer_extra_body(extra_body()))] board: Board,
) {
    let calls = decompose_one(&board);

    let fields = extra_body();
    let carries = |call: &Received| {
        fields.as_object().is_some_and(|fields| {
            fields
                .iter()
                .all(|(key, value)| call.body_field(key) == *value)
        })
    };
    every_call(
        "every billed call carries the decomposer's extra body fields",
        &calls,
        carries,
        |call| {
            format!(
                "provider={} top_k={}",
                call.body_field("provider"),
                call.body_field("top_k")
            )
        },
    )
    .note(|| board.setting(Setting::DecomposerExtraBody))
    .gap(GapKind::DecomposerSettingIgnored);
    every_call(
        "with the extra fields a billed call is still a decompose call (two messages, no tools)",
        &calls,
        |call| {
            call.body_field("tools").is_null()
                && call
                    .body_field("messages")
                    .as_array()
                    .is_some_and(|m| m.len() == 2)
        },
        |call| {
            format!(
                "tools={} messages={}",
                call.body_field("tools"),
                call.body_field("messages").as_array().map_or(0, Vec::len)
            )
        },
    )
    .gap(GapKind::DecomposerSettingIgnored);
}

#[rstest]
fn the_decomposer_api_key_is_the_bearer(
    #[with(Config::plain().decomposer_api_key(DECOMPOSER_KEY))] board: Board,
) {
    let calls = decompose_one(&board);

    let expected = format!("Bearer {DECOMPOSER_KEY}");
    every_call(
        "every billed call is sent with the decomposer's key, not the environment's",
        &calls,
        |call| call.bearer() == expected,
        Received::bearer,
    )
    .note(|| format!("the environment's key is {FAKE_API_KEY}"))
    .gap(GapKind::DecomposerSettingIgnored);
}
