//! Configuration: command-line flags (with `MESHHUB_*` environment names) for
//! addresses and paths, and one YAML file for structured settings (sources,
//! clusters, debounce, schema policy).
//!
//! Everything is parsed and checked here, at the edge, into typed values
//! ([`Config`]); nothing downstream parses strings. Every error names the
//! setting it is about (and the file and line, when the YAML parser knows
//! them), so that the binary can print it and exit before serving.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use meshhub_kube::Connection;
use meshhub_mcp::authz::{AllowList, GroupAccess};
use meshhub_mcp::limits::{Limits, RawLimits};
use meshhub_mcp::reconnect::ReconnectPolicy;
use meshhub_mcp::tls::reload::ServerTlsFiles;
use serde::Deserialize;

use crate::groups::{ClusterSpec, DEFAULT_GROUP, Selector};

pub mod embedded;

/// Default gRPC listen address (Galley's MCP port, on loopback).
pub const DEFAULT_GRPC_ADDR: &str = "127.0.0.1:9901";
/// Default admin HTTP listen address.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:9902";

/// Command-line flags of `meshhub`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "meshhub",
    version,
    about = "Multi-cluster configuration hub for Istio (MCP)"
)]
pub struct Args {
    /// gRPC listen address (MCP ResourceSource, ADS, grpc.health.v1).
    #[arg(long, env = "MESHHUB_GRPC_ADDR", default_value = DEFAULT_GRPC_ADDR)]
    pub grpc_addr: SocketAddr,

    /// Admin HTTP listen address (/healthz, /readyz, /metrics, /status,
    /// /debug/*).
    #[arg(long, env = "MESHHUB_ADMIN_ADDR", default_value = DEFAULT_ADMIN_ADDR)]
    pub admin_addr: SocketAddr,

    /// YAML configuration file (sources, clusters, debounce). Without it,
    /// the example configuration compiled into the binary is served (see
    /// `config::embedded`).
    #[arg(long, env = "MESHHUB_CONFIG")]
    pub config: Option<PathBuf>,

    /// File holding the bearer token that state-changing admin endpoints
    /// require (read on every request). Without it they answer only on a
    /// loopback admin address.
    #[arg(long, env = "MESHHUB_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,

    /// How long shutdown waits for streams and tasks to end (e.g. `10s`).
    #[arg(long, env = "MESHHUB_SHUTDOWN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// Allow the gRPC port to serve plaintext on a non-loopback address
    /// (the same as `insecure: true` in the file).
    #[arg(long, env = "MESHHUB_INSECURE")]
    pub insecure: bool,
}

/// The whole, checked configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// gRPC listen address.
    pub grpc_addr: SocketAddr,
    /// Admin HTTP listen address.
    pub admin_addr: SocketAddr,
    /// Shutdown grace period.
    pub shutdown_grace: Duration,
    /// The admin token file (see [`Args::admin_token_file`]).
    pub admin_token_file: Option<PathBuf>,
    /// The configuration file these settings came from.
    pub config_file: PathBuf,
    /// The embedded default's private directory, when no file was given
    /// (`config_file` is in it; removed when the last clone is dropped).
    pub embedded: Option<Arc<embedded::Materialised>>,
    /// Where objects come from.
    pub sources: Vec<SourceSpec>,
    /// The clusters (snapshot groups besides the default group).
    pub clusters: Vec<ClusterSpec>,
    /// The sink agents the hub dials, one per cluster that has `agent:`
    /// (in configuration order).
    pub agents: Vec<AgentSpec>,
    /// Debounce of changes before snapshots are built.
    pub debounce: Debounce,
    /// What to do with fields the schema does not know.
    pub unknown_fields: UnknownFields,
    /// Every kind the hub serves: Istio's, plus the `extraKinds` of every
    /// Kubernetes source.
    pub kinds: meshhub_proto::kinds::KindTable,
    /// Leader election for the dial-out role (`None`: off, every replica
    /// dials, as a single hub does).
    pub leader_election: Option<LeaderElectionSpec>,
    /// The validating admission webhook (off when `None`).
    pub webhook: Option<WebhookSpec>,
    /// Version history and pins (off when `None`).
    pub history: Option<crate::history::HistorySpec>,
    /// The audit log (off when `None`).
    pub audit: Option<crate::audit::AuditSpec>,
    /// TLS on the gRPC port (`grpcTls`; plaintext when `None`).
    pub grpc_tls: Option<ServerTlsFiles>,
    /// Plaintext beyond loopback was asked for (`insecure`, `--insecure`).
    pub insecure: bool,
    /// Who may read which group (`clusters[].identities`,
    /// `defaultIdentities`); enforced when `grpcTls.clientCa` is set.
    pub access: GroupAccess,
    /// Flow control of the gRPC port (`limits`).
    pub limits: Limits,
    /// `--insecure` itself (kept across reloads).
    insecure_flag: bool,
}

