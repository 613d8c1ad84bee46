use meshhub_analyze::Facts;
use meshhub_api::analysis::Level;
use meshhub_proto::object::Object;

use super::*;

fn facts(yaml: &str) -> Facts {
    let obj: Object = serde_saphyr::from_str(yaml).unwrap();
    Facts::of(&obj).unwrap()
}

fn bound_vs() -> Facts {
    facts(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs, namespace: ns}\nspec:\n  hosts: [a.example.com]\n  gateways: [gw]\n",
    )
}

fn spec(hold_back: &[&'static str]) -> AnalysisSpec {
    AnalysisSpec {
        enabled: true,
        hold_back: hold_back.iter().copied().collect(),
    }
}

#[test]
fn messages_are_kept_per_group_and_hold_back_only_for_chosen_codes() {
    let east = Group::from("east");
    let vs = bound_vs();
    let mut a = Analysis::new(spec(&[]));
    let audit = AuditLog::disabled();
    assert_eq!(a.check(&east, "v1", [&vs], None, &audit), Decision::Serve);
    let view = a.view();
    assert_eq!(view.len(), 1);
    assert_eq!(view[0].cluster, "east");
    assert_eq!(view[0].count(Level::Error), 1);
    assert_eq!(view[0].count(Level::Warning), 1);
    assert!(view[0].held_back.is_none());

    let mut a = Analysis::new(spec(&["IST0101"]));
    let d = a.check(&east, "v2", [&vs], Some("v1".into()), &audit);
    let Decision::HoldBack(reasons) = d else {
        panic!("{d:?}")
    };
    assert_eq!(reasons.len(), 1);
    assert!(reasons[0].contains("IST0101"), "{reasons:?}");
    assert!(a.is_held(&east));
    let held = a.view()[0].held_back.clone().unwrap();
    assert_eq!(
        (
            held.version.as_str(),
            held.serving.as_deref(),
            held.codes.clone()
        ),
        ("v2", Some("v1"), vec!["IST0101".to_owned()])
    );
    // Still held by the next bad build: held since the first.
    a.check(&east, "v3", [&vs], Some("v1".into()), &audit);
    assert_eq!(a.view()[0].held_back.as_ref().unwrap().since, held.since);
    // A clean build is served; a removed group is forgotten.
    assert_eq!(
        a.check(&east, "v4", [], Some("v1".into()), &audit),
        Decision::Serve
    );
    assert!(!a.is_held(&east));
    a.remove(&east);
    assert!(a.view().is_empty());
}

#[test]
fn disabled_analysis_serves_everything_and_shows_nothing() {
    let mut a = Analysis::new(AnalysisSpec {
        enabled: false,
        hold_back: Default::default(),
    });
    assert!(!a.enabled());
    let vs = bound_vs();
    let g = Group::from("east");
    assert_eq!(
        a.check(&g, "v1", [&vs], None, &AuditLog::disabled()),
        Decision::Serve
    );
    assert!(a.view().is_empty());
}

fn keepalive_dr() -> Facts {
    facts(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: bookinfo}\nspec:\n  host: reviews\n  trafficPolicy:\n    connectionPool:\n      http:\n        http2KeepAlive: {interval: 10s}\n",
    )
}

#[test]
fn version_skew_is_checked_per_cluster_release_and_holdable() {
    let (east, west, north) = (
        Group::from("east"),
        Group::from("west"),
        Group::from("north"),
    );
    let dr = keepalive_dr();
    let audit = AuditLog::disabled();
    let mut a = Analysis::new(spec(&["MH0002"]));
    let v = |s: &str| meshhub_analyze::IstioVersion::parse(s).unwrap();
    let changed = a.set_releases([(east.clone(), v("1.28.3")), (west.clone(), v("1.32.0"))].into());
    assert_eq!(changed, [east.clone(), west.clone()]);
    assert!(
        a.set_releases([(east.clone(), v("1.28.3")), (west.clone(), v("1.32.0"))].into())
            .is_empty()
    );

    // East runs 1.28.3: held, with the cluster and its release named.
    let Decision::HoldBack(reasons) = a.check(&east, "v2", [&dr], Some("v1".into()), &audit) else {
        panic!("not held")
    };
    assert_eq!(
        reasons,
        [
            "Warning [MH0002] DestinationRule bookinfo/reviews spec.trafficPolicy.connectionPool.http.http2KeepAlive: needs Istio 1.31; cluster east runs 1.28.3"
        ]
    );
    // West runs 1.32: served, no message.
    assert_eq!(a.check(&west, "v2", [&dr], None, &audit), Decision::Serve);
    // North never reported: unknown, taken as the oldest (fail closed).
    let d = a.check(&north, "v2", [&dr], None, &audit);
    let Decision::HoldBack(reasons) = d else {
        panic!("{d:?}")
    };
    assert!(
        reasons[0].contains("cluster north is unknown"),
        "{reasons:?}"
    );

    // East upgrades: it is named as changed, and the same build is served.
    let changed = a.set_releases([(east.clone(), v("1.31.0")), (west.clone(), v("1.32.0"))].into());
    assert_eq!(changed, std::slice::from_ref(&east));
    assert_eq!(
        a.check(&east, "v2", [&dr], Some("v1".into()), &audit),
        Decision::Serve
    );
    // A cluster whose report is gone is named too.
    assert_eq!(a.set_releases([(east.clone(), v("1.31.0"))].into()), [west]);
}

