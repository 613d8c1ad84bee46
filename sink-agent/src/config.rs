//! Configuration: command-line flags (with `MESHHUB_AGENT_*` environment
//! names) and an optional YAML file holding the same settings.
//!
//! A flag (or its environment variable) wins over the file; the file wins
//! over the built-in default. Everything is parsed and checked here, at the
//! edge, into typed values ([`Config`]); every error names the setting (and
//! the file and line, when the YAML parser knows them), so that the binary
//! prints it and exits with status 2 before serving anything.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshhub_mcp::authz::AllowList;
use meshhub_mcp::limits::Limits;
use meshhub_mcp::tls::reload::ServerTlsFiles;
use meshhub_proto::kinds::KindTable;
use meshhub_runtime::config_file;

mod args;
mod file;
pub mod upward;
pub mod values;

pub use args::Args;
use file::{FileConfig, SizeValue};
pub use values::ModeName;

/// Default `ResourceSink` listen address (push mode: the hub dials it).
pub const DEFAULT_SINK_ADDR: SocketAddr = loopback(9911);
/// Default local re-serve gRPC address (ResourceSource, ADS, health).
pub const DEFAULT_GRPC_ADDR: SocketAddr = loopback(9912);
/// Default admin HTTP address.
pub const DEFAULT_ADMIN_ADDR: SocketAddr = loopback(9913);
/// Default gRPC message limit, both ways, on every server and client.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Default shutdown grace period.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long startup waits for the data directory's lock: a pod replaced on
/// the same volume (deleted, evicted, drained) starts while the old one
/// still stops within its grace period.
pub const DEFAULT_DATA_DIR_WAIT: Duration = Duration::from_secs(60);

/// Default `meshhub.io/source-cluster` annotation value.
pub const DEFAULT_SOURCE_CLUSTER: &str = "primary";
/// Default interval of the applier's full reconciles.
pub const DEFAULT_APPLY_RESYNC: Duration = Duration::from_secs(300);

/// TLS on a server port: the sink port (push mode) or the local re-serve
/// port. The files are re-read when they change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkTls {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
    /// Roots for client certificates (mutual TLS when set).
    pub client_ca: Option<PathBuf>,
}

impl SinkTls {
    /// The files, as the engine's reloading TLS reads them.
    pub fn files(&self) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            client_ca: self.client_ca.clone(),
        }
    }
}

/// TLS to the hub (pull mode, `https://` hub URL). The files are read
/// again at every connection attempt.
pub type HubTls = meshhub_mcp::dial::ClientTlsFiles;

/// How the agent gets its configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Serve `ResourceSink` on this address; the hub dials in and pushes.
    Push {
        /// Listen address.
        listen: SocketAddr,
        /// TLS on that port.
        tls: Option<SinkTls>,
    },
    /// Dial the hub's `ResourceSource` at this URL and subscribe as a sink.
    Pull {
        /// The hub's URL (`http://host:port`, or `https://host:port` with
        /// `tls`).
        hub_url: String,
        /// TLS to the hub.
        tls: Option<HubTls>,
    },
}

/// The whole, checked configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// This cluster's name (SinkNode id, local snapshot group).
    pub cluster: String,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Push or pull.
    pub mode: Mode,
    /// Local re-serve gRPC address.
    pub grpc_addr: SocketAddr,
    /// TLS on the local re-serve port (plaintext when `None`).
    pub grpc_tls: Option<SinkTls>,
    /// Plaintext on a non-loopback address was asked for (`insecure`).
    pub insecure: bool,
    /// Push mode: the only hub identities that may push (`None`: any hub
    /// the sink port's client CA verifies, or any hub without TLS).
    pub sink_allowed_identities: Option<AllowList>,
    /// Admin HTTP address.
    pub admin_addr: SocketAddr,
    /// The admin token file (see [`Args::admin_token_file`]).
    pub admin_token_file: Option<PathBuf>,
    /// Collections accepted, sorted; each is in the kind table.
    pub collections: Vec<String>,
    /// gRPC message limit both ways.
    pub max_message_bytes: usize,
    /// Flow control of the agent's gRPC port (`limits`); its
    /// `max_message_bytes` is always [`Config::max_message_bytes`].
    pub limits: Limits,
    /// Whether to ask for incremental responses.
    pub incremental: bool,
    /// Shutdown grace period.
    pub shutdown_grace: Duration,
    /// How long startup waits for the data directory's lock.
    pub data_dir_wait: Duration,
    /// Applying to this cluster's Kubernetes API, when enabled.
    pub apply: Option<crate::apply::ApplyConfig>,
    /// The upward channel: what the agent reports to the hub.
    pub upward: crate::upward::UpwardConfig,
}

