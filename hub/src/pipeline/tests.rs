use std::path::Path;
use std::time::Duration;

use meshhub_mcp::cache::{self, SnapshotCache};
use meshhub_proto::kinds::KindTable;

use super::*;
use crate::groups::{ClusterSpec, Selector};
use crate::source::file::parse_file;
use crate::store::UnknownFields;

mod model;

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DR: &str = "istio/networking/v1alpha3/destinationrules";

fn settings() -> Debounce {
    Debounce {
        quiet: Duration::from_millis(100),
        max_wait: Duration::from_secs(1),
    }
}

#[test]
fn debouncer_waits_for_quiet_bounded_by_max_wait() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut d = Debouncer::new(settings());
    assert_eq!(d.deadline(), None);
    d.touch(t0);
    assert_eq!(d.deadline(), Some(t0 + ms(100)));
    d.touch(t0 + ms(50));
    assert_eq!(d.deadline(), Some(t0 + ms(150)));
    // A steady stream never gets quiet: the maximum wait bounds it.
    d.touch(t0 + ms(950));
    assert_eq!(d.deadline(), Some(t0 + ms(1000)));
    assert_eq!(d.take(t0 + ms(1000)), Some(ms(1000)));
    assert!(!d.pending());
    assert_eq!(d.take(t0 + ms(1000)), None);
}

struct Harness {
    events: mpsc::Sender<SourceEvent>,
    status: watch::Receiver<Arc<Status>>,
    cache: SnapshotCache,
    shutdown: CancellationToken,
}

/// `east` selects the namespace `bookinfo`, `west` the label
/// `region: west`.
fn east_west() -> GroupRules {
    GroupRules::new(&[
        ClusterSpec {
            name: "east".into(),
            selector: Selector {
                namespaces: ["bookinfo".to_owned()].into(),
                ..Selector::default()
            },
        },
        ClusterSpec {
            name: "west".into(),
            selector: Selector {
                labels: [("region".to_owned(), "west".to_owned())].into(),
                ..Selector::default()
            },
        },
    ])
}

/// The store of `rules` and a snapshot cache.
fn store_of(rules: &GroupRules) -> (Store, cache::SnapshotWriter, SnapshotCache) {
    let store = Store::new(
        KindTable::builtin(),
        rules.clone(),
        UnknownFields::Reject,
        crate::validation::semantic_check(&meshhub_validate::Validator::default()),
    );
    let (writer, cache) = cache::new();
    (store, writer, cache)
}

fn start(sources: &[&str]) -> Harness {
    let rules = east_west();
    let (store, writer, cache) = store_of(&rules);
    let (pipeline, status) = Pipeline::new(
        store,
        writer,
        rules,
        settings(),
        sources.iter().map(|s| (*s).to_owned()),
    );
    let (events, rx) = mpsc::channel(64);
    let shutdown = CancellationToken::new();
    tokio::spawn(pipeline.run(rx, shutdown.clone()));
    Harness {
        events,
        status,
        cache,
        shutdown,
    }
}

fn file(name: &str, text: &str) -> SourceEvent {
    let (source, unit): (Arc<str>, Arc<str>) = ("files".into(), name.into());
    let entries = parse_file(&source, &unit, Path::new(name), text.as_bytes(), usize::MAX);
    SourceEvent::Unit {
        source,
        unit,
        entries,
    }
}

fn synced() -> SourceEvent {
    SourceEvent::Synced {
        source: "files".into(),
    }
}

fn vs(name: &str, ns: &str, host: &str, extra_meta: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\n{extra_meta}spec:\n  hosts: [{host}]\n  http:\n  - route:\n    - destination:\n        host: {host}\n"
    )
}

fn version(cache: &SnapshotCache, group: &str, coll: &str) -> String {
    cache
        .snapshot(group)
        .expect("published")
        .collection(coll)
        .version()
        .to_owned()
}

