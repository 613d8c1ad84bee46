//! The `status` of Istio's objects (`istio.meta.v1alpha1.IstioStatus`, the
//! schema of the `status` subresource of every Istio CRD): `conditions`,
//! `validationMessages` and `observedGeneration`, read from a live object
//! and written with server-side apply under a field manager of our own.
//!
//! Istio's CRDs mark `status` `x-kubernetes-preserve-unknown-fields` and
//! give its lists no list type: each list is atomic, so the one who applies
//! it owns all of it (an istiod writing status on the same objects would
//! take turns with us; see docs/operations.md).

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::discovery::api;

pub mod gateway;

/// The field manager of meshhub's status writes.
pub const FIELD_MANAGER: &str = "meshhub-status";

/// Where Istio documents its analysis messages (`documentationUrl` is this
/// followed by the lower-case code, as istiod writes it).
pub const ANALYSIS_DOCS: &str = "https://istio.io/latest/docs/reference/config/analysis";

/// `istio.meta.v1alpha1.IstioStatus`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IstioStatus {
    /// Current service state of the resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Errors and warnings of the analyzers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_messages: Vec<ValidationMessage>,
    /// The generation this status is about.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int_or_string"
    )]
    pub observed_generation: Option<i64>,
}

/// `istio.meta.v1alpha1.IstioCondition`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Distributed`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Last time we probed the condition (meshhub leaves it out: a time
    /// that moves on every write would make every write a change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<String>,
    /// When `status` last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// One CamelCase word.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// For people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The generation the condition is about.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int_or_string"
    )]
    pub observed_generation: Option<i64>,
}

/// `istio.analysis.v1alpha1.AnalysisMessageBase`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationMessage {
    /// The message type.
    #[serde(rename = "type")]
    pub type_: MessageType,
    /// `ERROR`, `WARNING`, `INFO` (or `UNKNOWN`).
    pub level: String,
    /// The message's page in Istio's documentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
}

/// `istio.analysis.v1alpha1.AnalysisMessageBase.Type`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MessageType {
    /// `IST0101`.
    pub code: String,
    /// `ReferencedResourceNotFound`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl ValidationMessage {
    /// A message as istiod writes it (`level` upper-case, its page).
    pub fn new(code: &str, name: &str, level: &str) -> Self {
        Self {
            type_: MessageType {
                code: code.to_owned(),
                name: name.to_owned(),
            },
            level: level.to_ascii_uppercase(),
            documentation_url: Some(format!("{ANALYSIS_DOCS}/{}/", code.to_ascii_lowercase())),
        }
    }
}

impl IstioStatus {
    /// Whether `self` and `other` say the same: equal but for the
    /// conditions' times.
    pub fn same_as(&self, other: &IstioStatus) -> bool {
        fn timeless(c: &Condition) -> Condition {
            Condition {
                last_probe_time: None,
                last_transition_time: None,
                ..c.clone()
            }
        }
        self.observed_generation == other.observed_generation
            && self.validation_messages == other.validation_messages
            && self.conditions.len() == other.conditions.len()
            && self
                .conditions
                .iter()
                .zip(&other.conditions)
                .all(|(a, b)| timeless(a) == timeless(b))
    }

    /// The condition of type `type_`.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

fn int_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    })
}

/// The status of a live object, as far as it reads as an `IstioStatus`
/// (`None`: no status, or one of another shape).
pub fn observed(obj: &DynamicObject) -> Option<IstioStatus> {
    let status = obj.data.get("status")?;
    IstioStatus::deserialize(status).ok()
}

/// The server-side apply body of `status` for one object.
pub fn apply_body(
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    status: &IstioStatus,
) -> Value {
    let mut metadata = serde_json::json!({ "name": name });
    if let Some(ns) = namespace {
        metadata["namespace"] = Value::String(ns.to_owned());
    }
    serde_json::json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": metadata,
        "status": status,
    })
}

/// What became of one status write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Written; the object's new `resourceVersion`.
    Written(Option<String>),
    /// The object is gone (deleted meanwhile), or its kind has no status
    /// subresource: nothing to write to.
    Gone,
}

/// Writes `status` into the object's status subresource with server-side
/// apply as [`FIELD_MANAGER`] (forced: the fields are ours).
pub async fn apply(
    client: kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    status: &IstioStatus,
) -> Result<Applied, kube::Error> {
    let body = apply_body(resource, namespace, name, status);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api(client, resource, namespace)
        .patch_status(name, &params, &Patch::Apply(body))
        .await
    {
        Ok(obj) => Ok(Applied::Written(obj.metadata.resource_version)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Applied::Gone),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