/// Default `leaderElection.leaseName`.
pub const DEFAULT_LEASE_NAME: &str = "meshhub-dial-out";
/// Default `leaderElection.namespace` when `POD_NAMESPACE` is not set.
pub const DEFAULT_LEASE_NAMESPACE: &str = "meshhub";
/// Default `leaderElection.leaseDuration`.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default `leaderElection.renewDeadline`.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default `leaderElection.retryPeriod`.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Leader election among hub replicas for the dial-out role
/// (`leaderElection`, when `enabled`): one `coordination.k8s.io/v1` Lease;
/// only its holder dials the sink agents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionSpec {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub lease_name: String,
    /// This replica's identity (the Lease's `holderIdentity`, and the
    /// `meshhub-replica` metadata sent to the agents).
    pub identity: String,
    /// How long a lease not renewed stays the holder's (whole seconds).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// How often the lease is renewed, or tried for.
    pub retry_period: Duration,
    /// The API server holding the Lease (and the shared pins).
    pub connection: Connection,
}

/// Default listen address of the admission webhook: every interface, since
/// the API server calls it from outside the pod.
pub const DEFAULT_WEBHOOK_ADDR: &str = "0.0.0.0:9443";
/// Default URL path of the admission webhook.
pub const DEFAULT_WEBHOOK_PATH: &str = "/validate";

/// The validating admission webhook (`webhook:`): HTTPS only, since the API
/// server calls webhooks over TLS alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSpec {
    /// Listen address.
    pub addr: SocketAddr,
    /// The URL path AdmissionReviews are posted to.
    pub path: String,
    /// The serving certificate chain (PEM), re-read when it changes.
    pub cert: PathBuf,
    /// The serving private key (PEM), re-read when it changes.
    pub key: PathBuf,
}

/// One source of objects.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceSpec {
    /// A watched directory tree of YAML and JSON files.
    File(FileSourceSpec),
    /// A Kubernetes API server, watched.
    Kubernetes(KubeSourceSpec),
    /// An upstream MCP `ResourceSource`, subscribed to as a sink.
    Mcp(McpSourceSpec),
}

impl SourceSpec {
    /// The source's name (unique in a configuration).
    pub fn name(&self) -> &str {
        match self {
            Self::File(f) => &f.name,
            Self::Kubernetes(k) => &k.name,
            Self::Mcp(m) => &m.name,
        }
    }
}

/// Default time to establish a connection to an upstream MCP source.
pub const DEFAULT_MCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// An upstream MCP `ResourceSource` (Galley, another meshhub, an MCP
/// server of Nacos or Higress) the hub subscribes to as a sink
/// (`sources[].mcp`).
#[derive(Clone, Debug, PartialEq)]
pub struct McpSourceSpec {
    /// The source's name (`mcp:<address>` unless configured).
    pub name: String,
    /// The upstream's address: `http://host:port` (h2c), or
    /// `https://host:port` with a `tls` block.
    pub address: String,
    /// The collections subscribed, each in the kind table (default: every
    /// collection of the kind table).
    pub collections: Vec<String>,
    /// TLS to the upstream (required with `https://`); the same settings as
    /// an agent's.
    pub tls: Option<AgentTls>,
    /// The `SinkNode.id` sent (a meshhub upstream maps it to a cluster's
    /// group; empty: its default group).
    pub node_id: String,
    /// Ask for incremental responses (with the versions held, on reconnect).
    pub incremental: bool,
    /// How long a connection attempt may take.
    pub connect_timeout: Duration,
    /// Backoff between attempts (full jitter; reset after a healthy stream).
    pub reconnect: ReconnectPolicy,
}

/// Default interval of the Kubernetes source's API discovery (besides the
/// immediate one when a CustomResourceDefinition changes).
pub const DEFAULT_DISCOVERY_INTERVAL: Duration = Duration::from_secs(60);

/// A watched Kubernetes API server (`sources[].kubernetes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeSourceSpec {
    /// The source's name (`kubernetes`, or `kubernetes:<context>`, unless
    /// configured).
    pub name: String,
    /// The API server watched.
    pub connection: Connection,
    /// Namespaces watched (empty: every namespace).
    pub namespaces: Vec<String>,
    /// Kinds watched besides Istio's (carried with `google.protobuf.Struct`
    /// bodies).
    pub extra_kinds: Vec<ExtraKind>,
    /// How often the served kinds are discovered again.
    pub discovery_interval: Duration,
}

/// A Kubernetes kind outside the kind table (`extraKinds[]`): carried as a
/// schema-less `google.protobuf.Struct` in collection
/// `k8s/<group|core>/<version>/<plural>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtraKind {
    /// API group (empty for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Resource (plural) name.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl ExtraKind {
    /// The kind-table entry.
    pub fn to_kind(&self) -> Result<meshhub_proto::kinds::Kind, meshhub_proto::kinds::KindError> {
        meshhub_proto::kinds::Kind::schemaless(
            self.group.clone(),
            self.version.clone(),
            self.kind.clone(),
            self.plural.clone(),
            self.namespaced,
        )
    }
}

/// Kubernetes' guess of a kind's resource name, for `extraKinds` without
/// `plural` (`ConfigMap` → `configmaps`, `NetworkPolicy` →
/// `networkpolicies`, `Ingress` → `ingresses`).
pub fn guess_plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
        && !stem.is_empty()
    {
        return format!("{stem}ies");
    }
    if lower.ends_with('s')
        || lower.ends_with('x')
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

