//! `AuxClient` against a real HTTP server: the suite's fake provider for canned replies, and a
//! raw TCP server for what it cannot do (headers then a stall, a body that never ends).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use fixtures::aux_model::{AuxModel, Reply};
use hermes::aux_client::{
    AuxClient, AuxError, AuxSettings, ChatMessage, Completion, Usage, DEFAULT_MAX_BODY_BYTES,
};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_millis(800);

fn settings(base_url: &str) -> AuxSettings {
    AuxSettings {
        base_url: base_url.to_owned(),
        model: "decomposer-test".to_owned(),
        api_key: Some("sk-test-key".to_owned()),
        timeout: TIMEOUT,
        max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        temperature: 0.25,
        max_tokens: 1500,
    }
}

fn messages() -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("decompose"),
        ChatMessage::user("Task id: t_0123abcd\nTitle: x"),
    ]
}

fn chat_json(content: &str) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 34, "total_tokens": 154}
    })
}

fn delta_event(content: &str) -> String {
    let chunk =
        json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
    format!("data: {chunk}\n\n")
}

/// A fake provider answering every chat-completions call with `reply`.
fn provider_replying(reply: Reply) -> AuxModel {
    let provider = AuxModel::start();
    provider.reply_default(reply);
    provider
}

/// `value` as a JSON body with `status`.
fn json_body(status: u16, value: &Value) -> Reply {
    Reply::raw(status, "application/json", value.to_string())
}

/// An empty body with `status` (headers are added by the caller).
fn status_only(status: u16) -> Reply {
    Reply::raw(status, "text/plain", Vec::new())
}

fn send_to(provider: &AuxModel) -> Result<Completion, AuxError> {
    send_with(settings(&provider.base_url()))
}

/// One request, made on a current-thread runtime of its own (the provider runs on another), so
/// anything the client spawns runs on the test's thread, under its logging.
fn send_with(settings: AuxSettings) -> Result<Completion, AuxError> {
    let client = AuxClient::new(settings)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime for the request");
    runtime.block_on(client.send_once(&messages()))
}

#[test]
fn json_reply_gives_content_and_usage() {
    let provider = provider_replying(json_body(200, &chat_json("{\"fanout\": false}")));
    let completion = send_to(&provider);
    assert_eq!(
        completion,
        Ok(Completion {
            content: "{\"fanout\": false}".to_owned(),
            http_status: 200,
            usage: Usage {
                prompt_tokens: Some(120),
                completion_tokens: Some(34)
            },
            streamed: false,
        })
    );
}

#[test]
fn json_reply_without_usage_is_still_ok() {
    let body = json!({"choices": [{"message": {"content": "hello"}}]});
    let provider = provider_replying(json_body(200, &body));
    let completion = send_to(&provider);
    assert_eq!(
        completion.map(|c| (c.content, c.usage)),
        Ok(("hello".to_owned(), Usage::default()))
    );
}

#[test]
fn sse_reply_split_across_many_events_with_usage() {
    let text = "{\"fanout\": true, \"tasks\": [{\"title\": \"ünï ✓\"}]}";
    let mut body = String::from(": comment line\n\nevent: message\n");
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(3) {
        body.push_str(&delta_event(&piece.iter().collect::<String>()));
    }
    body.push_str(
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    );
    body.push_str(
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":9}}\n\n",
    );
    body.push_str("data: [DONE]\n\n");
    let provider = provider_replying(Reply::raw(200, "text/event-stream", body));

    let completion = send_to(&provider);
    assert_eq!(
        completion,
        Ok(Completion {
            content: text.to_owned(),
            http_status: 200,
            usage: Usage {
                prompt_tokens: Some(7),
                completion_tokens: Some(9)
            },
            streamed: true,
        })
    );
}

#[test]
fn sse_cut_before_done_is_malformed_not_a_fragment() {
    let body = format!(
        "{}{}",
        delta_event("{\"fanout\": tr"),
        delta_event("ue, \"tasks\"")
    );
    let provider = provider_replying(Reply::raw(200, "text/event-stream", body));
    assert_eq!(
        send_to(&provider),
        Err(AuxError::Malformed("stream ended before [DONE]".to_owned()))
    );
}

