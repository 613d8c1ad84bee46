//! The command-line flags (and their `MESHHUB_AGENT_*` environment
//! variables), parsed by clap into typed values.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::values::{self, ModeName};

/// Command-line flags of `meshhub-sink-agent`. Every flag is optional here;
/// [`super::Config::from_args`] merges them with the file and the defaults.
/// Values arrive typed: clap parses them with [`values`], and a bad one
/// is refused naming the flag before the file is read.
#[derive(Clone, Debug, Default, Parser)]
#[command(
    name = "meshhub-sink-agent",
    version,
    about = "meshhub sink agent: receives MCP configuration for one cluster, persists it and serves it locally"
)]
pub struct Args {
    /// YAML file with any of the settings below (flags win over it).
    #[arg(long, env = "MESHHUB_AGENT_CONFIG")]
    pub config: Option<PathBuf>,

    /// This cluster's name: the SinkNode id announced to the hub (required).
    #[arg(long, env = "MESHHUB_AGENT_CLUSTER")]
    pub cluster: Option<String>,

    /// Directory holding the persisted configuration (required).
    #[arg(long, env = "MESHHUB_AGENT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// `push` (serve ResourceSink; the hub dials in) or `pull` (dial the
    /// hub's ResourceSource) [default: push].
    #[arg(long, env = "MESHHUB_AGENT_MODE", value_enum)]
    pub mode: Option<ModeName>,

    /// Push mode: ResourceSink listen address [default: 127.0.0.1:9911].
    #[arg(long, env = "MESHHUB_AGENT_SINK_ADDR", value_name = "HOST:PORT", value_parser = values::socket_addr)]
    pub sink_addr: Option<SocketAddr>,

    /// Pull mode: the hub's ResourceSource URL (`http://host:port`).
    #[arg(long, env = "MESHHUB_AGENT_HUB_URL")]
    pub hub_url: Option<String>,

    /// Local re-serve gRPC address (ResourceSource, ADS, grpc.health.v1)
    /// [default: 127.0.0.1:9912].
    #[arg(long, env = "MESHHUB_AGENT_GRPC_ADDR", value_name = "HOST:PORT", value_parser = values::socket_addr)]
    pub grpc_addr: Option<SocketAddr>,

    /// Admin HTTP address (/healthz, /readyz, /metrics, /status, /debug/*)
    /// [default: 127.0.0.1:9913].
    #[arg(long, env = "MESHHUB_AGENT_ADMIN_ADDR", value_name = "HOST:PORT", value_parser = values::socket_addr)]
    pub admin_addr: Option<SocketAddr>,

    /// File holding the bearer token that state-changing admin endpoints
    /// require (read on every request). Without it they answer only on a
    /// loopback admin address.
    #[arg(long, env = "MESHHUB_AGENT_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,

    /// Collections accepted, comma-separated [default: every built-in kind].
    #[arg(long, env = "MESHHUB_AGENT_COLLECTIONS", value_delimiter = ',')]
    pub collections: Option<Vec<String>>,

    /// gRPC message limit in bytes (`64MiB`, `4194304`) [default: 64MiB].
    #[arg(long, env = "MESHHUB_AGENT_MAX_MESSAGE_SIZE", value_name = "SIZE", value_parser = values::size)]
    pub max_message_size: Option<usize>,

    /// Ask the hub for incremental responses, declaring what is held on
    /// every new stream (`true`/`false`) [default: true].
    #[arg(long, env = "MESHHUB_AGENT_INCREMENTAL", value_name = "BOOL", value_parser = values::boolean)]
    pub incremental: Option<bool>,

    /// How long startup waits for another process holding the data
    /// directory to let it go: the pod this one replaces, still stopping
    /// (`60s`; `0s` refuses at once).
    #[arg(long, env = "MESHHUB_AGENT_DATA_DIR_WAIT", value_name = "DURATION", value_parser = values::duration)]
    pub data_dir_wait: Option<Duration>,

    /// How long shutdown waits for streams and tasks (`10s`).
    #[arg(long, env = "MESHHUB_AGENT_SHUTDOWN_GRACE", value_name = "DURATION", value_parser = values::duration)]
    pub shutdown_grace: Option<Duration>,

    /// Push mode: PEM certificate chain for TLS on the sink port.
    #[arg(long, env = "MESHHUB_AGENT_SINK_TLS_CERT")]
    pub sink_tls_cert: Option<PathBuf>,

    /// Push mode: PEM private key for TLS on the sink port.
    #[arg(long, env = "MESHHUB_AGENT_SINK_TLS_KEY")]
    pub sink_tls_key: Option<PathBuf>,

