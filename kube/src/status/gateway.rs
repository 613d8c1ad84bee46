//! meshhub's part of a Gateway API object's `status`, in the Gateway
//! API's own shape, beside the conditions other controllers own:
//!
//! * a **route** (`HTTPRoute`, `GRPCRoute`, `TCPRoute`, `TLSRoute`,
//!   `UDPRoute`): one `status.parents[]` entry per `spec.parentRefs[]`
//!   under controller [`CONTROLLER`], whose `Accepted` condition sums up
//!   what the clusters' controllers said of that parent. `status.parents`
//!   is an atomic list, so the write reads the object, keeps every entry
//!   of another controller and replaces meshhub's, and puts it back under
//!   the object's `resourceVersion` (a conflict reads it again): as
//!   istiod itself writes it, keeping other controllers' entries.
//! * a **Gateway** or **ListenerSet**: one condition of type
//!   [`ACCEPTED`] (domain-prefixed: `Accepted` is the Gateway's own
//!   controller's) in `status.conditions`, a list map by type, written
//!   with server-side apply: no other condition is touched.

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Applied, FIELD_MANAGER};
use crate::discovery::api;

/// The controller name of meshhub's `status.parents` entries.
pub const CONTROLLER: &str = "meshhub.io/hub";
/// The condition type meshhub writes on a Gateway or ListenerSet.
pub const ACCEPTED: &str = "meshhub.io/Accepted";
/// The condition type of meshhub's route parent entries.
pub const ROUTE_ACCEPTED: &str = "Accepted";
/// `status.parents` holds at most this many entries (the CRDs' limit):
/// meshhub's are cut to what the other controllers leave.
pub const MAX_PARENTS: usize = 32;
/// How many times a route's write reads the object again after a conflict
/// before it gives up (the writer retries later, with backoff).
const CONFLICT_RETRIES: usize = 3;

/// Where meshhub's part of a kind's status goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A route's `status.parents`.
    Parents,
    /// A Gateway's or ListenerSet's `status.conditions`.
    Conditions,
}

impl Shape {
    /// The shape of `kind` (of a Gateway API group); `None`: meshhub
    /// writes nothing there (ReferenceGrant, BackendTLSPolicy, whose
    /// ancestors are the controllers' to find).
    pub fn of(kind: &str) -> Option<Self> {
        match kind {
            "HTTPRoute" | "GRPCRoute" | "TCPRoute" | "TLSRoute" | "UDPRoute" => Some(Self::Parents),
            "Gateway" | "ListenerSet" | "XListenerSet" => Some(Self::Conditions),
            _ => None,
        }
    }
}

/// A `metav1.Condition`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayCondition {
    /// Its type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The generation it speaks of.
    #[serde(default)]
    pub observed_generation: i64,
    /// When `status` last changed (RFC 3339, required by the API).
    #[serde(default)]
    pub last_transition_time: String,
    /// One CamelCase word (required, non-empty).
    #[serde(default)]
    pub reason: String,
    /// For people.
    #[serde(default)]
    pub message: String,
}

impl GatewayCondition {
    /// Equal but for the transition time.
    pub fn same_as(&self, other: &Self) -> bool {
        Self {
            last_transition_time: String::new(),
            ..self.clone()
        } == Self {
            last_transition_time: String::new(),
            ..other.clone()
        }
    }
}

/// One of meshhub's `status.parents` entries: the parent as the route's
/// spec names it, and what the clusters said of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentEntry {
    /// The `parentRef`, as written in the route's spec.
    pub parent_ref: Value,
    /// Its `Accepted` condition.
    pub condition: GatewayCondition,
}

/// meshhub's part of an object's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetStatus {
    /// A route's entries, one per `parentRef`.
    Parents(Vec<ParentEntry>),
    /// A Gateway's or ListenerSet's condition.
    Condition(GatewayCondition),
}

