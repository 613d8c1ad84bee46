use std::time::Duration;

use super::*;
use crate::config::testing::{err, parse};
use crate::source::SourceSpec;

#[test]
fn kubernetes_sources_are_checked_and_get_defaults() {
    let c = parse("sources:\n  - kubernetes: {}\n").unwrap();
    let SourceSpec::Kubernetes(k) = &c.sources[0] else {
        panic!("a kubernetes source")
    };
    assert_eq!(k.name, "kubernetes");
    assert_eq!(k.connection.kubeconfig, None);
    assert!(k.namespaces.is_empty());
    assert_eq!(k.discovery_interval, DEFAULT_DISCOVERY_INTERVAL);
    assert_eq!(
        k.status_write_back, None,
        "status write-back is off by default"
    );
    assert_eq!(
        c.kinds.iter().count(),
        meshhub_proto::kinds::KindTable::builtin().iter().count()
    );

    let c = parse(
        "sources:\n  - kubernetes:\n      context: west\n      namespaces: [bookinfo, bookinfo]\n      discoveryInterval: 10s\n      extraKinds:\n        - {version: v1, kind: ConfigMap}\n        - {group: networking.k8s.io, version: v1, kind: NetworkPolicy}\n        - {group: example.com, version: v1, kind: Widget, plural: widgetz, clusterScoped: true}\n",
    )
    .unwrap();
    let SourceSpec::Kubernetes(k) = &c.sources[0] else {
        panic!("a kubernetes source")
    };
    assert_eq!(k.name, "kubernetes:west");
    assert_eq!(k.namespaces, ["bookinfo"]);
    assert_eq!(k.discovery_interval, Duration::from_secs(10));
    let plurals: Vec<&str> = k.extra_kinds.iter().map(|e| e.plural.as_str()).collect();
    assert_eq!(plurals, ["configmaps", "networkpolicies", "widgetz"]);
    assert!(!k.extra_kinds[2].namespaced);
    for collection in [
        "k8s/core/v1/configmaps",
        "k8s/networking.k8s.io/v1/networkpolicies",
        "k8s/example.com/v1/widgetz",
    ] {
        assert!(c.kinds.by_collection(collection).is_some(), "{collection}");
    }
}

#[test]
fn kubernetes_source_errors_name_the_setting() {
    let e = err("sources:\n  - kubernetes: {kubeconfig: /nonexistent/kubeconfig}\n");
    assert!(e.contains("sources[0].kubernetes.kubeconfig"), "{e}");
    let e = err("sources:\n  - kubernetes: {namespaces: [Bad_NS]}\n");
    assert!(e.contains("sources[0].kubernetes.namespaces[0]"), "{e}");
    let e = err("sources:\n  - kubernetes: {discoveryInterval: 10ms}\n");
    assert!(e.contains("discoveryInterval"), "{e}");
    let e = err(
        "sources:\n  - kubernetes: {extraKinds: [{group: networking.istio.io, version: v1, kind: VirtualService}]}\n",
    );
    assert!(e.contains("extraKinds[0].group"), "{e}");
    let e = err("sources:\n  - file: {path: objects}\n    kubernetes: {}\n");
    assert!(e.contains("exactly one of"), "{e}");
    let e = err("sources:\n  - kubernetes: {}\n  - kubernetes: {}\n");
    assert!(e.contains("duplicate source name"), "{e}");
    let e = err("sources:\n  - kubernetes: {statusWriteBack: {enabled: true, qps: 0}}\n");
    assert!(
        e.contains("sources[0].kubernetes.statusWriteBack.qps"),
        "{e}"
    );
    let e = err("sources:\n  - kubernetes: {statusWriteBack: {enabled: true, rate: 5}}\n");
    assert!(e.contains("rate"), "{e}");
}

#[test]
fn status_write_back_is_typed_in_the_sources_block() {
    let c =
        parse("sources:\n  - kubernetes: {statusWriteBack: {enabled: true, qps: 10}}\n").unwrap();
    let SourceSpec::Kubernetes(k) = &c.sources[0] else {
        panic!("a kubernetes source")
    };
    let spec = k.status_write_back.as_ref().expect("on");
    assert_eq!((spec.qps.get(), spec.burst.get()), (10, 100));
}

#[test]
fn plurals_are_guessed_like_kubernetes_does() {
    for (kind, plural) in [
        ("ConfigMap", "configmaps"),
        ("Ingress", "ingresses"),
        ("NetworkPolicy", "networkpolicies"),
        ("Gateway", "gateways"),
        ("Endpoints", "endpointses"),
    ] {
        assert_eq!(guess_plural(kind), plural, "{kind}");
    }
}
