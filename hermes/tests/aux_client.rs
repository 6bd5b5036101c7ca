//! `AuxClient` against a real HTTP server: wiremock for canned replies, and a raw TCP server for
//! what wiremock cannot do (headers then a stall, a body that never ends).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use hermes::aux_client::{
    AuxClient, AuxError, AuxSettings, ChatMessage, Completion, Usage, DEFAULT_MAX_BODY_BYTES,
};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

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

async fn server_replying(template: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(template)
        .mount(&server)
        .await;
    server
}

async fn send_to(server: &MockServer) -> Result<Completion, AuxError> {
    send_with(settings(&format!("{}/v1", server.uri()))).await
}

async fn send_with(settings: AuxSettings) -> Result<Completion, AuxError> {
    let client = AuxClient::new(settings)?;
    client.send_once(&messages()).await
}

#[tokio::test]
async fn json_reply_gives_content_and_usage() {
    let server =
        server_replying(ResponseTemplate::new(200).set_body_json(chat_json("{\"fanout\": false}")))
            .await;
    let completion = send_to(&server).await;
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

#[tokio::test]
async fn json_reply_without_usage_is_still_ok() {
    let body = json!({"choices": [{"message": {"content": "hello"}}]});
    let server = server_replying(ResponseTemplate::new(200).set_body_json(body)).await;
    let completion = send_to(&server).await;
    assert_eq!(
        completion.map(|c| (c.content, c.usage)),
        Ok(("hello".to_owned(), Usage::default()))
    );
}

#[tokio::test]
async fn sse_reply_split_across_many_events_with_usage() {
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
    let server =
        server_replying(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")).await;

    let completion = send_to(&server).await;
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

#[tokio::test]
async fn sse_cut_before_done_is_malformed_not_a_fragment() {
    let body = format!(
        "{}{}",
        delta_event("{\"fanout\": tr"),
        delta_event("ue, \"tasks\"")
    );
    let server =
        server_replying(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")).await;
    assert_eq!(
        send_to(&server).await,
        Err(AuxError::Malformed("stream ended before [DONE]".to_owned()))
    );
}

#[tokio::test]
async fn sse_with_finish_reason_but_no_done_is_ok() {
    let body = format!(
        "{}data: {{\"choices\":[{{\"delta\":{{\"content\":\"!\"}},\"finish_reason\":\"stop\"}}]}}\n\n",
        delta_event("done")
    );
    let server =
        server_replying(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")).await;
    assert_eq!(
        send_to(&server).await.map(|c| c.content),
        Ok("done!".to_owned())
    );
}

#[tokio::test]
async fn sse_sent_as_json_content_type_is_still_read() {
    let body = format!("{}data: [DONE]\n\n", delta_event("streamed anyway"));
    let server =
        server_replying(ResponseTemplate::new(200).set_body_raw(body, "application/json")).await;
    let completion = send_to(&server).await;
    assert_eq!(
        completion.map(|c| (c.content, c.streamed)),
        Ok(("streamed anyway".to_owned(), true))
    );
}

#[tokio::test]
async fn sse_chunk_that_is_not_json_is_malformed() {
    let body = format!(
        "{}data: not json at all\n\ndata: [DONE]\n\n",
        delta_event("a")
    );
    let server =
        server_replying(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")).await;
    let err = send_to(&server).await.err();
    assert!(
        matches!(&err, Some(AuxError::Malformed(reason)) if reason.starts_with("stream chunk is not JSON")),
        "{err:?}"
    );
}

#[tokio::test]
async fn sse_error_object_is_malformed_with_the_provider_message() {
    let body = "data: {\"error\":{\"message\":\"model overloaded\",\"code\":503}}\n\n";
    let server =
        server_replying(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")).await;
    assert_eq!(
        send_to(&server).await,
        Err(AuxError::Malformed(
            "provider error in stream: model overloaded".to_owned()
        ))
    );
}

#[tokio::test]
async fn blank_content_is_an_empty_reply() {
    let server =
        server_replying(ResponseTemplate::new(200).set_body_json(chat_json(" \n\t "))).await;
    assert_eq!(
        send_to(&server).await,
        Err(AuxError::Malformed("empty reply".to_owned()))
    );
}

#[tokio::test]
async fn non_json_body_is_malformed() {
    let server = server_replying(
        ResponseTemplate::new(200).set_body_raw("Sorry, no JSON here", "text/plain"),
    )
    .await;
    let err = send_to(&server).await.err();
    assert!(matches!(&err, Some(AuxError::Malformed(_))), "{err:?}");
    assert_eq!(err.map(|e| e.outcome()), Some("malformed"));
}

#[tokio::test]
async fn each_status_class_maps_to_its_error() {
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
        let server = server_replying(
            ResponseTemplate::new(status).set_body_json(json!({"error": {"message": "nope"}})),
        )
        .await;
        let err = send_to(&server).await.err();
        assert_eq!(err.as_ref(), Some(&expected), "HTTP {status}");
        let transient = err.as_ref().is_some_and(AuxError::is_transient);
        assert_eq!(transient, status >= 500, "HTTP {status} transient");
        assert_eq!(err.and_then(|e| e.http_status()), Some(status));
    }
}

#[tokio::test]
async fn rate_limit_reads_retry_after_seconds() {
    let server =
        server_replying(ResponseTemplate::new(429).insert_header("Retry-After", "30")).await;
    assert_eq!(
        send_to(&server).await,
        Err(AuxError::RateLimited {
            retry_after: Some(Duration::from_secs(30))
        })
    );
}

#[tokio::test]
async fn rate_limit_reads_retry_after_http_date() {
    let at = SystemTime::now() + Duration::from_secs(120);
    let server = server_replying(
        ResponseTemplate::new(429)
            .insert_header("Retry-After", httpdate::fmt_http_date(at).as_str()),
    )
    .await;
    let wait = match send_to(&server).await {
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

#[tokio::test]
async fn rate_limit_with_past_date_waits_zero_and_junk_gives_none() {
    let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(3600));
    let server =
        server_replying(ResponseTemplate::new(429).insert_header("Retry-After", past.as_str()))
            .await;
    assert_eq!(
        send_to(&server).await,
        Err(AuxError::RateLimited {
            retry_after: Some(Duration::ZERO)
        })
    );

    let server = server_replying(
        ResponseTemplate::new(429).insert_header("Retry-After", "whenever you like"),
    )
    .await;
    let err = send_to(&server).await;
    assert_eq!(err, Err(AuxError::RateLimited { retry_after: None }));
    assert!(err.is_err_and(|e| !e.is_transient()));
}

#[tokio::test]
async fn redirect_is_not_followed() {
    let server = server_replying(
        ResponseTemplate::new(307).insert_header("Location", "/v1/other/chat/completions"),
    )
    .await;
    assert_eq!(
        send_to(&server).await,
        Err(AuxError::Client { status: 307 })
    );
    let requests = server.received_requests().await.unwrap_or_default();
    assert_eq!(requests.len(), 1, "exactly one request per call");
}

#[tokio::test]
async fn hang_past_the_timeout_ends_at_the_timeout() {
    let server = server_replying(
        ResponseTemplate::new(200)
            .set_body_json(chat_json("late"))
            .set_delay(Duration::from_secs(30)),
    )
    .await;
    let started = Instant::now();
    let result = send_to(&server).await;
    let elapsed = started.elapsed();
    assert_eq!(result, Err(AuxError::Timeout { after: TIMEOUT }));
    assert!(elapsed >= TIMEOUT, "ended early: {elapsed:?}");
    assert!(
        elapsed < TIMEOUT + Duration::from_secs(1),
        "ended late: {elapsed:?}"
    );
}

#[tokio::test]
async fn headers_then_a_stalled_body_still_ends_at_the_timeout() {
    let server = RawServer::start(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec(),
    );
    let started = Instant::now();
    let result = send_with(settings(&server.base_url)).await;
    let elapsed = started.elapsed();
    assert_eq!(result, Err(AuxError::Timeout { after: TIMEOUT }));
    assert!(
        elapsed < TIMEOUT + Duration::from_secs(1),
        "ended late: {elapsed:?}"
    );
}

#[tokio::test]
async fn done_then_an_open_connection_is_not_waited_on() {
    let events = format!("{}data: [DONE]\n\n", delta_event("quick"));
    let mut response =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    response.extend_from_slice(format!("{:x}\r\n{events}\r\n", events.len()).as_bytes());
    let server = RawServer::start(response);
    let started = Instant::now();
    let result = send_with(settings(&server.base_url)).await;
    assert_eq!(result.map(|c| c.content), Ok("quick".to_owned()));
    assert!(
        started.elapsed() < TIMEOUT,
        "waited for the stalled connection"
    );
}

#[tokio::test]
async fn a_503_reads_retry_after() {
    let server =
        server_replying(ResponseTemplate::new(503).insert_header("Retry-After", "2")).await;
    let err = send_to(&server).await.err();
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

#[tokio::test]
async fn error_status_then_a_stalled_body_is_still_the_status_error() {
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
    let result = send_with(settings(&server.base_url)).await;
    assert_eq!(
        result,
        Err(AuxError::Server {
            status: 500,
            retry_after: None
        })
    );
    assert!(started.elapsed() < TIMEOUT, "waited on the error body");
}

#[tokio::test]
async fn body_of_2_mib_is_too_large() {
    let server = server_replying(
        ResponseTemplate::new(200).set_body_json(chat_json(&"x".repeat(2 * 1024 * 1024))),
    )
    .await;
    let err = send_to(&server).await.err();
    assert_eq!(
        err,
        Some(AuxError::TooLarge {
            limit: DEFAULT_MAX_BODY_BYTES
        })
    );
    assert_eq!(err.map(|e| e.outcome()), Some("too_large"));
}

#[tokio::test]
async fn body_of_900_kib_is_accepted() {
    let content = "y".repeat(900 * 1024);
    let server =
        server_replying(ResponseTemplate::new(200).set_body_json(chat_json(&content))).await;
    assert_eq!(
        send_to(&server).await.map(|c| c.content.len()),
        Ok(content.len())
    );
}

#[tokio::test]
async fn endless_body_without_length_is_cut_off_at_the_limit() {
    for content_type in ["text/event-stream", "application/json"] {
        endless_body_is_cut_off(content_type).await;
    }
}

async fn endless_body_is_cut_off(content_type: &str) {
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
    })
    .await;
    assert_eq!(result, Err(AuxError::TooLarge { limit }), "{content_type}");
    assert!(
        started.elapsed() < TIMEOUT,
        "{content_type}: the cap should end it before the timeout"
    );
}

#[tokio::test]
async fn connection_refused_is_unreachable_and_not_retried() {
    let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(err) => panic!("cannot reserve a port: {err}"),
    };
    // The listener is dropped above, so nothing accepts on this port.
    let err = send_with(settings(&format!("http://127.0.0.1:{port}/v1")))
        .await
        .err();
    assert!(matches!(&err, Some(AuxError::Unreachable(_))), "{err:?}");
    assert!(err.as_ref().is_some_and(AuxError::is_undelivered));
    assert!(!err.as_ref().is_some_and(AuxError::is_transient));
    assert_eq!(err.map(|e| e.outcome()), Some("unreachable"));
}

#[tokio::test]
async fn an_unknown_host_is_unreachable() {
    // `.invalid` never resolves (RFC 2606).
    let err = send_with(settings("http://hermes-test.invalid/v1"))
        .await
        .err();
    assert!(matches!(&err, Some(AuxError::Unreachable(_))), "{err:?}");
}

#[tokio::test]
async fn a_tls_handshake_failure_is_unreachable() {
    // A plain-HTTP server spoken to over TLS: the handshake fails, nothing is delivered.
    let server = server_replying(ResponseTemplate::new(200).set_body_json(chat_json("ok"))).await;
    let base = server.uri().replace("http://", "https://");
    let err = send_with(settings(&format!("{base}/v1"))).await.err();
    assert!(matches!(&err, Some(AuxError::Unreachable(_))), "{err:?}");
    let requests = server.received_requests().await.unwrap_or_default();
    assert!(requests.is_empty(), "no request was delivered");
}

#[tokio::test]
async fn a_connection_cut_after_the_request_is_a_transport_error_that_may_be_billed() {
    // Reads the request, then closes without a reply: the provider may have billed it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut buf = [0u8; 65536];
            let _ = std::io::Read::read(&mut stream, &mut buf);
        }
    });
    let err = send_with(settings(&format!("http://{addr}/v1")))
        .await
        .err();
    assert!(matches!(&err, Some(AuxError::Transport(_))), "{err:?}");
    assert!(err.as_ref().is_some_and(AuxError::is_transient));
    assert!(!err.as_ref().is_some_and(AuxError::is_undelivered));
}

#[tokio::test]
async fn request_body_and_headers_have_the_expected_shape() {
    let server = server_replying(ResponseTemplate::new(200).set_body_json(chat_json("ok"))).await;
    // Trailing slash on the base URL must not produce `//chat/completions`.
    let result = send_with(settings(&format!("{}/v1/", server.uri()))).await;
    assert!(result.is_ok(), "{result:?}");

    let requests = server.received_requests().await.unwrap_or_default();
    assert_eq!(requests.len(), 1, "exactly one request per call");
    let request = &requests[0];
    assert_eq!(request.url.path(), "/v1/chat/completions");
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header("authorization").as_deref(),
        Some("Bearer sk-test-key")
    );
    assert!(header("user-agent").is_some_and(|ua| ua.starts_with("hermes/")));
    assert_eq!(header("content-type").as_deref(), Some("application/json"));

    let body: Value = match serde_json::from_slice(&request.body) {
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

#[tokio::test]
async fn no_key_sends_no_authorization_header() {
    let server = server_replying(ResponseTemplate::new(200).set_body_json(chat_json("ok"))).await;
    for api_key in [None, Some("   ".to_owned())] {
        let result = send_with(AuxSettings {
            api_key,
            ..settings(&format!("{}/v1", server.uri()))
        })
        .await;
        assert!(result.is_ok(), "{result:?}");
    }
    let requests = server.received_requests().await.unwrap_or_default();
    assert_eq!(requests.len(), 2);
    assert!(requests
        .iter()
        .all(|r| !r.headers.contains_key("authorization")));
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
