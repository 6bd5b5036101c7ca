//! What a decompose request may be, and where it goes (contract §2, §5): a base URL with a query
//! keeps its path (the query stays a query, after `/chat/completions`), `extra_body` may not make
//! one call bill more than one completion, `kanban.prices` is bounded, and a config nested past
//! hermes's limit is refused at once, naming its line.

use std::time::{Duration, Instant};

use fixtures::aux_model::AuxModel;
use judge::prelude::*;
use rstest::rstest;

/// The request target (path and query) of every decompose call the fake provider billed.
fn billed_targets(aux: &AuxModel) -> Vec<String> {
    aux.billed_calls()
        .into_iter()
        .map(|call| call.target)
        .collect()
}

#[rstest]
fn a_base_url_with_a_query_is_joined_on_its_path(#[with(Config::plain())] board: Board) {
    let aux = board.aux();
    let base = format!("{}?api-version=2024-06-01", aux.base_url());
    board.reconfigure(
        board
            .config()
            .yaml(&format!("model:\n  base_url: '{base}'\n")),
    );
    let card = board.create("an idea for a provider with an api-version", &["--triage"]);
    aux.reply(&card, Reply::default_single());
    let decompose = board.cli_unchecked(["kanban", "decompose", &card, "--json"]);
    let targets = billed_targets(aux);

    holds(
        "the request went to the base URL's path plus /chat/completions, its query after it",
        targets == ["/v1/chat/completions?api-version=2024-06-01"],
    )
    .note(|| format!("request targets: {targets:?}"))
    .context(|| decompose.to_string())
    .gap(GapKind::RequestOffContract);
    holds(
        "the card is decomposed by that one call",
        decompose.code == Some(0) && board.rows().status(&card) != "triage",
    )
    .context(|| format!("{decompose}\n{}", board.diag(&card)))
    .gap(GapKind::RequestOffContract);
}

#[rstest]
#[case::best_of("best_of", "3")]
#[case::web_search("web_search_options", "{search_context_size: high}")]
#[case::web_plugin("plugins", "[{id: web}]")]
#[case::priority_tier("service_tier", "priority")]
#[case::audio_output("modalities", "[text, audio]")]
#[case::audio("audio", "{voice: alloy, format: wav}")]
fn extra_body_that_bills_more_than_one_completion_is_refused(
    #[case] field: &str,
    #[case] value: &str,
    #[with(Config::plain())] board: Board,
) {
    let aux = board.aux();
    board.reconfigure(board.config().yaml(&format!(
        "auxiliary:\n  kanban_decomposer:\n    extra_body:\n      {field}: {value}\n"
    )));
    let card = board.create("an idea with a dear extra_body", &["--triage"]);
    let decompose = board.cli_unchecked(["kanban", "decompose", &card, "--json"]);

    bound(
        format!("requests sent with extra_body.{field}: {value}"),
        aux.bills(),
    )
    .at_most(0)
    .context(|| decompose.to_string())
    .gap(GapKind::RequestOffContract);
    holds(
        "the config error names the field, with exit 1",
        decompose.code == Some(1)
            && decompose
                .stderr
                .contains(&format!("auxiliary.kanban_decomposer.extra_body.{field}: ")),
    )
    .context(|| decompose.to_string())
    .gap(GapKind::UnclearRefusal);
}

#[rstest]
fn a_price_past_the_bound_is_refused_and_the_ledger_still_shows(
    #[with(Config::plain())] board: Board,
) {
    board.reconfigure(board.config().yaml(&format!(
        "kanban:\n  prices:\n    {}: {{input: 1e308, output: 1}}\n",
        fixtures::aux_model::MODEL_NAME
    )));
    let card = board.create("an idea billed once", &["--triage"]);
    board.aux().reply(&card, Reply::default_single());
    board.cli_unchecked(["kanban", "decompose", &card]);
    let usage = board.cli_unchecked(["kanban", "usage"]);

    holds(
        "`usage` names the price's key and its bound, and shows no infinite cost",
        usage.code == Some(0)
            && usage.stderr.contains("prices.")
            && usage.stderr.contains("at most 1000000")
            && !usage.stdout.contains("inf"),
    )
    .context(|| usage.to_string())
    .gap(GapKind::UnclearRefusal);
}

/// How deeply the nested config nests: far past any limit, a mebibyte of it.
const NESTED: usize = 1024 * 1024 - 64;

/// The longest a verb may take to refuse it: the quadratic parse took minutes; the refusal
/// takes milliseconds, with room for a loaded debug build.
const REFUSED_WITHIN: Duration = Duration::from_secs(10);