/// Why the configuration is unusable. Every variant names the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file can't be read or is not YAML of the expected shape.
    #[error(transparent)]
    File(#[from] meshhub_runtime::config_file::FileError),
    /// A required setting is missing.
    #[error("{setting}: required (flag --{flag}, env {env}, or `{key}:` in the config file)")]
    Missing {
        /// The setting.
        setting: &'static str,
        /// Its flag.
        flag: &'static str,
        /// Its environment variable.
        env: &'static str,
        /// Its key in the file.
        key: &'static str,
    },
    /// A setting has a value that makes no sense.
    #[error("{setting}: {message}")]
    Invalid {
        /// The setting (`mode`, `collections[2]`, ...).
        setting: String,
        /// What is wrong.
        message: String,
    },
}

impl Config {
    /// Builds the configuration from flags, reading the YAML file if one is
    /// named.
    pub fn from_args(args: Args) -> Result<Self, ConfigError> {
        let file = match &args.config {
            None => None,
            Some(path) => {
                let text = config_file::read(path)?;
                Some((path.clone(), text))
            }
        };
        Self::from_parts(args, file.as_ref().map(|(p, t)| (p.as_path(), t.as_str())))
    }

    /// Builds the configuration from flags and, optionally, the path and
    /// text of the YAML file.
    pub fn from_parts(args: Args, file: Option<(&Path, &str)>) -> Result<Self, ConfigError> {
        let raw = match file {
            None => FileConfig::default(),
            Some((path, text)) => parse_file(path, text)?,
        };
        let invalid = |setting: &str, message: String| ConfigError::Invalid {
            setting: setting.to_owned(),
            message,
        };

        let cluster = args.cluster.or(raw.cluster).ok_or(ConfigError::Missing {
            setting: "cluster",
            flag: "cluster",
            env: "MESHHUB_AGENT_CLUSTER",
            key: "cluster",
        })?;
        if !is_cluster_name(&cluster) {
            return Err(invalid(
                "cluster",
                format!(
                    "{cluster:?} is not a valid cluster name (lower-case letters, digits and '-', at most 63)"
                ),
            ));
        }
        let data_dir = args.data_dir.or(raw.data_dir).ok_or(ConfigError::Missing {
            setting: "dataDir",
            flag: "data-dir",
            env: "MESHHUB_AGENT_DATA_DIR",
            key: "dataDir",
        })?;
        if data_dir.as_os_str().is_empty() {
            return Err(invalid("dataDir", "must not be empty".to_owned()));
        }
        if data_dir.exists() && !data_dir.is_dir() {
            return Err(invalid(
                "dataDir",
                format!("{} exists and is not a directory", data_dir.display()),
            ));
        }

        let mode = match (args.mode, raw.mode) {
            (Some(flag), _) => flag,
            (None, Some(text)) => values::mode(&text).map_err(|m| invalid("mode", m))?,
            (None, None) => ModeName::Push,
        };
        let hub_tls_ca = args.hub_tls_ca.or(raw.hub_tls_ca);
        let hub_tls_cert = args.hub_tls_cert.or(raw.hub_tls_cert);
        let hub_tls_key = args.hub_tls_key.or(raw.hub_tls_key);
        let hub_tls_server_name = args.hub_tls_server_name.or(raw.hub_tls_server_name);
        if mode == ModeName::Push
            && (hub_tls_ca.is_some() || hub_tls_cert.is_some() || hub_tls_key.is_some())
        {
            return Err(invalid(
                "hubTlsCa",
                "hub TLS settings are only used in pull mode (mode is push)".to_owned(),
            ));
        }
        let sink_addr = flag_or_file(
            args.sink_addr,
            raw.sink_addr,
            "sinkAddr",
            values::socket_addr,
        )?;
        let hub_url = args.hub_url.or(raw.hub_url);
        let tls_cert = args.sink_tls_cert.or(raw.sink_tls_cert);
        let tls_key = args.sink_tls_key.or(raw.sink_tls_key);
        let tls_client_ca = args.sink_tls_client_ca.or(raw.sink_tls_client_ca);
        let mode = match mode {
            ModeName::Push => {
                if let Some(url) = &hub_url {
                    return Err(invalid(
                        "hubUrl",
                        format!("{url:?} is only used in pull mode (mode is push)"),
                    ));
                }
                let tls = server_tls("sinkTls", tls_cert, tls_key, tls_client_ca)?;
                Mode::Push {
                    listen: sink_addr.unwrap_or(DEFAULT_SINK_ADDR),
                    tls,
                }
            }
            ModeName::Pull => {
                if sink_addr.is_some() {
                    return Err(invalid(
                        "sinkAddr",
                        "is only used in push mode (mode is pull)".to_owned(),
                    ));
                }
                if tls_cert.is_some() || tls_key.is_some() || tls_client_ca.is_some() {
                    return Err(invalid(
                        "sinkTlsCert",
                        "sink TLS settings are only used in push mode (mode is pull)".to_owned(),
                    ));
                }
                let url = hub_url.ok_or(ConfigError::Missing {
                    setting: "hubUrl (pull mode)",
                    flag: "hub-url",
                    env: "MESHHUB_AGENT_HUB_URL",
                    key: "hubUrl",
                })?;
                let tls = match (hub_tls_ca, hub_tls_cert, hub_tls_key) {
                    (None, None, None) => None,
                    (Some(ca), cert, key) if cert.is_some() == key.is_some() => Some(HubTls {
                        ca,
                        cert,
                        key,
                        server_name: hub_tls_server_name,
                    }),
                    (None, _, _) => {
                        return Err(invalid(
                            "hubTlsCa",
                            "hubTlsCert/hubTlsKey need hubTlsCa (the roots that verify the hub)"
                                .to_owned(),
                        ));
                    }
                    _ => {
                        return Err(invalid(
                            "hubTlsCert",
                            "hubTlsCert and hubTlsKey go together".to_owned(),
                        ));
                    }
                };
                check_url(&url, tls.is_some())?;
                if let Some(tls) = &tls {
                    tls.client_config()
                        .map_err(|e| invalid("hubTlsCa", e.to_string()))?;
                }
                Mode::Pull { hub_url: url, tls }
            }
        };
        let grpc_addr = flag_or_file(
            args.grpc_addr,
            raw.grpc_addr,
            "grpcAddr",
            values::socket_addr,
        )?
        .unwrap_or(DEFAULT_GRPC_ADDR);
        let admin_addr = flag_or_file(
            args.admin_addr,
            raw.admin_addr,
            "adminAddr",
            values::socket_addr,
        )?
        .unwrap_or(DEFAULT_ADMIN_ADDR);
        let admin_token_file = args.admin_token_file.or(raw.admin_token_file);
        let grpc_tls = server_tls(
            "grpcTls",
            args.grpc_tls_cert.or(raw.grpc_tls_cert),
            args.grpc_tls_key.or(raw.grpc_tls_key),
            args.grpc_tls_client_ca.or(raw.grpc_tls_client_ca),
        )?;
        let insecure = args.insecure.or(raw.insecure).unwrap_or(false);
        let plaintext = |setting: &str, what, addr, tls: bool| {
            meshhub_mcp::listen::check_plaintext(what, addr, tls, insecure)
                .map_err(|e| invalid(setting, e.to_string()))
        };
        plaintext(
            "grpcTlsCert",
            "the re-serve gRPC port",
            grpc_addr,
            grpc_tls.is_some(),
        )?;
        if let Mode::Push { listen, tls } = &mode {
            plaintext("sinkTlsCert", "the sink port", *listen, tls.is_some())?;
        }
        let sink_allowed_identities = match args
            .sink_allowed_identities
            .or(raw.sink_allowed_identities)
        {
            None => None,
            Some(list) => {
                let mutual =
                    matches!(&mode, Mode::Push { tls: Some(t), .. } if t.client_ca.is_some());
                if !mutual {
                    return Err(invalid(
                        "sinkAllowedIdentities",
                        "needs push mode with sinkTlsClientCa (identities come from verified client certificates)".to_owned(),
                    ));
                }
                let list: Vec<String> = list.into_iter().filter(|s| !s.trim().is_empty()).collect();
                if list.is_empty() {
                    return Err(invalid(
                        "sinkAllowedIdentities",
                        "lists no identity".to_owned(),
                    ));
                }
                Some(
                    AllowList::parse(&list)
                        .map_err(|(i, e)| invalid(&format!("sinkAllowedIdentities[{i}]"), e))?,
                )
            }
        };

        let kinds = KindTable::builtin();
        let collections = match args.collections.or(raw.collections) {
            None => kinds.iter().map(|k| k.collection().to_owned()).collect(),
            Some(list) => {
                let mut set = BTreeSet::new();
                for (i, c) in list.iter().enumerate() {
                    let c = c.trim();
                    if kinds.by_collection(c).is_none() {
                        return Err(invalid(
                            &format!("collections[{i}]"),
                            format!("{c:?} is not a collection of any known kind"),
                        ));
                    }
                    if !set.insert(c.to_owned()) {
                        return Err(invalid(
                            &format!("collections[{i}]"),
                            format!("{c:?} is listed twice"),
                        ));
                    }
                }
                if set.is_empty() {
                    return Err(invalid(
                        "collections",
                        "at least one collection is needed".to_owned(),
                    ));
                }
                set.into_iter().collect()
            }
        };
        let mut collections: Vec<String> = collections;
        collections.sort();
        collections.dedup();

        // The same block and checks as the hub's `limits`.
        let mut limits = raw
            .limits
            .unwrap_or_default()
            .check()
            .map_err(|e| invalid(&format!("limits.{}", e.field), e.message))?;
        // The flag, then `maxMessageSize`, then `limits.maxMessageSize`.
        let max_message_bytes = match args.max_message_size {
            Some(bytes) => bytes,
            None => match raw.max_message_size {
                None => limits.max_message_bytes,
                Some(SizeValue::Bytes(b)) => usize::try_from(b)
                    .map_err(|_| invalid("maxMessageSize", format!("{b} is too large")))?,
                Some(SizeValue::Text(s)) => {
                    values::size(&s).map_err(|m| invalid("maxMessageSize", m))?
                }
            },
        };
        if max_message_bytes < 4096 {
            return Err(invalid(
                "maxMessageSize",
                format!("{max_message_bytes} bytes is below the minimum of 4KiB"),
            ));
        }
        limits.max_message_bytes = max_message_bytes;
        // Incremental by default: on every new stream (a hub restart, a
        // hub replica taking the cluster over) the agent declares what it
        // holds and the hub sends only what changed, not every collection
        // again (issue 29's reconnect storm). Only a meshhub hub talks to
        // the agent, and it honours the declared versions exactly.
        let incremental = args.incremental.or(raw.incremental).unwrap_or(true);
        let shutdown_grace = flag_or_file(
            args.shutdown_grace,
            raw.shutdown_grace,
            "shutdownGrace",
            values::duration,
        )?
        .unwrap_or(DEFAULT_SHUTDOWN_GRACE);
        let data_dir_wait = flag_or_file(
            args.data_dir_wait,
            raw.data_dir_wait,
            "dataDirWait",
            values::duration,
        )?
        .unwrap_or(DEFAULT_DATA_DIR_WAIT);

        let raw_apply = raw.apply.unwrap_or_default();
        let enabled = args.apply.or(raw_apply.enabled).unwrap_or(false);
        let apply = if enabled {
            let kubeconfig = args.apply_kubeconfig.or(raw_apply.kubeconfig);
            if let Some(k) = &kubeconfig
                && !k.is_file()
            {
                return Err(invalid(
                    "apply.kubeconfig",
                    format!("{} is not a file", k.display()),
                ));
            }
            let force = args.apply_force.or(raw_apply.force).unwrap_or(false);
            let source_cluster = args
                .apply_source_cluster
                .or(raw_apply.source_cluster)
                .unwrap_or_else(|| DEFAULT_SOURCE_CLUSTER.to_owned());
            if !is_cluster_name(&source_cluster) {
                return Err(invalid(
                    "apply.sourceCluster",
                    format!("{source_cluster:?} is not a valid cluster name"),
                ));
            }
            let resync = flag_or_file(
                args.apply_resync,
                raw_apply.resync,
                "apply.resync",
                values::duration,
            )?
            .unwrap_or(DEFAULT_APPLY_RESYNC);
            if resync < Duration::from_secs(1) {
                return Err(invalid("apply.resync", "must be at least 1s".to_owned()));
            }
            let namespaces: Vec<String> = args
                .apply_namespaces
                .or(raw_apply.namespaces)
                .unwrap_or_default()
                .into_iter()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect();
            if let Some(bad) = namespaces.iter().find(|n| !is_cluster_name(n)) {
                return Err(invalid(
                    "apply.namespaces",
                    format!("{bad:?} is not a valid namespace name"),
                ));
            }
            Some(crate::apply::ApplyConfig {
                connection: meshhub_kube::Connection {
                    kubeconfig,
                    context: args.apply_context.or(raw_apply.context),
                },
                force,
                source_cluster,
                resync,
                namespaces: namespaces.into_iter().collect(),
            })
        } else {
            None
        };

        let upward = upward::check(args.upward, raw.upward)?;

        Ok(Self {
            apply,
            upward,
            cluster,
            data_dir,
            mode,
            grpc_addr,
            grpc_tls,
            insecure,
            sink_allowed_identities,
            admin_addr,
            admin_token_file,
            collections,
            max_message_bytes,
            limits,
            incremental,
            shutdown_grace,
            data_dir_wait,
        })
    }
}

