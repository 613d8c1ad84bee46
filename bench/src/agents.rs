//! Real `meshhub-sink-agent` processes in push mode, mixed into scenario
//! `clusters` so that the real agent (validation, persistence, its sink
//! port's limits) is always part of what the hub dials.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::sync::oneshot;

/// The agent binary: in `MESHHUB_E2E_BIN_DIR` when set, else beside this
/// harness (`target/<profile>/`).
pub fn agent_binary() -> Result<PathBuf> {
    let dir = match std::env::var_os("MESHHUB_E2E_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .context("locating the harness binary")?
            .parent()
            .context("the harness's directory")?
            .to_owned(),
    };
    let bin = dir.join("meshhub-sink-agent");
    if !bin.is_file() {
        bail!(
            "{} is missing: build it with the harness (`cargo build --release -p meshhub-bench -p meshhub-sink-agent`) or set MESHHUB_E2E_BIN_DIR",
            bin.display()
        );
    }
    Ok(bin)
}

/// Running agents, killed when dropped.
pub struct Agents {
    /// Cluster names, in order.
    pub names: Vec<String>,
    /// Their sink addresses (`http://host:port`).
    pub addresses: Vec<String>,
    children: Vec<Child>,
}

impl Agents {
    /// Starts `count` agents keeping their data under `dir`, and waits
    /// until each one's sink port accepts connections.
    pub async fn start(count: usize, dir: &Path) -> Result<Self> {
        let mut agents = Self {
            names: Vec::new(),
            addresses: Vec::new(),
            children: Vec::new(),
        };
        if count == 0 {
            return Ok(agents);
        }
        let bin = agent_binary()?;
        let mut starting = Vec::new();
        for i in 0..count {
            let name = format!("agent-{i}");
            let data = dir.join(&name);
            std::fs::create_dir_all(&data)?;
            let mut child = Command::new(&bin)
                .args([
                    "--cluster",
                    &name,
                    "--data-dir",
                    &data.display().to_string(),
                    "--mode",
                    "push",
                    "--sink-addr",
                    "127.0.0.1:0",
                    "--grpc-addr",
                    "127.0.0.1:0",
                    "--admin-addr",
                    "127.0.0.1:0",
                ])
                // Quiet unless asked (the agents log at info by default),
                // except for the start line, which says where the sink port
                // is: the kernel chose it.
                .env(
                    "MESHHUB_LOG",
                    format!(
                        "{},meshhub_sink_agent::app=info",
                        std::env::var("MESHHUB_LOG").unwrap_or_else(|_| "warn".into())
                    ),
                )
                .env("MESHHUB_LOG_FORMAT", "json")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            let (tx, rx) = oneshot::channel();
            let stderr = child.stderr.take().context("the agent's stderr")?;
            tokio::spawn(forward_log(name.clone(), stderr, tx));
            starting.push((name, child, rx));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for (name, mut child, sink) in starting {
            let sink = tokio::select! {
                sink = sink => sink.ok(),
                () = tokio::time::sleep_until(deadline) => bail!("{name} did not start within 60 s"),
            };
            let Some(sink) = sink else {
                let status = child.wait().await?;
                bail!("{name} exited at start ({status}) without saying where its sink listens");
            };
            agents.children.push(child);
            agents.addresses.push(format!("http://{sink}"));
            agents.names.push(name);
        }
        Ok(agents)
    }
}

/// Copies agent `name`'s log lines (JSON) to this harness's stderr, except
/// its start line, whose sink address goes to `sink`.
async fn forward_log(name: String, stderr: ChildStderr, sink: oneshot::Sender<SocketAddr>) {
    let mut sink = Some(sink);
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let started = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .map(|v| v["fields"].clone())
            .filter(|f| f["message"] == "meshhub-sink-agent started");
        match started {
            Some(fields) => {
                let addr = fields["sink.addr"].as_str().and_then(|a| a.parse().ok());
                if let (Some(tx), Some(addr)) = (sink.take(), addr) {
                    let _ = tx.send(addr);
                }
            }
            None => eprintln!("{name}: {line}"),
        }
    }
}
