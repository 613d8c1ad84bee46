//! Each analyzer's dependency keys: two objects one of which changes the
//! other's messages are neighbours (they share a key, or are within the
//! mesh analyzer's two steps), and objects that cannot are not.

use super::objects;
use crate::facts::Facts;
use crate::hosts::fqdn;
use crate::incremental::ball_of;
use crate::keys::{Fqdn, Key, keys};
use crate::{Message, analyze_set};

/// The messages about `set[0]` in `set`.
fn about_first(set: &[&Facts]) -> Vec<Message> {
    let f = set[0];
    analyze_set(set.iter().copied())
        .into_iter()
        .filter(|m| m.kind == f.kind.as_str() && m.namespace == f.namespace && m.name == f.name)
        .collect()
}

/// Whether `b` is in `a`'s ball in the set `[a, b]`.
fn neighbours(a: &Facts, b: &Facts) -> bool {
    ball_of(&[a, b], 0).contains(&1)
}

/// `yaml`'s two objects: the second changes the first's messages, and
/// they are neighbours.
fn depends(yaml: &str) -> (Facts, Facts) {
    let mut o = objects(yaml);
    assert_eq!(o.len(), 2, "two objects");
    let b = o.pop().unwrap();
    let a = o.pop().unwrap();
    assert_ne!(
        about_first(&[&a]),
        about_first(&[&a, &b]),
        "b changes a's messages"
    );
    assert!(neighbours(&a, &b), "{:?}\n{:?}", keys(&a), keys(&b));
    assert!(neighbours(&b, &a), "the relation is symmetric");
    (a, b)
}

/// `yaml`'s two objects are not neighbours (nor does either change the
/// other's messages).
fn independent(yaml: &str) {
    let o = objects(yaml);
    let (a, b) = (&o[0], &o[1]);
    assert_eq!(about_first(&[a]), about_first(&[a, b]));
    assert_eq!(about_first(&[b]), about_first(&[b, a]));
    assert!(!neighbours(a, b), "{:?}\n{:?}", keys(a), keys(b));
}

const VS: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\n";
const GW: &str = "apiVersion: networking.istio.io/v1\nkind: Gateway\n";

#[test]
fn a_virtual_service_depends_on_its_gateway_by_name() {
    let (a, _) = depends(&format!(
        "{VS}metadata: {{name: vs, namespace: ns}}\nspec: {{hosts: [a.com], gateways: [gw]}}\n---\n\
         {GW}metadata: {{name: gw, namespace: ns}}\nspec: {{servers: [{{port: {{number: 80}}, hosts: [a.com]}}]}}\n"
    ));
    assert!(keys(&a).near.contains(&Key::Gateway("ns", "gw")));
    independent(&format!(
        "{VS}metadata: {{name: vs, namespace: ns}}\nspec: {{hosts: [a.com], gateways: [gw]}}\n---\n\
         {GW}metadata: {{name: gw, namespace: other}}\nspec: {{servers: [{{port: {{number: 80}}, hosts: [a.com]}}]}}\n"
    ));
}

#[test]
fn a_route_to_a_subset_depends_on_the_destination_rules_of_its_service() {
    let (a, _) = depends(&format!(
        "{VS}metadata: {{name: vs, namespace: ns}}\nspec: {{hosts: [r], http: [{{route: [{{destination: {{host: reviews, subset: v1}}}}]}}]}}\n---\n\
         apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: dr, namespace: other}}\nspec: {{host: reviews.ns.svc.cluster.local, subsets: [{{name: v1}}]}}\n"
    ));
    assert!(keys(&a).near.contains(&Key::Subset("ns", "reviews")));
    independent(&format!(
        "{VS}metadata: {{name: vs, namespace: ns}}\nspec: {{hosts: [r], http: [{{route: [{{destination: {{host: reviews, subset: v1}}}}]}}]}}\n---\n\
         apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: dr, namespace: other}}\nspec: {{host: reviews, subsets: [{{name: v1}}]}}\n"
    ));
}

