//! Real `meshhub-sink-agent` processes in push mode, mixed into scenario
//! `clusters` so that the real agent (validation, persistence, its sink
//! port's limits) is always part of what the hub dials.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use tokio::process::{Child, Command};

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
        let mut sinks = Vec::new();
        for i in 0..count {
            let name = format!("agent-{i}");
            let sink = free_addr()?;
            let data = dir.join(&name);
            std::fs::create_dir_all(&data)?;
            let child = Command::new(&bin)
                .args([
                    "--cluster",
                    &name,
                    "--data-dir",
                    &data.display().to_string(),
                    "--mode",
                    "push",
                    "--sink-addr",
                    &sink.to_string(),
                    "--grpc-addr",
                    "127.0.0.1:0",
                    "--admin-addr",
                    "127.0.0.1:0",
                ])
                // Quiet unless asked (the agents log at info by default).
                .env(
                    "MESHHUB_LOG",
                    std::env::var("MESHHUB_LOG").unwrap_or_else(|_| "warn".into()),
                )
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            agents.children.push(child);
            agents.addresses.push(format!("http://{sink}"));
            agents.names.push(name);
            sinks.push(sink);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for (sink, child) in sinks.iter().zip(&mut agents.children) {
            while tokio::net::TcpStream::connect(sink).await.is_err() {
                if let Some(status) = child.try_wait()? {
                    bail!("an agent exited at start: {status}");
                }
                if tokio::time::Instant::now() >= deadline {
                    bail!("agent sink {sink} did not listen within 60 s");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(agents)
    }
}

/// A loopback address free now (the agent binds it right after).
fn free_addr() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}
