//! A Kubernetes-style object, as meshhub reads it from files, the Kubernetes
//! API or turns it back from an MCP resource.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One Kubernetes object: `apiVersion`, `kind`, `metadata` and everything
/// else (`spec`, `data`, `status`, ...) kept as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Object {
    /// `group/version`, or `version` for the core group.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// The kind, e.g. `VirtualService`.
    pub kind: String,
    /// Name, namespace, labels, annotations, ...
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Every other top-level field (`spec` for Istio kinds).
    #[serde(flatten)]
    pub content: Map<String, Value>,
}

/// The part of Kubernetes' `ObjectMeta` that meshhub carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name (required).
    #[serde(default)]
    pub name: String,
    /// Namespace; absent for cluster-scoped objects (and for namespaced
    /// objects in files, which then land in the default namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Kubernetes resourceVersion, when the object came from an API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// RFC 3339 creation time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
}

impl Object {
    /// The API group (`networking.istio.io`; empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// The API version (`v1alpha3`).
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version.as_str(), |(_, v)| v)
    }

    /// `spec`, if present.
    pub fn spec(&self) -> Option<&Value> {
        self.content.get("spec")
    }
}
