//! What the cluster's Gateway API controllers (its istiod) wrote in the
//! status of the Gateway API objects the applier manages: read from the
//! live objects the applier lists and watches anyway, and reported upward
//! (issue 39: the real status comes back).
//!
//! Three shapes carry it: a route's `status.parents[]` (per `parentRef`
//! and controller), a policy's `status.ancestors[]`, and a Gateway's or
//! ListenerSet's own `status.conditions` with `status.listeners[]`. Each
//! becomes a [`GatewayApiObjectStatus`]; a condition's message is cut to
//! [`MESSAGE_BYTES`] so that a chatty controller does not swell every
//! report.

use kube::api::DynamicObject;
use meshhub_proto::kinds::gateway_api::has_status;
use meshhub_proto::upward::{
    ConditionStatus, GatewayApiObjectStatus, ParentRole, ParentStatus, StatusCondition,
};
use serde_json::Value;

use super::HUB_VERSION;

/// A condition's message is cut to this many bytes (at a character
/// boundary) in the report.
pub const MESSAGE_BYTES: usize = 1024;
/// At most this many parent, ancestor and listener entries per object (the
/// Gateway API allows 32 parents and 64 listeners).
pub const MAX_ENTRIES: usize = 64;
/// At most this many conditions per entry (the Gateway API allows 8).
pub const MAX_CONDITIONS: usize = 16;

/// Whether objects of `group`/`kind` have a status the agent reports: the
/// Gateway API kinds but ReferenceGrant, which has none.
pub fn reported(group: &str, kind: &str) -> bool {
    has_status(group, kind)
}

/// The status of `obj`, an object of `collection` (one of the [`reported`]
/// kinds).
pub fn of(collection: &str, obj: &DynamicObject) -> GatewayApiObjectStatus {
    let name = match &obj.metadata.namespace {
        Some(ns) => format!("{ns}/{}", obj.metadata.name.as_deref().unwrap_or_default()),
        None => obj.metadata.name.clone().unwrap_or_default(),
    };
    let version = obj
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HUB_VERSION))
        .cloned()
        .unwrap_or_default();
    let status = obj.data.get("status");
    let list = |field: &str| {
        status
            .and_then(|s| s.get(field))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    let mut parents: Vec<ParentStatus> = list("parents")
        .iter()
        .take(MAX_ENTRIES)
        .map(|p| entry(ParentRole::Parent, p.get("parentRef"), p))
        .collect();
    parents.extend(
        list("ancestors")
            .iter()
            .take(MAX_ENTRIES)
            .map(|p| entry(ParentRole::Ancestor, p.get("ancestorRef"), p)),
    );
    parents.extend(
        list("listeners")
            .iter()
            .take(MAX_ENTRIES)
            .map(|l| ParentStatus {
                role: ParentRole::Listener.into(),
                name: text(l, "name"),
                conditions: conditions(l),
                ..Default::default()
            }),
    );
    let parent_refs = obj
        .data
        .get("spec")
        .and_then(|s| s.get("parentRefs"))
        .and_then(Value::as_array)
        .map_or(0, |r| u32::try_from(r.len()).unwrap_or(u32::MAX));
    GatewayApiObjectStatus {
        collection: collection.to_owned(),
        name,
        version,
        parent_refs,
        generation: obj.metadata.generation.unwrap_or_default(),
        conditions: status.map(conditions).unwrap_or_default(),
        parents,
    }
}

/// One entry of `status.parents` or `status.ancestors`.
fn entry(role: ParentRole, reference: Option<&Value>, entry: &Value) -> ParentStatus {
    let r = reference.unwrap_or(&Value::Null);
    ParentStatus {
        role: role.into(),
        group: text(r, "group"),
        kind: text(r, "kind"),
        namespace: text(r, "namespace"),
        name: text(r, "name"),
        section_name: text(r, "sectionName"),
        port: r
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or_default(),
        controller_name: text(entry, "controllerName"),
        conditions: conditions(entry),
    }
}

/// The `conditions` of `holder`.
fn conditions(holder: &Value) -> Vec<StatusCondition> {
    holder
        .get("conditions")
        .and_then(Value::as_array)
        .map(|cs| cs.iter().take(MAX_CONDITIONS).map(condition).collect())
        .unwrap_or_default()
}