impl FleetStatus {
    /// Whether `self` and `other` say the same (but for times).
    pub fn same_as(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Parents(a), Self::Parents(b)) => {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(a, b)| {
                        a.parent_ref == b.parent_ref && a.condition.same_as(&b.condition)
                    })
            }
            (Self::Condition(a), Self::Condition(b)) => a.same_as(b),
            _ => false,
        }
    }

    /// The condition about `parent_ref` (a route's), or the object's own.
    pub fn condition(&self, parent_ref: Option<&Value>) -> Option<&GatewayCondition> {
        match (self, parent_ref) {
            (Self::Parents(entries), Some(r)) => entries
                .iter()
                .find(|e| e.parent_ref == *r)
                .map(|e| &e.condition),
            (Self::Condition(c), None) => Some(c),
            _ => None,
        }
    }
}

/// What meshhub last wrote in `status` (the live object's), for `shape`;
/// `None`: nothing of meshhub's is there.
pub fn ours(status: Option<&Value>, shape: Shape) -> Option<FleetStatus> {
    let status = status?;
    match shape {
        Shape::Parents => {
            let entries: Vec<ParentEntry> = status
                .get("parents")?
                .as_array()?
                .iter()
                .filter(|p| p.get("controllerName").and_then(Value::as_str) == Some(CONTROLLER))
                .filter_map(|p| {
                    let condition = p
                        .get("conditions")?
                        .as_array()?
                        .iter()
                        .filter_map(|c| GatewayCondition::deserialize(c).ok())
                        .find(|c| c.type_ == ROUTE_ACCEPTED)?;
                    Some(ParentEntry {
                        parent_ref: p.get("parentRef")?.clone(),
                        condition,
                    })
                })
                .collect();
            (!entries.is_empty()).then_some(FleetStatus::Parents(entries))
        }
        Shape::Conditions => status
            .get("conditions")?
            .as_array()?
            .iter()
            .filter_map(|c| GatewayCondition::deserialize(c).ok())
            .find(|c| c.type_ == ACCEPTED)
            .map(FleetStatus::Condition),
    }
}

/// `status` (the live one, or none) with meshhub's `parents` entries
/// replaced by `entries`: every other controller's kept in place, ours
/// after them, cut to [`MAX_PARENTS`] in all.
pub fn merged_parents(status: Option<&Value>, entries: &[ParentEntry]) -> Value {
    let mut status = status
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    if !status.is_object() {
        status = Value::Object(Default::default());
    }
    let mut parents: Vec<Value> = status
        .get("parents")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter(|p| p.get("controllerName").and_then(Value::as_str) != Some(CONTROLLER))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let room = MAX_PARENTS.saturating_sub(parents.len());
    parents.extend(entries.iter().take(room).map(|e| {
        serde_json::json!({
            "parentRef": e.parent_ref,
            "controllerName": CONTROLLER,
            "conditions": [e.condition],
        })
    }));
    status["parents"] = Value::Array(parents);
    status
}

