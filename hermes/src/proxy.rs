//! Which proxy a decompose request goes through, decided once, here, from the environment as
//! curl and most HTTP clients read it (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, each
//! also lowercase), so that what the start line names is what the client uses (the client reads
//! no proxy setting of its own).
//!
//! A request to this machine (`localhost`, `127.0.0.0/8`, `::1`) never goes through a proxy,
//! whatever the environment says: a proxy would carry the key, in the clear over plain HTTP, to
//! a host that has no business with it, for an endpoint that was never meant to leave the box.

use std::net::IpAddr;

/// Every variable a proxy is read from.
pub const VARIABLES: [&str; 6] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// An HTTP client builder for requests to `endpoint`: through the proxy [`proxy_for`] decides
/// from this process's environment, or direct, and never through a proxy setting of the
/// client's own. Returns the proxy's URL beside it (`None`: direct). Every request the reference
/// sends goes through a client built here, so what the start line names is what is used.
///
/// # Errors
/// A proxy URL the environment gives that cannot be used, in words that show it redacted.
pub fn client_builder(
    endpoint: &reqwest::Url,
) -> Result<(reqwest::ClientBuilder, Option<reqwest::Url>), String> {
    let builder = reqwest::Client::builder().no_proxy();
    let Some(proxy) = proxy_for(endpoint, |name| std::env::var(name).ok()) else {
        return Ok((builder, None));
    };
    let invalid = |err: &dyn std::fmt::Display| {
        format!(
            "the proxy {} from the environment cannot be used: {err}",
            crate::output::redact(&proxy)
        )
    };
    let url = reqwest::Url::parse(&proxy).map_err(|err| invalid(&err))?;
    let all = reqwest::Proxy::all(url.clone()).map_err(|err| invalid(&err))?;
    Ok((builder.proxy(all), Some(url)))
}

/// The proxy requests to `url` go through, if any: its URL as the environment gives it.
/// `var` reads one environment variable.
pub fn proxy_for(url: &reqwest::Url, var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let host = url
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']');
    if is_loopback(host) {
        return None;
    }
    let read = |names: &[&str]| {
        names
            .iter()
            .filter_map(|name| var(name))
            .map(|value| value.trim().to_owned())
            .find(|value| !value.is_empty())
    };
    let exempt = read(&["NO_PROXY", "no_proxy"]).unwrap_or_default();
    if exempt
        .split([',', ' '])
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .any(|entry| exempts(entry, host))
    {
        return None;
    }
    let for_scheme: &[&str] = match url.scheme() {
        "https" => &["HTTPS_PROXY", "https_proxy"],
        _ => &["HTTP_PROXY", "http_proxy"],
    };
    read(for_scheme).or_else(|| read(&["ALL_PROXY", "all_proxy"]))
}

/// Whether `host` is this machine.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a `NO_PROXY` entry covers `host`: `*`, the host itself, a domain it is in (`.x.org`
/// or `x.org`), its IP address, or a network holding it (`10.0.0.0/8`). A port in the entry is
/// ignored.
fn exempts(entry: &str, host: &str) -> bool {
    if entry == "*" {
        return true;
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if let Some((network, bits)) = entry.split_once('/') {
        return in_network(&host, network, bits);
    }
    let entry = entry
        .trim_start_matches('[')
        .split(']')
        .next()
        .unwrap_or_default();
    let name = match entry.rsplit_once(':') {
        // `host:port`, but not an IPv6 address.
        Some((name, port)) if !name.contains(':') && port.parse::<u16>().is_ok() => name,
        _ => entry,
    };
    let name = name
        .trim_start_matches('.')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    !name.is_empty() && (host == name || host.ends_with(&format!(".{name}")))
}

fn in_network(host: &str, network: &str, bits: &str) -> bool {
    let (Ok(ip), Ok(network), Ok(bits)) = (
        host.parse::<IpAddr>(),
        network.parse::<IpAddr>(),
        bits.parse::<u32>(),
    ) else {
        return false;
    };
    match (ip, network) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(url: &str, vars: &[(&str, &str)]) -> Option<String> {
        let url = reqwest::Url::parse(url).unwrap();
        proxy_for(&url, |name| {
            vars.iter()
                .find(|(var, _)| *var == name)
                .map(|(_, value)| (*value).to_owned())
        })
    }

    #[test]
    fn the_schemes_proxy_else_all_proxy() {
        let vars = [
            ("HTTP_PROXY", "http://p:3128"),
            ("https_proxy", "http://s:3128"),
        ];
        assert_eq!(
            proxy("http://api.example/v1", &vars).as_deref(),
            Some("http://p:3128")
        );
        assert_eq!(
            proxy("https://api.example/v1", &vars).as_deref(),
            Some("http://s:3128")
        );
        let all = [("ALL_PROXY", "http://a:1"), ("HTTP_PROXY", " ")];
        assert_eq!(
            proxy("http://api.example/v1", &all).as_deref(),
            Some("http://a:1")
        );
        assert_eq!(proxy("http://api.example/v1", &[]), None);
    }

    #[test]
    fn this_machine_is_never_reached_through_a_proxy() {
        let vars = [
            ("ALL_PROXY", "http://p:3128"),
            ("HTTPS_PROXY", "http://p:3128"),
        ];
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://127.1.2.3/v1",
            "http://[::1]:9/v1",
            "http://localhost:9/v1",
            "https://api.localhost/v1",
        ] {
            assert_eq!(proxy(url, &vars), None, "{url}");
        }
        assert!(proxy("http://10.0.0.1/v1", &vars).is_some());
    }

    #[test]
    fn no_proxy_exempts_hosts_domains_addresses_and_networks() {
        let vars = [
            ("HTTP_PROXY", "http://p:3128"),
            (
                "no_proxy",
                "internal.example, .corp.example,10.0.0.0/8, fd00::/8,h:8080,*.x",
            ),
        ];
        for exempt in [
            "http://internal.example/v1",
            "http://llm.internal.example/v1",
            "http://corp.example/v1",
            "http://a.corp.example/v1",
            "http://10.1.2.3/v1",
            "http://[fd00::1]/v1",
            "http://h/v1",
        ] {
            assert_eq!(proxy(exempt, &vars), None, "{exempt}");
        }
        for proxied in [
            "http://example.org/v1",
            "http://11.0.0.1/v1",
            "http://xinternal.example/v1",
        ] {
            assert!(proxy(proxied, &vars).is_some(), "{proxied}");
        }
        assert_eq!(
            proxy(
                "http://example.org/v1",
                &[("HTTP_PROXY", "http://p"), ("NO_PROXY", "*")]
            ),
            None
        );
    }
}