#[test]
fn a_message_every_cluster_carries_is_held_once() {
    let mut a = Analysis::new(spec(&[]));
    let audit = AuditLog::disabled();
    let vs = bound_vs();
    let groups: Vec<Group> = (0..50)
        .map(|i| Group::from(format!("c{i}").as_str()))
        .collect();
    for g in &groups {
        a.check(g, "v1", [&vs], None, &audit);
    }
    let view = a.view();
    assert_eq!(view.len(), 50);
    let first = &view[0].messages;
    assert!(
        !first.is_empty(),
        "the route to a missing gateway is reported"
    );
    for c in view.iter() {
        for (m, shared) in c.messages.iter().zip(first) {
            assert!(
                std::sync::Arc::ptr_eq(m, shared),
                "{} shares {m}",
                c.cluster
            );
        }
    }
    // Forgotten once no group carries them any more (at the next sweep:
    // a view sweeps when the interned messages doubled since the last).
    for g in &groups {
        a.check(g, "v2", [], None, &audit);
    }
    drop(view);
    assert!(a.view().iter().all(|c| c.messages.is_empty()));
    a.sweep_interned();
    assert!(
        a.interned.is_empty(),
        "{} messages still held",
        a.interned.len()
    );
}

#[test]
fn identical_content_is_analysed_once_and_each_cluster_keeps_its_own_version_check() {
    let (east, west) = (Group::from("east"), Group::from("west"));
    let vs = bound_vs();
    let dr = keepalive_dr();
    let audit = AuditLog::disabled();
    let mut a = Analysis::new(spec(&[]));
    let v = |s: &str| meshhub_analyze::IstioVersion::parse(s).unwrap();
    a.set_releases([(east.clone(), v("1.28.3")), (west.clone(), v("1.32.0"))].into());
    a.check(&east, "v1", [&vs, &dr], None, &audit);
    a.check(&west, "v1", [&vs, &dr], None, &audit);
    // One set analysis for both; the version check is each cluster's.
    assert!(Arc::ptr_eq(
        &a.groups[&east].base.set,
        &a.groups[&west].base.set
    ));
    let view = a.view();
    let codes = |c: &str| -> Vec<String> {
        view.iter()
            .find(|x| x.cluster == c)
            .unwrap()
            .messages
            .iter()
            .map(|m| m.code.clone())
            .collect()
    };
    assert!(
        codes("east").contains(&"MH0002".to_owned()),
        "{:?}",
        codes("east")
    );
    assert!(
        !codes("west").contains(&"MH0002".to_owned()),
        "{:?}",
        codes("west")
    );
    assert_eq!(
        codes("east")
            .into_iter()
            .filter(|c| c != "MH0002")
            .collect::<Vec<_>>(),
        codes("west"),
        "the same set messages"
    );
    // The same messages as analysing each alone.
    let alone = meshhub_analyze::analyze_for(
        [&vs, &dr],
        &meshhub_analyze::Target::Known {
            cluster: Some("east"),
            version: v("1.28.3"),
        },
    );
    assert_eq!(
        view.iter()
            .find(|x| x.cluster == "east")
            .unwrap()
            .messages
            .len(),
        alone.len()
    );
    // Other content: its own analysis; the old one is dropped once no
    // group holds it.
    a.check(&east, "v2", [&vs], None, &audit);
    a.check(&west, "v2", [&vs], None, &audit);
    assert!(Arc::ptr_eq(
        &a.groups[&east].base.set,
        &a.groups[&west].base.set
    ));
    assert!(
        a.memo
            .sets
            .get("v1")
            .is_none_or(|(w, _)| w.upgrade().is_none()),
        "v1's analysis is held by no group"
    );
}

