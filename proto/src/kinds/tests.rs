use std::collections::{BTreeSet, HashSet};

use super::*;

/// Istio's kinds of `t` (the ones with a protobuf schema).
fn istio(t: &KindTable) -> impl Iterator<Item = &Kind> {
    t.iter().filter(|k| k.family() == Family::Istio)
}

const CRDS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/istio/crds/crd-all.gen.yaml"
);

#[test]
fn builtin_has_every_istio_kind_in_order() {
    let t = KindTable::builtin();
    let kinds: Vec<&str> = istio(&t).map(Kind::kind).collect();
    assert_eq!(
        kinds,
        [
            "VirtualService",
            "DestinationRule",
            "Gateway",
            "ServiceEntry",
            "Sidecar",
            "EnvoyFilter",
            "WorkloadEntry",
            "WorkloadGroup",
            "ProxyConfig",
            "AuthorizationPolicy",
            "PeerAuthentication",
            "RequestAuthentication",
            "Telemetry",
            "WasmPlugin",
            "TrafficExtension",
        ]
    );
}

/// Fails (never skips) while a schema file is missing, naming what's missing.
#[test]
fn every_builtin_body_message_is_in_the_descriptor_pool() {
    let t = KindTable::builtin();
    let missing: Vec<&str> = t
        .iter()
        .filter(|k| k.descriptor().is_none())
        .map(Kind::message)
        .collect();
    assert!(
        missing.is_empty(),
        "body messages missing from the descriptor pool (schema/ lacks their .proto): {missing:?}"
    );
}

#[test]
fn virtual_service_has_all_its_names() {
    let t = KindTable::builtin();
    let k = t
        .by_collection("istio/networking/v1alpha3/virtualservices")
        .expect("VirtualService by collection");
    assert_eq!(k.kind(), "VirtualService");
    assert_eq!(k.group(), "networking.istio.io");
    assert_eq!(k.versions(), ["v1", "v1beta1", "v1alpha3"]);
    assert_eq!(k.api_version(), "networking.istio.io/v1");
    assert_eq!(k.plural(), "virtualservices");
    assert!(k.namespaced());
    assert_eq!(
        k.legacy_type_url(),
        "networking.istio.io/v1alpha3/VirtualService"
    );
    assert_eq!(
        k.current_type_url(),
        "networking.istio.io/v1/VirtualService"
    );
    assert_eq!(k.message(), "istio.networking.v1alpha3.VirtualService");
    assert_eq!(
        k.body_type_url(),
        "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
    );
    assert!(!k.is_schemaless());
    for url in [
        "networking.istio.io/v1/VirtualService",
        "networking.istio.io/v1beta1/VirtualService",
        "networking.istio.io/v1alpha3/VirtualService",
    ] {
        assert_eq!(t.by_type_url(url), Some(k), "{url}");
    }
    assert_eq!(
        t.by_group_kind("networking.istio.io", "VirtualService"),
        Some(k)
    );
    assert_eq!(
        t.by_gvk("networking.istio.io", "v1beta1", "VirtualService"),
        Some(k)
    );
    assert_eq!(
        t.by_gvk("networking.istio.io", "v2", "VirtualService"),
        None
    );
    assert_eq!(
        t.by_api_version("networking.istio.io/v1alpha3", "VirtualService"),
        Some(k)
    );
    assert_eq!(
        t.by_message("istio.networking.v1alpha3.VirtualService"),
        Some(k)
    );
    assert_eq!(t.by_type_url("networking.istio.io/v2/VirtualService"), None);
    assert_eq!(t.by_collection("istio/networking/v1/virtualservices"), None);
}

