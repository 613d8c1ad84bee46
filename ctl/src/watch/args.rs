//! The flags of `meshhubctl watch`, and the endpoint they name.

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use meshhub_mcp::dial::{ClientTlsFiles, DialTarget};
use tonic::transport::Endpoint;

/// How `watch` prints objects.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Output {
    /// `kubectl get -o yaml`-like documents.
    Yaml,
    /// One JSON object per line.
    Json,
}

/// Flags of `meshhubctl watch`.
#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    /// The ResourceSource to dial.
    #[arg(long, env = "MESHHUB_SERVER", default_value = "http://127.0.0.1:9901")]
    pub server: String,
    /// Collections to watch (repeatable); default: every kind meshhub knows.
    /// With `--ads`, a collection or a type URL (`networking.istio.io/v1/VirtualService`).
    #[arg(long = "collection", short = 'c')]
    pub collections: Vec<String>,
    /// Subscribe as a consumer of this cluster (sent as the SinkNode id; with
    /// `--ads`, as the node metadata `meshhub.io/cluster`).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "yaml")]
    pub output: Output,
    /// Print the first complete state of every collection, then exit 0.
    #[arg(long)]
    pub once: bool,
    /// Ask for incremental (delta) responses.
    #[arg(long, conflicts_with = "ads")]
    pub incremental: bool,
    /// Subscribe over Envoy ADS (MCP-over-xDS) as istiod does: one wildcard
    /// subscription per type URL, every response ACKed.
    #[arg(long)]
    pub ads: bool,
    /// With `--ads`: use incremental xDS (`DeltaAggregatedResources`) and
    /// print additions, updates and removals.
    #[arg(long, requires = "ads")]
    pub delta: bool,
    /// Give up connecting after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
    /// PEM roots that verify the hub's certificate (an `https://` server).
    #[arg(long, env = "MESHHUB_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// PEM client certificate chain for mutual TLS (with `--tls-key`).
    #[arg(long, env = "MESHHUB_TLS_CERT", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// PEM client private key for mutual TLS (with `--tls-cert`).
    #[arg(long, env = "MESHHUB_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The name to verify in the hub's certificate [default: the server's host].
    #[arg(long, requires = "tls_ca")]
    tls_server_name: Option<String>,
}

impl WatchArgs {
    /// The endpoint of `--server`, with TLS when `--tls-ca` is given.
    pub fn endpoint(&self) -> Result<DialTarget, String> {
        let endpoint = Endpoint::from_shared(self.server.clone())
            .map_err(|e| format!("--server {:?}: {e}", self.server))?
            .connect_timeout(self.connect_timeout);
        let tls = self.tls_ca.as_ref().map(|ca| ClientTlsFiles {
            ca: ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            server_name: self.tls_server_name.clone(),
        });
        DialTarget::new(endpoint, tls).map_err(|e| format!("--server {:?}: {e}", self.server))
    }
}
