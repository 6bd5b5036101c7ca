//! `report.html` in a real browser: headless Chromium driven through ChromeDriver (W3C
//! WebDriver). The page of the sample runs (`testdata/report/`) is opened from a file, and every
//! count of the grid is clicked: it must lead to a list of exactly that many tests, each with its
//! verdict, and a failure's reason must be on the page.
//!
//! These tests need Debian's `chromium` and `chromium-driver` (`/usr/bin/chromium`,
//! `/usr/bin/chromedriver`; `HERMES_CHROMIUM` and `HERMES_CHROMEDRIVER` name others). Like the
//! `with_upstream` tests, they live in modules named `in_browser`: the nextest `default` profile
//! leaves them out, so a machine without a browser runs everything else, the `browser` profile
//! runs exactly them, and a selected test fails (never skips) when the browser is missing.

mod in_browser {
    use std::net::TcpListener;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use serde_json::{json, Value};
    use tools::junit;
    use tools::report::{Report, TargetRun};
    use tools::verdicts;

    /// The flags that let Chromium start headless on a machine whose only network is loopback.
    const CHROMIUM_FLAGS: [&str; 9] = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,900",
    ];

    fn program(variable: &str, default: &str) -> PathBuf {
        let path = std::env::var_os(variable).map_or_else(|| PathBuf::from(default), PathBuf::from);
        assert!(
            path.is_file(),
            "this test opens the report in a real browser, and {} is missing: install Debian's \
             `chromium` and `chromium-driver` (`apt-get install chromium chromium-driver`), or \
             set {variable} to it. Tests in `in_browser` modules run with `cargo nextest run \
             --profile browser`; the default profile leaves them out.",
            path.display()
        );
        path
    }

    fn sample(name: &str) -> TargetRun {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/report");
        TargetRun {
            name: name.to_owned(),
            describes: format!("the {name} sample"),
            gap_list: "upstream-0.19.0".to_owned(),
            cases: junit::read(&dir.join(format!("{name}-junit.xml"))).expect("sample JUnit"),
            verdicts: verdicts::read(&dir.join(format!("{name}.jsonl"))).expect("sample verdicts"),
            seconds: 12.0,
            pace: None,
        }
    }

    /// ChromeDriver on a free loopback port, ended when dropped.
    struct Driver {
        child: Child,
        base: String,
        http: reqwest::Client,
        runtime: tokio::runtime::Runtime,
    }

    impl Drop for Driver {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    impl Driver {
        fn start() -> Driver {
            let driver = program("HERMES_CHROMEDRIVER", "/usr/bin/chromedriver");
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            let child = Command::new(driver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting chromedriver");
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the HTTP client");
            let driver = Driver {
                child,
                base: format!("http://127.0.0.1:{port}"),
                http: reqwest::Client::new(),
                runtime,
            };
            let started = Instant::now();
            while driver.call("GET", "/status", None).is_err() {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "chromedriver did not answer on port {port} within 30 s"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            driver
        }

        /// One WebDriver command: its `value`, or the error it answered.
        fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
            let url = format!("{}{path}", self.base);
            let request = match method {
                "GET" => self.http.get(&url),
                "DELETE" => self.http.delete(&url),
                _ => self
                    .http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.unwrap_or_else(|| json!({})).to_string()),
            };
            let text = self.runtime.block_on(async {
                let response = request.send().await.map_err(|e| e.to_string())?;
                response.text().await.map_err(|e| e.to_string())
            })?;
            let answer: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
            if answer["value"]["error"].is_string() {
                return Err(answer["value"].to_string());
            }
            Ok(answer["value"].clone())
        }
    }

    /// A browser session on one page.
    struct Session<'d> {
        driver: &'d Driver,
        id: String,
    }

    impl Drop for Session<'_> {
        fn drop(&mut self) {
            let _ = self
                .driver
                .call("DELETE", &format!("/session/{}", self.id), None);
        }
    }

    impl<'d> Session<'d> {
        fn open(driver: &'d Driver, profile_dir: &Path) -> Session<'d> {
            let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|f| (*f).to_owned()).collect();
            args.push(format!("--user-data-dir={}", profile_dir.display()));
            let browser = program("HERMES_CHROMIUM", "/usr/bin/chromium");
            let capabilities = json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": browser.display().to_string(), "args": args},
            }}});
            let session = driver
                .call("POST", "/session", Some(capabilities))
                .unwrap_or_else(|error| panic!("the browser did not start: {error}"));
            Session {
                driver,
                id: session["sessionId"]
                    .as_str()
                    .expect("a session id")
                    .to_owned(),
            }
        }

        fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
            let path = format!("/session/{}{path}", self.id);
            self.driver
                .call(method, &path, body)
                .unwrap_or_else(|error| panic!("{method} {path}: {error}"))
        }

        fn script(&self, script: &str, args: Value) -> Value {
            self.command(
                "POST",
                "/execute/sync",
                Some(json!({"script": script, "args": args})),
            )
        }

        /// The WebDriver ids of the elements `css` selects.
        fn elements(&self, css: &str) -> Vec<String> {
            let found = self.command(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            );
            found
                .as_array()
                .expect("a list of elements")
                .iter()
                .filter_map(|element| element.as_object()?.values().next()?.as_str())
                .map(str::to_owned)
                .collect()
        }
    }

    #[test]
    fn every_count_of_the_grid_leads_to_its_tests_and_reasons() {
        let report = Report::build(
            vec![sample("reference"), sample("upstream")],
            "2026-11-30".to_owned(),
        );
        let dir = tempfile::tempdir().expect("scratch dir");
        let page = dir.path().join("report.html");
        std::fs::write(&page, tools::html::page(&report, "abc1234")).expect("writing the page");
        let driver = Driver::start();
        let session = Session::open(&driver, &dir.path().join("browser-profile"));
        let url = format!("file://{}", page.display());
        session.command("POST", "/url", Some(json!({ "url": url })));

        let title = session.command("GET", "/title", None);
        assert_eq!(title, "Conformance: bounded billing (2026-11-30)");
        let headers = session.script(
            "return [...document.querySelectorAll('#grid thead th')].map(th => th.textContent)",
            json!([]),
        );
        assert_eq!(headers, json!(["bound (tests)", "reference", "upstream"]));
        let rows = session.script(
            "return [...document.querySelectorAll('#grid tbody th')].map(th => th.textContent)",
            json!([]),
        );
        assert_eq!(
            rows,
            json!([
                "B1 budget",
                "B3 validation",
                "B5 provider pause",
                "B6 hourly ceiling",
                "CLI contract",
                "no bound reached",
                "oracle (whole runs)"
            ])
        );

        let counts = session.elements("#grid a.count");
        assert_eq!(counts.len(), 13, "one link per count in the grid");
        for count in &counts {
            let text = session.command("GET", &format!("/element/{count}/text"), None);
            let text = text.as_str().expect("link text").to_owned();
            session.command("POST", &format!("/element/{count}/click"), Some(json!({})));
            // The section the click landed on: the one `:target` selects, shown on screen.
            let landed = session.script(
                "const s = document.querySelector('section.tests:target');\
                 if (!s) return null;\
                 const r = s.getBoundingClientRect();\
                 return {heading: s.querySelector('h2').textContent,\
                         items: s.querySelectorAll('li').length,\
                         verdicts: [...s.querySelectorAll('li .verdict')].map(v => v.textContent),\
                         onScreen: r.top < window.innerHeight && r.bottom > 0};",
                json!([]),
            );
            assert!(
                !landed.is_null(),
                "clicking {text:?} landed on no list of tests"
            );
            let tests: u64 = text
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a count starts with its number");
            assert_eq!(landed["items"], tests, "{text:?} → {landed}");
            assert_eq!(landed["onScreen"], true, "{text:?} → {landed}");
            let status = text.split_once(' ').map_or("", |(_, words)| words);
            assert!(
                landed["heading"].as_str().unwrap_or("").contains(status),
                "{text:?} → {landed}"
            );
            let verdicts = landed["verdicts"].as_array().expect("verdicts");
            assert_eq!(verdicts.len() as u64, tests, "{landed}");
        }

        // A failure's reason is on the page, under the count that lists it.
        let reasons = session.script(
            "return [...document.querySelectorAll('section.tests .why')].map(w => w.textContent)",
            json!([]),
        );
        assert!(
            reasons.as_array().expect("reasons").iter().any(|why| why
                .as_str()
                .unwrap_or("")
                .contains("database disk image is malformed")),
            "{reasons}"
        );
    }
}
