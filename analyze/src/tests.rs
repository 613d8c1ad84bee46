//! One test per code: raised for the set that lacks (or doubles) what the
//! object needs, and not for the set that has it right.

use meshhub_proto::object::Object;

use crate::{Facts, Message, analyze};

/// The objects of a multi-document YAML text.
fn objects(yaml: &str) -> Vec<Facts> {
    yaml.split("\n---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| {
            let obj: Object = serde_saphyr::from_str(d).expect("test YAML parses");
            Facts::of(&obj).expect("an analysed kind")
        })
        .collect()
}

/// `CODE Kind ns/name path` of every message.
fn codes(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| format!("{} {} {}", m.code.code, m.object(), m.path))
        .collect()
}

fn run(yaml: &str) -> Vec<String> {
    codes(&analyze(&objects(yaml)))
}

const GATEWAY: &str = "
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: bookinfo-gateway, namespace: bookinfo}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: [bookinfo.example.com]
";

const BOUND_VS: &str = "
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: bookinfo, namespace: bookinfo}
spec:
  hosts: [bookinfo.example.com]
  gateways: [bookinfo-gateway]
  http:
  - route:
    - destination: {host: productpage, port: {number: 9080}}
";

#[test]
fn ist0101_gateway_missing_from_the_set_only() {
    assert_eq!(
        run(BOUND_VS),
        [
            "IST0101 VirtualService bookinfo/bookinfo spec.gateways[0]",
            "IST0132 VirtualService bookinfo/bookinfo spec.gateways[0]",
        ]
    );
    assert!(run(&format!("{BOUND_VS}\n---\n{GATEWAY}")).is_empty());
    // `mesh` is no object; a namespace-qualified name looks there.
    let qualified = BOUND_VS.replace(
        "[bookinfo-gateway]",
        "[mesh, istio-system/bookinfo-gateway]",
    );
    assert_eq!(
        run(&format!("{qualified}\n---\n{GATEWAY}")),
        [
            "IST0101 VirtualService bookinfo/bookinfo spec.gateways[1]",
            "IST0132 VirtualService bookinfo/bookinfo spec.gateways[1]",
        ]
    );
    let msg = &analyze(&objects(BOUND_VS))[0];
    assert_eq!(
        msg.to_string(),
        "Error [IST0101] VirtualService bookinfo/bookinfo spec.gateways[0]: Referenced gateway not found: \"bookinfo-gateway\""
    );
}

#[test]
fn ist0132_host_the_gateway_does_not_serve() {
    let other_host = BOUND_VS.replace(
        "hosts: [bookinfo.example.com]",
        "hosts: [other.example.com]",
    );
    assert_eq!(
        run(&format!("{other_host}\n---\n{GATEWAY}")),
        ["IST0132 VirtualService bookinfo/bookinfo spec.gateways[0]"]
    );
    // A wildcard server host, or `*/host`, serves it; `other-ns/host` does not.
    let wildcard = GATEWAY.replace("[bookinfo.example.com]", "[\"*.example.com\"]");
    assert!(run(&format!("{other_host}\n---\n{wildcard}")).is_empty());
    let elsewhere = GATEWAY.replace("[bookinfo.example.com]", "[other-ns/other.example.com]");
    assert_eq!(run(&format!("{other_host}\n---\n{elsewhere}")).len(), 1);
}

const SUBSET_VS: &str = "
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews]
  http:
  - mirror: {host: reviews, subset: v3}
    route:
    - destination: {host: reviews, subset: v2}
";

const SUBSET_DR: &str = "
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews.bookinfo.svc.cluster.local
  subsets:
  - {name: v2, labels: {version: v2}}
  - {name: v3, labels: {version: v3}}
";

#[test]
fn ist0101_subset_missing_from_the_set_only() {
    assert_eq!(
        run(SUBSET_VS),
        [
            "IST0101 VirtualService bookinfo/reviews spec.http[0].mirror",
            "IST0101 VirtualService bookinfo/reviews spec.http[0].route[0].destination",
        ]
    );
    assert!(run(&format!("{SUBSET_VS}\n---\n{SUBSET_DR}")).is_empty());
    // A DestinationRule in another namespace defines another host's subsets.
    let other_ns = SUBSET_DR
        .replace("namespace: bookinfo", "namespace: other")
        .replace("reviews.bookinfo.svc.cluster.local", "reviews");
    assert_eq!(run(&format!("{SUBSET_VS}\n---\n{other_ns}")).len(), 2);
    let texts: Vec<String> = analyze(&objects(SUBSET_VS))
        .iter()
        .map(|m| m.text.to_string())
        .collect();
    assert_eq!(
        texts,
        [
            "Referenced mirror+subset in destinationrule not found: \"reviews+v3\"",
            "Referenced host+subset in destinationrule not found: \"reviews+v2\"",
        ]
    );
}

