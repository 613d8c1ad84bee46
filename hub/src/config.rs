//! Configuration: command-line flags (with `MESHHUB_*` environment names) for
//! addresses and paths, and one YAML file for structured settings (sources,
//! clusters, debounce, schema policy).
//!
//! Everything is parsed and checked at the edge into typed values
//! ([`Config`]); nothing downstream parses strings. Each feature owns its
//! block: the serde form, defaults and checks live next to the code that
//! uses them (`source::{file,kube,mcp}::spec`, `clusters::spec`,
//! `leader::spec`, `webhook::spec`, `pipeline::spec`, `history`, `audit`, `analysis::spec`;
//! the engine's `limits`, `dial` and `reconnect` blocks in `meshhub_mcp`).
//! This module is the aggregator: flags, reading the file, calling each
//! block's check and naming where the block is, and the settings that span
//! features (the gRPC port's TLS, plaintext and who may read which group).
//! Every error names the setting it is about (and the file and line, when
//! the YAML parser knows them), so that the binary can print it and exit
//! before serving.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use meshhub_mcp::authz::{AllowList, GroupAccess};
use meshhub_mcp::limits::{Limits, RawLimits};
use meshhub_mcp::settings::SettingError;
use meshhub_mcp::tls::reload::ServerTlsFiles;
use meshhub_runtime::config_file;
use serde::Deserialize;

use crate::analysis::{AnalysisSpec, RawAnalysis};
use crate::audit::{AuditSpec, RawAudit};
use crate::clusters::AgentSpec;
use crate::clusters::spec::{Clusters, RawCluster};
use crate::groups::{ClusterSpec, DEFAULT_GROUP};
use crate::history::{HistorySpec, RawHistory};
use crate::leader::LeaderElectionSpec;
use crate::leader::spec::RawLeaderElection;
use crate::pipeline::{Debounce, RawDebounce};
use crate::rollout::spec::{RawRollout, RolloutSpec};
use crate::source::SourceSpec;
use crate::source::spec::{RawSource, Sources};
use crate::store::UnknownFields;
use crate::validation::{RawValidation, ValidationSpec};
use crate::webhook::{RawWebhook, WebhookSpec};

pub mod embedded;
#[cfg(test)]
pub(crate) mod testing;

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

    /// Serve the web console on the admin port (`/console`);
    /// `--console=false` turns it off.
    #[arg(long, env = "MESHHUB_CONSOLE", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub console: bool,
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
    /// The web console on the admin port ([`Args::console`]).
    pub console: bool,
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
    pub history: Option<HistorySpec>,
    /// The audit log (off when `None`).
    pub audit: Option<AuditSpec>,
    /// Per-cluster analysis and what it holds back (`analysis`).
    pub analysis: AnalysisSpec,
    /// TLS on the gRPC port (`grpcTls`; plaintext when `None`).
    pub grpc_tls: Option<ServerTlsFiles>,
    /// Plaintext beyond loopback was asked for (`insecure`, `--insecure`).
    pub insecure: bool,
    /// Who may read which group (`clusters[].identities`,
    /// `defaultIdentities`); enforced when `grpcTls.clientCa` is set.
    pub access: GroupAccess,
    /// Flow control of the gRPC port (`limits`).
    pub limits: Limits,
    /// Staged rollout of changes to the dialed clusters (`rollout`; off
    /// when `None`: every cluster gets a change at once).
    pub rollout: Option<RolloutSpec>,
    /// Each cluster's own labels (`clusters[].clusterLabels`), for the
    /// rollout's wave selectors.
    pub cluster_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// What objects are checked with (`validation`: the CRDs given).
    pub validation: ValidationSpec,
    /// `--insecure` itself (kept across reloads).
    insecure_flag: bool,
}