/// Reference §3.3: what istiod 1.20–1.23 (legacy) and 1.24+ (current)
/// request, and the body message of each.
#[test]
fn type_urls_and_bodies_match_what_istiod_requests() {
    let t = KindTable::builtin();
    // What the ADS port offers: the Gateway API kinds are not among them.
    let ads = || t.iter().filter(|k| k.offered_over_ads());
    assert!(ads().all(|k| k.family() == Family::Istio));
    let legacy: BTreeSet<&str> = ads().map(Kind::legacy_type_url).collect();
    let expected_legacy: BTreeSet<&str> = [
        "networking.istio.io/v1alpha3/DestinationRule",
        "networking.istio.io/v1alpha3/EnvoyFilter",
        "networking.istio.io/v1alpha3/Gateway",
        "networking.istio.io/v1alpha3/ServiceEntry",
        "networking.istio.io/v1alpha3/Sidecar",
        "networking.istio.io/v1alpha3/VirtualService",
        "networking.istio.io/v1alpha3/WorkloadEntry",
        "networking.istio.io/v1alpha3/WorkloadGroup",
        "security.istio.io/v1beta1/AuthorizationPolicy",
        "security.istio.io/v1beta1/PeerAuthentication",
        "security.istio.io/v1beta1/RequestAuthentication",
        "networking.istio.io/v1beta1/ProxyConfig",
        "telemetry.istio.io/v1alpha1/Telemetry",
        "extensions.istio.io/v1alpha1/WasmPlugin",
        // Only istiod 1.30+ asks for it; v1alpha1 is its one version.
        "extensions.istio.io/v1alpha1/TrafficExtension",
    ]
    .into();
    assert_eq!(legacy, expected_legacy);

    let current: Vec<(&str, &str)> = ads().map(|k| (k.current_type_url(), k.message())).collect();
    let expected_current: BTreeSet<(&str, &str)> = [
        (
            "networking.istio.io/v1/DestinationRule",
            "istio.networking.v1alpha3.DestinationRule",
        ),
        (
            "networking.istio.io/v1/Gateway",
            "istio.networking.v1alpha3.Gateway",
        ),
        (
            "networking.istio.io/v1/ServiceEntry",
            "istio.networking.v1alpha3.ServiceEntry",
        ),
        (
            "networking.istio.io/v1/Sidecar",
            "istio.networking.v1alpha3.Sidecar",
        ),
        (
            "networking.istio.io/v1/VirtualService",
            "istio.networking.v1alpha3.VirtualService",
        ),
        (
            "networking.istio.io/v1/WorkloadEntry",
            "istio.networking.v1alpha3.WorkloadEntry",
        ),
        (
            "networking.istio.io/v1/WorkloadGroup",
            "istio.networking.v1alpha3.WorkloadGroup",
        ),
        (
            "networking.istio.io/v1alpha3/EnvoyFilter",
            "istio.networking.v1alpha3.EnvoyFilter",
        ),
        (
            "networking.istio.io/v1beta1/ProxyConfig",
            "istio.networking.v1beta1.ProxyConfig",
        ),
        (
            "security.istio.io/v1/AuthorizationPolicy",
            "istio.security.v1beta1.AuthorizationPolicy",
        ),
        (
            "security.istio.io/v1/PeerAuthentication",
            "istio.security.v1beta1.PeerAuthentication",
        ),
        (
            "security.istio.io/v1/RequestAuthentication",
            "istio.security.v1beta1.RequestAuthentication",
        ),
        (
            "telemetry.istio.io/v1/Telemetry",
            "istio.telemetry.v1alpha1.Telemetry",
        ),
        (
            "extensions.istio.io/v1alpha1/WasmPlugin",
            "istio.extensions.v1alpha1.WasmPlugin",
        ),
        (
            "extensions.istio.io/v1alpha1/TrafficExtension",
            "istio.extensions.v1alpha1.TrafficExtension",
        ),
    ]
    .into();
    assert_eq!(current.len(), expected_current.len());
    assert_eq!(
        current.into_iter().collect::<BTreeSet<_>>(),
        expected_current
    );
}

#[test]
fn collections_follow_istio_naming() {
    let t = KindTable::builtin();
    let collections: Vec<&str> = istio(&t).map(Kind::collection).collect();
    assert_eq!(
        collections,
        [
            "istio/networking/v1alpha3/virtualservices",
            "istio/networking/v1alpha3/destinationrules",
            "istio/networking/v1alpha3/gateways",
            "istio/networking/v1alpha3/serviceentries",
            "istio/networking/v1alpha3/sidecars",
            "istio/networking/v1alpha3/envoyfilters",
            "istio/networking/v1alpha3/workloadentries",
            "istio/networking/v1alpha3/workloadgroups",
            "istio/networking/v1beta1/proxyconfigs",
            "istio/security/v1beta1/authorizationpolicies",
            "istio/security/v1beta1/peerauthentications",
            "istio/security/v1beta1/requestauthentications",
            "istio/telemetry/v1alpha1/telemetries",
            "istio/extensions/v1alpha1/wasmplugins",
            "istio/extensions/v1alpha1/trafficextensions",
        ]
    );
    for k in istio(&t) {
        assert_eq!(t.by_collection(k.collection()), Some(k));
        assert_eq!(t.by_message(k.message()), Some(k));
        for url in k.type_urls() {
            assert_eq!(t.by_type_url(&url), Some(k), "{url}");
        }
    }
}

