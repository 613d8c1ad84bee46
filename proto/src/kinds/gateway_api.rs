//! The Kubernetes Gateway API kinds Istio implements, as built-in kinds.
//!
//! Istio has no protobuf schema for them (its Gateway controller reads the
//! Go types of `sigs.k8s.io/gateway-api`), so between meshhub's hub and its
//! agents they travel like the configured schemaless kinds: a
//! `google.protobuf.Struct` of every top-level field but `apiVersion`,
//! `kind`, `metadata` and `status`, in collection
//! `k8s/<group>/<preferred version>/<plural>` (the name an `extraKinds`
//! entry of the preferred version had, so a hub or agent that carried one
//! that way agrees on the collection).
//!
//! The served versions are those of the Gateway API releases Istio 1.28–1.31
//! builds against (v1.4 to v1.6), newest first: a cluster serves the
//! preferred one or an older one, and the agent applies with the version
//! its cluster serves (the versions of one kind share their schema in
//! these releases: the CRDs convert with strategy `None`).

use std::sync::Arc;

use super::{Family, Kind, STRUCT_MESSAGE};

/// The standard channel's API group.
pub const GROUP: &str = "gateway.networking.k8s.io";
/// The experimental kinds' API group (`X`-prefixed kinds).
pub const EXPERIMENTAL_GROUP: &str = "gateway.networking.x-k8s.io";

/// Whether `group` is one of the Gateway API's groups.
pub fn is_gateway_api_group(group: &str) -> bool {
    group == GROUP || group == EXPERIMENTAL_GROUP
}

/// Whether the objects of MCP collection `collection`
/// (`k8s/<group>/<version>/<plural>`) carry a status their controller
/// writes ([`has_status`]).
pub fn collection_has_status(collection: &str) -> bool {
    let mut parts = collection.splitn(4, '/');
    let (Some("k8s"), Some(group), Some(_), Some(plural)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    KINDS
        .iter()
        .any(|k| k.group == group && k.plural == plural && has_status(k.group, k.kind))
}

/// Whether objects of `group`/`kind` carry a status their controller
/// writes (the Gateway API kinds but ReferenceGrant, which has none): the
/// ones whose status agents report and the hub judges.
pub fn has_status(group: &str, kind: &str) -> bool {
    is_gateway_api_group(group) && kind != "ReferenceGrant"
}

/// One Gateway API kind: its group, served versions (preferred first),
/// kind and plural. All are namespaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatewayApiKind {
    /// API group.
    pub group: &'static str,
    /// Served versions, the preferred first.
    pub versions: &'static [&'static str],
    /// Kind.
    pub kind: &'static str,
    /// Resource (plural) name.
    pub plural: &'static str,
}

/// The Gateway API kinds Istio's Gateway controller reads
/// (`pkg/config/schema/metadata.yaml` of Istio 1.28 and 1.31), less
/// GatewayClass (cluster-scoped; each cluster's istiod writes its own) and
/// UDPRoute (Istio does not program it).
///
/// Versions per Gateway API release (standard / experimental channel):
/// * Gateway, HTTPRoute: v1, v1beta1 (v1.4–v1.6).
/// * GRPCRoute: v1.
/// * ReferenceGrant: v1beta1 (v1.4), v1 and v1beta1 (v1.5+).
/// * BackendTLSPolicy: v1 (v1.4+), v1alpha3 (experimental).
/// * TCPRoute: v1alpha2 (experimental, v1.4–v1.5), v1 (standard, v1.6).
/// * TLSRoute: v1alpha3 and v1alpha2 (experimental, v1.4), v1 (v1.5+).
/// * ListenerSet: `gateway.networking.k8s.io/v1` (v1.5+); before that the
///   experimental XListenerSet, `gateway.networking.x-k8s.io/v1alpha1`
///   (v1.4), a kind of its own.
/// * XBackendTrafficPolicy: `gateway.networking.x-k8s.io/v1alpha1`
///   (experimental, v1.4–v1.6).
pub const KINDS: &[GatewayApiKind] = &[
    std("Gateway", "gateways", &["v1", "v1beta1"]),
    std("HTTPRoute", "httproutes", &["v1", "v1beta1"]),
    std("GRPCRoute", "grpcroutes", &["v1"]),
    std("TCPRoute", "tcproutes", &["v1", "v1alpha2"]),
    std("TLSRoute", "tlsroutes", &["v1", "v1alpha3", "v1alpha2"]),
    std("ReferenceGrant", "referencegrants", &["v1", "v1beta1"]),
    std(
        "BackendTLSPolicy",
        "backendtlspolicies",
        &["v1", "v1alpha3"],
    ),
    std("ListenerSet", "listenersets", &["v1"]),
    GatewayApiKind {
        group: EXPERIMENTAL_GROUP,
        versions: &["v1alpha1"],
        kind: "XListenerSet",
        plural: "xlistenersets",
    },
    GatewayApiKind {
        group: EXPERIMENTAL_GROUP,
        versions: &["v1alpha1"],
        kind: "XBackendTrafficPolicy",
        plural: "xbackendtrafficpolicies",
    },
];

const fn std(
    kind: &'static str,
    plural: &'static str,
    versions: &'static [&'static str],
) -> GatewayApiKind {
    GatewayApiKind {
        group: GROUP,
        versions,
        kind,
        plural,
    }
}

impl GatewayApiKind {
    /// The kind-table entry.
    pub fn to_kind(&self) -> Kind {
        let preferred = self.versions[0];
        let type_url = format!("{}/{preferred}/{}", self.group, self.kind);
        Kind {
            group: self.group.to_owned(),
            versions: self.versions.iter().map(|v| (*v).to_owned()).collect(),
            kind: Arc::from(self.kind),
            plural: self.plural.to_owned(),
            namespaced: true,
            collection: Arc::from(format!("k8s/{}/{preferred}/{}", self.group, self.plural)),
            legacy_type_url: type_url.clone(),
            current_type_url: type_url,
            message: STRUCT_MESSAGE.to_owned(),
            family: Family::GatewayApi,
        }
    }

    /// The CRD's name (`httproutes.gateway.networking.k8s.io`).
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

/// The Gateway API kind of `group` and `kind`, if meshhub carries it.
pub fn find(group: &str, kind: &str) -> Option<&'static GatewayApiKind> {
    KINDS.iter().find(|k| k.group == group && k.kind == kind)
}