#[test]
fn a_delegating_virtual_service_depends_on_its_delegate() {
    depends(&format!(
        "{VS}metadata: {{name: root, namespace: ns}}\nspec: {{hosts: [r], gateways: [mesh], http: [{{delegate: {{name: child}}}}]}}\n---\n\
         {VS}metadata: {{name: child, namespace: ns}}\nspec: {{gateways: [mesh]}}\n"
    ));
}

#[test]
fn mesh_virtual_services_depend_on_each_other_by_host_within_two_steps() {
    let (a, _) = depends(&format!(
        "{VS}metadata: {{name: one, namespace: ns}}\nspec: {{hosts: [a.com]}}\n---\n\
         {VS}metadata: {{name: two, namespace: other}}\nspec: {{hosts: [a.com]}}\n"
    ));
    assert_eq!(keys(&a).mesh, [Fqdn::Other("a.com")]);
    // A wildcard overlaps hosts it shares no key with.
    let (w, _) = depends(&format!(
        "{VS}metadata: {{name: one, namespace: ns}}\nspec: {{hosts: ['*.com']}}\n---\n\
         {VS}metadata: {{name: two, namespace: other}}\nspec: {{hosts: [a.com], exportTo: [ns]}}\n"
    ));
    assert!(keys(&w).mesh_wildcard && keys(&w).mesh.is_empty());
    // x.b.com and y.b.com do not overlap, but both overlap a wildcard
    // claimed for one namespace: the conflict there names both.
    let o = objects(&format!(
        "{VS}metadata: {{name: x, namespace: ns}}\nspec: {{hosts: [x.b.com]}}\n---\n\
         {VS}metadata: {{name: y, namespace: ns}}\nspec: {{hosts: [y.b.com]}}\n---\n\
         {VS}metadata: {{name: w, namespace: ns}}\nspec: {{hosts: ['*.b.com'], exportTo: [ns]}}\n"
    ));
    let set: Vec<&Facts> = o.iter().collect();
    assert!(about_first(&set)[0].text.contains("ns/y"));
    assert!(!neighbours(set[0], set[1]));
    assert_eq!(ball_of(&set, 0), [0, 1, 2], "two steps");
    independent(&format!(
        "{VS}metadata: {{name: one, namespace: ns}}\nspec: {{hosts: [a.com]}}\n---\n\
         {VS}metadata: {{name: two, namespace: ns}}\nspec: {{hosts: [a.com], gateways: [gw]}}\n"
    ));
}

#[test]
fn gateways_depend_on_each_others_servers_and_certificates() {
    let (a, _) = depends(&format!(
        "{GW}metadata: {{name: one, namespace: ns}}\nspec: {{selector: {{app: gw}}, servers: [{{port: {{number: 80}}, hosts: [a.com]}}]}}\n---\n\
         {GW}metadata: {{name: two, namespace: ns}}\nspec: {{selector: {{app: gw}}, servers: [{{port: {{number: 80}}, hosts: [a.com]}}]}}\n"
    ));
    assert!(keys(&a).near.contains(&Key::Server(80, "a.com", "")));
    depends(&format!(
        "{GW}metadata: {{name: one, namespace: ns}}\nspec: {{selector: {{app: gw}}, servers: [{{port: {{number: 443}}, hosts: [a.com], tls: {{credentialName: c}}}}]}}\n---\n\
         {GW}metadata: {{name: two, namespace: ns}}\nspec: {{selector: {{app: gw}}, servers: [{{port: {{number: 443}}, hosts: [b.com], tls: {{credentialName: c}}}}]}}\n"
    ));
    independent(&format!(
        "{GW}metadata: {{name: one, namespace: ns}}\nspec: {{selector: {{app: gw}}, servers: [{{port: {{number: 80}}, hosts: [a.com]}}]}}\n---\n\
         {GW}metadata: {{name: two, namespace: ns}}\nspec: {{selector: {{app: gw}}, servers: [{{port: {{number: 81}}, hosts: [a.com]}}]}}\n"
    ));
}

