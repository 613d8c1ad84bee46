//! The `sources[].mcp` block: its serde form, defaults and checks.

use std::path::Path;
use std::time::Duration;

use meshhub_mcp::dial::{DialDefaults, DialSpec, RawClientTls, RawDialSpec};
use meshhub_mcp::reconnect::RawReconnect;
use meshhub_mcp::settings::{SettingError, duration};
use serde::Deserialize;

/// Default time to establish a connection to an upstream MCP source.
pub const DEFAULT_MCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How an upstream is dialed when its block leaves a key out.
const DIAL_DEFAULTS: DialDefaults = DialDefaults {
    connect_timeout: DEFAULT_MCP_CONNECT_TIMEOUT,
    port: "the upstream's MCP port, 9901 for Galley and meshhub",
};

/// An upstream MCP `ResourceSource` (Galley, another meshhub, an MCP
/// server of Nacos or Higress) the hub subscribes to as a sink
/// (`sources[].mcp`).
#[derive(Clone, Debug, PartialEq)]
pub struct McpSourceSpec {
    /// The source's name (`mcp:<address>` unless configured).
    pub name: String,
    /// The upstream: address, TLS (the same settings as an agent's),
    /// connect timeout and reconnect backoff.
    pub dial: DialSpec,
    /// The collections subscribed, each in the kind table (default: every
    /// collection of the kind table).
    pub collections: Vec<String>,
    /// The `SinkNode.id` sent (a meshhub upstream maps it to a cluster's
    /// group; empty: its default group).
    pub node_id: String,
    /// Ask for incremental responses (with the versions held, on reconnect).
    pub incremental: bool,
}

/// `sources[].mcp` as written: the dial keys and the subscription's.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawMcpSource {
    address: String,
    #[serde(default)]
    collections: Option<Vec<String>>,
    #[serde(default)]
    tls: Option<RawClientTls>,
    #[serde(default)]
    node_id: Option<String>,
    #[serde(default)]
    incremental: bool,
    #[serde(default, deserialize_with = "duration")]
    connect_timeout: Option<Duration>,
    #[serde(default)]
    reconnect: RawReconnect,
}

impl RawMcpSource {
    /// Whether the block lists its collections (otherwise every collection
    /// of the kind table is subscribed).
    pub fn lists_collections(&self) -> bool {
        self.collections.is_some()
    }

    /// Checks the block; `name` is the configured name, if any, and `base`
    /// the configuration file's directory. Listed collections are checked
    /// against the kind table by the caller, once every source's extra
    /// kinds are in it; unlisted ones are left empty for it to fill in.
    pub fn check(self, name: Option<String>, base: &Path) -> Result<McpSourceSpec, SettingError> {
        let dial = RawDialSpec {
            address: self.address,
            tls: self.tls,
            connect_timeout: self.connect_timeout,
            reconnect: self.reconnect,
        }
        .check(base, DIAL_DEFAULTS)?;
        let mut collections: Vec<String> = Vec::new();
        if let Some(list) = self.collections {
            if list.is_empty() {
                return Err(SettingError::new(
                    "collections",
                    "must not be empty (leave it out to subscribe to every collection)",
                ));
            }
            for (j, c) in list.into_iter().enumerate() {
                let c = c.trim().to_owned();
                if c.is_empty() {
                    return Err(SettingError::new(
                        format!("collections[{j}]"),
                        "must not be empty",
                    ));
                }
                if collections.contains(&c) {
                    return Err(SettingError::new(
                        format!("collections[{j}]"),
                        format!("duplicate collection {c:?}"),
                    ));
                }
                collections.push(c);
            }
        }
        Ok(McpSourceSpec {
            name: name.unwrap_or_else(|| format!("mcp:{}", dial.address)),
            dial,
            collections,
            node_id: self.node_id.unwrap_or_default(),
            incremental: self.incremental,
        })
    }
}

#[cfg(test)]
mod tests;