#[test]
fn sse_with_finish_reason_but_no_done_is_ok() {
    let body = format!(
        "{}data: {{\"choices\":[{{\"delta\":{{\"content\":\"!\"}},\"finish_reason\":\"stop\"}}]}}\n\n",
        delta_event("done")
    );
    let provider = provider_replying(Reply::raw(200, "text/event-stream", body));
    assert_eq!(
        send_to(&provider).map(|c| c.content),
        Ok("done!".to_owned())
    );
}

#[test]
fn sse_sent_as_json_content_type_is_still_read() {
    let body = format!("{}data: [DONE]\n\n", delta_event("streamed anyway"));
    let provider = provider_replying(Reply::raw(200, "application/json", body));
    let completion = send_to(&provider);
    assert_eq!(
        completion.map(|c| (c.content, c.streamed)),
        Ok(("streamed anyway".to_owned(), true))
    );
}

#[test]
fn sse_chunk_that_is_not_json_is_malformed() {
    let body = format!(
        "{}data: not json at all\n\ndata: [DONE]\n\n",
        delta_event("a")
    );
    let provider = provider_replying(Reply::raw(200, "text/event-stream", body));
    let err = send_to(&provider).err();
    assert!(
        matches!(&err, Some(AuxError::Malformed(reason)) if reason.starts_with("stream chunk is not JSON")),
        "{err:?}"
    );
}

#[test]
fn sse_error_object_is_malformed_with_the_provider_message() {
    let body = "data: {\"error\":{\"message\":\"model overloaded\",\"code\":503}}\n\n";
    let provider = provider_replying(Reply::raw(200, "text/event-stream", body));
    assert_eq!(
        send_to(&provider),
        Err(AuxError::Malformed(
            "provider error in stream: model overloaded".to_owned()
        ))
    );
}

#[test]
fn blank_content_is_an_empty_reply() {
    let provider = provider_replying(json_body(200, &chat_json(" \n\t ")));
    assert_eq!(
        send_to(&provider),
        Err(AuxError::Malformed("empty reply".to_owned()))
    );
}

#[test]
fn non_json_body_is_malformed() {
    let provider = provider_replying(Reply::raw(200, "text/plain", "Sorry, no JSON here"));
    let err = send_to(&provider).err();
    assert!(matches!(&err, Some(AuxError::Malformed(_))), "{err:?}");
    assert_eq!(err.map(|e| e.outcome().as_str()), Some("malformed"));
}

#[test]
fn each_status_class_maps_to_its_error() {
    let cases = [
        (401, AuxError::Auth { status: 401 }),
        (402, AuxError::Billing { status: 402 }),
        (403, AuxError::Auth { status: 403 }),
        (404, AuxError::Client { status: 404 }),
        (400, AuxError::Client { status: 400 }),
        (
            500,
            AuxError::Server {
                status: 500,
                retry_after: None,
            },
        ),
        (
            503,
            AuxError::Server {
                status: 503,
                retry_after: None,
            },
        ),
    ];
    for (status, expected) in cases {
        let provider = provider_replying(json_body(status, &json!({"error": {"message": "nope"}})));
        let err = send_to(&provider).err();
        assert_eq!(err.as_ref(), Some(&expected), "HTTP {status}");
        let transient = err.as_ref().is_some_and(AuxError::is_transient);
        assert_eq!(transient, status >= 500, "HTTP {status} transient");
        assert_eq!(err.and_then(|e| e.http_status()), Some(status));
    }
}

#[test]
fn rate_limit_reads_retry_after_seconds() {
    let provider = provider_replying(status_only(429).header("Retry-After", "30"));
    assert_eq!(
        send_to(&provider),
        Err(AuxError::RateLimited {
            retry_after: Some(Duration::from_secs(30))
        })
    );
}

#[test]
fn rate_limit_reads_retry_after_http_date() {
    let at = SystemTime::now() + Duration::from_secs(120);
    let provider = provider_replying(
        status_only(429).header("Retry-After", httpdate::fmt_http_date(at).as_str()),
    );
    let wait = match send_to(&provider) {
        Err(AuxError::RateLimited {
            retry_after: Some(wait),
        }) => wait,
        other => panic!("expected a rate limit with a wait, got {other:?}"),
    };
    // The date has one-second resolution and some time passes before it is read.
    assert!(
        wait > Duration::from_secs(115) && wait <= Duration::from_secs(120),
        "wait {wait:?}"
    );
}

