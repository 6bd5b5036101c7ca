//! `hermes gateway check` answers "what will this bill" and bills nothing, on every
//! configuration the operator tests use: the defaults, a decomposer route of its own, an
//! `extra_body`, a base URL with a path and a query, and no key at all. The fake provider
//! records every request; the check's one free request (`GET …/models`) is recorded and is no
//! bill, and the same configuration does bill a decompose call when one is asked for, so the
//! zero is the check's, not a provider that cannot count.

use fixtures::home::FAKE_API_KEY;
use rstest::rstest;
use serde_json::{json, Value};

use judge::prelude::*;

/// The decomposer's own key, in the route-override case.
const ROUTE_KEY: &str = "sk-check-route-0001";

/// The configurations of the operator tests, by name.
#[derive(Debug, Clone, Copy)]
enum Case {
    Defaults,
    DecomposerRoute,
    ExtraBody,
    PathAndQuery,
    NoKey,
}

impl Case {
    fn config(self) -> Config {
        let gateway = Config::gateway();
        match self {
            Case::Defaults | Case::PathAndQuery | Case::NoKey => gateway,
            Case::DecomposerRoute => gateway
                .decomposer_model("cheap-decomposer-model")
                .decomposer_api_key(ROUTE_KEY),
            Case::ExtraBody => gateway.decomposer_extra_body(json!({
                "provider": {"order": ["fake"]},
                "reasoning": {"enabled": false},
            })),
        }
    }

    /// The bearer every request of this configuration carries.
    fn bearer(self) -> String {
        match self {
            Case::DecomposerRoute => format!("Bearer {ROUTE_KEY}"),
            Case::NoKey => "<none>".to_owned(),
            _ => format!("Bearer {FAKE_API_KEY}"),
        }
    }

    fn model(self) -> &'static str {
        match self {
            Case::DecomposerRoute => "cheap-decomposer-model",
            _ => fixtures::aux_model::MODEL_NAME,
        }
    }
}

/// The board for `case`, its config written through the builder (plus, for the URL case, the
/// base URL's path and query, and for the no-key case an empty `.env`).
fn arranged(case: Case) -> Board {
    let board = Board::new(case.config());
    match case {
        Case::PathAndQuery => {
            let url = format!("{}?api-version=2024-06-01", board.aux().base_url());
            board.reconfigure(
                case.config()
                    .yaml(&format!("model:\n  base_url: \"{url}\"\n")),
            );
        }
        Case::NoKey => board.write_dotenv(""),
        _ => {}
    }
    board
}

#[rstest]
#[case::defaults(Case::Defaults)]
#[case::decomposer_route(Case::DecomposerRoute)]
#[case::extra_body(Case::ExtraBody)]
#[case::path_and_query(Case::PathAndQuery)]
#[case::no_key(Case::NoKey)]
fn the_check_says_what_would_be_billed_and_bills_nothing(#[case] case: Case) {
    let board = arranged(case);
    let card = board.create("a card the next tick would bill", &["--triage"]);
    let aux = board.aux();

    let out = board.cli_unchecked(["gateway", "check", "--json"]);
    let report: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
    let free: Vec<_> = aux
        .received()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/models"))
        .collect();
    bound("chat completions the check billed", aux.bills())
        .exactly(0)
        .context(|| format!("{out}\n{:#?}", aux.received()))
        .gap(GapKind::BilledForNothing);
    Findings::new()
        .equal("exit code", &out.code, &Some(0))
        .equal("would start", &report["would_start"], &json!(true))
        .equal(
            "the route's model",
            &report["route"]["model"],
            &json!(case.model()),
        )
        .equal(
            "the board's due cards",
            &report["board"]["triage"]["due"],
            &json!(1),
        )
        .equal(
            "the provider's answer",
            &report["provider"]["status"],
            &json!(200),
        )
        .equal("free requests recorded", &free.len(), &1)
        .that(free.iter().all(|r| r.bearer() == case.bearer()), || {
            format!("the free request carries {}", case.bearer())
        })
        .that(
            !out.stdout.contains(ROUTE_KEY) && !out.stdout.contains(FAKE_API_KEY),
            || "no key is shown".to_owned(),
        )
        .verdict("the check reports the route it would bill")
        .context(|| out.to_string())
        .gap(GapKind::CallNotVisible);

    // The precondition of the zero: this provider counts a decompose call on this route.
    let mark = aux.mark();
    board.cli(["kanban", "decompose", &card]);
    bound(
        "a decompose call on the checked route",
        aux.bills_since(mark),
    )
    .exactly(1)
    .context(|| format!("{:#?}", aux.received()))
    .gap(GapKind::CallNotVisible);
    let billed = aux.billed_calls();
    Findings::new()
        .equal(
            "the billed call's model",
            &billed[0].model(),
            &case.model().to_owned(),
        )
        .equal("the billed call's key", &billed[0].bearer(), &case.bearer())
        .that(
            report["route"]["endpoint"]
                .as_str()
                .is_some_and(|shown| shown.contains(&billed[0].path)),
            || format!("the check named {} as the endpoint", billed[0].path),
        )
        .verdict("the decompose call goes where the check said")
        .gap(GapKind::CallNotVisible);
}