#[rstest]
fn a_config_nested_too_deep_is_refused_at_once_naming_its_line(
    #[with(Config::plain())] board: Board,
) {
    let text = format!(
        "model:\n  default: m\nkanban:\n  x: {}\n",
        "[".repeat(NESTED)
    );
    if let Err(error) = std::fs::write(board.config_path(), text) {
        panic!("cannot write the nested config: {error}");
    }
    let card = board.create("an idea under a hostile config", &["--triage"]);
    let started = Instant::now();
    let decompose = board.cli_unchecked(["kanban", "decompose", &card, "--json"]);
    let took = started.elapsed();

    holds(
        "a mebibyte of nested flow sequences is refused at once, naming its line",
        decompose.code == Some(1)
            && decompose.stderr.contains("line 4")
            && decompose.stderr.contains("nested more than 64 levels")
            && took <= REFUSED_WITHIN,
    )
    .note(|| format!("took {:.2}s", took.as_secs_f64()))
    .context(|| decompose.to_string())
    .gap(GapKind::UnboundedConfigRead);
    bound(
        "requests sent under the refused config",
        board.aux().bills(),
    )
    .at_most(0)
    .gap(GapKind::UnboundedConfigRead);
}

/// A host name that never resolves (RFC 2606): reached only through a proxy.
const FAR_PROVIDER: &str = "http://provider.hermes-test.invalid/v1";

/// The fake provider's address as a proxy URL (it answers absolute-form requests as a proxy
/// relays them).
fn proxy_at(board: &Board) -> String {
    format!("http://{}", board.aux().address())
}

/// A proxy from the environment never carries a request to this machine: the key would go in
/// the clear to a host that has no business with it.
#[rstest]
fn a_loopback_endpoint_is_never_sent_through_a_proxy(#[with(Config::plain())] board: Board) {
    let aux = board.aux();
    let card = board.create("an idea for the provider on this machine", &["--triage"]);
    aux.reply(&card, Reply::default_single());
    let nowhere = fixtures::closed_port::closed_port_url();
    let proxies = ["HTTP_PROXY", "http_proxy", "ALL_PROXY"]
        .into_iter()
        .map(|name| (name.into(), nowhere.clone().into()))
        .collect();
    let decompose = board.cli_with_env(["kanban", "decompose", &card, "--json"], proxies);
    let targets = billed_targets(aux);

    holds(
        "the request went straight to the provider on this machine, not to the proxy",
        decompose.code == Some(0) && targets == ["/v1/chat/completions"],
    )
    .note(|| format!("request targets: {targets:?}"))
    .context(|| decompose.to_string())
    .gap(GapKind::RequestOffContract);
}

#[rstest]
#[case::answered(Reply::default_single(), Some(0), "ok")]
#[case::proxy_could_not_reach(Reply::http_error(502, "Bad Gateway"), Some(1), "unreachable")]
fn a_remote_endpoint_goes_through_the_proxy_and_its_502_costs_no_budget(
    #[case] reply: Reply,
    #[case] exit: Option<i32>,
    #[case] outcome: &str,
    #[with(Config::plain())] board: Board,
) {
    let aux = board.aux();
    board.reconfigure(
        board
            .config()
            .yaml(&format!("model:\n  base_url: '{FAR_PROVIDER}'\n")),
    );
    let card = board.create("an idea for a provider behind a proxy", &["--triage"]);
    aux.reply(&card, reply);
    let decompose = board.cli_with_env(
        ["kanban", "decompose", &card, "--json"],
        vec![("HTTP_PROXY".into(), proxy_at(&board).into())],
    );
    let targets = billed_targets(aux);
    let ledger: Vec<String> = board
        .rows()
        .ledger(&card)
        .iter()
        .map(|row| row.outcome.clone())
        .collect();
    let attempts = board
        .rows()
        .decompose_state(&card)
        .and_then(|state| state.columns["attempts"].as_i64());

    holds(
        "the request went to the proxy, naming the provider's URL",
        targets == [format!("{FAR_PROVIDER}/chat/completions")],
    )
    .note(|| format!("request targets: {targets:?}"))
    .context(|| decompose.to_string())
    .gap(GapKind::RequestOffContract);
    Findings::new()
        .equal("exit code", &decompose.code, &exit)
        .equal("ledger outcomes", &ledger, &vec![outcome.to_owned()])
        .equal(
            "attempts counted on the card",
            &attempts,
            &Some(i64::from(outcome == "ok")),
        )
        .verdict(format!(
            "through a proxy, a {outcome} answer is recorded as such (a 502 is the proxy's: \
             the provider was not reached, no budget spent)"
        ))
        .context(|| format!("{decompose}\n{}", board.diag(&card)))
        .gap(GapKind::UnreachableCharged);
}
