use crate::config::testing::err;

#[test]
fn sources_are_checked() {
    let e = err("clusters: []\n");
    assert!(e.contains("sources: at least one source"), "{e}");
    let e = err("sources:\n  - file: {path: missing}\n");
    assert!(
        e.contains("sources[0].file.path") && e.contains("not a directory"),
        "{e}"
    );
    let e = err("sources:\n  - name: x\n");
    assert!(e.contains("sources[0]"), "{e}");
    let e = err(
        "sources:\n  - {name: a, file: {path: objects}}\n  - {name: a, file: {path: objects}}\n",
    );
    assert!(e.contains("sources[1].name: duplicate source name"), "{e}");
}

/// An `extraKinds` entry naming a Gateway API kind meshhub now carries (at
/// any version) is that kind: the configuration that carried it before it
/// was built in still loads, and the kind is in the table once.
#[test]
fn extra_kinds_naming_a_built_in_kind_are_that_kind() {
    let config = crate::config::testing::parse(
        "sources:\n  - kubernetes:\n      extraKinds:\n        - {group: gateway.networking.k8s.io, version: v1beta1, kind: HTTPRoute}\n        - {group: gateway.networking.k8s.io, version: v1, kind: Gateway}\n        - {group: gateway.networking.k8s.io, version: v1, kind: UDPRoute}\n",
    )
    .expect("loads");
    let kinds = &config.kinds;
    let routes: Vec<&str> = kinds
        .iter()
        .filter(|k| k.kind() == "HTTPRoute")
        .map(|k| k.collection())
        .collect();
    assert_eq!(routes, ["k8s/gateway.networking.k8s.io/v1/httproutes"]);
    let udp = kinds
        .by_api_version("gateway.networking.k8s.io/v1", "UDPRoute")
        .expect("a kind meshhub does not carry is added");
    assert!(!udp.is_builtin());
}