fn parse_file(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
    Ok(config_file::parse(path, text)?)
}

/// The flag's value, already typed by clap, or else the file's text parsed
/// with the same parser (an error names the file's key).
fn flag_or_file<T>(
    flag: Option<T>,
    file: Option<String>,
    key: &str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Option<T>, ConfigError> {
    match (flag, file) {
        (Some(v), _) => Ok(Some(v)),
        (None, Some(text)) => parse(&text)
            .map(Some)
            .map_err(|message| ConfigError::Invalid {
                setting: key.to_owned(),
                message,
            }),
        (None, None) => Ok(None),
    }
}

/// A server port's TLS settings (`<prefix>Cert`, `Key`, `ClientCa`): none,
/// or a certificate and key that load.
fn server_tls(
    prefix: &str,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
) -> Result<Option<SinkTls>, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        setting: format!("{prefix}Cert"),
        message,
    };
    match (cert, key, client_ca) {
        (None, None, None) => Ok(None),
        (Some(cert), Some(key), client_ca) => {
            let tls = SinkTls {
                cert,
                key,
                client_ca,
            };
            // Read the files now: a bad path is a config error.
            meshhub_mcp::tls::reload::check(&tls.files()).map_err(|e| invalid(e.to_string()))?;
            Ok(Some(tls))
        }
        _ => Err(invalid(format!(
            "{prefix}Cert and {prefix}Key go together ({prefix}ClientCa needs both)"
        ))),
    }
}

fn check_url(url: &str, tls: bool) -> Result<(), ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        setting: "hubUrl".to_owned(),
        message,
    };
    let rest = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) if !tls => rest,
        (Some(_), _) => {
            return Err(invalid(format!(
                "{url:?}: hub TLS settings need an https:// URL"
            )));
        }
        (_, Some(rest)) if tls => rest,
        (_, Some(_)) => {
            return Err(invalid(format!(
                "{url:?} is https://: give hubTlsCa (and hubTlsCert/hubTlsKey for mutual TLS)"
            )));
        }
        _ => {
            return Err(invalid(format!(
                "{url:?} must start with http:// or https://"
            )));
        }
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(invalid(format!("{url:?} names no host")));
    }
    tonic::transport::Endpoint::from_shared(url.to_owned())
        .map(|_| ())
        .map_err(|e| invalid(format!("{url:?} is not a valid URL: {e}")))
}

/// `127.0.0.1:<port>`.
const fn loopback(port: u16) -> SocketAddr {
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), port)
}

/// RFC 1123 label, as the hub requires of cluster names.
fn is_cluster_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests;
