//! A real Prometheus server on loopback (Debian's package, installed by
//! `e2e/peers/prometheus.sh`) scraping a target the test controls: what the
//! rollout's metric gates query.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use meshhub_testkit::ports::free_addr;

use crate::istio::tail;
use crate::{PortAttempts, Proc};

/// `prometheus`: `MESHHUB_PROMETHEUS_BIN` if set, else what
/// `e2e/peers/prometheus.sh` installs.
pub fn prometheus_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("MESHHUB_PROMETHEUS_BIN") {
        Some(p) => PathBuf::from(p),
        None => crate::peer_script("prometheus.sh", &[], "the rollout metric-gate tests"),
    })
}

/// `promtool` (rule checks and unit tests): `MESHHUB_PROMTOOL_BIN` if set,
/// else the one beside [`prometheus_bin`] (Debian's `prometheus` package
/// ships both).
pub fn promtool_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("MESHHUB_PROMTOOL_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            let bin = prometheus_bin().with_file_name("promtool");
            assert!(
                bin.exists(),
                "no promtool beside {} (set MESHHUB_PROMTOOL_BIN)",
                prometheus_bin().display()
            );
            bin
        }
    })
}

/// A `/metrics` endpoint serving `requests_failed{cluster="<c>"} <value>`
/// for each cluster, each value set by the test.
#[derive(Debug)]
pub struct Target {
    /// Where Prometheus scrapes.
    pub addr: SocketAddr,
    values: Arc<Vec<(String, AtomicU64)>>,
    stop: CancellationToken,
}

impl Target {
    /// Serves a value of 0 for each of `clusters`.
    pub async fn start(clusters: &[&str]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let values: Arc<Vec<(String, AtomicU64)>> = Arc::new(
            clusters
                .iter()
                .map(|c| ((*c).to_owned(), AtomicU64::new(0f64.to_bits())))
                .collect(),
        );
        let stop = CancellationToken::new();
        let (v, s) = (values.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let (mut conn, _) = tokio::select! {
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                    () = s.cancelled() => break,
                };
                let v = v.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let mut body = String::from("# TYPE requests_failed gauge\n");
                    for (c, value) in v.iter() {
                        let x = f64::from_bits(value.load(Ordering::SeqCst));
                        body.push_str(&format!("requests_failed{{cluster=\"{c}\"}} {x}\n"));
                    }
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                });
            }
        });
        Self { addr, values, stop }
    }

    /// Sets `cluster`'s value.
    pub fn set(&self, cluster: &str, value: f64) {
        for (c, v) in self.values.iter() {
            if c == cluster {
                v.store(value.to_bits(), Ordering::SeqCst);
            }
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A Prometheus server scraping `target` every 500 ms, with its data in
/// `dir`; killed when dropped.
#[derive(Debug)]
pub struct Prometheus {
    /// Its HTTP address.
    pub addr: SocketAddr,
    _proc: Proc,
}

/// Whether the Prometheus at `addr` answers `/-/ready` with 200.
async fn ready(addr: SocketAddr) -> bool {
    tokio::task::spawn_blocking(move || meshhub_testkit::http::get_blocking(addr, "/-/ready"))
        .await
        .ok()
        .flatten()
        .is_some_and(|(code, _)| code == 200)
}

impl Prometheus {
    /// Starts it and waits until it is ready.
    pub async fn start(target: SocketAddr, dir: &Path) -> Self {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 500ms\n  evaluation_interval: 500ms\nscrape_configs:\n- job_name: gates\n  static_configs:\n  - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let mut attempts = PortAttempts::new("prometheus");
        loop {
            let addr = free_addr();
            let args = vec![
                format!("--config.file={}", config.display()),
                format!("--storage.tsdb.path={}", dir.join("data").display()),
                format!("--web.listen-address={addr}"),
                "--log.level=warn".to_owned(),
            ];
            let mut proc = Proc::spawn_program("prometheus", prometheus_bin(), &args, &[], dir);
            let deadline = tokio::time::Instant::now() + meshhub_testkit::DEADLINE;
            loop {
                // Its own port: another Prometheus's /-/ready is no answer.
                if proc.listens_on(addr.port()) && ready(addr).await {
                    return Self { addr, _proc: proc };
                }
                if let Some(status) = proc.exited() {
                    attempts.exited(&status, &proc.output());
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "Prometheus not ready on {addr}:\n{}",
                    tail(&proc.output(), 40)
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }

    /// The value of `query` now, as Prometheus answers it (for waits).
    pub async fn value(&self, query: &str) -> Option<f64> {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", query)
            .finish();
        let (code, body) =
            meshhub_testkit::http::get(self.addr, &format!("/api/v1/query?{q}")).await;
        if code != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}