/// A watched directory tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSourceSpec {
    /// The source's name (`file:<path>` unless configured).
    pub name: String,
    /// The directory (absolute, or relative to the working directory).
    pub root: PathBuf,
    /// Files never read as objects (the configuration file itself, when it
    /// lies inside the tree).
    pub exclude: Vec<PathBuf>,
    /// Larger files are reported as errors and not read (`maxFileSize`).
    pub max_file_bytes: u64,
    /// Larger documents (YAML documents, JSON values) are reported as errors
    /// and not parsed (`maxObjectSize`).
    pub max_object_bytes: u64,
}

/// Default `sources[].file.maxFileSize`: 16 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 << 20;

/// Default `sources[].file.maxObjectSize`: 1.5 MiB, etcd's default request
/// limit (`--max-request-bytes`), so a larger object could not be stored
/// by a cluster's API server anyway.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 3 << 19;

/// Default time to establish a connection to a sink agent.
pub const DEFAULT_AGENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A sink agent the hub dials to push one cluster's group (`clusters[].agent`).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSpec {
    /// The cluster (and group) pushed.
    pub cluster: String,
    /// The agent's `ResourceSink` address: `http://host:port` (h2c), or
    /// `https://host:port` with a `tls` block.
    pub address: String,
    /// TLS to the agent (required with `https://`).
    pub tls: Option<AgentTls>,
    /// How long a connection attempt may take.
    pub connect_timeout: Duration,
    /// Backoff between attempts (full jitter; reset after a healthy stream).
    pub reconnect: ReconnectPolicy,
}

/// TLS settings of a connection the hub makes: to an agent
/// (`clusters[].agent.tls`) or to an upstream MCP source
/// (`sources[].mcp.tls`). The files are read again at every connection
/// attempt.
pub type AgentTls = meshhub_mcp::dial::ClientTlsFiles;

/// Debounce settings: a change is published once no further change arrived
/// for `quiet`, and at the latest `max_wait` after the first unpublished
/// change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    /// Quiet period.
    pub quiet: Duration,
    /// Maximum wait.
    pub max_wait: Duration,
}

impl Default for Debounce {
    fn default() -> Self {
        Self {
            quiet: Duration::from_millis(100),
            max_wait: Duration::from_secs(1),
        }
    }
}

/// What happens to an object with fields its schema does not know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownFields {
    /// The object is rejected (and reported).
    #[default]
    Reject,
    /// The unknown fields are dropped with a warning; the rest is served.
    Prune,
}

/// Why the configuration is unusable. Every variant names the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The embedded default can't be written to its private directory.
    #[error("can't write the embedded default configuration to a temporary directory")]
    Embedded(#[source] std::io::Error),
    /// The file can't be read.
    #[error("config file {path}: can't read")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not parse or does not fit the schema.
    #[error("config file {path}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// Line of the error, when known.
        line: Option<u64>,
        /// What is wrong (naming the field).
        message: String,
    },
    /// A setting has a value that parses but makes no sense.
    #[error("config file {path}: {setting}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The setting (`clusters[1].name`, `debounce.quiet`, ...).
        setting: String,
        /// What is wrong.
        message: String,
    },
}