#[test]
fn no_name_is_used_twice() {
    let t = KindTable::builtin();
    let mut collections = HashSet::new();
    let mut urls = HashSet::new();
    let mut messages = HashSet::new();
    for k in &t {
        assert!(collections.insert(k.collection()), "{}", k.collection());
        assert!(
            k.is_schemaless() || messages.insert(k.message()),
            "{}",
            k.message()
        );
        for url in k.type_urls() {
            assert!(urls.insert(url.clone()), "{url}");
        }
        // Legacy and current are served versions, not extra names.
        assert!(k.type_urls().any(|u| u == k.legacy_type_url()), "{k}");
        assert!(k.type_urls().any(|u| u == k.current_type_url()), "{k}");
    }
}

/// The served versions, plural and scope agree with Istio's own CRDs.
#[test]
fn builtins_agree_with_istio_crds() {
    let text = std::fs::read_to_string(CRDS).expect("read crd-all.gen.yaml");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("parse CRDs");
    let t = KindTable::builtin();
    let mut seen = 0;
    for crd in &docs {
        let spec = &crd["spec"];
        let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str())
        else {
            continue;
        };
        let Some(k) = t.by_group_kind(group, kind) else {
            continue;
        };
        seen += 1;
        assert_eq!(spec["names"]["plural"].as_str(), Some(k.plural()), "{kind}");
        assert_eq!(
            spec["scope"].as_str() == Some("Namespaced"),
            k.namespaced(),
            "{kind}"
        );
        let served: BTreeSet<&str> = spec["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["served"].as_bool() == Some(true))
            .filter_map(|v| v["name"].as_str())
            .collect();
        let ours: BTreeSet<&str> = k.versions().iter().map(String::as_str).collect();
        assert_eq!(served, ours, "{kind}");
    }
    assert_eq!(seen, istio(&t).count(), "every Istio kind has a CRD");
}

#[test]
fn schemaless_kinds_join_the_table() {
    let cm = Kind::schemaless("", "v1", "ConfigMap", "configmaps", true).expect("ConfigMap");
    let ns = Kind::schemaless("", "v1", "Namespace", "namespaces", false).expect("Namespace");
    let gw = Kind::schemaless(
        "gateway.networking.k8s.io",
        "v1",
        "UDPRoute",
        "udproutes",
        true,
    )
    .expect("UDPRoute");
    let base = KindTable::builtin();
    let t = base
        .with_kinds([cm, ns])
        .expect("no clash")
        .with_kind(gw)
        .expect("no clash");
    let builtin = base.len();
    assert_eq!(builtin, 15 + gateway_api::KINDS.len());
    assert_eq!(t.len(), builtin + 3, "the original table is unchanged");

    let k = t
        .by_collection("k8s/core/v1/configmaps")
        .expect("by collection");
    assert_eq!(k.kind(), "ConfigMap");
    assert_eq!(k.api_version(), "v1");
    assert_eq!(k.legacy_type_url(), "core/v1/ConfigMap");
    assert_eq!(k.current_type_url(), "core/v1/ConfigMap");
    assert_eq!(k.message(), "google.protobuf.Struct");
    assert!(k.is_schemaless());
    assert_eq!(t.by_type_url("core/v1/ConfigMap"), Some(k));
    assert_eq!(t.by_api_version("v1", "ConfigMap"), Some(k));
    assert_eq!(t.by_gvk("", "v1", "ConfigMap"), Some(k));
    assert!(
        !t.by_api_version("v1", "Namespace")
            .expect("Namespace")
            .namespaced()
    );
    let r = t
        .by_type_url("gateway.networking.k8s.io/v1/UDPRoute")
        .expect("UDPRoute");
    assert_eq!(r.collection(), "k8s/gateway.networking.k8s.io/v1/udproutes");
    assert_eq!(r.family(), Family::Extra);
    assert!(
        r.offered_over_ads(),
        "configured kinds are offered as before"
    );
    assert_eq!(t.by_message(STRUCT_MESSAGE), None, "Struct names no kind");
    assert_eq!(
        t.iter().last().map(Kind::kind),
        Some("UDPRoute"),
        "insertion order"
    );
}