#[test]
fn namespace_wide_sidecars_and_telemetries_depend_on_their_namespaces_others() {
    let sidecar = |name: &str, ns: &str, labels: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{workloadSelector: {{labels: {{{labels}}}}}}}\n"
        )
    };
    depends(&format!(
        "{}---\n{}",
        sidecar("a", "ns", ""),
        sidecar("b", "ns", "")
    ));
    independent(&format!(
        "{}---\n{}",
        sidecar("a", "ns", ""),
        sidecar("b", "other", "")
    ));
    independent(&format!(
        "{}---\n{}",
        sidecar("a", "ns", ""),
        sidecar("b", "ns", "app: x")
    ));
    let telemetry = |name: &str| {
        format!(
            "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {{name: {name}, namespace: ns}}\nspec: {{}}\n"
        )
    };
    depends(&format!("{}---\n{}", telemetry("a"), telemetry("b")));
}

#[test]
fn service_entries_depend_on_each_other_by_address_and_port() {
    let se = |name: &str, host: &str, port: u32| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: ns}}\nspec: {{hosts: [{host}], addresses: [10.0.0.1], ports: [{{number: {port}}}]}}\n"
        )
    };
    let (a, _) = depends(&format!(
        "{}---\n{}",
        se("a", "a.com", 80),
        se("b", "b.com", 80)
    ));
    assert_eq!(keys(&a).near, [Key::Address("10.0.0.1", 80)]);
    independent(&format!(
        "{}---\n{}",
        se("a", "a.com", 80),
        se("b", "b.com", 81)
    ));
}

const ROUTE: &str = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n";
const GRANT: &str = "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\n";

#[test]
fn routes_depend_on_their_parents_and_the_grants_of_their_backends_namespaces() {
    depends(&format!(
        "{ROUTE}metadata: {{name: r, namespace: ns}}\nspec: {{parentRefs: [{{name: gw}}]}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: ns}}\nspec: {{listeners: [{{name: l}}]}}\n"
    ));
    let (a, _) = depends(&format!(
        "{ROUTE}metadata: {{name: r, namespace: ns}}\nspec: {{rules: [{{backendRefs: [{{name: s, namespace: other}}]}}]}}\n---\n\
         {GRANT}metadata: {{name: g, namespace: other}}\nspec: {{from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: ns}}], to: [{{group: '', kind: Service}}]}}\n"
    ));
    assert_eq!(keys(&a).near, [Key::Grants("other")]);
    independent(&format!(
        "{ROUTE}metadata: {{name: r, namespace: ns}}\nspec: {{rules: [{{backendRefs: [{{name: s, namespace: other}}]}}]}}\n---\n\
         {GRANT}metadata: {{name: g, namespace: third}}\nspec: {{from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: ns}}], to: [{{group: '', kind: Service}}]}}\n"
    ));
}

#[test]
fn a_listeners_certificate_depends_on_the_grants_of_its_namespace() {
    depends(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: ns}}\nspec: {{listeners: [{{name: l, tls: {{certificateRefs: [{{name: c, namespace: certs}}]}}}}]}}\n---\n\
         {GRANT}metadata: {{name: g, namespace: certs}}\nspec: {{from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: ns}}], to: [{{group: '', kind: Secret}}]}}\n"
    ));
}

#[test]
fn kinds_no_set_analyzer_reads_have_no_keys() {
    let o = objects(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: ns}\nspec: {}\n",
    );
    assert_eq!(keys(&o[0]), Default::default());
}

#[test]
fn borrowed_fqdns_are_equal_exactly_when_the_fqdns_are() {
    let hosts = [
        "reviews",
        "reviews.ns",
        "reviews.ns.svc.cluster.local",
        "reviews.a.b.svc.cluster.local",
        "b.svc.cluster.local",
        "e.com",
    ];
    let namespaces = ["ns", "a.b", "other", ""];
    for (n1, h1) in namespaces
        .iter()
        .flat_map(|n| hosts.iter().map(move |h| (*n, *h)))
    {
        for (n2, h2) in namespaces
            .iter()
            .flat_map(|n| hosts.iter().map(move |h| (*n, *h)))
        {
            assert_eq!(
                fqdn(n1, h1) == fqdn(n2, h2),
                Fqdn::of(n1, h1) == Fqdn::of(n2, h2),
                "{n1}/{h1} {n2}/{h2}"
            );
        }
    }
}