fn condition(c: &Value) -> StatusCondition {
    let status = match c.get("status").and_then(Value::as_str) {
        Some("True") => ConditionStatus::True,
        Some("False") => ConditionStatus::False,
        Some("Unknown") => ConditionStatus::Unknown,
        _ => ConditionStatus::Unspecified,
    };
    StatusCondition {
        r#type: text(c, "type"),
        status: status.into(),
        reason: text(c, "reason"),
        message: cut(text(c, "message"), MESSAGE_BYTES),
        observed_generation: c
            .get("observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or_default(),
        last_transition_time: c
            .get("lastTransitionTime")
            .and_then(Value::as_str)
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
            .map(prost_types::Timestamp::from),
    }
}

fn text(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// `s` cut to at most `max` bytes at a character boundary, `…` marking
/// the cut.
fn cut(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(yaml: &str) -> DynamicObject {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn a_routes_parents_are_read_with_their_conditions() {
        let o = object(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: r
  namespace: shop
  generation: 3
  annotations: {meshhub.io/hub-version: "v7"}
spec: {}
status:
  parents:
  - parentRef: {name: gw, namespace: infra, sectionName: http, port: 80}
    controllerName: istio.io/gateway-controller
    conditions:
    - {type: Accepted, status: "False", reason: NoMatchingParent, message: no such gateway, observedGeneration: 3, lastTransitionTime: "2026-11-28T10:00:00Z"}
    - {type: ResolvedRefs, status: "True", reason: ResolvedRefs, observedGeneration: 2}
"#,
        );
        let s = of("gateway.networking.k8s.io/v1/HTTPRoute", &o);
        assert_eq!(s.name, "shop/r");
        assert_eq!(s.parent_refs, 0, "spec: {{}}");
        assert_eq!(s.version, "v7");
        assert_eq!(s.generation, 3);
        assert!(s.conditions.is_empty());
        let [p] = s.parents.as_slice() else {
            panic!("{:?}", s.parents)
        };
        assert_eq!(p.role(), ParentRole::Parent);
        assert_eq!(
            (
                p.name.as_str(),
                p.namespace.as_str(),
                p.section_name.as_str(),
                p.port
            ),
            ("gw", "infra", "http", 80)
        );
        assert_eq!(p.controller_name, "istio.io/gateway-controller");
        let accepted = &p.conditions[0];
        assert_eq!(accepted.status(), ConditionStatus::False);
        assert_eq!(accepted.reason, "NoMatchingParent");
        assert_eq!(accepted.observed_generation, 3);
        assert_eq!(
            accepted.last_transition_time.as_ref().map(|t| t.seconds),
            Some(1_795_860_000)
        );
        assert_eq!(p.conditions[1].status(), ConditionStatus::True);
        assert_eq!(p.conditions[1].observed_generation, 2);
    }

    #[test]
    fn a_gateways_own_conditions_and_listeners_and_a_policys_ancestors_are_read() {
        let gw = object(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra, generation: 1}
spec: {}
status:
  conditions:
  - {type: Accepted, status: "True", reason: Accepted, observedGeneration: 1}
  - {type: Programmed, status: Unknown, reason: Pending, observedGeneration: 1}
  listeners:
  - name: http
    conditions:
    - {type: Accepted, status: "False", reason: UnsupportedProtocol, observedGeneration: 1}
"#,
        );
        let s = of("gateway.networking.k8s.io/v1/Gateway", &gw);
        assert_eq!(s.version, "", "no annotation: no version");
        assert_eq!(s.conditions.len(), 2);
        assert_eq!(s.conditions[1].status(), ConditionStatus::Unknown);
        assert_eq!(s.parents[0].role(), ParentRole::Listener);
        assert_eq!(s.parents[0].name, "http");
        assert_eq!(s.parents[0].conditions[0].reason, "UnsupportedProtocol");

        let policy = object(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: p, namespace: shop, generation: 2}
spec: {}
status:
  ancestors:
  - ancestorRef: {group: gateway.networking.k8s.io, kind: Gateway, name: gw}
    controllerName: istio.io/gateway-controller
    conditions: [{type: Accepted, status: "True", observedGeneration: 2}]
"#,
        );
        let s = of("gateway.networking.k8s.io/v1/BackendTLSPolicy", &policy);
        assert_eq!(s.parents[0].role(), ParentRole::Ancestor);
        assert_eq!(s.parents[0].kind, "Gateway");
        assert_eq!(s.parents[0].conditions[0].status(), ConditionStatus::True);
    }

    #[test]
    fn an_object_without_status_or_with_odd_fields_reads_as_nothing_written() {
        let o = object(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
status: {parents: "not a list", conditions: [{type: 7, status: maybe}]}
"#,
        );
        let s = of("c", &o);
        assert!(s.parents.is_empty());
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].status(), ConditionStatus::Unspecified);
        assert_eq!(s.conditions[0].r#type, "");
        assert_eq!(s.generation, 0);
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let s = cut("é".repeat(2000), MESSAGE_BYTES);
        assert!(s.len() <= MESSAGE_BYTES, "{}", s.len());
        assert!(s.ends_with('…'));
        assert_eq!(cut("short".into(), MESSAGE_BYTES), "short");
    }

    #[test]
    fn reference_grants_and_istio_kinds_are_not_reported() {
        assert!(reported("gateway.networking.k8s.io", "HTTPRoute"));
        assert!(reported("gateway.networking.x-k8s.io", "XListenerSet"));
        assert!(!reported("gateway.networking.k8s.io", "ReferenceGrant"));
        assert!(!reported("networking.istio.io", "Gateway"));
    }
}