#[test]
fn rate_limit_with_past_date_waits_zero_and_junk_gives_none() {
    let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(3600));
    let provider = provider_replying(status_only(429).header("Retry-After", past.as_str()));
    assert_eq!(
        send_to(&provider),
        Err(AuxError::RateLimited {
            retry_after: Some(Duration::ZERO)
        })
    );

    let provider = provider_replying(status_only(429).header("Retry-After", "whenever you like"));
    let err = send_to(&provider);
    assert_eq!(err, Err(AuxError::RateLimited { retry_after: None }));
    assert!(err.is_err_and(|e| !e.is_transient()));
}

#[test]
fn redirect_is_not_followed() {
    let provider =
        provider_replying(status_only(307).header("Location", "/v1/other/chat/completions"));
    assert_eq!(send_to(&provider), Err(AuxError::Client { status: 307 }));
    assert_eq!(provider.received().len(), 1, "exactly one request per call");
}

#[test]
fn hang_past_the_timeout_ends_at_the_timeout() {
    let provider =
        provider_replying(json_body(200, &chat_json("late")).delayed(Duration::from_secs(30)));
    let started = Instant::now();
    let result = send_to(&provider);
    let elapsed = started.elapsed();
    assert_eq!(
        result,
        Err(AuxError::Timeout {
            url: format!("{}/chat/completions", provider.base_url()),
            after: TIMEOUT
        })
    );
    assert!(elapsed >= TIMEOUT, "ended early: {elapsed:?}");
    assert!(
        elapsed < TIMEOUT + Duration::from_secs(1),
        "ended late: {elapsed:?}"
    );
}

#[test]
fn headers_then_a_stalled_body_still_ends_at_the_timeout() {
    let server = RawServer::start(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec(),
    );
    let started = Instant::now();
    let result = send_with(settings(&server.base_url));
    let elapsed = started.elapsed();
    assert_eq!(
        result,
        Err(AuxError::Timeout {
            url: format!("{}/chat/completions", server.base_url),
            after: TIMEOUT
        })
    );
    assert!(
        elapsed < TIMEOUT + Duration::from_secs(1),
        "ended late: {elapsed:?}"
    );
}

#[test]
fn done_then_an_open_connection_is_not_waited_on() {
    let events = format!("{}data: [DONE]\n\n", delta_event("quick"));
    let mut response =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    response.extend_from_slice(format!("{:x}\r\n{events}\r\n", events.len()).as_bytes());
    let server = RawServer::start(response);
    let started = Instant::now();
    let result = send_with(settings(&server.base_url));
    assert_eq!(result.map(|c| c.content), Ok("quick".to_owned()));
    assert!(
        started.elapsed() < TIMEOUT,
        "waited for the stalled connection"
    );
}

#[test]
fn a_503_reads_retry_after() {
    let provider = provider_replying(status_only(503).header("Retry-After", "2"));
    let err = send_to(&provider).err();
    assert_eq!(
        err,
        Some(AuxError::Server {
            status: 503,
            retry_after: Some(Duration::from_secs(2))
        })
    );
    assert_eq!(
        err.and_then(|e| e.retry_after()),
        Some(Duration::from_secs(2))
    );
}

