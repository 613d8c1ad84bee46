//! Which workloads a rule applies to: Kubernetes labels, label selectors,
//! and the `selector`/`targetRef`/`targetRefs` of the policy kinds.

use serde_json::Value;

use crate::json::{field, has, list, str_field, string_map};
use crate::names::{is_qualified_name, validate_label_key};
use crate::report::{Report, at, idx, key};

/// Kubernetes-style labels (subset labels, endpoint labels, source labels).
pub(crate) fn check_labels(r: &mut Report, path: &str, v: &Value, name: &str) {
    let p = at(path, name);
    for (k, val) in string_map(v, name) {
        r.check(key(&p, k), validate_label_key(k));
        if !val.is_empty() && !is_qualified_name(val) {
            r.err(key(&p, k), format!("invalid label value {val:?}"));
        }
    }
}

/// Selector labels: keys must be set and neither keys nor values may hold a
/// wildcard.
pub(crate) fn check_selector_labels(r: &mut Report, path: &str, v: &Value, name: &str) {
    let p = at(path, name);
    for (k, val) in string_map(v, name) {
        if k.is_empty() {
            r.err(key(&p, k), "empty key is not supported in a selector");
        }
        if k.contains('*') || val.contains('*') {
            r.err(key(&p, k), "wildcard is not supported in a selector");
        }
        // A value's 63 characters are the CRDs' maxLength (limits.tsv).
    }
}

/// The `selector`/`targetRef`/`targetRefs` trio of the policy kinds.
pub(crate) fn check_policy_target(r: &mut Report, spec: &Value) {
    let set = usize::from(has(spec, "selector"))
        + usize::from(has(spec, "targetRef"))
        + usize::from(!list(spec, "targetRefs").is_empty());
    if set > 1 {
        r.err(
            "spec",
            "only one of selector, targetRef or targetRefs can be set",
        );
    }
    if let Some(sel) = field(spec, "selector") {
        check_selector_labels(r, "spec.selector", sel, "matchLabels");
    }
    if let Some(t) = field(spec, "targetRef") {
        check_target_ref(r, "spec.targetRef", t, false);
    }
    for (i, t) in list(spec, "targetRefs").iter().enumerate() {
        check_target_ref(r, &idx("spec.targetRefs", i), t, false);
    }
}

/// A policy target: a Service, ServiceEntry or Gateway API Gateway (or,
/// with `gateway_class`, GatewayClass: istiod's full list) in the
/// policy's own namespace.
pub(crate) fn check_target_ref(r: &mut Report, path: &str, t: &Value, gateway_class: bool) {
    // An empty name is the CRDs' minLength (limits.tsv).
    if !has(t, "name") {
        r.err(at(path, "name"), "must be set");
    }
    if !str_field(t, "namespace").is_empty() {
        r.err(
            at(path, "namespace"),
            "must not be set; cross namespace referencing is not supported",
        );
    }
    let group = str_field(t, "group");
    let kind = str_field(t, "kind");
    let allowed = matches!(
        (group, kind),
        ("" | "core", "Service")
            | ("networking.istio.io", "ServiceEntry")
            | ("gateway.networking.k8s.io", "Gateway")
    ) || (gateway_class
        && (group, kind) == ("gateway.networking.k8s.io", "GatewayClass"));
    if !allowed {
        r.err(
            path,
            format!(
                "must refer to a core Service, a networking.istio.io ServiceEntry or a gateway.networking.k8s.io Gateway, found {group}/{kind}"
            ),
        );
    }
}
