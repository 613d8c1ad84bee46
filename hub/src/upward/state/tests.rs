use meshhub_proto::kinds::KindTable;
use meshhub_proto::object::Object;
use meshhub_proto::upward::{ClusterStatus, GatewayAddress, ServicePort};

use super::*;
use crate::store::UnknownFields;
use crate::upward::mcs::aggregate_all;

fn owner() -> (Owner, mpsc::Receiver<(SystemTime, AuditEvent)>) {
    let (audit, records) = AuditLog::capture();
    let check = crate::validation::export_check(
        &KindTable::builtin(),
        UnknownFields::Reject,
        &meshhub_validate::Validator::default(),
    );
    (Owner::new(audit, check), records)
}

fn update(cluster: &str, generation: u64, what: What) -> Update {
    Update {
        cluster: cluster.into(),
        generation,
        what,
    }
}

fn started(cluster: &str, generation: u64) -> Update {
    update(
        cluster,
        generation,
        What::Started {
            policy: ExportPolicy::default(),
        },
    )
}

/// A report saying the exports of `version` are complete (or not).
fn status(cluster: &str, generation: u64, version: &str, complete: bool) -> Update {
    let report = ClusterStatus {
        cluster: cluster.into(),
        exports_state: Some(ExportsState {
            complete,
            exports_version: version.into(),
            waiting_for: if complete {
                Vec::new()
            } else {
                vec!["services".into()]
            },
        }),
        ..Default::default()
    };
    update(cluster, generation, What::Status(Some(Box::new(report))))
}