#[test]
fn error_status_then_a_stalled_body_is_still_the_status_error() {
    // Debug logging on, so the error body is read (off the request's path) for the log.
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_test_writer()
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let server = RawServer::start(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100000\r\n\r\n{\"error\":".to_vec(),
    );
    let started = Instant::now();
    let result = send_with(settings(&server.base_url));
    assert_eq!(
        result,
        Err(AuxError::Server {
            status: 500,
            retry_after: None
        })
    );
    assert!(started.elapsed() < TIMEOUT, "waited on the error body");
}

#[test]
fn body_of_2_mib_is_too_large() {
    let provider = provider_replying(json_body(200, &chat_json(&"x".repeat(2 * 1024 * 1024))));
    let err = send_to(&provider).err();
    assert_eq!(
        err,
        Some(AuxError::TooLarge {
            limit: DEFAULT_MAX_BODY_BYTES
        })
    );
    assert_eq!(err.map(|e| e.outcome().as_str()), Some("too_large"));
}

#[test]
fn body_of_900_kib_is_accepted() {
    let content = "y".repeat(900 * 1024);
    let provider = provider_replying(json_body(200, &chat_json(&content)));
    assert_eq!(
        send_to(&provider).map(|c| c.content.len()),
        Ok(content.len())
    );
}

#[test]
fn endless_body_without_length_is_cut_off_at_the_limit() {
    for content_type in ["text/event-stream", "application/json"] {
        endless_body_is_cut_off(content_type);
    }
}

fn endless_body_is_cut_off(content_type: &str) {
    let limit = 64 * 1024;
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    // A stream that keeps going past the limit and then stalls: the cap, not the timeout, ends it.
    let event = delta_event(&"z".repeat(1000));
    for _ in 0..(2 * limit / event.len()) {
        response.extend_from_slice(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes());
    }
    let server = RawServer::start(response);
    let started = Instant::now();
    let result = send_with(AuxSettings {
        max_body_bytes: limit,
        ..settings(&server.base_url)
    });
    assert_eq!(result, Err(AuxError::TooLarge { limit }), "{content_type}");
    assert!(
        started.elapsed() < TIMEOUT,
        "{content_type}: the cap should end it before the timeout"
    );
}

#[test]
fn connection_refused_is_unreachable_and_not_retried() {
    let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(err) => panic!("cannot reserve a port: {err}"),
    };
    // The listener is dropped above, so nothing accepts on this port.
    let err = send_with(settings(&format!("http://127.0.0.1:{port}/v1"))).err();
    assert!(matches!(&err, Some(AuxError::Unreachable(_))), "{err:?}");
    let said = err.as_ref().map(ToString::to_string).unwrap_or_default();
    assert!(
        said.starts_with(&format!(
            "provider unreachable: http://127.0.0.1:{port}/v1/chat/completions: "
        )) && said.contains("Connection refused"),
        "the error names the URL it tried and why: {said}"
    );
    assert!(err.as_ref().is_some_and(AuxError::is_undelivered));
    assert!(!err.as_ref().is_some_and(AuxError::is_transient));
    assert_eq!(err.map(|e| e.outcome().as_str()), Some("unreachable"));
}

#[test]
fn an_unknown_host_is_unreachable() {
    // `.invalid` never resolves (RFC 2606).
    let err = send_with(settings("http://hermes-test.invalid/v1")).err();
    assert!(matches!(&err, Some(AuxError::Unreachable(_))), "{err:?}");
    let said = err.as_ref().map(ToString::to_string).unwrap_or_default();
    assert!(
        said.contains("http://hermes-test.invalid/v1/chat/completions: "),
        "{said}"
    );
}

#[test]
fn a_connection_error_names_the_url_without_its_credentials_or_query_values() {
    let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(err) => panic!("cannot reserve a port: {err}"),
    };
    for api_key in [None, Some("sk-test-key".to_owned())] {
        let base = format!("http://ops:pw-in-url-0042@127.0.0.1:{port}/v1?key=sk-in-query-0042");
        let err = send_with(AuxSettings {
            api_key: api_key.clone(),
            ..settings(&base)
        })
        .err();
        let said = err.as_ref().map(ToString::to_string).unwrap_or_default();
        assert!(
            said.starts_with(&format!(
                "provider unreachable: http://127.0.0.1:{port}/v1/chat/completions?key=<redacted>: "
            )),
            "key {api_key:?}: {said}"
        );
        for secret in ["ops", "pw-in-url-0042", "sk-in-query-0042", "sk-test-key"] {
            assert!(!said.contains(secret), "{secret} shown: {said}");
        }
    }
}

#[test]
fn a_tls_handshake_failure_is_unreachable() {
    // A plain-HTTP server spoken to over TLS: the handshake fails, nothing is delivered.
    let provider = provider_replying(json_body(200, &chat_json("ok")));
    let base = provider.base_url().replace("http://", "https://");
    let err = send_with(settings(&base)).err();
    assert!(matches!(&err, Some(AuxError::Unreachable(_))), "{err:?}");
    assert!(provider.received().is_empty(), "no request was delivered");
}