    /// Push mode: PEM roots that verify the hub's client certificate; with
    /// it, the hub must present one (mutual TLS).
    #[arg(long, env = "MESHHUB_AGENT_SINK_TLS_CLIENT_CA")]
    pub sink_tls_client_ca: Option<PathBuf>,

    /// Push mode: identities (URI or DNS SANs of the hub's verified client
    /// certificate; `*` and `**` patterns) allowed to push, comma-separated
    /// [default: any hub the client CA verifies]. Needs
    /// `--sink-tls-client-ca`.
    #[arg(
        long,
        env = "MESHHUB_AGENT_SINK_ALLOWED_IDENTITIES",
        value_delimiter = ','
    )]
    pub sink_allowed_identities: Option<Vec<String>>,

    /// PEM certificate chain for TLS on the local re-serve gRPC port.
    #[arg(long, env = "MESHHUB_AGENT_GRPC_TLS_CERT")]
    pub grpc_tls_cert: Option<PathBuf>,

    /// PEM private key for TLS on the local re-serve gRPC port.
    #[arg(long, env = "MESHHUB_AGENT_GRPC_TLS_KEY")]
    pub grpc_tls_key: Option<PathBuf>,

    /// PEM roots that verify local consumers' client certificates; with
    /// it, every consumer must present one (mutual TLS).
    #[arg(long, env = "MESHHUB_AGENT_GRPC_TLS_CLIENT_CA")]
    pub grpc_tls_client_ca: Option<PathBuf>,

    /// Pull mode: PEM roots that verify the hub's certificate (required
    /// with an `https://` hub URL).
    #[arg(long, env = "MESHHUB_AGENT_HUB_TLS_CA")]
    pub hub_tls_ca: Option<PathBuf>,

    /// Pull mode: our PEM client certificate chain (mutual TLS).
    #[arg(long, env = "MESHHUB_AGENT_HUB_TLS_CERT")]
    pub hub_tls_cert: Option<PathBuf>,

    /// Pull mode: our PEM client private key (mutual TLS).
    #[arg(long, env = "MESHHUB_AGENT_HUB_TLS_KEY")]
    pub hub_tls_key: Option<PathBuf>,

    /// Pull mode: the name to verify in the hub's certificate [default:
    /// the host of the hub URL].
    #[arg(long, env = "MESHHUB_AGENT_HUB_TLS_SERVER_NAME")]
    pub hub_tls_server_name: Option<String>,

    /// Allow a gRPC port without TLS on a non-loopback address
    /// (`true`/`false`) [default: false].
    #[arg(long, env = "MESHHUB_AGENT_INSECURE", num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", value_parser = values::boolean)]
    pub insecure: Option<bool>,

    /// Apply every ACKed object to this cluster's Kubernetes API
    /// (server-side apply, field manager `meshhub`) [default: false].
    #[arg(long, env = "MESHHUB_AGENT_APPLY", num_args = 0..=1, default_missing_value = "true", value_name = "BOOL", value_parser = values::boolean)]
    pub apply: Option<bool>,

    /// Applying: the kubeconfig [default: KUBECONFIG, ~/.kube/config or
    /// in-cluster].
    #[arg(long, env = "MESHHUB_AGENT_APPLY_KUBECONFIG")]
    pub apply_kubeconfig: Option<PathBuf>,

    /// Applying: the kubeconfig context [default: its current context].
    #[arg(long, env = "MESHHUB_AGENT_APPLY_CONTEXT")]
    pub apply_context: Option<String>,

    /// Applying: take over same-named objects meshhub does not manage
    /// (`true`/`false`) [default: false: report them as conflicts].
    #[arg(long, env = "MESHHUB_AGENT_APPLY_FORCE", value_name = "BOOL", value_parser = values::boolean)]
    pub apply_force: Option<bool>,

    /// Applying: the value of the `meshhub.io/source-cluster` annotation
    /// [default: primary].
    #[arg(long, env = "MESHHUB_AGENT_APPLY_SOURCE_CLUSTER")]
    pub apply_source_cluster: Option<String>,

    /// Applying: interval of full reconciles (`5m`) [default: 5m].
    #[arg(long, env = "MESHHUB_AGENT_APPLY_RESYNC", value_name = "DURATION", value_parser = values::duration)]
    pub apply_resync: Option<Duration>,

    /// Applying: the only namespaces written, listed and watched,
    /// comma-separated [default: every namespace]. With a list, the agent
    /// needs RBAC in those namespaces only (no cluster-wide access).
    #[arg(long, env = "MESHHUB_AGENT_APPLY_NAMESPACES", value_delimiter = ',')]
    pub apply_namespaces: Option<Vec<String>>,

    /// The upward channel (istiod's view, exported Services).
    #[command(flatten)]
    pub upward: super::upward::UpwardArgs,
}
