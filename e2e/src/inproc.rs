//! The hub and the sink agent started in the test's own process (their
//! libraries, on kernel-chosen loopback ports): for tests that need the
//! real thing and also its handles (cache, ledger, readiness) rather than
//! a process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser as _;
use meshhub::app::Hub;
use meshhub::clusters::is_dialer;
use meshhub::config::{Args, Config};
use meshhub_mcp::ledger::PeerStatus;
use meshhub_mcp::limits::Limits;
use meshhub_proto::kinds::KindTable;
use meshhub_sink_agent::app::Agent;
use meshhub_sink_agent::config::{Config as AgentConfig, DEFAULT_MAX_MESSAGE_BYTES, Mode};
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::pki::Ca;
use meshhub_testkit::within;

use crate::yaml::files_hub;

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

/// A scratch tree for a hub: `objects/` (its file source) and `etc/`;
/// the second value is where its configuration goes, `etc/meshhub.yaml`
/// (which reads `../objects`, see [`write_hub_config`]).
pub fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for sub in ["objects", "etc"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("the tree");
    }
    let config = dir.path().join("etc/meshhub.yaml");
    (dir, config)
}

/// Writes (atomically, as editors and ConfigMap updates do) the
/// configuration of a hub in a [`tree`]: its file source reading
/// `../objects`, `clusters` (YAML entries, see `yaml::cluster`), then
/// `extra` top-level lines.
pub fn write_hub_config(path: &Path, clusters: &str, extra: &str) {
    write_atomic(path, &files_hub("../objects", clusters, extra));
}

/// The hub's live dial-out stream to `cluster`'s agent, from its ledger.
pub fn dialer(hub: &Hub, cluster: &str) -> Option<PeerStatus> {
    hub.ledger()
        .view()
        .into_iter()
        .find(|p| is_dialer(p) && p.peer == cluster && p.connected)
}

/// The identity of cluster east's consumers in [`mtls_hub`].
pub const EAST_ID: &str = "spiffe://east.example/ns/istio-system/sa/istiod";
/// The identity of cluster west's consumers in [`mtls_hub`].
pub const WEST_ID: &str = "spiffe://west.example/ns/istio-system/sa/istiod";

/// A ready hub whose gRPC port wants mutual TLS and places consumers by
/// their verified identity: east (namespace `east-ns`, holding
/// `east-ns/reviews`) for [`EAST_ID`], west (`west-ns`, `west-ns/ratings`)
/// for [`WEST_ID`]. Its PKI is in `dir`: `ca.pem`, the hub's
/// `server.pem`/`server-key.pem` (for localhost), and the clients'
/// `east.pem`/`east-key.pem` and `west.pem`/`west-key.pem`.
pub async fn mtls_hub(dir: &Path) -> Hub {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = Ca::new("meshhub test root");
    ca.write(&dir.join("ca.pem"));
    ca.server(&["localhost"]).write_pem(dir, "server");
    ca.client(EAST_ID).write_pem(dir, "east");
    ca.client(WEST_ID).write_pem(dir, "west");
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects).expect("objects/");
    let vs = |name: &str, ns: &str| meshhub_testkit::objects::virtual_service(name, ns, name, "");
    std::fs::write(
        objects.join("vs.yaml"),
        format!(
            "{}---\n{}",
            vs("reviews", "east-ns"),
            vs("ratings", "west-ns")
        ),
    )
    .expect("objects");
    let text = "\
sources:
  - name: files
    file: {path: objects}
clusters:
  - name: east
    namespaces: [east-ns]
    identities: ['spiffe://east.example/**']
  - name: west
    namespaces: [west-ns]
    identities: ['spiffe://west.example/ns/*/sa/istiod']
grpcTls: {cert: server.pem, key: server-key.pem, clientCa: ca.pem}
debounce: {quiet: 20ms, maxWait: 200ms}
";
    let config = hub_config(&dir.join("meshhub.yaml"), text);
    assert!(config.access.enforced, "identities are enforced");
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
        data_dir_wait: Duration::ZERO,
        apply: None,
        upward: Default::default(),
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
