//! The hub and the sink agent started in the test's own process (their
//! libraries, on kernel-chosen loopback ports): for tests that need the
//! real thing and also its handles (cache, ledger, readiness) rather than
//! a process.

use std::path::Path;
use std::time::Duration;

use clap::Parser as _;
use meshhub::app::Hub;
use meshhub::config::{Args, Config};
use meshhub_mcp::limits::Limits;
use meshhub_proto::kinds::KindTable;
use meshhub_sink_agent::app::Agent;
use meshhub_sink_agent::config::{Config as AgentConfig, DEFAULT_MAX_MESSAGE_BYTES, Mode};
use meshhub_testkit::within;

/// Both ports on 127.0.0.1, chosen by the kernel.
pub const ANY_PORT: &str = "127.0.0.1:0";

/// The flags of a hub serving gRPC on `grpc` (usually [`ANY_PORT`]) and
/// its admin port on any loopback port, with a 5 s shutdown grace, then
/// `more` (`--config <file>`, ...).
pub fn hub_args(grpc: &str, more: &[&str]) -> Args {
    let base = [
        "meshhub",
        "--grpc-addr",
        grpc,
        "--admin-addr",
        ANY_PORT,
        "--shutdown-grace",
        "5s",
    ];
    Args::parse_from(base.iter().chain(more))
}

/// The configuration `text` as read from `path` (written there first, so
/// that relative paths in it resolve from its directory and a reload reads
/// it again), with [`hub_args`] on any port.
pub fn hub_config(path: &Path, text: &str) -> Config {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Config::from_yaml(&hub_args(ANY_PORT, &[]), path, text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Starts the hub of `config`, not waiting for readiness.
pub async fn start_hub(config: Config) -> Hub {
    Hub::start(config).await.expect("the hub starts")
}

/// Waits until `hub` is ready (every source synced once).
pub async fn ready(hub: &Hub) {
    within("the hub to be ready", hub.ready()).await;
}

/// Starts the hub of `config` and waits until it is ready.
pub async fn ready_hub(config: Config) -> Hub {
    let hub = start_hub(config).await;
    ready(&hub).await;
    hub
}

/// A ready hub of `text`, written to `path` ([`hub_config`]).
pub async fn hub_of_text(path: &Path, text: &str) -> Hub {
    ready_hub(hub_config(path, text)).await
}

/// A ready hub started as `meshhub --config <path>` would be (the file
/// read by the hub, and watched for changes).
pub async fn hub_of_file(path: &Path) -> Hub {
    let path = path.to_str().expect("a UTF-8 path");
    let config = Config::from_args(hub_args(ANY_PORT, &["--config", path]))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    ready_hub(config).await
}

/// An agent for `cluster` keeping its data in `data`, in `mode`: every
/// port on loopback (kernel-chosen), plaintext, every built-in collection,
/// the default message limit, a 5 s shutdown grace, nothing applied to a
/// Kubernetes API. Tests change what they need with `..agent_config(..)`.
pub fn agent_config(cluster: &str, data: &Path, mode: Mode) -> AgentConfig {
    let any = ANY_PORT.parse().expect("a socket address");
    AgentConfig {
        cluster: cluster.into(),
        data_dir: data.to_owned(),
        mode,
        grpc_addr: any,
        grpc_tls: None,
        insecure: false,
        sink_allowed_identities: None,
        admin_addr: any,
        admin_token_file: None,
        collections: KindTable::builtin()
            .iter()
            .map(|k| k.collection().to_owned())
            .collect(),
        max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        limits: Limits {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            ..Limits::default()
        },
        incremental: false,
        shutdown_grace: Duration::from_secs(5),
        apply: None,
    }
}

/// Push mode: the sink port on any loopback port, plaintext.
pub fn push() -> Mode {
    Mode::Push {
        listen: ANY_PORT.parse().expect("a socket address"),
        tls: None,
    }
}

/// Starts the agent of `config`.
pub async fn start_agent(config: AgentConfig) -> Agent {
    Agent::start(config).await.expect("the agent starts")
}