/// Why the configuration is unusable. Every variant names the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The embedded default can't be written to its private directory.
    #[error("can't write the embedded default configuration to a temporary directory")]
    Embedded(#[source] std::io::Error),
    /// The file can't be read or is not YAML of the expected shape.
    #[error(transparent)]
    File(#[from] meshhub_runtime::config_file::FileError),
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

/// The configuration file as written: each block in its feature's serde
/// form.
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
    history: Option<RawHistory>,
    #[serde(default)]
    audit: Option<RawAudit>,
    #[serde(default)]
    analysis: RawAnalysis,
    grpc_tls: Option<RawGrpcTls>,
    #[serde(default)]
    insecure: bool,
    #[serde(default)]
    default_identities: Option<Vec<String>>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    rollout: Option<RawRollout>,
    #[serde(default)]
    validation: RawValidation,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawGrpcTls {
    cert: PathBuf,
    key: PathBuf,
    #[serde(default)]
    client_ca: Option<PathBuf>,
}

/// The settings of the gRPC port, which span features: its TLS, plaintext
/// beyond loopback, flow control, and who may read which group.
struct GrpcPort {
    tls: Option<ServerTlsFiles>,
    insecure: bool,
    access: GroupAccess,
    limits: Limits,
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
        let text = config_file::read(&path)?;
        let mut config = Self::from_yaml(&args, &path, &text)?;
        config.embedded = embedded;
        Ok(config)
    }

    /// Reads the configuration file again, keeping the flags (addresses,
    /// grace period) of `self`.
    pub fn reload(&self) -> Result<Self, ConfigError> {
        let text = config_file::read(&self.config_file)?;
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
            console: self.console,
        };
        let mut config = Self::from_yaml(&args, &self.config_file, text)?;
        config.embedded.clone_from(&self.embedded);
        Ok(config)
    }

    /// Builds the configuration from flags and the text of the YAML file at
    /// `path` (relative paths are resolved against its directory).
    pub fn from_yaml(args: &Args, path: &Path, text: &str) -> Result<Self, ConfigError> {
        let raw = parse(path, text)?;
        let invalid = |e: SettingError| ConfigError::Invalid {
            path: path.to_owned(),
            setting: e.field,
            message: e.message,
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let Sources { sources, kinds } =
            crate::source::spec::check(raw.sources.unwrap_or_default(), base, path)
                .map_err(invalid)?;
        let Clusters {
            clusters,
            agents,
            identities,
            labels: cluster_labels,
        } = crate::clusters::spec::check(raw.clusters.unwrap_or_default(), base)
            .map_err(invalid)?;
        let rollout = raw
            .rollout
            .map(|r| {
                let dialed = agents.iter().map(|a| a.cluster.clone()).collect();
                r.check(&dialed, base)
            })
            .transpose()
            .map_err(|e| invalid(e.within("rollout")))?;
        let debounce = raw
            .debounce
            .check()
            .map_err(|e| invalid(e.within("debounce")))?;
        let leader_election = match raw.leader_election {
            Some(l) => l
                .check(base)
                .map_err(|e| invalid(e.within("leaderElection")))?,
            None => None,
        };
        let webhook = raw
            .webhook
            .map(|w| w.check(base))
            .transpose()
            .map_err(|e| invalid(e.within("webhook")))?;
        let history = raw
            .history
            .map(|h| h.check(base))
            .transpose()
            .map_err(|e| invalid(e.within("history")))?;
        if rollout.is_some() && history.is_none() {
            return Err(invalid(SettingError::new(
                "rollout",
                "needs `history:` (a rollout serves clusters their previous version from it, and continues from it after a restart)",
            )));
        }
        let audit = raw
            .audit
            .map(|a| a.check(base))
            .transpose()
            .map_err(|e| invalid(e.within("audit")))?;
        let analysis = raw
            .analysis
            .check()
            .map_err(|e| invalid(e.within("analysis")))?;
        let validation = raw.validation.check(base).map_err(invalid)?;
        let grpc = grpc_port(
            args,
            GrpcBlocks {
                tls: raw.grpc_tls,
                insecure: raw.insecure,
                default_identities: raw.default_identities,
                limits: raw.limits,
            },
            identities,
            base,
        )
        .map_err(invalid)?;

        Ok(Self {
            grpc_addr: args.grpc_addr,
            admin_addr: args.admin_addr,
            shutdown_grace: args.shutdown_grace,
            admin_token_file: args.admin_token_file.clone(),
            console: args.console,
            grpc_tls: grpc.tls,
            insecure: grpc.insecure,
            access: grpc.access,
            limits: grpc.limits,
            insecure_flag: args.insecure,
            rollout,
            cluster_labels,
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
            analysis,
            validation,
        })
    }
}

/// Parses the YAML text (an empty file is the defaults); errors carry the
/// line when the parser knows it.
fn parse(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
    Ok(config_file::parse(path, text)?)
}

/// The top-level blocks about the gRPC port, as written.
struct GrpcBlocks {
    tls: Option<RawGrpcTls>,
    insecure: bool,
    default_identities: Option<Vec<String>>,
    limits: RawLimits,
}

/// Checks the gRPC port's settings; `identities` are the clusters' lists
/// (`clusters[].identities`), joined by `defaultIdentities`.
fn grpc_port(
    args: &Args,
    raw: GrpcBlocks,
    identities: Vec<(meshhub_mcp::cache::Group, AllowList)>,
    base: &Path,
) -> Result<GrpcPort, SettingError> {
    let mut access = GroupAccess {
        groups: identities,
        ..GroupAccess::default()
    };
    if let Some(list) = &raw.default_identities {
        let list = AllowList::parse(list)
            .map_err(|(j, e)| SettingError::new(format!("defaultIdentities[{j}]"), e))?;
        access.groups.push((DEFAULT_GROUP.into(), list));
    }
    let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let tls = raw.tls.map(|t| ServerTlsFiles {
        cert: resolve(t.cert),
        key: resolve(t.key),
        client_ca: t.client_ca.map(resolve),
    });
    if let Some(files) = &tls {
        meshhub_mcp::tls::reload::check(files)
            .map_err(|e| SettingError::new("grpcTls", e.to_string()))?;
    }
    let limits = raw
        .limits
        .check()
        .map_err(|e| SettingError::new(format!("limits.{}", e.field), e.message))?;
    // Identities come from client certificates the port verifies.
    access.enforced = tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    let insecure = args.insecure || raw.insecure;
    meshhub_mcp::listen::check_plaintext("the gRPC port", args.grpc_addr, tls.is_some(), insecure)
        .map_err(|e| SettingError::new("grpcTls", e.to_string()))?;
    Ok(GrpcPort {
        tls,
        insecure,
        access,
        limits,
    })
}

#[cfg(test)]
mod tests;
