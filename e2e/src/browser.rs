//! A real headless Chromium, driven over WebDriver by `chromedriver` (both
//! Debian's, installed by `e2e/peers/chromium.sh`): what the console tests
//! open the hub's pages in.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use crate::Proc;
use meshhub_testkit::ports::free_port;

/// `chromedriver`: `MESHHUB_CHROMEDRIVER_BIN` if set, else what
/// `e2e/peers/chromium.sh` installs.
pub fn chromedriver_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("MESHHUB_CHROMEDRIVER_BIN") {
        Some(p) => PathBuf::from(p),
        None => crate::peer_script("chromium.sh", &[], "the console's browser tests"),
    })
}

/// A headless Chromium session; the driver is killed when dropped.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    _driver: Proc,
}

impl Browser {
    /// Starts chromedriver on a loopback port and a headless Chromium
    /// (1400×1000) through it; logs under `logs`.
    pub async fn start(logs: &Path) -> Self {
        let bin = chromedriver_bin();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port();
            let driver = Proc::spawn_program(
                "chromedriver",
                bin,
                &[
                    format!("--port={port}"),
                    "--allowed-ips=127.0.0.1".to_owned(),
                ],
                &[],
                logs,
            );
            match connect(port).await {
                Ok(client) => {
                    return Self {
                        client,
                        _driver: driver,
                    };
                }
                Err(e) if attempt < 3 => {
                    eprintln!("chromedriver on port {port}: {e}; trying another port");
                }
                Err(e) => panic!(
                    "can't start a headless Chromium through {}: {e}\n{}",
                    bin.display(),
                    driver.output()
                ),
            }
        }
    }

    /// Waits (up to `within`) until the script `js` (a function body that
    /// returns a value) returns something other than `null`/`false`, and
    /// returns it. Panics naming `what` with the last value otherwise.
    pub async fn until(&self, what: &str, within: Duration, js: &str) -> Value {
        let deadline = Instant::now() + within;
        let mut last: Value;
        loop {
            match self.client.execute(js, vec![]).await {
                Ok(v) if !v.is_null() && v != Value::Bool(false) => return v,
                Ok(v) => last = v,
                Err(e) => last = Value::String(e.to_string()),
            }
            assert!(
                Instant::now() < deadline,
                "waited {within:?} for {what}; the page's script last returned {last}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the script `js` (a function body) returns.
    pub async fn eval(&self, js: &str) -> Value {
        self.client
            .execute(js, vec![])
            .await
            .unwrap_or_else(|e| panic!("the page's script failed: {e}\n{js}"))
    }

    /// Clicks the first enabled element matching `css`, found and clicked
    /// in one step (an event may replace the page's elements between two
    /// WebDriver commands); panics when there is none.
    pub async fn click(&self, css: &str) {
        let js = format!(
            "const e = document.querySelector({}); if (!e || e.disabled) return false; e.click(); return true;",
            Value::String(css.to_owned())
        );
        assert_eq!(
            self.eval(&js).await,
            Value::Bool(true),
            "no enabled {css} to click"
        );
    }

    /// The text of the first element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
            .text()
            .await
            .unwrap()
    }

    /// Writes a PNG screenshot of the page to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// The page's accessibility tree as Chromium builds it for screen
    /// readers (DevTools' `Accessibility.getFullAXTree`, through
    /// chromedriver): its nodes, each with `role.value` and `name.value`.
    pub async fn accessibility_tree(&self) -> Vec<Value> {
        let answer = self
            .client
            .issue_cmd(Cdp {
                cmd: "Accessibility.getFullAXTree",
                params: json!({}),
            })
            .await
            .expect("Accessibility.getFullAXTree");
        answer["nodes"].as_array().cloned().unwrap_or_default()
    }

    /// Ends the session (Chromium exits); the driver goes when dropped.
    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// A DevTools command through chromedriver's `goog/cdp/execute`.
#[derive(Debug)]
struct Cdp {
    cmd: &'static str,
    params: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        let body = json!({"cmd": self.cmd, "params": self.params});
        (http::Method::POST, Some(body.to_string()))
    }
}

async fn connect(port: u16) -> Result<Client, String> {
    let mut caps = Capabilities::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "args": [
                "--headless=new",
                // The tests run as root, where Chromium's sandbox can't.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1400,1000",
                "--force-renderer-accessibility",
            ]
        }),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await;
        match r {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() < deadline => {
                // The driver is still starting (connection refused).
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}