#[test]
fn a_view_is_made_again_only_after_a_change_and_shares_the_groups_that_did_not_change() {
    let mut a = Analysis::new(spec(&[]));
    let audit = AuditLog::disabled();
    let vs = bound_vs();
    let groups: Vec<Group> = (0..20)
        .map(|i| Group::from(format!("c{i:02}").as_str()))
        .collect();
    for g in &groups {
        a.check(g, "v1", [&vs], None, &audit);
    }
    let first = a.view();
    assert!(
        std::sync::Arc::ptr_eq(&first, &a.view()),
        "nothing changed: the same view"
    );
    // One group's analysis changes: a new view, the others' entries shared.
    a.check(&groups[3], "v2", [], None, &audit);
    let second = a.view();
    assert!(!std::sync::Arc::ptr_eq(&first, &second));
    for (i, (x, y)) in first.iter().zip(second.iter()).enumerate() {
        assert_eq!(std::sync::Arc::ptr_eq(x, y), i != 3, "{}", x.cluster);
    }
    assert_eq!(second[3].version, "v2");
    assert!(second[3].messages.is_empty());
    // A group gone: a new view without it.
    a.remove(&groups[0]);
    let third = a.view();
    assert_eq!(third.len(), 19);
    assert!(third.iter().all(|c| c.cluster != "c00"));
}

#[test]
fn sets_of_different_content_share_their_messages_about_the_same_objects() {
    let mut memo = Memo::default();
    let vs = bound_vs();
    let other = facts(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: own, namespace: ns}\nspec:\n  hosts: [own.example.com]\n  gateways: [missing]\n",
    );
    let (shared_only, _) = memo.set_of("v1", &[&vs], None);
    let (with_own, _) = memo.set_of("v2", &[&vs, &other], None);
    assert!(!shared_only.is_empty());
    assert!(
        with_own.len() > shared_only.len(),
        "the own object's message too"
    );
    for m in shared_only.iter() {
        let same = with_own
            .iter()
            .find(|o| ***o == **m)
            .expect("the shared object's message in both sets");
        assert!(Arc::ptr_eq(m, same), "{m} is held once");
    }
    // The same content again: the same set.
    assert!(Arc::ptr_eq(
        &memo.set_of("v2", &[&vs, &other], None).0,
        &with_own
    ));
}

fn route_to_reviews() -> Facts {
    facts(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: shop}\nspec:\n  rules:\n  - backendRefs: [{name: reviews, port: 9080}]\n",
    )
}

fn cluster_with(services: &[(&str, &str)], crd_bundle: &str, istio: &str) -> ClusterFacts {
    let release = meshhub_analyze::IstioVersion::parse(istio).ok();
    ClusterFacts {
        release,
        newest: release,
        gateway_api_crds: Some(Arc::from(vec![meshhub_analyze::CrdBundle {
            name: "tlsroutes.gateway.networking.k8s.io".into(),
            bundle_version: crd_bundle.into(),
        }])),
        services: Some(Arc::new(meshhub_analyze::Services::new(
            services
                .iter()
                .map(|(ns, n)| ((*ns).to_owned(), (*n).to_owned())),
            true,
        ))),
    }
}

#[test]
fn each_clusters_services_and_crds_are_judged_for_it_alone() {
    let (east, west) = (Group::from("east"), Group::from("west"));
    let route = route_to_reviews();
    let audit = AuditLog::disabled();
    let mut a = Analysis::new(spec(&["IST0101"]));
    // East lacks shop/reviews and has TLSRoute CRDs too old for 1.30;
    // west has both right. Both receive the same content (one set
    // analysis shared), yet only east's analysis says so.
    let east_facts = cluster_with(&[("shop", "ratings")], "v1.4.0", "1.30.1");
    let west_facts = cluster_with(&[("shop", "reviews")], "v1.5.0", "1.30.1");
    let changed = a.set_clusters(
        [
            (east.clone(), east_facts.clone()),
            (west.clone(), west_facts.clone()),
        ]
        .into(),
    );
    assert_eq!(changed, [east.clone(), west.clone()]);
    let d = a.check(&east, "v1", [&route], None, &audit);
    let Decision::HoldBack(reasons) = d else {
        panic!("{d:?}")
    };
    assert_eq!(
        reasons,
        [
            "Error [IST0101] HTTPRoute shop/r spec.rules[0].backendRefs[0]: Referenced Service not found: \"shop/reviews\""
        ]
    );
    assert_eq!(
        a.check(&west, "v1", [&route], None, &audit),
        Decision::Serve
    );
    let view = a.view();
    let origins = |c: &str| -> Vec<String> {
        view.iter()
            .find(|v| v.cluster == c)
            .unwrap()
            .messages
            .iter()
            .map(|m| format!("{} {}", m.code, m.origin))
            .collect()
    };
    assert_eq!(
        origins("east"),
        [
            "IST0176 CustomResourceDefinition tlsroutes.gateway.networking.k8s.io",
            "IST0101 HTTPRoute shop/r",
        ]
    );
    assert!(origins("west").is_empty());

    // The same facts (the same Services, shared): nothing to do again. A
    // new list naming the Service: east is analysed again and served.
    assert!(
        a.set_clusters(
            [
                (east.clone(), east_facts.clone()),
                (west.clone(), west_facts.clone())
            ]
            .into()
        )
        .is_empty()
    );
    let listed = cluster_with(&[("shop", "ratings")], "v1.4.0", "1.30.1");
    let changed = a.set_clusters([(east.clone(), listed), (west.clone(), west_facts)].into());
    assert_eq!(
        changed,
        std::slice::from_ref(&east),
        "a new list is a change"
    );
    let fixed = cluster_with(&[("shop", "reviews")], "v1.4.0", "1.30.1");
    a.set_clusters([(east.clone(), fixed)].into());
    assert_eq!(
        a.check(&east, "v1", [&route], Some("v0".into()), &audit),
        Decision::Serve
    );
    // Services unknown (an agent that lists none): nothing is judged.
    a.set_clusters([(east.clone(), ClusterFacts::default())].into());
    assert_eq!(
        a.check(&east, "v1", [&route], None, &audit),
        Decision::Serve
    );
}