fn exports(cluster: &str, generation: u64, version: &str, e: Vec<ServiceExport>) -> Update {
    update(
        cluster,
        generation,
        What::Exports {
            version: version.into(),
            exports: e,
        },
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

fn accepted(o: &Owner, cluster: &str) -> Vec<String> {
    o.reports.get(cluster).map_or_else(Vec::new, |r| {
        r.accepted
            .iter()
            .map(|c| format!("{}/{}", c.export.namespace, c.export.name))
            .collect()
    })
}

fn entries(o: &Owner, clusters: &[&str]) -> BTreeMap<String, Object> {
    let clusters: Vec<String> = clusters.iter().map(|c| (*c).to_owned()).collect();
    aggregate_all(&Arc::new(o.reports.clone()), &clusters)
        .into_iter()
        .filter_map(|(k, a)| a.object.map(|o| (k, o)))
        .collect()
}

fn state(o: &Owner, cluster: &str) -> ExportsStateView {
    o.reports[cluster].view.exports_state.clone().unwrap()
}

/// Issue 38, defect 1: an agent restart (its exports published before
/// the Services listed) withdraws nothing.
#[test]
fn an_incomplete_report_withdraws_nothing_and_shows_as_stale() {
    let (mut o, _) = owner();
    o.apply(started("west", 1));
    o.apply(status("west", 1, "v1", true));
    o.apply(exports(
        "west",
        1,
        "v1",
        vec![export("shop", "cart", 80, "192.0.2.1")],
    ));
    assert_eq!(accepted(&o, "west"), ["shop/cart"]);
    assert!(o.reports["west"].exports_received);
    assert!(!state(&o, "west").stale);

    // The agent restarts: an empty set, its report says incomplete.
    o.apply(exports("west", 1, "v0", Vec::new()));
    assert_eq!(accepted(&o, "west"), ["shop/cart"], "not before the report");
    o.apply(status("west", 1, "v0", false));
    assert_eq!(accepted(&o, "west"), ["shop/cart"], "kept: incomplete");
    let s = state(&o, "west");
    assert_eq!(s.completeness, Completeness::Incomplete);
    assert!(s.stale && s.stale_since.is_some());
    assert_eq!(s.waiting_for, ["services"]);

    // Complete again (report first, then the exports): the new set.
    o.apply(status("west", 1, "v2", true));
    assert_eq!(accepted(&o, "west"), ["shop/cart"]);
    o.apply(exports(
        "west",
        1,
        "v2",
        vec![export("shop", "checkout", 80, "192.0.2.1")],
    ));
    assert_eq!(accepted(&o, "west"), ["shop/checkout"]);
    let s = state(&o, "west");
    assert_eq!(s.completeness, Completeness::Complete);
    assert!(!s.stale && s.stale_since.is_none());

    // A complete report about another version trusts nothing else.
    o.apply(exports("west", 1, "v3", Vec::new()));
    o.apply(status("west", 1, "v4", true));
    assert_eq!(accepted(&o, "west"), ["shop/checkout"]);
}

#[test]
fn nothing_is_trusted_before_the_first_complete_report() {
    let (mut o, _) = owner();
    o.apply(started("west", 1));
    o.apply(exports(
        "west",
        1,
        "v1",
        vec![export("shop", "cart", 80, "192.0.2.1")],
    ));
    assert!(accepted(&o, "west").is_empty());
    assert!(
        !o.reports["west"].exports_received,
        "the hub waits for it at start"
    );
    o.apply(status("west", 1, "v1", true));
    assert_eq!(accepted(&o, "west"), ["shop/cart"]);
}

#[test]
fn an_agent_older_than_the_field_is_taken_as_complete() {
    let (mut o, _) = owner();
    o.apply(started("west", 1));
    let report = ClusterStatus {
        cluster: "west".into(),
        ..Default::default()
    };
    o.apply(update("west", 1, What::Status(Some(Box::new(report)))));
    o.apply(exports(
        "west",
        1,
        "v1",
        vec![export("shop", "cart", 80, "192.0.2.1")],
    ));
    assert_eq!(accepted(&o, "west"), ["shop/cart"]);
    assert_eq!(state(&o, "west").completeness, Completeness::Unknown);
}

/// Issue 38, defect 3: a removed cluster can't come back as a ghost.
#[test]
fn a_stopped_subscriber_cannot_bring_its_cluster_back() {
    let (mut o, _) = owner();
    o.apply(started("west", 1));
    o.apply(status("west", 1, "v1", true));
    o.apply(exports(
        "west",
        1,
        "v1",
        vec![export("shop", "cart", 80, "192.0.2.1")],
    ));
    // The agent's settings change: generation 2; 1's late reports are
    // dropped.
    o.apply(started("west", 2));
    assert!(!o.apply(exports("west", 1, "v9", Vec::new())));
    assert!(!o.apply(status("west", 1, "v9", true)));
    assert_eq!(accepted(&o, "west"), ["shop/cart"]);
    // Removed; what its subscriber read meanwhile lands after `Gone`.
    assert!(o.apply(update("west", 2, What::Gone)));
    assert!(!o.apply(status("west", 2, "v1", true)));
    assert!(!o.apply(exports(
        "west",
        2,
        "v1",
        vec![export("shop", "cart", 80, "192.0.2.1")]
    )));
    assert!(!o.apply(update("west", 2, What::Unserved(true))));
    assert!(!o.reports.contains_key("west"), "no ghost");
    assert!(entries(&o, &["east"]).is_empty());
    // A `Gone` of an older generation does not remove the current one.
    o.apply(started("west", 3));
    assert!(!o.apply(update("west", 2, What::Gone)));
    assert!(o.tracked.contains_key("west"));
}

/// Issue 38, defect 2: a cluster exporting into istio-system, with port
/// 0 and a bad gateway, beside a well-behaved one whose entry stays
/// exactly as it was.
#[test]
fn a_hostile_cluster_leaves_the_others_entry_exactly_as_it_was() {
    let (mut o, mut audit) = owner();
    let clusters = ["east", "west", "north"];
    for c in clusters {
        o.apply(started(c, 1));
        o.apply(status(c, 1, "empty", true));
        o.apply(exports(c, 1, "empty", Vec::new()));
    }
    o.apply(status("east", 1, "e1", true));
    o.apply(exports(
        "east",
        1,
        "e1",
        vec![export("shop", "cart", 80, "192.0.2.1")],
    ));
    let before = entries(&o, &clusters);
    assert_eq!(before.len(), 1);

    let mut forged = export("shop", "cart", 0, "192.0.2.66");
    forged.created = Some(prost_types::Timestamp {
        seconds: 0,
        nanos: 0,
    });
    let hostile = vec![
        export("istio-system", "istiod", 15012, "192.0.2.66"),
        forged,
        export("shop", "badgw", 80, "not an address!"),
    ];
    o.apply(status("west", 1, "w1", true));
    o.apply(exports("west", 1, "w1", hostile));
    assert_eq!(entries(&o, &clusters), before, "east's entry as it was");
    assert!(accepted(&o, "west").is_empty());
    let refused: BTreeMap<String, String> = o.reports["west"]
        .view
        .exports
        .iter()
        .map(|e| (format!("{}/{}", e.namespace, e.name), e.refused.clone()))
        .collect();
    assert!(
        refused["istio-system/istiod"].starts_with("policy: "),
        "{refused:?}"
    );
    assert!(
        refused["shop/cart"].starts_with("invalid: port 0"),
        "{refused:?}"
    );
    assert!(
        refused["shop/badgw"].starts_with("invalid: "),
        "{refused:?}"
    );
    // Each refusal audited once; judging again records nothing new.
    let mut records = Vec::new();
    while let Ok((_, e)) = audit.try_recv() {
        records.push(e);
    }
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(
        records
            .iter()
            .all(|e| matches!(e, AuditEvent::ExportRefused { cluster, .. } if cluster == "west"))
    );
    o.apply(update("west", 1, What::Policy(ExportPolicy::default())));
    assert!(audit.try_recv().is_err());

    // A valid export with a forged old `created`: east, seen first,
    // still defines the ports.
    let mut old = export("shop", "cart", 80, "192.0.2.66");
    old.ports[0].name = "grpc".into();
    old.created = Some(prost_types::Timestamp {
        seconds: 0,
        nanos: 0,
    });
    o.apply(status("west", 1, "w2", true));
    o.apply(exports("west", 1, "w2", vec![old]));
    let all = aggregate_all(&Arc::new(o.reports.clone()), &clusters.map(str::to_owned));
    let cart = &all["shop/cart"];
    assert!(cart.conflicts.contains_key("west"), "{:?}", cart.conflicts);
    let spec = &cart.object.as_ref().unwrap().content["spec"];
    assert_eq!(spec["ports"][0]["name"], "http", "east's definition");
}

#[test]
fn a_policy_change_judges_again_without_a_new_report() {
    let (mut o, _) = owner();
    o.apply(started("west", 1));
    o.apply(status("west", 1, "v1", true));
    o.apply(exports(
        "west",
        1,
        "v1",
        vec![export("istio-system", "mesh-api", 80, "192.0.2.1")],
    ));
    assert!(accepted(&o, "west").is_empty());
    let allow = ExportPolicy {
        namespaces: crate::clusters::exports::Namespaces::Only(vec![("istio-system".into(), None)]),
        ..ExportPolicy::default()
    };
    o.apply(update("west", 1, What::Policy(allow)));
    assert_eq!(accepted(&o, "west"), ["istio-system/mesh-api"]);
}

#[test]
fn a_refused_export_does_not_squat_the_oldest_place_in_a_conflict() {
    let (mut o, _) = owner();
    let clusters = ["east", "west", "north"];
    for c in clusters {
        o.apply(started(c, 1));
        o.apply(status(c, 1, "empty", true));
        o.apply(exports(c, 1, "empty", Vec::new()));
    }
    // west exports shop/cart first, invalid (port 0): refused.
    o.apply(status("west", 1, "w1", true));
    o.apply(exports(
        "west",
        1,
        "w1",
        vec![export("shop", "cart", 0, "192.0.2.66")],
    ));
    assert!(accepted(&o, "west").is_empty());
    // east's valid export defines the entry.
    o.apply(status("east", 1, "e1", true));
    o.apply(exports(
        "east",
        1,
        "e1",
        vec![export("shop", "cart", 80, "192.0.2.1")],
    ));
    // west fixes its export, with another port name: east stays first.
    let mut fixed = export("shop", "cart", 80, "192.0.2.66");
    fixed.ports[0].name = "grpc".into();
    o.apply(status("west", 1, "w2", true));
    o.apply(exports("west", 1, "w2", vec![fixed]));
    assert_eq!(accepted(&o, "west"), ["shop/cart"]);
    let all = aggregate_all(&Arc::new(o.reports.clone()), &clusters.map(str::to_owned));
    let cart = &all["shop/cart"];
    assert!(cart.conflicts.contains_key("west"), "{:?}", cart.conflicts);
    let spec = &cart.object.as_ref().unwrap().content["spec"];
    assert_eq!(spec["ports"][0]["name"], "http", "east's definition");
}

#[test]
fn an_update_replaces_its_clusters_report_only() {
    let (mut o, _records) = owner();
    for c in ["east", "west"] {
        o.apply(started(c, 1));
        o.apply(status(c, 1, "1", true));
    }
    let before: Reports = Arc::new(o.reports.clone());
    assert!(o.apply(status("west", 1, "2", true)));
    let after: Reports = Arc::new(o.reports.clone());
    // What a reader sees of the others is the very report it saw before
    // (published as a pointer, never copied); west's is a new one.
    assert!(Arc::ptr_eq(&before["east"], &after["east"]));
    assert!(!Arc::ptr_eq(&before["west"], &after["west"]));
    assert_eq!(before["east"], after["east"]);
    // An update that changes nothing shown publishes nothing.
    assert!(!o.apply(update("east", 1, What::Unserved(false))));
    assert!(Arc::ptr_eq(&after["east"], &o.reports["east"]));
}

#[test]
fn a_flood_of_refusals_is_logged_and_audited_in_bounds() {
    // Issue 38: a cluster reporting 5,000 exports over its cap. Each
    // refusal one by one would fill the audit queue (others' records
    // then dropped) and write a log line per export.
    let (mut o, mut audit) = owner();
    let policy = ExportPolicy {
        max_services: 1,
        ..ExportPolicy::default()
    };
    o.apply(update("west", 1, What::Started { policy }));
    let flood: Vec<ServiceExport> = (0..5_000)
        .map(|i| export("bulk", &format!("svc-{i:04}"), 80, "192.0.2.66"))
        .collect();
    o.apply(status("west", 1, "flood", true));
    o.apply(exports("west", 1, "flood", flood));
    let mut records = Vec::new();
    while let Ok((_, e)) = audit.try_recv() {
        records.push(e);
    }
    let itemized = records
        .iter()
        .filter(|e| matches!(e, AuditEvent::ExportRefused { .. }))
        .count();
    assert_eq!(itemized, REFUSALS_ITEMIZED, "{records:?}");
    let summary: Vec<&AuditEvent> = records
        .iter()
        .filter(|e| matches!(e, AuditEvent::ExportsRefused { .. }))
        .collect();
    assert_eq!(
        summary,
        [&AuditEvent::ExportsRefused {
            cluster: "west".into(),
            count: 5_000 - 1 - REFUSALS_ITEMIZED,
            by_reason: [("cap".to_owned(), 5_000 - 1 - REFUSALS_ITEMIZED)].into(),
        }]
    );
    // Every export merged is listed, the refusals counted by reason and
    // the first of them listed, each with its reason: a flood does not
    // make `/status` as large.
    let view = &o.reports["west"].view;
    assert_eq!(
        view.exports.iter().filter(|e| e.refused.is_empty()).count(),
        1
    );
    let listed: Vec<&str> = view
        .exports
        .iter()
        .filter(|e| !e.refused.is_empty())
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(listed.len(), REFUSED_EXPORTS_LISTED);
    assert!(
        view.exports
            .iter()
            .filter(|e| !e.refused.is_empty())
            .all(|e| e.refused.starts_with("cap:"))
    );
    assert_eq!(
        view.exports_refused,
        Some(RefusedExportsView {
            count: 4_999,
            by_reason: [("cap".to_owned(), 4_999)].into(),
            listed: REFUSED_EXPORTS_LISTED,
        })
    );
    // A new report of the cluster keeps the count with the list.
    o.apply(status("west", 1, "flood", true));
    assert_eq!(
        o.reports["west"]
            .view
            .exports_refused
            .as_ref()
            .map(|r| r.count),
        Some(4_999)
    );
    assert_eq!(
        o.reports["west"].view.exports.len(),
        1 + REFUSED_EXPORTS_LISTED
    );
}
