//! The Gateway API checks added for issue 39 item 3: certificates across
//! namespaces (MH0003), a cluster's backend Services (IST0101) and its CRD
//! versions (IST0176, through [`cluster_for`]).

use super::{ROUTE, codes, objects, run};
use crate::{Cluster, CrdBundle, Facts, IstioVersion, Services, Target, cluster_for};

const TLS_GATEWAY: &str = "
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ingress, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    tls:
      certificateRefs:
      - {name: local-cert}
      - {name: shared-cert, namespace: certs}
      - {kind: ConfigMap, name: not-a-secret, namespace: certs}
  - name: passthrough
    port: 8443
    protocol: TLS
    tls: {mode: Passthrough, certificateRefs: [{name: p, namespace: certs}]}
  - name: istio-mutual
    port: 9443
    protocol: HTTPS
    tls:
      options: {gateway.istio.io/tls-terminate-mode: ISTIO_MUTUAL}
      certificateRefs: [{name: m, namespace: certs}]
";

fn grant(from_kind: &str, from_ns: &str, to_name: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: g, namespace: certs}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: {from_kind}, namespace: {from_ns}}}]
  to: [{{group: '', kind: Secret{to_name}}}]
"
    )
}

fn mh0003(yaml: &str) -> Vec<String> {
    run(yaml)
        .into_iter()
        .filter(|m| m.starts_with("MH0003"))
        .collect()
}

#[test]
fn mh0003_certificate_in_another_namespace_without_a_grant() {
    // Only the Secret of another namespace, of a listener that terminates
    // TLS with it: not the local one, not a ConfigMap (istiod's
    // InvalidCertificateRef), not Passthrough nor Istio's own mode.
    assert_eq!(
        mh0003(TLS_GATEWAY),
        ["MH0003 Gateway infra/ingress spec.listeners[0].tls.certificateRefs[1]"]
    );
    let facts = objects(TLS_GATEWAY);
    let m = crate::analyze(&facts);
    assert!(
        m[0].text.contains("certificateRef certs/shared-cert"),
        "{}",
        m[0].text
    );
    for (g, permitted) in [
        (grant("Gateway", "infra", ""), true),
        (grant("Gateway", "infra", ", name: shared-cert"), true),
        (grant("Gateway", "infra", ", name: other"), false),
        (grant("Gateway", "elsewhere", ""), false),
        (grant("HTTPRoute", "infra", ""), false),
        (grant("ListenerSet", "infra", ""), false),
    ] {
        let found = mh0003(&format!("{TLS_GATEWAY}\n---\n{g}"));
        assert_eq!(found.is_empty(), permitted, "{g}\n{found:?}");
    }
}

#[test]
fn mh0003_a_listener_sets_certificate_needs_a_grant_from_listener_sets() {
    let set = TLS_GATEWAY
        .replace("kind: Gateway", "kind: ListenerSet")
        .replace(
            "gatewayClassName: istio",
            "parentRef: {name: ingress, namespace: infra}",
        );
    assert_eq!(
        mh0003(&set),
        ["MH0003 ListenerSet infra/ingress spec.listeners[0].tls.certificateRefs[1]"]
    );
    assert!(
        mh0003(&format!(
            "{set}\n---\n{}",
            grant("ListenerSet", "infra", "")
        ))
        .is_empty()
    );
    assert_eq!(
        mh0003(&format!("{set}\n---\n{}", grant("Gateway", "infra", ""))).len(),
        1
    );
}

/// Services `ns/name`.
fn services(names: &[&str], complete: bool) -> Services {
    Services::new(
        names.iter().map(|n| {
            let (ns, name) = n.split_once('/').expect("ns/name");
            (ns.to_owned(), name.to_owned())
        }),
        complete,
    )
}

fn on_cluster(facts: &[Facts], cluster: &Cluster<'_>) -> Vec<String> {
    let refs: Vec<&Facts> = facts.iter().collect();
    codes(&cluster_for(&refs, cluster))
}

fn with_services(s: &Services) -> Cluster<'_> {
    Cluster {
        services: Some(s),
        ..Cluster::of(Target::Unchecked)
    }
}