#[test]
fn a_groups_next_build_is_analysed_from_its_last_and_says_what_analysis_from_scratch_does() {
    let east = Group::from("east");
    let audit = AuditLog::disabled();
    let shared: Vec<Arc<Facts>> = [bound_vs(), keepalive_dr(), route_to_reviews()]
        .into_iter()
        .map(Arc::new)
        .collect();
    let gateway = Arc::new(facts(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: ns}\nspec:\n  servers: [{port: {number: 80}, hosts: [b.example.com]}]\n",
    ));
    let builds: Vec<Vec<Arc<Facts>>> = vec![
        shared.clone(),
        // The gateway the route binds, serving another host: IST0101 gone,
        // IST0132 stays.
        shared.iter().cloned().chain([gateway.clone()]).collect(),
        // The route gone.
        shared[1..].iter().cloned().chain([gateway]).collect(),
        // Back to the first: the memo has no such content any more.
        shared,
    ];
    let mut a = Analysis::new(spec(&[]));
    for (i, build) in builds.into_iter().enumerate() {
        let version = format!("v{i}");
        let build: Arc<[Arc<Facts>]> = build.into();
        let job = a.job(&east, &version, build.clone());
        assert_eq!(job.base.is_some(), i > 0, "the last build is carried");
        let done = job.run(&mut a.memo);
        a.take(done, None, &audit);
        let mut scratch = Analysis::new(spec(&[]));
        scratch.check_shared(&east, &version, build, None, &audit);
        assert_eq!(
            a.view()[0].messages,
            scratch.view()[0].messages,
            "{version}"
        );
    }
}

#[test]
fn a_wrong_base_lasts_at_most_rebase_every_builds() {
    let east = Group::from("east");
    let audit = AuditLog::disabled();
    // Two objects that never relate: a change to the second never makes
    // the first a neighbour, so a message about the first stays as its
    // base says.
    let route = Arc::new(bound_vs());
    let mut a = Analysis::new(spec(&[]));
    let build = |i: u32| -> Arc<[Arc<Facts>]> {
        let other = facts(&format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: other, namespace: elsewhere}}\nspec:\n  host: h{i}.elsewhere.svc.cluster.local\n"
        ));
        vec![route.clone(), Arc::new(other)].into()
    };
    let run = |a: &mut Analysis, i: u32| {
        let done = a.job(&east, &format!("v{i}"), build(i)).run(&mut a.memo);
        a.take(done, None, &audit);
    };
    run(&mut a, 0);
    let right = a.view()[0].messages.clone();
    assert!(!right.is_empty(), "the unbound route is reported");
    // The base as a defect in an analyzer's keys would leave it: its
    // messages lost.
    a.groups.get_mut(&east).unwrap().base.set = Arc::from(Vec::new());
    let mut wrong_for = 0;
    for i in 1..=REBASE_EVERY + 1 {
        run(&mut a, i);
        if a.view()[0].messages != right {
            wrong_for += 1;
        }
    }
    // Wrong exactly as long as the incremental runs carried it.
    assert_eq!(wrong_for, REBASE_EVERY);
    assert_eq!(a.view()[0].messages, right, "analysed from scratch again");
}
