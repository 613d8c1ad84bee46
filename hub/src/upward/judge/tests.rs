use meshhub_proto::kinds::KindTable;
use meshhub_proto::upward::{GatewayAddress, ServicePort};
use std::time::SystemTime;

use super::*;
use crate::store::UnknownFields;

fn check() -> Check {
    crate::validation::export_check(
        &KindTable::builtin(),
        UnknownFields::Reject,
        &meshhub_validate::Validator::default(),
    )
}

fn export(ns: &str, name: &str, port: u32, gw: &str) -> ServiceExport {
    ServiceExport {
        namespace: ns.into(),
        name: name.into(),
        r#type: "ClusterSetIP".into(),
        ports: vec![ServicePort {
            name: "http".into(),
            port,
            protocol: "TCP".into(),
            app_protocol: String::new(),
        }],
        gateways: vec![GatewayAddress {
            address: gw.into(),
            port: 15443,
        }],
        created: None,
        problem: String::new(),
    }
}

/// Stamps the exports in the order given.
fn seen(exports: &[ServiceExport]) -> BTreeMap<String, FirstSeen> {
    exports
        .iter()
        .enumerate()
        .map(|(i, e)| {
            (
                format!("{}/{}", e.namespace, e.name),
                FirstSeen {
                    seq: i as u64 + 1,
                    at: SystemTime::UNIX_EPOCH,
                },
            )
        })
        .collect()
}

fn refusals(j: &[Judged]) -> BTreeMap<String, Option<&'static str>> {
    j.iter()
        .map(|j| {
            let e = &j.contribution.export;
            (
                format!("{}/{}", e.namespace, e.name),
                j.refusal.as_ref().map(Refusal::kind),
            )
        })
        .collect()
}

#[test]
fn a_hostile_contribution_is_refused_export_by_export() {
    let exports = vec![
        export("shop", "cart", 80, "192.0.2.1"),
        export("istio-system", "istiod", 15012, "192.0.2.1"),
        export("kube-system", "kube-dns", 53, "192.0.2.1"),
        export("shop", "zero", 0, "192.0.2.1"),
        export("shop", "badgw", 80, "not an address!"),
        ServiceExport {
            r#type: "LoadBalancer".into(),
            ..export("shop", "badtype", 80, "192.0.2.1")
        },
    ];
    let j = judge(
        "west",
        &exports,
        &seen(&exports),
        &ExportPolicy::default(),
        &check(),
    );
    let r = refusals(&j);
    assert_eq!(r["shop/cart"], None, "{j:?}");
    assert_eq!(r["istio-system/istiod"], Some("policy"));
    assert_eq!(r["kube-system/kube-dns"], Some("policy"));
    assert_eq!(r["shop/zero"], Some("invalid"));
    assert_eq!(r["shop/badgw"], Some("invalid"));
    assert_eq!(r["shop/badtype"], Some("invalid"));
    let why = j
        .iter()
        .find(|j| j.contribution.export.name == "zero")
        .and_then(|j| j.refusal.clone())
        .unwrap()
        .to_string();
    assert!(why.contains("port 0"), "{why}");
}

#[test]
fn the_validation_of_the_entry_judges_each_contribution() {
    // Well-shaped to our own checks, refused by the store's: a port name
    // Istio does not take (a ServiceEntry port name must be a label, but
    // here the check itself is the point: whatever it says is a refusal).
    let refuse_all: Check = Arc::new(|_| vec!["nope".to_owned()]);
    let exports = vec![export("shop", "cart", 80, "192.0.2.1")];
    let j = judge(
        "west",
        &exports,
        &seen(&exports),
        &ExportPolicy::default(),
        &refuse_all,
    );
    assert_eq!(j[0].refusal, Some(Refusal::Invalid("nope".into())));
    // The real check takes a well-behaved export, with a host name gateway.
    let ok = vec![export("shop", "cart", 80, "gw.west.example")];
    let j = judge("west", &ok, &seen(&ok), &ExportPolicy::default(), &check());
    assert_eq!(j[0].refusal, None, "{j:?}");
}