#[test]
fn clashing_kinds_are_refused() {
    let t = KindTable::builtin();
    let again = Kind::schemaless("networking.istio.io", "v9", "VirtualService", "vs9", true)
        .expect("well-formed");
    let err = t.with_kind(again).expect_err("group+kind clash");
    assert!(
        matches!(
            err,
            KindError::Duplicate {
                what: "group and kind",
                ..
            }
        ),
        "{err}"
    );

    let cm = Kind::schemaless("", "v1", "ConfigMap", "configmaps", true).expect("ConfigMap");
    let err = t
        .with_kinds([cm.clone(), cm])
        .expect_err("the same kind twice");
    assert!(err.to_string().contains("k8s/core/v1/configmaps"), "{err}");

    assert!(
        Kind::schemaless("", "", "X", "xs", true).is_err(),
        "empty version"
    );
    assert!(
        Kind::schemaless("a/b", "v1", "X", "xs", true).is_err(),
        "slash in group"
    );
    assert!(
        Kind::schemaless("", "v1", "X", "a/b", true).is_err(),
        "slash in plural"
    );
}

#[test]
fn gateway_api_kinds_are_built_in_with_struct_bodies_and_not_offered_over_ads() {
    let t = KindTable::builtin();
    let gw: Vec<&Kind> = t
        .iter()
        .filter(|k| k.family() == Family::GatewayApi)
        .collect();
    let names: Vec<&str> = gw.iter().map(|k| k.kind()).collect();
    assert_eq!(
        names,
        [
            "Gateway",
            "HTTPRoute",
            "GRPCRoute",
            "TCPRoute",
            "TLSRoute",
            "ReferenceGrant",
            "BackendTLSPolicy",
            "ListenerSet",
            "XListenerSet",
            "XBackendTrafficPolicy",
        ]
    );
    for k in &gw {
        assert!(k.is_builtin() && k.is_schemaless() && k.namespaced(), "{k}");
        assert!(!k.offered_over_ads(), "{k}");
        assert!(gateway_api::is_gateway_api_group(k.group()), "{k}");
        assert!(
            k.collection()
                .starts_with(&format!("k8s/{}/{}/", k.group(), k.preferred_version())),
            "{}",
            k.collection()
        );
    }
    // Istio's Gateway and the Gateway API's are two kinds.
    let route = t
        .by_api_version("gateway.networking.k8s.io/v1beta1", "HTTPRoute")
        .expect("HTTPRoute v1beta1 is served");
    assert_eq!(
        route.collection(),
        "k8s/gateway.networking.k8s.io/v1/httproutes"
    );
    assert_eq!(route.api_version(), "gateway.networking.k8s.io/v1");
    assert_eq!(
        t.by_api_version("gateway.networking.k8s.io/v1", "Gateway")
            .map(Kind::collection),
        Some("k8s/gateway.networking.k8s.io/v1/gateways")
    );
    assert_eq!(
        t.by_api_version("networking.istio.io/v1", "Gateway")
            .map(Kind::collection),
        Some("istio/networking/v1alpha3/gateways")
    );
    assert_eq!(
        t.by_api_version("gateway.networking.k8s.io/v1alpha2", "TCPRoute")
            .map(Kind::kind),
        Some("TCPRoute"),
        "TCPRoute before Gateway API v1.6"
    );
    assert_eq!(
        t.by_api_version("gateway.networking.x-k8s.io/v1alpha1", "XListenerSet")
            .map(Kind::collection),
        Some("k8s/gateway.networking.x-k8s.io/v1alpha1/xlistenersets")
    );
    assert_eq!(
        gateway_api::find("gateway.networking.k8s.io", "HTTPRoute").map(|k| k.crd_name()),
        Some("httproutes.gateway.networking.k8s.io".to_owned())
    );
    // A configured kind of a built-in group and kind clashes.
    let twin = Kind::schemaless(
        "gateway.networking.k8s.io",
        "v1beta1",
        "HTTPRoute",
        "httproutes",
        true,
    )
    .expect("well-formed");
    assert!(t.with_kind(twin).is_err());
}

#[test]
fn collections_of_gateway_api_kinds_with_a_status_are_told_by_name() {
    use super::gateway_api::collection_has_status;
    assert!(collection_has_status(
        "k8s/gateway.networking.k8s.io/v1/httproutes"
    ));
    assert!(collection_has_status(
        "k8s/gateway.networking.k8s.io/v1/gateways"
    ));
    assert!(!collection_has_status(
        "k8s/gateway.networking.k8s.io/v1/referencegrants"
    ));
    assert!(!collection_has_status(
        "istio/networking/v1alpha3/virtualservices"
    ));
    assert!(!collection_has_status("k8s/gateway.networking.k8s.io"));
}