#[test]
fn ist0101_delegate_missing_from_the_set_only() {
    let root = "
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: root, namespace: bookinfo}
spec:
  hosts: [bookinfo.example.com]
  http:
  - match: [{uri: {prefix: /reviews}}]
    delegate: {name: reviews-delegate, namespace: team}
";
    let delegate = "
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews-delegate, namespace: team}
spec:
  http:
  - route:
    - destination: {host: reviews.bookinfo.svc.cluster.local}
";
    assert_eq!(
        run(root),
        ["IST0101 VirtualService bookinfo/root spec.http[0].delegate"]
    );
    assert!(run(&format!("{root}\n---\n{delegate}")).is_empty());
}

#[test]
fn ist0109_two_virtual_services_for_one_mesh_host() {
    let a = "
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings-a, namespace: bookinfo}
spec:
  hosts: [ratings]
";
    let b = "
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings-b, namespace: bookinfo}
spec:
  hosts: [ratings.bookinfo.svc.cluster.local]
  gateways: [mesh]
";
    assert!(run(a).is_empty());
    assert_eq!(
        run(&format!("{a}\n---\n{b}")),
        [
            "IST0109 VirtualService bookinfo/ratings-a spec.hosts",
            "IST0109 VirtualService bookinfo/ratings-b spec.hosts",
        ]
    );
    // Exported to disjoint namespaces: no conflict.
    let a_local = format!("{a}  exportTo: [\".\"]\n");
    let b_other = format!("{b}  exportTo: [other]\n");
    assert!(run(&format!("{a_local}\n---\n{b_other}")).is_empty());
    // Bound to a gateway only: not on the mesh.
    let b_gw = b.replace("[mesh]", "[bookinfo-gateway]");
    assert!(
        !run(&format!("{a}\n---\n{b_gw}"))
            .iter()
            .any(|m| m.starts_with("IST0109"))
    );
}

#[test]
fn ist0111_and_ist0160_several_namespace_wide_policies() {
    let sidecar = |name: &str, selects: bool| {
        let sel = if selects {
            "  workloadSelector: {labels: {app: x}}\n"
        } else {
            ""
        };
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  egress: [{{hosts: [\"./*\"]}}]\n{sel}"
        )
    };
    assert!(
        run(&format!(
            "{}\n---\n{}",
            sidecar("a", false),
            sidecar("b", true)
        ))
        .is_empty()
    );
    assert_eq!(
        run(&format!(
            "{}\n---\n{}",
            sidecar("a", false),
            sidecar("b", false)
        )),
        ["IST0111 Sidecar ns/a ", "IST0111 Sidecar ns/b "]
    );
    let telemetry = |name: &str| {
        format!(
            "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {{name: {name}, namespace: ns}}\nspec: {{}}\n"
        )
    };
    assert!(run(&telemetry("a")).is_empty());
    assert_eq!(
        run(&format!("{}\n---\n{}", telemetry("a"), telemetry("b"))),
        ["IST0160 Telemetry ns/a ", "IST0160 Telemetry ns/b "]
    );
}

fn gateway(name: &str, selector: &str, port: u32, host: &str, tls: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  selector: {{{selector}}}\n  servers:\n  - port: {{number: {port}, name: p, protocol: HTTPS}}\n    hosts: [{host}]\n{tls}"
    )
}

#[test]
fn ist0145_same_selector_port_and_host() {
    let a = gateway("a", "istio: ingress", 443, "x.com", "");
    assert!(run(&a).is_empty());
    assert_eq!(
        run(&format!(
            "{a}\n---\n{}",
            gateway("b", "istio: ingress", 443, "x.com", "")
        )),
        [
            "IST0145 Gateway ns/a spec.servers[0]",
            "IST0145 Gateway ns/b spec.servers[0]"
        ]
    );
    for other in [
        gateway("b", "istio: ingress", 8443, "x.com", ""),
        gateway("b", "istio: other", 443, "x.com", ""),
        gateway("b", "istio: ingress", 443, "y.com", ""),
    ] {
        assert!(run(&format!("{a}\n---\n{other}")).is_empty(), "{other}");
    }
}

#[test]
fn ist0138_one_certificate_on_the_same_workloads() {
    let tls = "    tls: {mode: SIMPLE, credentialName: cert}\n";
    let a = gateway("a", "istio: ingress", 443, "x.com", tls);
    let b = gateway("b", "istio: ingress", 443, "y.com", tls);
    assert!(run(&a).is_empty());
    assert_eq!(
        run(&format!("{a}\n---\n{b}")),
        ["IST0138 Gateway ns/a ", "IST0138 Gateway ns/b "]
    );
    let c = gateway(
        "b",
        "istio: ingress",
        443,
        "y.com",
        &tls.replace("cert}", "other}"),
    );
    assert!(run(&format!("{a}\n---\n{c}")).is_empty());
}

#[test]
fn mh0001_service_entries_sharing_an_address() {
    let se = |name: &str, host: &str, address: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  hosts: [{host}]\n  addresses: [{address}]\n  ports: [{{number: 5432, name: tcp, protocol: TCP}}]\n  resolution: STATIC\n"
        )
    };
    assert!(
        run(&format!(
            "{}\n---\n{}",
            se("a", "db-a", "10.0.0.1"),
            se("b", "db-b", "10.0.0.2")
        ))
        .is_empty()
    );
    assert_eq!(
        run(&format!(
            "{}\n---\n{}",
            se("a", "db-a", "10.0.0.1"),
            se("b", "db-b", "10.0.0.1")
        )),
        [
            "MH0001 ServiceEntry ns/a spec.addresses",
            "MH0001 ServiceEntry ns/b spec.addresses"
        ]
    );
}

