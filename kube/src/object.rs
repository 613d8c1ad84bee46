//! Dynamic objects (what the API server sends) and meshhub's objects (what
//! it carries: [`meshhub_proto::object::Object`]).
//!
//! Into meshhub, an object loses what is the API server's and not the
//! author's: `status`, managed fields, and the copy of itself that
//! client-side `kubectl apply` keeps in an annotation. Out of meshhub, an
//! object is written as it is (server-side apply); whether a live object
//! already holds it is [`holds`].

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject};
use meshhub_proto::object::{Object, ObjectMeta};
use serde_json::{Map, Value};

/// Annotation `kubectl apply` (client-side) writes: a copy of the object,
/// never carried.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The label of the objects meshhub creates for its own use (the leader
/// election's Lease, the shared pins' ConfigMap).
pub fn own_labels() -> BTreeMap<String, String> {
    [("app.kubernetes.io/name".to_owned(), "meshhub".to_owned())].into()
}

/// The object as meshhub carries it: without `status`, managed fields and
/// `kubectl apply`'s copy of itself; its `apiVersion` and `kind` are the
/// served `resource`'s.
pub fn to_object(resource: &ApiResource, obj: DynamicObject) -> Object {
    let mut content = match obj.data {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    content.remove("status");
    let m = obj.metadata;
    let mut annotations = m.annotations.unwrap_or_default();
    annotations.remove(LAST_APPLIED);
    Object {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
        metadata: ObjectMeta {
            name: m.name.unwrap_or_default(),
            namespace: m.namespace,
            labels: m.labels.unwrap_or_default(),
            annotations,
            resource_version: m.resource_version,
            creation_timestamp: m.creation_timestamp.map(|t| t.0.to_string()),
        },
        content,
    }
}

/// The field manager of the newest `managedFields` entry: who last
/// changed the object, as far as the API server knows.
pub fn last_manager(obj: &DynamicObject) -> Option<Arc<str>> {
    obj.metadata
        .managed_fields
        .as_ref()?
        .iter()
        .filter(|f| f.manager.is_some())
        .max_by_key(|f| f.time.as_ref().map(|t| t.0))
        .and_then(|f| f.manager.as_deref())
        .map(Arc::from)
}

/// Whether the live object holds `desired`: every field of it is there
/// with its value (the API server may add defaults), and its labels and
/// annotations are there.
pub fn holds(live: &DynamicObject, desired: &Object) -> bool {
    let meta_ok = desired
        .metadata
        .labels
        .iter()
        .all(|(k, v)| live.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v))
        && desired
            .metadata
            .annotations
            .iter()
            .all(|(k, v)| live.metadata.annotations.as_ref().and_then(|a| a.get(k)) == Some(v));
    let empty = Map::new();
    let live_content = live.data.as_object().unwrap_or(&empty);
    meta_ok
        && desired
            .content
            .iter()
            .all(|(k, v)| live_content.get(k).is_some_and(|l| subset(v, l)))
}

/// `desired` ⊆ `live`: objects by key (recursively), arrays element-wise
/// with equal length, scalars equal (numbers by value).
fn subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d
            .iter()
            .all(|(k, v)| l.get(k).is_some_and(|lv| subset(v, lv))),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(a, b)| subset(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests;