fn resources(cache: &SnapshotCache, group: &str, coll: &str) -> Vec<String> {
    cache
        .snapshot(group)
        .expect("published")
        .collection(coll)
        .keys()
        .iter()
        .map(|k| k.name.to_string())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn first_snapshots_wait_for_every_source_then_come_at_once() {
    let mut h = start(&["files", "other"]);
    h.events
        .send(file("a.yaml", &vs("a", "bookinfo", "a", "")))
        .await
        .unwrap();
    h.events.send(synced()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!h.status.borrow().ready);
    assert!(
        h.cache.groups().is_empty(),
        "nothing published before every source synced"
    );
    h.events
        .send(SourceEvent::Synced {
            source: "other".into(),
        })
        .await
        .unwrap();
    let s = h.status.wait_for(|s| s.ready).await.unwrap().clone();
    assert_eq!(s.generation, 1);
    let groups: Vec<String> = h.cache.groups().iter().map(ToString::to_string).collect();
    assert_eq!(groups, ["default", "east", "west"]);
    // Every collection of the kind table, in every group.
    let snap = h.cache.snapshot("west").unwrap();
    assert_eq!(
        snap.collections().count(),
        KindTable::builtin().iter().count()
    );
    assert!(snap.collection(VS).is_empty());
    assert_eq!(resources(&h.cache, "east", VS), ["bookinfo/a"]);
    h.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_burst_coalesces_into_one_publication() {
    let mut h = start(&["files"]);
    h.events.send(synced()).await.unwrap();
    h.status.wait_for(|s| s.ready).await.unwrap();
    let v0 = version(&h.cache, "default", VS);
    let mut watch = h.cache.watch("default", VS);
    watch.borrow_and_update();

    // Ten changes, 30ms apart: each inside the 100ms quiet period.
    let started = Instant::now();
    for i in 0..10 {
        h.events
            .send(file(
                &format!("{i}.yaml"),
                &vs(&format!("v{i}"), "x", "h", ""),
            ))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let s = h
        .status
        .wait_for(|s| s.generation == 2)
        .await
        .unwrap()
        .clone();
    // Published 100ms after the last change.
    assert_eq!(s.last_wait_ms, Some(370));
    assert!(started.elapsed() >= Duration::from_millis(370));
    watch.changed().await.unwrap();
    assert_ne!(version(&h.cache, "default", VS), v0);
    assert_eq!(resources(&h.cache, "default", VS).len(), 10);

    // Nothing more comes.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(h.status.borrow().generation, 2);
    assert!(!watch.has_changed().unwrap());
    h.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_steady_stream_is_published_at_the_maximum_wait() {
    let mut h = start(&["files"]);
    h.events.send(synced()).await.unwrap();
    h.status.wait_for(|s| s.ready).await.unwrap();
    for i in 0..30 {
        h.events
            .send(file("a.yaml", &vs("a", "x", &format!("h{i}"), "")))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // 1.5s of changes 50ms apart: the first build came at the max wait.
    let s = h
        .status
        .wait_for(|s| s.generation >= 3)
        .await
        .unwrap()
        .clone();
    assert!(s.generation >= 3);
    h.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn versions_change_only_for_groups_whose_content_changed() {
    let mut h = start(&["files"]);
    h.events
        .send(file("a.yaml", &vs("a", "bookinfo", "a", "")))
        .await
        .unwrap();
    h.events.send(synced()).await.unwrap();
    h.status.wait_for(|s| s.ready).await.unwrap();
    let east = version(&h.cache, "east", VS);
    let west = version(&h.cache, "west", VS);
    let east_dr = version(&h.cache, "east", DR);
    let mut west_watch = h.cache.watch("west", VS);
    west_watch.borrow_and_update();

    // An object only west (and default) sees.
    h.events
        .send(file(
            "b.yaml",
            &vs("b", "other", "b", "  labels:\n    region: west\n"),
        ))
        .await
        .unwrap();
    h.status.wait_for(|s| s.generation == 2).await.unwrap();
    assert_eq!(version(&h.cache, "east", VS), east);
    assert_eq!(version(&h.cache, "east", DR), east_dr);
    assert_ne!(version(&h.cache, "west", VS), west);
    assert!(west_watch.has_changed().unwrap());
    assert_eq!(resources(&h.cache, "west", VS), ["other/b"]);
    assert_eq!(
        resources(&h.cache, "default", VS),
        ["bookinfo/a", "other/b"]
    );

    // An annotation targets exactly the named clusters.
    h.events
        .send(file(
            "b.yaml",
            &vs(
                "b",
                "other",
                "b",
                "  annotations:\n    meshhub.io/clusters: east\n",
            ),
        ))
        .await
        .unwrap();
    h.status.wait_for(|s| s.generation == 3).await.unwrap();
    assert_eq!(resources(&h.cache, "east", VS), ["bookinfo/a", "other/b"]);
    assert!(resources(&h.cache, "west", VS).is_empty());
    assert_eq!(resources(&h.cache, "default", VS), ["bookinfo/a"]);
    h.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn invalid_objects_are_reported_in_the_status() {
    let mut h = start(&["files"]);
    let text = format!(
        "{}---\n{}",
        vs("good", "x", "g", ""),
        vs("bad", "x", "g", "").replace("hosts:", "hots:")
    );
    h.events.send(file("a.yaml", &text)).await.unwrap();
    h.events.send(synced()).await.unwrap();
    let s = h.status.wait_for(|s| s.ready).await.unwrap().clone();
    assert_eq!(s.objects, 1);
    assert_eq!(s.rejected.len(), 1);
    assert_eq!(s.rejected[0].name.as_deref(), Some("x/bad"));
    assert_eq!(resources(&h.cache, "default", VS), ["x/good"]);
    assert_eq!(s.sources[0].units, 1);
    h.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn rule_updates_replace_groups_and_rebuild_at_once() {
    let east = |namespaces: &[&str]| ClusterSpec {
        name: "east".into(),
        selector: Selector {
            namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
            ..Selector::default()
        },
    };
    let rules = GroupRules::new(&[east(&["bookinfo"])]);
    let store = Store::new(
        KindTable::builtin(),
        rules.clone(),
        UnknownFields::Reject,
        crate::validation::semantic_check(&meshhub_validate::Validator::default()),
    );
    let (writer, cache) = cache::new();
    let (rules_tx, rules_rx) = watch::channel(rules.clone());
    let (pipeline, mut status) =
        Pipeline::new(store, writer, rules, settings(), ["files".to_owned()]);
    let pipeline = pipeline.follow_rules(rules_rx);
    let (events, rx) = mpsc::channel(64);
    let shutdown = CancellationToken::new();
    tokio::spawn(pipeline.run(rx, shutdown.clone()));

    events
        .send(file("a.yaml", &vs("a", "bookinfo", "a", "")))
        .await
        .unwrap();
    events
        .send(file(
            "b.yaml",
            &vs(
                "b",
                "other",
                "b",
                "  annotations: {meshhub.io/clusters: north}\n",
            ),
        ))
        .await
        .unwrap();
    events.send(synced()).await.unwrap();
    status.wait_for(|s| s.ready).await.unwrap();
    assert_eq!(resources(&cache, "east", VS), ["bookinfo/a"]);
    assert_eq!(status.borrow().rejected.len(), 1, "north is no cluster yet");
    let mut east_watch = cache.watch("east", VS);
    east_watch.borrow_and_update();

    // A changed selector: east now selects `other` only; `north` appears,
    // which makes b valid. Published without waiting for the debouncer.
    let north = ClusterSpec {
        name: "north".into(),
        selector: Selector::default(),
    };
    rules_tx
        .send(GroupRules::new(&[east(&["other"]), north.clone()]))
        .unwrap();
    let s = status
        .wait_for(|s| s.generation == 2)
        .await
        .unwrap()
        .clone();
    assert!(s.rejected.is_empty(), "{:?}", s.rejected);
    assert_eq!(s.last_wait_ms, None, "nothing was debounced");
    assert!(resources(&cache, "east", VS).is_empty());
    // north selects everything; b names it.
    assert_eq!(resources(&cache, "north", VS), ["bookinfo/a", "other/b"]);
    assert!(east_watch.has_changed().unwrap());
    east_watch.borrow_and_update();

    // Removing east withdraws its group: its watches end.
    rules_tx.send(GroupRules::new(&[north])).unwrap();
    status.wait_for(|s| s.generation == 3).await.unwrap();
    assert!(east_watch.has_changed().is_err(), "the sender is gone");
    assert!(matches!(
        *east_watch.borrow(),
        meshhub_mcp::cache::CollectionState::Withdrawn
    ));
    let groups: Vec<String> = cache.groups().iter().map(ToString::to_string).collect();
    assert_eq!(groups, ["default", "north"]);
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_cluster_a_reload_stops_dialing_gets_its_newest_build_instead_of_its_hold() {
    use crate::clusters::tests::agent;
    use meshhub_mcp::ledger::Ledger;
    use meshhub_rollout::{Members, OnFailure, Policy, Promotion, Wave};

    let rules = east_west();
    let (store, writer, cache) = store_of(&rules);
    let (pipeline, mut status) =
        Pipeline::new(store, writer, rules, settings(), ["files".to_owned()]);
    let wave = |name: &str, members: Members| Wave {
        name: name.into(),
        members,
        max_concurrent: None,
        bake_ms: 0,
        promotion: Promotion::Automatic,
        metrics: vec![],
    };
    let policy = Policy {
        waves: vec![
            wave("canary", Members::Names(vec!["west".into()])),
            wave("rest", Members::Rest),
        ],
        progress_deadline_ms: 600_000,
        on_failure: OnFailure::Rollback,
    };
    let dialed = |names: &[&str]| {
        names
            .iter()
            .map(|n| ((*n).to_owned(), BTreeMap::new()))
            .collect()
    };
    let (controller, view) = rollout::Controller::new(
        policy.clone(),
        dialed(&["east", "west"]),
        Default::default(),
    );
    let (agents_tx, agents_rx) = watch::channel(Arc::new(vec![agent("east"), agent("west")]));
    let (_labels_tx, labels_rx) = watch::channel(Arc::new(BTreeMap::new()));
    let (_policy_tx, policy_rx) = watch::channel(Some(policy));
    let (_requests_tx, requests_rx) = mpsc::channel(1);
    let pipeline = pipeline
        .stage_rollouts(controller, Ledger::new(), requests_rx, None)
        .follow_reloads(agents_rx, labels_rx, policy_rx);
    let (events, rx) = mpsc::channel(64);
    let shutdown = CancellationToken::new();
    tokio::spawn(pipeline.run(rx, shutdown.clone()));

    // One object for both clusters (east by namespace, west by label).
    let labelled = |host: &str| vs("r", "bookinfo", host, "  labels: {region: west}\n");
    events.send(file("r.yaml", &labelled("v1"))).await.unwrap();
    events.send(synced()).await.unwrap();
    status.wait_for(|s| s.ready).await.unwrap();
    let first = version(&cache, "east", VS);
    assert_eq!(first, version(&cache, "west", VS));

    // A change: the canary (west) gets it, east is held on its first
    // version (no ACK comes: nothing dials).
    events.send(file("r.yaml", &labelled("v2"))).await.unwrap();
    let mut view = view;
    view.wait_for(|v| v.rollout.is_some()).await.unwrap();
    assert_ne!(version(&cache, "west", VS), first);
    assert_eq!(version(&cache, "east", VS), first, "east held");

    // A reload stops dialing east (its cluster entry stays): east is no
    // longer governed and is served its newest build.
    let mut east = cache.watch("east", VS);
    east.borrow_and_update();
    agents_tx.send_replace(Arc::new(vec![agent("west")]));
    tokio::time::timeout(Duration::from_secs(5), east.changed())
        .await
        .expect("east served again")
        .unwrap();
    assert_eq!(version(&cache, "east", VS), version(&cache, "west", VS));
    shutdown.cancel();
}

/// A Gateway API object is placed like any kind (east by namespace, west
/// by label); once west's agent reports that its cluster lacks the CRD,
/// west is served the collection empty and the status says why; east,
/// whose agent said nothing, keeps it.
#[tokio::test(start_paused = true)]
async fn gateway_api_objects_are_placed_like_any_kind_and_withheld_where_the_crd_is_missing() {
    const ROUTES: &str = "k8s/gateway.networking.k8s.io/v1/httproutes";
    let rules = east_west();
    let (store, writer, cache) = store_of(&rules);
    let (pipeline, mut status) =
        Pipeline::new(store, writer, rules, settings(), ["files".to_owned()]);
    let (reports, reports_rx) = watch::channel(crate::upward::Reports::default());
    let pipeline = pipeline.follow_istio(reports_rx);
    let (events, rx) = mpsc::channel(64);
    let shutdown = CancellationToken::new();
    tokio::spawn(pipeline.run(rx, shutdown.clone()));
    let route = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: reviews\n  namespace: bookinfo\n  labels: {region: west}\nspec:\n  parentRefs: [{name: ingress}]\n";
    events.send(file("route.yaml", route)).await.unwrap();
    events.send(synced()).await.unwrap();
    status.wait_for(|s| s.ready).await.unwrap();
    assert_eq!(resources(&cache, "east", ROUTES), ["bookinfo/reviews"]);
    assert_eq!(resources(&cache, "west", ROUTES), ["bookinfo/reviews"]);

    let lacking = crate::upward::ClusterReport {
        view: meshhub_api::upward::ClusterReportView {
            gateway_api: Some(meshhub_api::upward::GatewayApiCrdsView::default()),
            ..Default::default()
        },
        ..Default::default()
    };
    reports.send_replace(Arc::new(BTreeMap::from([(
        "west".to_owned(),
        Arc::new(lacking),
    )])));
    let s = status
        .wait_for(|s| !s.withheld.is_empty())
        .await
        .unwrap()
        .clone();
    assert!(resources(&cache, "west", ROUTES).is_empty());
    assert_eq!(resources(&cache, "east", ROUTES), ["bookinfo/reviews"]);
    assert_eq!(s.withheld.len(), 1, "{:?}", s.withheld);
    let w = &s.withheld[0];
    assert_eq!(
        (w.cluster.as_str(), w.collection.as_str(), w.objects),
        ("west", ROUTES, 1)
    );
    assert!(
        w.reason
            .contains("cluster west lacks the CRD httproutes.gateway.networking.k8s.io"),
        "{}",
        w.reason
    );
    shutdown.cancel();
}
