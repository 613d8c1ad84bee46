//! The `clusters:` list: each cluster's name, selector, identities and
//! `agent:` (the sink agent the hub dials), with their checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use meshhub_mcp::authz::AllowList;
use meshhub_mcp::cache::Group;
use meshhub_mcp::dial::{DialDefaults, DialSpec, RawDialSpec};
use meshhub_mcp::settings::SettingError;
use serde::Deserialize;

use crate::clusters::exports::{ExportPolicy, RawExportPolicy};
use crate::groups::{ClusterSpec, DEFAULT_GROUP, Selector};
use meshhub_validate::names::is_dns1123_label;

/// Default time to establish a connection to a sink agent.
pub const DEFAULT_AGENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How an agent is dialed when its block leaves a key out.
const DIAL_DEFAULTS: DialDefaults = DialDefaults {
    connect_timeout: DEFAULT_AGENT_CONNECT_TIMEOUT,
    port: "the agent's sink port, 9911 by default",
};

/// A sink agent the hub dials to push one cluster's group (`clusters[].agent`).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSpec {
    /// The cluster (and group) pushed.
    pub cluster: String,
    /// The agent's `ResourceSink`: address, TLS, connect timeout and
    /// reconnect backoff.
    pub dial: DialSpec,
    /// What the cluster may export to the others (`exports`); a change
    /// restarts neither the dialer nor the upward subscriber.
    pub exports: ExportPolicy,
}

/// One entry of `clusters:` as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawCluster {
    name: String,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    agent: Option<RawDialSpec>,
    #[serde(default)]
    identities: Option<Vec<String>>,
    #[serde(default)]
    cluster_labels: BTreeMap<String, String>,
    #[serde(default)]
    exports: Option<RawExportPolicy>,
}

/// The checked clusters.
#[derive(Clone, Debug, Default)]
pub struct Clusters {
    /// The clusters (snapshot groups besides the default group).
    pub clusters: Vec<ClusterSpec>,
    /// The agents dialed, one per cluster with `agent:`, in order.
    pub agents: Vec<AgentSpec>,
    /// Who may read each cluster's group (`identities`), in order.
    pub identities: Vec<(Group, AllowList)>,
    /// Each cluster's own labels (`clusterLabels`: what a rollout wave's
    /// `selector` matches), for the clusters that have some.
    pub labels: BTreeMap<String, BTreeMap<String, String>>,
}

/// Checks the `clusters:` list (errors name the setting from the top of
/// the file: `clusters[1].agent.address`). `base` is the configuration
/// file's directory.
pub fn check(raw: Vec<RawCluster>, base: &Path) -> Result<Clusters, SettingError> {
    let mut checked = Clusters::default();
    let mut seen = BTreeSet::new();
    for (i, c) in raw.into_iter().enumerate() {
        let setting = format!("clusters[{i}].name");
        if !is_dns1123_label(&c.name) {
            return Err(SettingError::new(
                setting,
                format!(
                    "{:?} is not a valid cluster name (lower-case letters, digits and '-', at most 63)",
                    c.name
                ),
            ));
        }
        if c.name == DEFAULT_GROUP {
            return Err(SettingError::new(
                setting,
                format!("{DEFAULT_GROUP:?} is reserved for the default group"),
            ));
        }
        if !seen.insert(c.name.clone()) {
            return Err(SettingError::new(
                setting,
                format!("duplicate cluster name {:?}", c.name),
            ));
        }
        for (j, ns) in c.namespaces.iter().enumerate() {
            if !is_dns1123_label(ns) {
                return Err(SettingError::new(
                    format!("clusters[{i}].namespaces[{j}]"),
                    format!("{ns:?} is not a valid namespace name"),
                ));
            }
        }
        if c.labels.keys().any(String::is_empty) {
            return Err(SettingError::new(
                format!("clusters[{i}].labels"),
                "label keys must not be empty",
            ));
        }
        let exports = match (c.exports, &c.agent) {
            (Some(_), None) => {
                return Err(SettingError::new(
                    format!("clusters[{i}].exports"),
                    "needs `agent:` (exports are read from the cluster's agent)",
                ));
            }
            (Some(raw), Some(_)) => raw.check(&format!("clusters[{i}].exports"))?,
            (None, _) => ExportPolicy::default(),
        };
        if let Some(a) = c.agent {
            let dial = a
                .check(base, DIAL_DEFAULTS)
                .map_err(|e| e.within(&format!("clusters[{i}].agent")))?;
            checked.agents.push(AgentSpec {
                cluster: c.name.clone(),
                dial,
                exports,
            });
        }
        if let Some(list) = &c.identities {
            let list = AllowList::parse(list)
                .map_err(|(j, e)| SettingError::new(format!("clusters[{i}].identities[{j}]"), e))?;
            checked.identities.push((c.name.as_str().into(), list));
        }
        if c.cluster_labels.keys().any(String::is_empty) {
            return Err(SettingError::new(
                format!("clusters[{i}].clusterLabels"),
                "label keys must not be empty",
            ));
        }
        if !c.cluster_labels.is_empty() {
            checked.labels.insert(c.name.clone(), c.cluster_labels);
        }
        checked.clusters.push(ClusterSpec {
            name: c.name,
            selector: Selector {
                namespaces: c.namespaces.into_iter().collect(),
                labels: c.labels,
            },
        });
    }
    Ok(checked)
}

#[cfg(test)]
mod tests;