/// The configuration file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileConfig {
    // `Option` so that an empty `clusters:` (null) means none.
    #[serde(default)]
    sources: Option<Vec<RawSource>>,
    #[serde(default)]
    clusters: Option<Vec<RawCluster>>,
    #[serde(default)]
    debounce: RawDebounce,
    #[serde(default)]
    unknown_fields: UnknownFields,
    #[serde(default)]
    leader_election: Option<RawLeaderElection>,
    #[serde(default)]
    webhook: Option<RawWebhook>,
    #[serde(default)]
    history: Option<crate::history::RawHistory>,
    #[serde(default)]
    audit: Option<crate::audit::RawAudit>,
    grpc_tls: Option<RawGrpcTls>,
    #[serde(default)]
    insecure: bool,
    #[serde(default)]
    default_identities: Option<Vec<String>>,
    #[serde(default)]
    limits: RawLimits,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawGrpcTls {
    cert: PathBuf,
    key: PathBuf,
    #[serde(default)]
    client_ca: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawLeaderElection {
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    lease_name: Option<String>,
    #[serde(default)]
    identity: Option<String>,
    #[serde(default, deserialize_with = "duration")]
    lease_duration: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    renew_deadline: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    retry_period: Option<Duration>,
    #[serde(default)]
    kubeconfig: Option<PathBuf>,
    #[serde(default)]
    context: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawWebhook {
    #[serde(default)]
    addr: Option<String>,
    tls: RawServerTls,
    #[serde(default)]
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawServerTls {
    cert: PathBuf,
    key: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSource {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    file: Option<RawFileSource>,
    #[serde(default)]
    kubernetes: Option<RawKubeSource>,
    #[serde(default)]
    mcp: Option<RawMcpSource>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawMcpSource {
    address: String,
    #[serde(default)]
    collections: Option<Vec<String>>,
    #[serde(default)]
    tls: Option<RawAgentTls>,
    #[serde(default)]
    node_id: Option<String>,
    #[serde(default)]
    incremental: bool,
    #[serde(default, deserialize_with = "duration")]
    connect_timeout: Option<Duration>,
    #[serde(default)]
    reconnect: RawReconnect,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawKubeSource {
    #[serde(default)]
    kubeconfig: Option<PathBuf>,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    extra_kinds: Vec<RawExtraKind>,
    #[serde(default, deserialize_with = "duration")]
    discovery_interval: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawExtraKind {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
    #[serde(default)]
    plural: Option<String>,
    #[serde(default)]
    cluster_scoped: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawFileSource {
    path: PathBuf,
    #[serde(default)]
    max_file_size: Option<u64>,
    #[serde(default)]
    max_object_size: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCluster {
    name: String,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    agent: Option<RawAgent>,
    #[serde(default)]
    identities: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAgent {
    address: String,
    #[serde(default)]
    tls: Option<RawAgentTls>,
    #[serde(default, deserialize_with = "duration")]
    connect_timeout: Option<Duration>,
    #[serde(default)]
    reconnect: RawReconnect,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAgentTls {
    ca: PathBuf,
    #[serde(default)]
    cert: Option<PathBuf>,
    #[serde(default)]
    key: Option<PathBuf>,
    #[serde(default)]
    server_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawReconnect {
    #[serde(default, deserialize_with = "duration")]
    initial: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    max: Option<Duration>,
    #[serde(default)]
    factor: Option<f32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawDebounce {
    #[serde(default, deserialize_with = "duration")]
    quiet: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    max_wait: Option<Duration>,
}

/// A humane duration (`100ms`, `1s`, `2m 30s`), parsed during
/// deserialization so that a bad value is reported with its line.
fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(s.trim())
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))
}

impl Config {
    /// Builds the configuration from flags: reads and checks the YAML file
    /// (the embedded default when none is given).
    pub fn from_args(args: Args) -> Result<Self, ConfigError> {
        let (path, embedded) = match &args.config {
            Some(path) => (path.clone(), None),
            None => {
                let m = embedded::Materialised::write().map_err(ConfigError::Embedded)?;
                (m.config_file(), Some(Arc::new(m)))
            }
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let mut config = Self::from_yaml(&args, &path, &text)?;
        config.embedded = embedded;
        Ok(config)
    }

    /// Reads the configuration file again, keeping the flags (addresses,
    /// grace period) of `self`.
    pub fn reload(&self) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(&self.config_file).map_err(|source| ConfigError::Read {
                path: self.config_file.clone(),
                source,
            })?;
        self.reparse(&text)
    }

    /// Parses a new text of the configuration file, keeping the flags of
    /// `self`: what a reload applies.
    pub fn reparse(&self, text: &str) -> Result<Self, ConfigError> {
        let args = Args {
            grpc_addr: self.grpc_addr,
            admin_addr: self.admin_addr,
            config: Some(self.config_file.clone()),
            admin_token_file: self.admin_token_file.clone(),
            shutdown_grace: self.shutdown_grace,
            insecure: self.insecure_flag,
        };
        let mut config = Self::from_yaml(&args, &self.config_file, text)?;
        config.embedded.clone_from(&self.embedded);
        Ok(config)
    }

    /// Builds the configuration from flags and the text of the YAML file at
    /// `path` (relative source paths are resolved against its directory).
    pub fn from_yaml(args: &Args, path: &Path, text: &str) -> Result<Self, ConfigError> {
        let options = serde_saphyr::options! { with_snippet: false };
        let raw: Option<FileConfig> =
            serde_saphyr::from_str_with_options(text, options).map_err(|e| {
                ConfigError::Syntax {
                    path: path.to_owned(),
                    line: e.location().map(|l| l.line()),
                    message: e.to_string().lines().next().unwrap_or_default().to_owned(),
                }
            })?;
        let raw = raw.unwrap_or_default();
        let invalid = |setting: String, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            setting,
            message,
        };
        let base = path.parent().unwrap_or(Path::new("."));

        let mut sources = Vec::new();
        let mut names = BTreeSet::new();
        let mut kinds = meshhub_proto::kinds::KindTable::builtin();
        let mut explicit_collections = Vec::new();
        for (i, s) in raw.sources.unwrap_or_default().into_iter().enumerate() {
            let spec = match (s.file, s.kubernetes, s.mcp) {
                (Some(file), None, None) => {
                    let root = if file.path.is_absolute() {
                        file.path.clone()
                    } else {
                        base.join(&file.path)
                    };
                    if !root.is_dir() {
                        return Err(invalid(
                            format!("sources[{i}].file.path"),
                            format!("{} is not a directory", root.display()),
                        ));
                    }
                    SourceSpec::File(FileSourceSpec {
                        name: s
                            .name
                            .unwrap_or_else(|| format!("file:{}", file.path.display())),
                        root,
                        exclude: vec![path.to_owned()],
                        max_file_bytes: match file.max_file_size {
                            None => DEFAULT_MAX_FILE_BYTES,
                            Some(0) => {
                                return Err(invalid(
                                    format!("sources[{i}].file.maxFileSize"),
                                    "must be positive".to_owned(),
                                ));
                            }
                            Some(n) => n,
                        },
                        max_object_bytes: match file.max_object_size {
                            None => DEFAULT_MAX_OBJECT_BYTES,
                            Some(0) => {
                                return Err(invalid(
                                    format!("sources[{i}].file.maxObjectSize"),
                                    "must be positive".to_owned(),
                                ));
                            }
                            Some(n) => n,
                        },
                    })
                }
                (None, Some(k), None) => {
                    let spec = kube_source_spec(s.name, k, base, &|field, message| {
                        invalid(format!("sources[{i}].kubernetes.{field}"), message)
                    })?;
                    for (j, extra) in spec.extra_kinds.iter().enumerate() {
                        let kind = extra.to_kind().map_err(|e| {
                            invalid(
                                format!("sources[{i}].kubernetes.extraKinds[{j}]"),
                                e.to_string(),
                            )
                        })?;
                        // The same extra kind in two sources is one kind.
                        if kinds.by_collection(kind.collection()).is_some() {
                            continue;
                        }
                        kinds = kinds.with_kind(kind).map_err(|e| {
                            invalid(
                                format!("sources[{i}].kubernetes.extraKinds[{j}]"),
                                e.to_string(),
                            )
                        })?;
                    }
                    SourceSpec::Kubernetes(spec)
                }
                (None, None, Some(m)) => {
                    let explicit = m.collections.is_some();
                    let spec = mcp_source_spec(s.name, m, base, &|field, message| {
                        invalid(format!("sources[{i}].mcp.{field}"), message)
                    })?;
                    // Checked against the kind table once every source's
                    // extra kinds are in it.
                    if explicit {
                        explicit_collections.push(i);
                    }
                    SourceSpec::Mcp(spec)
                }
                _ => {
                    return Err(invalid(
                        format!("sources[{i}]"),
                        "a source needs exactly one of `file: {path: <dir>}`, `kubernetes: {...}` or `mcp: {address: <url>}`"
                            .to_owned(),
                    ));
                }
            };
            let name = spec.name().to_owned();
            if name.is_empty() {
                return Err(invalid(
                    format!("sources[{i}].name"),
                    "must not be empty".to_owned(),
                ));
            }
            if !names.insert(name.clone()) {
                return Err(invalid(
                    format!("sources[{i}].name"),
                    format!("duplicate source name {name:?}"),
                ));
            }
            sources.push(spec);
        }
        if sources.is_empty() {
            return Err(invalid(
                "sources".to_owned(),
                "at least one source is needed".to_owned(),
            ));
        }
        for (i, s) in sources.iter_mut().enumerate() {
            let SourceSpec::Mcp(m) = s else { continue };
            if !explicit_collections.contains(&i) {
                m.collections = kinds.iter().map(|k| k.collection().to_owned()).collect();
                continue;
            }
            for (j, c) in m.collections.iter().enumerate() {
                if kinds.by_collection(c).is_none() {
                    return Err(invalid(
                        format!("sources[{i}].mcp.collections[{j}]"),
                        format!(
                            "{c:?} is not a collection of the hub's kinds (Istio's, and the extraKinds of the Kubernetes sources)"
                        ),
                    ));
                }
            }
        }

        let mut clusters = Vec::new();
        let mut access = GroupAccess::default();
        let mut agents = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, c) in raw.clusters.unwrap_or_default().into_iter().enumerate() {
            let setting = format!("clusters[{i}].name");
            if !is_dns1123_label(&c.name) {
                return Err(invalid(
                    setting,
                    format!(
                        "{:?} is not a valid cluster name (lower-case letters, digits and '-', at most 63)",
                        c.name
                    ),
                ));
            }
            if c.name == DEFAULT_GROUP {
                return Err(invalid(
                    setting,
                    format!("{DEFAULT_GROUP:?} is reserved for the default group"),
                ));
            }
            if !seen.insert(c.name.clone()) {
                return Err(invalid(
                    setting,
                    format!("duplicate cluster name {:?}", c.name),
                ));
            }
            for (j, ns) in c.namespaces.iter().enumerate() {
                if !is_dns1123_label(ns) {
                    return Err(invalid(
                        format!("clusters[{i}].namespaces[{j}]"),
                        format!("{ns:?} is not a valid namespace name"),
                    ));
                }
            }
            for k in c.labels.keys() {
                if k.is_empty() {
                    return Err(invalid(
                        format!("clusters[{i}].labels"),
                        "label keys must not be empty".to_owned(),
                    ));
                }
            }
            if let Some(a) = c.agent {
                agents.push(agent_spec(&c.name, a, base, |field, message| {
                    invalid(format!("clusters[{i}].agent.{field}"), message)
                })?);
            }
            if let Some(list) = &c.identities {
                let list = AllowList::parse(list)
                    .map_err(|(j, e)| invalid(format!("clusters[{i}].identities[{j}]"), e))?;
                access.groups.push((c.name.as_str().into(), list));
            }
            clusters.push(ClusterSpec {
                name: c.name,
                selector: Selector {
                    namespaces: c.namespaces.into_iter().collect(),
                    labels: c.labels,
                },
            });
        }

        let defaults = Debounce::default();
        let debounce = Debounce {
            quiet: raw.debounce.quiet.unwrap_or(defaults.quiet),
            max_wait: raw.debounce.max_wait.unwrap_or(defaults.max_wait),
        };
        if debounce.max_wait.is_zero() {
            return Err(invalid(
                "debounce.maxWait".to_owned(),
                "must be positive".to_owned(),
            ));
        }
        if debounce.quiet > debounce.max_wait {
            return Err(invalid(
                "debounce.quiet".to_owned(),
                format!(
                    "{} is longer than debounce.maxWait {}",
                    humantime::format_duration(debounce.quiet),
                    humantime::format_duration(debounce.max_wait)
                ),
            ));
        }

        let leader_election = match raw.leader_election {
            Some(l) if l.enabled => Some(leader_election_spec(l, base, &|field, message| {
                invalid(format!("leaderElection.{field}"), message)
            })?),
            _ => None,
        };
        let webhook = raw
            .webhook
            .map(|w| {
                webhook_spec(w, base, &|field, message| {
                    invalid(format!("webhook.{field}"), message)
                })
            })
            .transpose()?;
        let history = raw
            .history
            .map(|h| h.check(base))
            .transpose()
            .map_err(|(field, message)| invalid(format!("history.{field}"), message))?;
        let audit = raw
            .audit
            .map(|a| a.check(base))
            .transpose()
            .map_err(|(field, message)| invalid(format!("audit.{field}"), message))?;

        if let Some(list) = &raw.default_identities {
            let list = AllowList::parse(list)
                .map_err(|(j, e)| invalid(format!("defaultIdentities[{j}]"), e))?;
            access.groups.push((DEFAULT_GROUP.into(), list));
        }
        let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let grpc_tls = raw.grpc_tls.map(|t| ServerTlsFiles {
            cert: resolve(t.cert),
            key: resolve(t.key),
            client_ca: t.client_ca.map(resolve),
        });
        if let Some(files) = &grpc_tls {
            meshhub_mcp::tls::reload::check(files)
                .map_err(|e| invalid("grpcTls".to_owned(), e.to_string()))?;
        }
        let limits = raw
            .limits
            .check()
            .map_err(|e| invalid(format!("limits.{}", e.field), e.message))?;
        // Identities come from client certificates the port verifies.
        access.enforced = grpc_tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        let insecure = args.insecure || raw.insecure;
        meshhub_mcp::listen::check_plaintext(
            "the gRPC port",
            args.grpc_addr,
            grpc_tls.is_some(),
            insecure,
        )
        .map_err(|e| invalid("grpcTls".to_owned(), e.to_string()))?;

        Ok(Self {
            grpc_addr: args.grpc_addr,
            admin_addr: args.admin_addr,
            shutdown_grace: args.shutdown_grace,
            admin_token_file: args.admin_token_file.clone(),
            grpc_tls,
            insecure,
            access,
            limits,
            insecure_flag: args.insecure,
            config_file: path.to_owned(),
            embedded: None,
            sources,
            clusters,
            agents,
            debounce,
            unknown_fields: raw.unknown_fields,
            kinds,
            leader_election,
            webhook,
            history,
            audit,
        })
    }
}

/// Checks one `sources[].kubernetes` block. `invalid(field, message)` makes
/// the error naming the field.
fn kube_source_spec(
    name: Option<String>,
    raw: RawKubeSource,
    base: &Path,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<KubeSourceSpec, ConfigError> {
    let connection = Connection::from_config(raw.kubeconfig, raw.context, base)
        .map_err(|e| invalid(e.field(), e.to_string()))?;
    let mut namespaces = Vec::new();
    for (j, ns) in raw.namespaces.into_iter().enumerate() {
        if !is_dns1123_label(&ns) {
            return Err(invalid(
                &format!("namespaces[{j}]"),
                format!("{ns:?} is not a valid namespace name"),
            ));
        }
        if !namespaces.contains(&ns) {
            namespaces.push(ns);
        }
    }
    let mut extra_kinds = Vec::new();
    for (j, k) in raw.extra_kinds.into_iter().enumerate() {
        let plural = k.plural.unwrap_or_else(|| guess_plural(&k.kind));
        let extra = ExtraKind {
            group: k.group.trim().to_owned(),
            version: k.version.trim().to_owned(),
            kind: k.kind.trim().to_owned(),
            plural,
            namespaced: !k.cluster_scoped,
        };
        if extra.group.ends_with("istio.io") {
            // Istio's kinds have schemas in the kind table; a Struct twin
            // would clash with them (and lose their validation).
            return Err(invalid(
                &format!("extraKinds[{j}].group"),
                format!(
                    "{:?}: Istio's kinds are watched already; extraKinds is for other kinds",
                    extra.group
                ),
            ));
        }
        extra_kinds.push(extra);
    }
    let discovery_interval = raw.discovery_interval.unwrap_or(DEFAULT_DISCOVERY_INTERVAL);
    if discovery_interval < Duration::from_secs(1) {
        return Err(invalid(
            "discoveryInterval",
            "must be at least 1s".to_owned(),
        ));
    }
    let name = name.unwrap_or_else(|| match &connection.context {
        Some(c) => format!("kubernetes:{c}"),
        None => "kubernetes".to_owned(),
    });
    Ok(KubeSourceSpec {
        name,
        connection,
        namespaces,
        extra_kinds,
        discovery_interval,
    })
}

/// This replica's default identity: `POD_NAME`, else the host name and the
/// process id (two replicas on one host differ).
fn default_identity() -> String {
    if let Some(pod) = std::env::var("POD_NAME")
        .ok()
        .filter(|p| !p.trim().is_empty())
    {
        return pod.trim().to_owned();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "meshhub".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Checks the `leaderElection` block (when enabled), filling in the
/// defaults. `invalid(field, message)` makes the error naming the field.
fn leader_election_spec(
    raw: RawLeaderElection,
    base: &Path,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<LeaderElectionSpec, ConfigError> {
    let namespace = raw.namespace.unwrap_or_else(|| {
        std::env::var("POD_NAMESPACE")
            .ok()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| DEFAULT_LEASE_NAMESPACE.to_owned())
    });
    if !is_dns1123_label(&namespace) {
        return Err(invalid(
            "namespace",
            format!("{namespace:?} is not a valid namespace name"),
        ));
    }
    let lease_name = raw
        .lease_name
        .unwrap_or_else(|| DEFAULT_LEASE_NAME.to_owned());
    // A Lease name is a DNS-1123 subdomain: labels joined by dots.
    if lease_name.len() > 253 || !lease_name.split('.').all(is_dns1123_label) {
        return Err(invalid(
            "leaseName",
            format!(
                "{lease_name:?} is not a valid object name (lower-case letters, digits, '-' and '.')"
            ),
        ));
    }
    let identity = raw.identity.unwrap_or_else(default_identity);
    // It travels as gRPC metadata: visible ASCII only.
    if identity.is_empty()
        || identity.len() > 253
        || !identity.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(invalid(
            "identity",
            format!("{identity:?} must be 1 to 253 visible ASCII characters (no spaces)"),
        ));
    }
    let lease_duration = raw.lease_duration.unwrap_or(DEFAULT_LEASE_DURATION);
    let renew_deadline = raw.renew_deadline.unwrap_or(DEFAULT_RENEW_DEADLINE);
    let retry_period = raw.retry_period.unwrap_or(DEFAULT_RETRY_PERIOD);
    let show = |d: Duration| humantime::format_duration(d).to_string();
    // The Lease stores whole seconds.
    if lease_duration < Duration::from_secs(1) || lease_duration.subsec_nanos() != 0 {
        return Err(invalid(
            "leaseDuration",
            format!(
                "{} must be a whole number of seconds, at least 1s",
                show(lease_duration)
            ),
        ));
    }
    if renew_deadline >= lease_duration {
        return Err(invalid(
            "renewDeadline",
            format!(
                "{} must be shorter than leaderElection.leaseDuration {}",
                show(renew_deadline),
                show(lease_duration)
            ),
        ));
    }
    if retry_period.is_zero() {
        return Err(invalid("retryPeriod", "must be positive".to_owned()));
    }
    if retry_period >= renew_deadline {
        return Err(invalid(
            "retryPeriod",
            format!(
                "{} must be shorter than leaderElection.renewDeadline {}",
                show(retry_period),
                show(renew_deadline)
            ),
        ));
    }
    let connection = Connection::from_config(raw.kubeconfig, raw.context, base)
        .map_err(|e| invalid(e.field(), e.to_string()))?;
    Ok(LeaderElectionSpec {
        namespace,
        lease_name,
        identity,
        lease_duration,
        renew_deadline,
        retry_period,
        connection,
    })
}

/// Checks the `webhook` block. The certificate and key are read now: a
/// typo is a configuration error, not a webhook that fails every call.
fn webhook_spec(
    raw: RawWebhook,
    base: &Path,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<WebhookSpec, ConfigError> {
    let addr_text = raw.addr.unwrap_or_else(|| DEFAULT_WEBHOOK_ADDR.to_owned());
    let addr: SocketAddr = addr_text.trim().parse().map_err(|e| {
        invalid(
            "addr",
            format!("{addr_text:?}: {e} (expected ip:port, e.g. 0.0.0.0:9443)"),
        )
    })?;
    let path = raw
        .path
        .map(|p| p.trim().to_owned())
        .unwrap_or_else(|| DEFAULT_WEBHOOK_PATH.to_owned());
    if !path.starts_with('/') || path.contains(char::is_whitespace) || path.contains('?') {
        return Err(invalid(
            "path",
            format!("{path:?} must be a URL path starting with '/'"),
        ));
    }
    let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let spec = WebhookSpec {
        addr,
        path,
        cert: resolve(raw.tls.cert),
        key: resolve(raw.tls.key),
    };
    crate::webhook::certs::load(&spec.cert, &spec.key)
        .map_err(|e| invalid("tls", e.to_string()))?;
    Ok(spec)
}

/// Checks one `clusters[].agent` block. `invalid(field, message)` makes the
/// error naming the field.
fn agent_spec(
    cluster: &str,
    raw: RawAgent,
    base: &Path,
    invalid: impl Fn(&str, String) -> ConfigError,
) -> Result<AgentSpec, ConfigError> {
    let (address, tls) = client_address(
        &raw.address,
        raw.tls,
        base,
        "the agent's sink port, 9911 by default",
        &invalid,
    )?;
    let connect_timeout = raw.connect_timeout.unwrap_or(DEFAULT_AGENT_CONNECT_TIMEOUT);
    if connect_timeout.is_zero() {
        return Err(invalid("connectTimeout", "must be positive".to_owned()));
    }
    let reconnect = reconnect_policy(raw.reconnect, &invalid)?;
    Ok(AgentSpec {
        cluster: cluster.to_owned(),
        address,
        tls,
        connect_timeout,
        reconnect,
    })
}

/// Checks one `sources[].mcp` block. `invalid(field, message)` makes the
/// error naming the field. The collections are checked (or defaulted) by
/// the caller, against the whole kind table.
fn mcp_source_spec(
    name: Option<String>,
    raw: RawMcpSource,
    base: &Path,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<McpSourceSpec, ConfigError> {
    let (address, tls) = client_address(
        &raw.address,
        raw.tls,
        base,
        "the upstream's MCP port, 9901 for Galley and meshhub",
        invalid,
    )?;
    let mut collections: Vec<String> = Vec::new();
    if let Some(list) = raw.collections {
        if list.is_empty() {
            return Err(invalid(
                "collections",
                "must not be empty (leave it out to subscribe to every collection)".to_owned(),
            ));
        }
        for (j, c) in list.into_iter().enumerate() {
            let c = c.trim().to_owned();
            if c.is_empty() {
                return Err(invalid(
                    &format!("collections[{j}]"),
                    "must not be empty".to_owned(),
                ));
            }
            if collections.contains(&c) {
                return Err(invalid(
                    &format!("collections[{j}]"),
                    format!("duplicate collection {c:?}"),
                ));
            }
            collections.push(c);
        }
    }
    let connect_timeout = raw.connect_timeout.unwrap_or(DEFAULT_MCP_CONNECT_TIMEOUT);
    if connect_timeout.is_zero() {
        return Err(invalid("connectTimeout", "must be positive".to_owned()));
    }
    let reconnect = reconnect_policy(raw.reconnect, invalid)?;
    Ok(McpSourceSpec {
        name: name.unwrap_or_else(|| format!("mcp:{address}")),
        address,
        collections,
        tls,
        node_id: raw.node_id.unwrap_or_default(),
        incremental: raw.incremental,
        connect_timeout,
        reconnect,
    })
}

/// Checks the address and TLS block of a connection the hub makes
/// (`http://host:port`, or `https://host:port` with `tls`). `port` says
/// which port is meant, for the error when it is missing.
fn client_address(
    address: &str,
    tls: Option<RawAgentTls>,
    base: &Path,
    port: &str,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<(String, Option<AgentTls>), ConfigError> {
    let address = address.trim().to_owned();
    let uri: http::Uri = address
        .parse()
        .map_err(|e| invalid("address", format!("{address:?}: {e}")))?;
    let tls = tls.map(|t| AgentTls {
        ca: base.join(t.ca),
        cert: t.cert.map(|c| base.join(c)),
        key: t.key.map(|k| base.join(k)),
        server_name: t.server_name,
    });
    match (uri.scheme_str(), &tls) {
        (Some("http"), None) | (Some("https"), Some(_)) => {}
        (Some("https"), None) => {
            return Err(invalid(
                "tls",
                format!(
                    "{address:?} is https://: give tls.ca (and tls.cert/tls.key for mutual TLS)"
                ),
            ));
        }
        (Some("http"), Some(_)) => {
            return Err(invalid(
                "address",
                format!("{address:?}: a tls block needs an https:// address"),
            ));
        }
        _ => {
            return Err(invalid(
                "address",
                format!("{address:?}: must be http://host:port or https://host:port"),
            ));
        }
    }
    if let Some(t) = &tls {
        if t.cert.is_some() != t.key.is_some() {
            return Err(invalid("tls", "cert and key go together".to_owned()));
        }
        // Read the files now: a typo is a configuration error, not a
        // dialer that fails forever.
        t.client_config()
            .map_err(|e| invalid("tls", e.to_string()))?;
    }
    if uri.port_u16().is_none() {
        return Err(invalid(
            "address",
            format!("{address:?}: needs a port ({port})"),
        ));
    }
    Ok((address, tls))
}

/// Checks a `reconnect` block, filling in the defaults.
fn reconnect_policy(
    raw: RawReconnect,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<ReconnectPolicy, ConfigError> {
    let defaults = ReconnectPolicy::default();
    let reconnect = ReconnectPolicy {
        initial: raw.initial.unwrap_or(defaults.initial),
        max: raw.max.unwrap_or(defaults.max),
        factor: raw.factor.unwrap_or(defaults.factor),
    };
    if reconnect.initial.is_zero() {
        return Err(invalid("reconnect.initial", "must be positive".to_owned()));
    }
    if reconnect.max < reconnect.initial {
        return Err(invalid(
            "reconnect.max",
            format!(
                "{} is shorter than reconnect.initial {}",
                humantime::format_duration(reconnect.max),
                humantime::format_duration(reconnect.initial)
            ),
        ));
    }
    if !(reconnect.factor.is_finite() && reconnect.factor >= 1.0) {
        return Err(invalid(
            "reconnect.factor",
            format!("{} must be a number >= 1", reconnect.factor),
        ));
    }
    Ok(reconnect)
}

/// RFC 1123 label: what Kubernetes allows as a namespace name.
fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests;