#[test]
fn facts_read_only_analysed_kinds_and_survive_odd_json() {
    let obj: Object = serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "x"},
        "spec": {"hosts": 3, "gateways": [1, "g"], "http": [{"route": "no"}]}
    }))
    .unwrap();
    let f = Facts::of(&obj).unwrap();
    assert_eq!(f.namespace, "default");
    let crate::Body::VirtualService(vs) = &f.body else {
        panic!()
    };
    assert!(vs.hosts.is_empty());
    assert_eq!(vs.gateways, ["g"]);
    let cm: Object = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}
    }))
    .unwrap();
    assert!(Facts::of(&cm).is_none());
}

/// Thousands of objects claiming one thing: one message each, of bounded
/// length, naming ten others and counting the rest (Istio names them all,
/// which made the text quadratic in the objects).
#[test]
fn conflicts_among_thousands_stay_linear() {
    const N: usize = 2_000;
    let tls = "    tls: {mode: SIMPLE, credentialName: cert}\n";
    let mut docs: Vec<String> = (0..N)
        .map(|i| gateway(&format!("g{i:04}"), "istio: ingress", 443, "x.com", tls))
        .collect();
    docs.extend((0..N).map(|i| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: v{i:04}, namespace: ns}}\nspec:\n  hosts: [shared.example.com]\n  http:\n  - route:\n    - destination: {{host: shared.example.com}}\n"
        )
    }));
    docs.extend((0..N).map(|i| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: s{i:04}, namespace: ns}}\nspec:\n  hosts: [h{i}.example.com]\n  addresses: [10.0.0.1]\n  ports: [{{number: 80, name: http, protocol: TCP}}]\n  resolution: STATIC\n  endpoints: [{{address: 10.1.0.1}}]\n"
        )
    }));
    let messages = analyze(&objects(&docs.join("\n---\n")));
    for (code, kind) in [
        ("IST0145", "Gateway"),
        ("IST0138", "Gateway"),
        ("IST0109", "VirtualService"),
        ("MH0001", "ServiceEntry"),
    ] {
        let of: Vec<&Message> = messages.iter().filter(|m| m.code.code == code).collect();
        assert_eq!(of.len(), N, "{code}: one message per {kind}");
        assert!(
            of.iter().all(|m| m.text.len() < 600),
            "{code}: {}",
            of[0].text
        );
    }
    let text = |code: &str, name: &str| {
        messages
            .iter()
            .find(|m| m.code.code == code && m.name == name)
            .map(|m| m.text.clone())
            .unwrap()
    };
    assert!(text("IST0145", "g0000").starts_with("Conflict with gateways ns/g0001,ns/g0002,"));
    assert!(text("IST0145", "g0000").contains("ns/g0010 and 1989 more (workload selector"));
    assert!(
        text("IST0138", "g0005")
            .contains("[ns/g0005 ns/g0000 ns/g0001 ns/g0002 ns/g0003 ns/g0004 ns/g0006 ")
    );
    assert!(text("IST0138", "g0005").contains(" and 1989 more]"));
    assert!(text("IST0109", "v0003").contains("ns/v0009 and 1990 more associated"));
    assert!(text("MH0001", "s0000").contains("ns/s0010 and 1989 more;"));
}