#[test]
fn ist0101_backend_service_the_cluster_lacks() {
    // ROUTE: reviews (shop), a mirror to audit/audit and a backend in
    // backends and a mirror in mirror, neither permitted by a grant.
    let facts = objects(ROUTE);
    let none = services(&[], true);
    assert_eq!(
        on_cluster(&facts, &with_services(&none)),
        ["IST0101 HTTPRoute shop/reviews spec.rules[0].backendRefs[0]"],
        "a backend another namespace does not permit is not looked up"
    );
    let has = services(&["shop/reviews", "kube-system/dns"], true);
    assert!(on_cluster(&facts, &with_services(&has)).is_empty());
    // Unknown Services: nothing is judged.
    assert!(on_cluster(&facts, &Cluster::of(Target::Unchecked)).is_empty());

    // Permitted, the other namespaces' backends are looked up too.
    let grant = |ns: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: g, namespace: {ns}}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: shop}}]
  to: [{{group: '', kind: Service}}]
"
        )
    };
    let facts = objects(&format!(
        "{ROUTE}\n---\n{}\n---\n{}\n---\n{}",
        grant("audit"),
        grant("backends"),
        grant("mirror")
    ));
    let found = on_cluster(&facts, &with_services(&has));
    assert_eq!(
        found,
        [
            "IST0101 HTTPRoute shop/reviews spec.rules[0].backendRefs[0].filters[0].requestMirror.backendRef",
            "IST0101 HTTPRoute shop/reviews spec.rules[0].backendRefs[1]",
            "IST0101 HTTPRoute shop/reviews spec.rules[0].filters[0].requestMirror.backendRef",
        ]
    );
    let refs: Vec<&Facts> = facts.iter().collect();
    let texts: Vec<String> = cluster_for(&refs, &with_services(&has))
        .into_iter()
        .map(|m| m.text.to_string())
        .collect();
    assert_eq!(
        texts[0],
        "Referenced mirror Service not found: \"audit/audit\""
    );
    assert_eq!(
        texts[1],
        "Referenced Service not found: \"backends/ratings\""
    );
}

#[test]
fn a_cut_list_knows_only_the_services_up_to_where_it_was_cut() {
    let cut = services(&["a/x", "shop/details"], false);
    assert_eq!(cut.has("a", "x"), Some(true));
    assert_eq!(cut.has("a", "y"), Some(false), "before the cut: missing");
    assert_eq!(cut.has("shop", "details"), Some(true));
    assert_eq!(cut.has("shop", "reviews"), None, "after the cut: unknown");
    assert_eq!(cut.has("zoo", "a"), None);
    assert_eq!(services(&[], false).has("a", "b"), None);
    assert_eq!(services(&[], true).has("a", "b"), Some(false));
    assert_eq!(cut.len(), 2);
    // A route to shop/reviews on a cluster whose list was cut before it.
    assert!(on_cluster(&objects(ROUTE), &with_services(&cut)).is_empty());
}

#[test]
fn ist0176_once_per_crd_from_the_newest_istiod() {
    let crds = [
        CrdBundle {
            name: "tlsroutes.gateway.networking.k8s.io".into(),
            bundle_version: "v1.4.0".into(),
        },
        CrdBundle {
            name: "httproutes.gateway.networking.k8s.io".into(),
            bundle_version: "v1.4.0".into(),
        },
    ];
    let version = |v: &str| IstioVersion::parse(v).ok();
    let cluster = |newest| Cluster {
        newest,
        gateway_api_crds: Some(&crds),
        ..Cluster::of(Target::Unchecked)
    };
    // However many routes the set holds, one message per CRD.
    let facts = objects(&format!(
        "{ROUTE}\n---\n{}",
        ROUTE.replace("reviews}", "x}")
    ));
    assert_eq!(
        on_cluster(&facts, &cluster(version("1.30.1"))),
        ["IST0176 CustomResourceDefinition tlsroutes.gateway.networking.k8s.io "]
    );
    assert!(on_cluster(&facts, &cluster(version("1.29.6"))).is_empty());
    assert!(
        on_cluster(&facts, &cluster(None)).is_empty(),
        "no release, no minimum"
    );
}
