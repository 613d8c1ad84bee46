//! The Gateway API kinds meshhub carries (meshhub-proto's
//! `kinds::gateway_api`): what any API server takes of a custom resource of
//! the kind, checked before the object is served.
//!
//! Always checked: the object is a well-formed namespaced Kubernetes object
//! of its kind (a lower-case RFC 1123 subdomain as its name, a DNS label as
//! its namespace). With the kind's CRD at hand ([`CrdSchemas`], from the
//! CRDs the operator installs), its OpenAPI schema and CEL rules are
//! checked as the API server checks them; without it, only that `spec`,
//! which every Gateway API CRD requires, is an object, and the cluster's
//! agent (which applies with strict field validation) refuses what its API
//! server refuses, NACKing with the API server's message.

use meshhub_proto::kinds::gateway_api::{self, GatewayApiKind};
use meshhub_proto::object::Object;
use serde_json::Value;

use crate::crd::CrdSchemas;
use crate::names::is_dns1123_label;
use crate::problem::Problem;
use crate::report::Report;

/// The Gateway API kind of `group` and `kind`, if meshhub carries it.
pub(crate) fn kind_of(group: &str, kind: &str) -> Option<&'static GatewayApiKind> {
    gateway_api::find(group, kind)
}

/// Every problem of `obj`, an object of `kind`.
pub(crate) fn problems(
    obj: &Object,
    kind: &GatewayApiKind,
    crds: Option<&CrdSchemas>,
) -> Vec<Problem> {
    let mut r = Report::default();
    crate::metadata::check_resource_name(&mut r, obj);
    if let Some(ns) = obj.metadata.namespace.as_deref()
        && !ns.is_empty()
        && !is_dns1123_label(ns)
    {
        r.err(
            "metadata.namespace",
            format!("{ns:?} is not a lower-case RFC 1123 label (a-z, 0-9 and '-', at most 63 characters)"),
        );
    }
    if let Some(found) = crds.and_then(|c| c.problems(obj)) {
        let mut problems = r.into_problems();
        problems.extend(found);
        return problems;
    }
    match obj.spec() {
        None | Some(Value::Null) => {
            r.err("spec", format!("required: every {} has a spec", kind.kind))
        }
        Some(Value::Object(_)) => {}
        Some(_) => r.err("spec", "must be an object"),
    }
    r.into_problems()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, namespace: Option<&str>, spec: Option<Value>) -> Object {
        let mut content = serde_json::Map::new();
        if let Some(spec) = spec {
            content.insert("spec".to_owned(), spec);
        }
        Object {
            api_version: "gateway.networking.k8s.io/v1".to_owned(),
            kind: "HTTPRoute".to_owned(),
            metadata: meshhub_proto::object::ObjectMeta {
                name: name.to_owned(),
                namespace: namespace.map(str::to_owned),
                ..Default::default()
            },
            content,
        }
    }

    fn paths(obj: &Object) -> Vec<String> {
        crate::problems(obj).into_iter().map(|p| p.path).collect()
    }

    #[test]
    fn a_well_formed_route_passes_and_a_malformed_one_says_where() {
        let spec = serde_json::json!({"parentRefs": [{"name": "gw"}]});
        assert!(paths(&object("reviews", Some("bookinfo"), Some(spec.clone()))).is_empty());
        assert!(
            paths(&object("reviews", None, Some(serde_json::json!({})))).is_empty(),
            "no namespace: the default one; an empty spec is an object"
        );
        assert_eq!(
            paths(&object("Reviews_1", Some("Book.Info"), Some(spec))),
            ["metadata.name", "metadata.namespace"]
        );
        assert_eq!(paths(&object("r", Some("ns"), None)), ["spec"]);
        assert_eq!(
            paths(&object("r", Some("ns"), Some(serde_json::json!(["x"])))),
            ["spec"]
        );
        let e = crate::validate(&object("r", Some("ns"), None)).unwrap_err();
        assert!(e.to_string().contains("every HTTPRoute has a spec"), "{e}");
    }

    #[test]
    fn every_carried_gateway_api_kind_is_checked_and_istios_gateway_stays_istios() {
        for k in gateway_api::KINDS {
            assert!(crate::is_checked_kind(k.group, k.kind), "{}", k.kind);
        }
        assert!(crate::is_checked_kind("networking.istio.io", "Gateway"));
        assert!(!crate::is_checked_kind(gateway_api::GROUP, "UDPRoute"));
    }
}