const NEW_FIELDS: &str = "
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews
  trafficPolicy:
    connectionPool:
      http:
        http2KeepAlive: {interval: 10s}
---
apiVersion: extensions.istio.io/v1alpha1
kind: TrafficExtension
metadata: {name: ext, namespace: bookinfo}
spec: {}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: old, namespace: bookinfo}
spec:
  host: ratings
";

fn skew(target: &crate::Target<'_>) -> Vec<Message> {
    crate::analyze_for(&objects(NEW_FIELDS), target)
}

#[test]
fn mh0002_names_what_a_cluster_release_lacks() {
    let v128 = crate::IstioVersion::parse("1.28.3").unwrap();
    let m = skew(&crate::Target::Known {
        cluster: Some("east"),
        version: v128,
    });
    assert_eq!(
        codes(&m),
        [
            "MH0002 DestinationRule bookinfo/reviews spec.trafficPolicy.connectionPool.http.http2KeepAlive",
            "MH0002 TrafficExtension bookinfo/ext ",
        ]
    );
    assert_eq!(
        m[0].to_string(),
        "Warning [MH0002] DestinationRule bookinfo/reviews spec.trafficPolicy.connectionPool.http.http2KeepAlive: needs Istio 1.31; cluster east runs 1.28.3"
    );
    assert_eq!(
        &*m[1].text,
        "TrafficExtension needs Istio 1.30; cluster east runs 1.28.3"
    );

    // 1.30 knows the kind, not the field; 1.32 knows both.
    let v130 = crate::IstioVersion::parse("1.30").unwrap();
    let m = skew(&crate::Target::Known {
        cluster: None,
        version: v130,
    });
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(
        m[0].text.ends_with("checked against Istio 1.30"),
        "{}",
        m[0].text
    );
    let v132 = crate::IstioVersion::parse("1.32.0").unwrap();
    assert!(
        skew(&crate::Target::Known {
            cluster: None,
            version: v132
        })
        .is_empty()
    );
}

const NEWER_VALUES: &str = "
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews
  trafficPolicy:
    loadBalancer:
      simple: LEAST_REQUEST
      warmup: {duration: 60s, aggression: 0.5}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: td, namespace: bookinfo}
spec:
  rules:
  - when:
    - key: source.trustDomain
      values: [cluster.local]
";

#[test]
fn mh0002_names_a_value_an_older_release_refuses() {
    let at = |v: &str| {
        crate::analyze_for(
            &objects(NEWER_VALUES),
            &crate::Target::Known {
                cluster: Some("east"),
                version: crate::IstioVersion::parse(v).unwrap(),
            },
        )
    };
    let m = at("1.28.3");
    assert_eq!(
        codes(&m),
        [
            "MH0002 AuthorizationPolicy bookinfo/td spec.rules[0].when[0].key",
            "MH0002 DestinationRule bookinfo/reviews spec.trafficPolicy.loadBalancer.warmup.aggression",
        ]
    );
    assert_eq!(
        &*m[1].text,
        "value 0.5 needs Istio 1.31 (older releases refuse values in (0,1)); cluster east runs 1.28.3"
    );
    assert_eq!(
        &*m[0].text,
        "value \"source.trustDomain\" needs Istio 1.30 (older releases refuse values in {source.trustDomain}); cluster east runs 1.28.3"
    );
    // 1.30 accepts the condition key, not yet the aggression; 1.31 both.
    assert_eq!(codes(&at("1.30.3")).len(), 1);
    assert!(at("1.31.0").is_empty(), "{:?}", at("1.31.0"));
}

#[test]
fn mh0002_takes_an_unknown_release_as_the_oldest_and_says_so() {
    let m = skew(&crate::Target::Unknown { cluster: "west" });
    assert_eq!(m.len(), 2, "{m:?}");
    assert!(
        m.iter().all(|m| m.text.contains("cluster west is unknown")),
        "{m:?}"
    );
    assert!(
        skew(&crate::Target::Unchecked).is_empty(),
        "no check without a target"
    );
}

const K8S_GATEWAY: &str = "
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ingress, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP}
";

