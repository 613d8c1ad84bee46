//! The YAML file as written: every key optional, unknown keys refused.
//! Values stay as written here; the merge parses each with the same
//! parser as its flag and names the key when one is bad.

use std::path::PathBuf;

use meshhub_mcp::limits::RawLimits;
use serde::Deserialize;

/// The configuration file as written (every key optional).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) cluster: Option<String>,
    pub(super) data_dir: Option<PathBuf>,
    pub(super) mode: Option<String>,
    pub(super) sink_addr: Option<String>,
    pub(super) hub_url: Option<String>,
    pub(super) grpc_addr: Option<String>,
    pub(super) admin_addr: Option<String>,
    pub(super) admin_token_file: Option<PathBuf>,
    pub(super) collections: Option<Vec<String>>,
    pub(super) max_message_size: Option<SizeValue>,
    pub(super) incremental: Option<bool>,
    pub(super) shutdown_grace: Option<String>,
    pub(super) data_dir_wait: Option<String>,
    pub(super) sink_tls_cert: Option<PathBuf>,
    pub(super) sink_tls_key: Option<PathBuf>,
    pub(super) sink_tls_client_ca: Option<PathBuf>,
    pub(super) sink_allowed_identities: Option<Vec<String>>,
    pub(super) grpc_tls_cert: Option<PathBuf>,
    pub(super) grpc_tls_key: Option<PathBuf>,
    pub(super) grpc_tls_client_ca: Option<PathBuf>,
    pub(super) hub_tls_ca: Option<PathBuf>,
    pub(super) hub_tls_cert: Option<PathBuf>,
    pub(super) hub_tls_key: Option<PathBuf>,
    pub(super) hub_tls_server_name: Option<String>,
    pub(super) insecure: Option<bool>,
    pub(super) apply: Option<RawApply>,
    pub(super) limits: Option<RawLimits>,
    pub(super) upward: Option<super::upward::RawUpward>,
}

/// `apply:` in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawApply {
    pub(super) enabled: Option<bool>,
    pub(super) kubeconfig: Option<PathBuf>,
    pub(super) context: Option<String>,
    pub(super) force: Option<bool>,
    pub(super) source_cluster: Option<String>,
    pub(super) resync: Option<String>,
    pub(super) namespaces: Option<Vec<String>>,
}

/// A size in the file: a plain number of bytes or a string with a unit.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum SizeValue {
    Bytes(u64),
    Text(String),
}
