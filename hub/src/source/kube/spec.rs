//! The `sources[].kubernetes` block: its serde form, defaults and checks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use meshhub_kube::Connection;
use meshhub_mcp::settings::{SettingError, duration};
use serde::Deserialize;

use meshhub_validate::names::is_dns1123_label;

pub mod write_back;

use write_back::{RawWriteBack, WriteBackSpec};

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
    /// Whether (and how fast) the objects' distribution is written back to
    /// their `status` (`statusWriteBack`; off by default).
    pub status_write_back: Option<WriteBackSpec>,
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

/// `sources[].kubernetes` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawKubeSource {
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
    #[serde(default)]
    status_write_back: Option<RawWriteBack>,
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

impl RawKubeSource {
    /// Checks the block and fills in the defaults. `name` is the
    /// configured name, if any; `base` the configuration file's directory.
    pub fn check(self, name: Option<String>, base: &Path) -> Result<KubeSourceSpec, SettingError> {
        let connection = connection(self.kubeconfig, self.context, base)?;
        let mut namespaces = Vec::new();
        for (j, ns) in self.namespaces.into_iter().enumerate() {
            if !is_dns1123_label(&ns) {
                return Err(SettingError::new(
                    format!("namespaces[{j}]"),
                    format!("{ns:?} is not a valid namespace name"),
                ));
            }
            if !namespaces.contains(&ns) {
                namespaces.push(ns);
            }
        }
        let mut extra_kinds = Vec::new();
        for (j, k) in self.extra_kinds.into_iter().enumerate() {
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
                return Err(SettingError::new(
                    format!("extraKinds[{j}].group"),
                    format!(
                        "{:?}: Istio's kinds are watched already; extraKinds is for other kinds",
                        extra.group
                    ),
                ));
            }
            extra_kinds.push(extra);
        }
        let discovery_interval = self
            .discovery_interval
            .unwrap_or(DEFAULT_DISCOVERY_INTERVAL);
        if discovery_interval < Duration::from_secs(1) {
            return Err(SettingError::new(
                "discoveryInterval",
                "must be at least 1s",
            ));
        }
        let status_write_back = match self.status_write_back {
            Some(raw) => raw.check().map_err(|e| e.within("statusWriteBack"))?,
            None => None,
        };
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
            status_write_back,
        })
    }
}

/// Checks where a Kubernetes client connects (`kubeconfig`, relative to
/// `base`, the configuration file's directory, and `context`): the
/// Kubernetes source's and the leader election's keys.
pub fn connection(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    base: &Path,
) -> Result<Connection, SettingError> {
    Connection::from_config(kubeconfig, context, base)
        .map_err(|e| SettingError::new(e.field(), e.to_string()))
}

#[cfg(test)]
mod tests;