const ROUTE: &str = "
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reviews, namespace: shop}
spec:
  parentRefs:
  - {name: ingress, namespace: infra, sectionName: http}
  - {name: ingress, namespace: infra, sectionName: https}
  - {group: '', kind: Service, name: reviews}
  rules:
  - backendRefs:
    - name: reviews
      port: 9080
      filters:
      - type: RequestMirror
        requestMirror: {backendRef: {name: audit, namespace: audit, port: 80}}
    - {name: ratings, namespace: backends, port: 9080}
    filters:
    - type: RequestMirror
      requestMirror: {backendRef: {name: shadow, namespace: mirror, port: 80}}
";

#[test]
fn mh0004_gateway_api_parent_missing_from_the_set_only() {
    // Without the Gateway: both references to it (and never the Service
    // parent, which the hub cannot see).
    let found = run(ROUTE);
    assert!(
        found.contains(&"MH0004 HTTPRoute shop/reviews spec.parentRefs[0]".to_owned()),
        "{found:?}"
    );
    assert!(
        found.contains(&"MH0004 HTTPRoute shop/reviews spec.parentRefs[1]".to_owned()),
        "{found:?}"
    );
    assert!(
        !found.iter().any(|m| m.ends_with("spec.parentRefs[2]")),
        "{found:?}"
    );
    // With it: only the listener it lacks.
    let found = run(&format!("{K8S_GATEWAY}\n---\n{ROUTE}"));
    let parents: Vec<&String> = found.iter().filter(|m| m.starts_with("MH0004")).collect();
    assert_eq!(
        parents,
        ["MH0004 HTTPRoute shop/reviews spec.parentRefs[1].sectionName"]
    );
    // An Istio Gateway of the same name is not a Gateway API parent.
    let istio = K8S_GATEWAY
        .replace("gateway.networking.k8s.io/v1", "networking.istio.io/v1")
        .replace(
            "gatewayClassName: istio\n  listeners:\n  - {name: http, port: 80, protocol: HTTP}",
            "servers: []",
        );
    let found = run(&format!("{istio}\n---\n{ROUTE}"));
    assert!(
        found.contains(&"MH0004 HTTPRoute shop/reviews spec.parentRefs[0]".to_owned()),
        "{found:?}"
    );
}

#[test]
fn mh0003_cross_namespace_backend_without_a_reference_grant() {
    let found = run(&format!("{K8S_GATEWAY}\n---\n{ROUTE}"));
    let grants: Vec<&String> = found.iter().filter(|m| m.starts_with("MH0003")).collect();
    assert_eq!(
        grants,
        [
            "MH0003 HTTPRoute shop/reviews spec.rules[0].backendRefs[0].filters[0].requestMirror.backendRef",
            "MH0003 HTTPRoute shop/reviews spec.rules[0].backendRefs[1]",
            "MH0003 HTTPRoute shop/reviews spec.rules[0].filters[0].requestMirror.backendRef",
        ]
    );
    // A grant in the backend's namespace, from HTTPRoutes of shop to that
    // Service (or any Service), permits it; one from another namespace,
    // another kind or to another name does not.
    let grant = |from_ns: &str, from_kind: &str, to_name: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: g, namespace: backends}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: {from_kind}, namespace: {from_ns}}}]
  to: [{{group: '', kind: Service{to_name}}}]
"
        )
    };
    for (g, permitted) in [
        (grant("shop", "HTTPRoute", ", name: ratings"), true),
        (grant("shop", "HTTPRoute", ""), true),
        (grant("other", "HTTPRoute", ""), false),
        (grant("shop", "GRPCRoute", ""), false),
        (grant("shop", "HTTPRoute", ", name: details"), false),
    ] {
        let found = run(&format!("{K8S_GATEWAY}\n---\n{ROUTE}\n---\n{g}"));
        let ratings = found.iter().any(|m| m.ends_with("backendRefs[1]"));
        assert_eq!(ratings, !permitted, "{g}\n{found:?}");
        assert!(
            found
                .iter()
                .any(|m| m.ends_with("requestMirror.backendRef")),
            "{found:?}"
        );
    }
}

#[test]
fn gateway_api_objects_have_no_istio_version_needs() {
    let facts = objects(&format!("{K8S_GATEWAY}\n---\n{ROUTE}"));
    assert!(facts.iter().all(|f| f.needs.is_empty()));
    assert_eq!(facts[0].kind.as_str(), "Gateway");
    assert!(!facts[0].kind.is_istio());
}

mod gateway_api;
mod incremental;
mod keys;