#[test]
fn caps_keep_the_exports_seen_first() {
    let policy = ExportPolicy {
        max_services: 2,
        max_endpoints: 1,
        ..ExportPolicy::default()
    };
    let mut exports = vec![
        export("shop", "zz-first", 80, "192.0.2.1"),
        export("shop", "aa-second", 80, "192.0.2.1"),
        export("shop", "mm-third", 80, "192.0.2.1"),
        export("shop", "wide", 80, "192.0.2.1"),
    ];
    exports[3].gateways.push(GatewayAddress {
        address: "192.0.2.2".into(),
        port: 15443,
    });
    let j = judge("west", &exports, &seen(&exports), &policy, &check());
    let r = refusals(&j);
    assert_eq!(r["shop/zz-first"], None);
    assert_eq!(r["shop/aa-second"], None);
    assert_eq!(
        r["shop/mm-third"],
        Some("cap"),
        "seen last: over maxServices"
    );
    assert_eq!(r["shop/wide"], Some("cap"), "over maxEndpoints");
    // Judged in the order first seen.
    assert_eq!(j[0].contribution.export.name, "zz-first");
}

#[test]
fn an_allow_list_limits_namespaces_and_names() {
    let policy = crate::clusters::exports::ExportPolicy {
        namespaces: crate::clusters::exports::Namespaces::Only(vec![(
            "shop".into(),
            Some(["cart".to_owned()].into()),
        )]),
        ..ExportPolicy::default()
    };
    let exports = vec![
        export("shop", "cart", 80, "192.0.2.1"),
        export("shop", "checkout", 80, "192.0.2.1"),
        export("payments", "card", 80, "192.0.2.1"),
    ];
    let r = refusals(&judge("west", &exports, &seen(&exports), &policy, &check()));
    assert_eq!(r["shop/cart"], None);
    assert_eq!(r["shop/checkout"], Some("policy"));
    assert_eq!(r["payments/card"], Some("policy"));
}

#[test]
fn a_flood_costs_no_more_validations_than_the_cap() {
    // Issue 38: a cluster reporting 100,000 exports. Past the cap, no
    // export is validated (a validation each would cost the hub seconds of
    // CPU per report); each is refused over the cap.
    let validated = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counting: Check = {
        let validated = validated.clone();
        let real = check();
        Arc::new(move |o| {
            validated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            real(o)
        })
    };
    let policy = ExportPolicy {
        max_services: 3,
        ..ExportPolicy::default()
    };
    let mut exports = vec![
        export("shop", "zero", 0, "192.0.2.1"),
        export("istio-system", "istiod", 15012, "192.0.2.1"),
    ];
    exports.extend((0..10_000).map(|i| export("bulk", &format!("svc-{i:05}"), 80, "192.0.2.1")));
    exports.push(export("shop", "late-zero", 0, "192.0.2.1"));
    let j = judge("west", &exports, &seen(&exports), &policy, &counting);
    let r = refusals(&j);
    assert_eq!(r["shop/zero"], Some("invalid"));
    assert_eq!(
        r["shop/late-zero"],
        Some("invalid"),
        "the cheap checks still say what is wrong past the cap"
    );
    assert_eq!(r["istio-system/istiod"], Some("policy"));
    for taken in ["bulk/svc-00000", "bulk/svc-00001", "bulk/svc-00002"] {
        assert_eq!(r[taken], None, "{taken}");
    }
    assert_eq!(r["bulk/svc-00003"], Some("cap"));
    assert_eq!(
        r.values().filter(|r| **r == Some("cap")).count(),
        10_000 - 3
    );
    assert_eq!(
        validated.load(std::sync::atomic::Ordering::Relaxed),
        3,
        "only the exports taken are validated"
    );
}
