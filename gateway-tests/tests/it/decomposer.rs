//! Upstream's decomposer settings (`auxiliary.kanban_decomposer.*`) shape every call a gateway
//! pays for on its own, on every target: the model it names (the price), the key it is sent
//! with, and the extra body fields. Judged by what the fake provider received from the gateway.

use fixtures::aux_model::{Received, MODEL_NAME};
use fixtures::home::FAKE_API_KEY;
use judge::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};

/// The model a user sets for decomposition: cheaper than the main model ([`MODEL_NAME`]).
const DECOMPOSER_MODEL: &str = "cheap-small-model";

/// The decomposer's own key, unlike the environment's [`FAKE_API_KEY`].
const DECOMPOSER_KEY: &str = "sk-decomposer-only-not-real";

/// Provider routing fields a user merges into every decompose call.
fn extra_body() -> Value {
    json!({"provider": {"order": ["cheap-host"], "sort": "price"}, "top_k": 20})
}

/// The calls of `calls` that break `ok`, described by `seen`; every call when none was billed.
fn breaking(
    calls: &[Received],
    ok: impl Fn(&Received) -> bool,
    seen: impl Fn(&Received) -> String,
) -> Vec<String> {
    if calls.is_empty() {
        return vec!["no call billed at all".to_owned()];
    }
    calls.iter().filter(|call| !ok(call)).map(seen).collect()
}

#[rstest]
fn the_gateway_bills_with_the_decomposers_model_key_and_extra_body(
    #[with(
        Config::gateway()
            .decomposer_model(DECOMPOSER_MODEL)
            .decomposer_api_key(DECOMPOSER_KEY)
            .decomposer_extra_body(extra_body())
    )]
    board: Board,
) {
    let aux = board.aux();
    let card = board.create("an idea for the decomposer's own model", &["--triage"]);
    aux.reply(&card, Reply::graph(2, &[]));

    let mut run = board.scenario();
    run.start()
        .until_left_triage(&card, "the card auto-decomposed");
    let seen = run.stop();
    let calls = aux.billed_calls();

    let wrong_model = breaking(
        &calls,
        |call| call.model() == DECOMPOSER_MODEL,
        Received::model,
    );
    bound(
        "gateway calls that name another model than the decomposer's",
        wrong_model.len(),
    )
    .at_most(0)
    .over(&seen)
    .note(|| {
        format!(
            "{wrong_model:?}; main model {MODEL_NAME}; {}",
            board.setting(Setting::DecomposerModel)
        )
    })
    .gap(GapKind::DecomposerSettingIgnored);
    let expected_bearer = format!("Bearer {DECOMPOSER_KEY}");
    let wrong_key = breaking(
        &calls,
        |call| call.bearer() == expected_bearer,
        Received::bearer,
    );
    bound(
        "gateway calls sent with another key than the decomposer's",
        wrong_key.len(),
    )
    .at_most(0)
    .over(&seen)
    .note(|| format!("{wrong_key:?}; the environment's key is {FAKE_API_KEY}"))
    .gap(GapKind::DecomposerSettingIgnored);
    let fields = extra_body();
    let missing_fields = breaking(
        &calls,
        |call| {
            fields.as_object().is_some_and(|fields| {
                fields
                    .iter()
                    .all(|(key, value)| call.body_field(key) == *value)
            })
        },
        |call| {
            format!(
                "provider={} top_k={}",
                call.body_field("provider"),
                call.body_field("top_k")
            )
        },
    );
    bound(
        "gateway calls without the decomposer's extra body fields",
        missing_fields.len(),
    )
    .at_most(0)
    .over(&seen)
    .note(|| {
        format!(
            "{missing_fields:?}; {}",
            board.setting(Setting::DecomposerExtraBody)
        )
    })
    .gap(GapKind::DecomposerSettingIgnored);
    holds(
        "the card is decomposed by the gateway",
        board.rows().children_of(&card).len() == 2,
    )
    .over(&seen)
    .context(|| board.diag(&card))
    .gap(GapKind::ReplyNotApplied);
}