#[test]
fn a_connection_cut_after_the_request_is_a_transport_error_that_may_be_billed() {
    // Reads the request, then closes without a reply: the provider may have billed it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut buf = [0u8; 65536];
            let _ = std::io::Read::read(&mut stream, &mut buf);
        }
    });
    let err = send_with(settings(&format!("http://{addr}/v1"))).err();
    assert!(matches!(&err, Some(AuxError::Transport(_))), "{err:?}");
    assert!(err.as_ref().is_some_and(AuxError::is_transient));
    assert!(!err.as_ref().is_some_and(AuxError::is_undelivered));
}

#[test]
fn request_body_and_headers_have_the_expected_shape() {
    let provider = provider_replying(json_body(200, &chat_json("ok")));
    // Trailing slash on the base URL must not produce `//chat/completions`.
    let result = send_with(settings(&format!("{}/", provider.base_url())));
    assert!(result.is_ok(), "{result:?}");

    let requests = provider.received();
    assert_eq!(requests.len(), 1, "exactly one request per call");
    let request = &requests[0];
    assert_eq!(request.path, "/v1/chat/completions");
    let header = |name: &str| request.header(name).map(str::to_owned);
    assert_eq!(
        header("authorization").as_deref(),
        Some("Bearer sk-test-key")
    );
    assert!(header("user-agent").is_some_and(|ua| ua.starts_with("hermes/")));
    assert_eq!(header("content-type").as_deref(), Some("application/json"));

    let body: Value = match request.json() {
        Ok(body) => body,
        Err(err) => panic!("request body is not JSON: {err}"),
    };
    assert_eq!(
        body,
        json!({
            "model": "decomposer-test",
            "messages": [
                {"role": "system", "content": "decompose"},
                {"role": "user", "content": "Task id: t_0123abcd\nTitle: x"}
            ],
            "temperature": 0.25,
            "max_tokens": 1500,
            "stream": false
        })
    );
    assert!(body.get("tools").is_none());
}

#[test]
fn no_key_sends_no_authorization_header() {
    let provider = provider_replying(json_body(200, &chat_json("ok")));
    for api_key in [None, Some("   ".to_owned())] {
        let result = send_with(AuxSettings {
            api_key,
            ..settings(&provider.base_url())
        });
        assert!(result.is_ok(), "{result:?}");
    }
    let requests = provider.received();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.header("authorization").is_none()));
}

#[test]
fn settings_that_cannot_make_a_request_are_refused() {
    let bad = [
        AuxSettings {
            base_url: "not a url".to_owned(),
            ..settings("http://127.0.0.1:1/v1")
        },
        AuxSettings {
            temperature: f32::NAN,
            ..settings("http://127.0.0.1:1/v1")
        },
        AuxSettings {
            api_key: Some("line\nbreak".to_owned()),
            ..settings("http://127.0.0.1:1/v1")
        },
    ];
    for settings in bad {
        let shown = format!("{settings:?}");
        let err = AuxClient::new(settings).err();
        assert!(
            matches!(err, Some(AuxError::InvalidSettings(_))),
            "{shown}: {err:?}"
        );
    }
}

/// A one-connection HTTP server that writes a fixed byte string and then holds the connection
/// open until it is dropped: a provider that stalls mid-reply.
struct RawServer {
    base_url: String,
    _release: mpsc::Sender<()>,
}

impl RawServer {
    fn start(response: Vec<u8>) -> Self {
        let listener = match TcpListener::bind("127.0.0.1:0") {
            Ok(listener) => listener,
            Err(err) => panic!("cannot bind a test listener: {err}"),
        };
        let base_url = match listener.local_addr() {
            Ok(addr) => format!("http://{addr}/v1"),
            Err(err) => panic!("test listener has no address: {err}"),
        };
        let (release, released) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            read_request(&mut stream);
            if stream
                .write_all(&response)
                .and_then(|()| stream.flush())
                .is_err()
            {
                return;
            }
            // Blocks until the test drops the server; the connection stays open meanwhile.
            let _ = released.recv();
        });
        Self {
            base_url,
            _release: release,
        }
    }
}

/// Reads one request (headers and a `Content-Length` body) so the client is never blocked
/// writing it.
fn read_request(stream: &mut std::net::TcpStream) {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        received.extend_from_slice(&buf[..n]);
        let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if received.len() >= end + 4 + length {
            return;
        }
    }
}