/// Writes `fleet` into the object's status (see the module's
/// documentation for how each shape is written).
pub async fn write(
    client: kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    fleet: &FleetStatus,
) -> Result<Applied, kube::Error> {
    let api = api(client, resource, namespace);
    let gone = |e: kube::Error| match e {
        kube::Error::Api(s) if s.code == 404 => Ok(Applied::Gone),
        e => Err(e),
    };
    match fleet {
        FleetStatus::Condition(c) => {
            let mut metadata = serde_json::json!({ "name": name });
            if let Some(ns) = namespace {
                metadata["namespace"] = Value::String(ns.to_owned());
            }
            let body = serde_json::json!({
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "metadata": metadata,
                "status": { "conditions": [c] },
            });
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match api.patch_status(name, &params, &Patch::Apply(body)).await {
                Ok(obj) => Ok(Applied::Written(obj.metadata.resource_version)),
                Err(e) => gone(e),
            }
        }
        FleetStatus::Parents(entries) => {
            let mut attempt = 0;
            loop {
                let mut obj: DynamicObject = match api.get(name).await {
                    Ok(o) => o,
                    Err(e) => return gone(e),
                };
                let status = merged_parents(obj.data.get("status"), entries);
                if obj.data.get("status") == Some(&status) {
                    return Ok(Applied::Written(obj.metadata.resource_version));
                }
                obj.data["status"] = status;
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PostParams::default()
                };
                match api.replace_status(name, &params, &obj).await {
                    Ok(o) => return Ok(Applied::Written(o.metadata.resource_version)),
                    Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_RETRIES => {
                        attempt += 1;
                    }
                    Err(e) => return gone(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(status: &str) -> GatewayCondition {
        GatewayCondition {
            type_: ROUTE_ACCEPTED.into(),
            status: status.into(),
            observed_generation: 2,
            last_transition_time: "2026-11-28T10:00:00Z".into(),
            reason: "Accepted".into(),
            message: "Accepted by 3/3 clusters".into(),
        }
    }

    #[test]
    fn our_entries_replace_ours_and_keep_every_other_controllers() {
        let live = serde_json::json!({
            "parents": [
                {"parentRef": {"name": "gw"}, "controllerName": "istio.io/gateway-controller",
                 "conditions": [{"type": "Accepted", "status": "True"}]},
                {"parentRef": {"name": "old"}, "controllerName": CONTROLLER,
                 "conditions": [{"type": "Accepted", "status": "False"}]},
            ],
            "other": 1,
        });
        let entries = [ParentEntry {
            parent_ref: serde_json::json!({"name": "gw"}),
            condition: condition("True"),
        }];
        let merged = merged_parents(Some(&live), &entries);
        let parents = merged["parents"].as_array().unwrap();
        assert_eq!(parents.len(), 2);
        assert_eq!(parents[0]["controllerName"], "istio.io/gateway-controller");
        assert_eq!(parents[1]["controllerName"], CONTROLLER);
        assert_eq!(parents[1]["parentRef"]["name"], "gw");
        assert_eq!(
            parents[1]["conditions"][0]["message"],
            "Accepted by 3/3 clusters"
        );
        assert_eq!(merged["other"], 1, "the rest of the status stays");
        // Read back as ours.
        let read = ours(Some(&merged), Shape::Parents).unwrap();
        assert!(read.same_as(&FleetStatus::Parents(entries.to_vec())));
        assert_eq!(
            read.condition(Some(&serde_json::json!({"name": "gw"})))
                .map(|c| c.status.as_str()),
            Some("True")
        );
    }

    #[test]
    fn ours_are_cut_to_the_room_the_others_leave() {
        let others: Vec<Value> = (0..30)
            .map(|i| serde_json::json!({"parentRef": {"name": format!("g{i}")}, "controllerName": "x.io/c", "conditions": []}))
            .collect();
        let live = serde_json::json!({ "parents": others });
        let entries: Vec<ParentEntry> = (0..5)
            .map(|i| ParentEntry {
                parent_ref: serde_json::json!({"name": format!("g{i}")}),
                condition: condition("True"),
            })
            .collect();
        let merged = merged_parents(Some(&live), &entries);
        assert_eq!(merged["parents"].as_array().unwrap().len(), MAX_PARENTS);
        // Nothing live: ours alone.
        let merged = merged_parents(None, &entries);
        assert_eq!(merged["parents"].as_array().unwrap().len(), 5);
    }

    #[test]
    fn a_gateways_condition_is_read_by_its_type_only() {
        let live = serde_json::json!({"conditions": [
            {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "lastTransitionTime": "t", "observedGeneration": 1},
            {"type": ACCEPTED, "status": "Unknown", "reason": "Pending", "message": "m", "lastTransitionTime": "t", "observedGeneration": 1},
        ]});
        let Some(FleetStatus::Condition(c)) = ours(Some(&live), Shape::Conditions) else {
            panic!()
        };
        assert_eq!(c.status, "Unknown");
        assert!(ours(Some(&serde_json::json!({})), Shape::Conditions).is_none());
        assert!(ours(None, Shape::Parents).is_none());
    }

    #[test]
    fn times_do_not_make_a_change() {
        let a = condition("True");
        let b = GatewayCondition {
            last_transition_time: "later".into(),
            ..a.clone()
        };
        assert!(a.same_as(&b));
        assert!(!a.same_as(&condition("False")));
    }

    #[test]
    fn shapes_by_kind() {
        assert_eq!(Shape::of("HTTPRoute"), Some(Shape::Parents));
        assert_eq!(Shape::of("Gateway"), Some(Shape::Conditions));
        assert_eq!(Shape::of("ReferenceGrant"), None);
        assert_eq!(Shape::of("BackendTLSPolicy"), None);
    }
}
