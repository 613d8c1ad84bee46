use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;

fn res(name: &str, version: &str, body: &str) -> EncodedResource {
    EncodedResource {
        name: name.into(),
        version: version.into(),
        encoded: Bytes::from(body.to_owned()),
    }
}

fn snap(resources: Vec<EncodedResource>) -> Arc<Snapshot> {
    Arc::new(Snapshot::new().with_collection("vs", Arc::new(CollectionSnapshot::new(resources))))
}

fn publication(cluster: &str, snapshot: Arc<Snapshot>, unit: &str) -> Publication {
    Publication {
        held_back: Vec::new(),
        cluster: cluster.into(),
        snapshot,
        at: SystemTime::now(),
        origins: Arc::new(vec![ChangeOrigin {
            source: "files".into(),
            unit: unit.into(),
            objects: vec!["VirtualService ns/a".into()],
            removed: false,
            unreadable: 0,
            resource_version: None,
            changed_by: None,
        }]),
        more_origins: 0,
    }
}

fn open(dir: &Path, keep: usize) -> (History, CancellationToken, TaskTracker) {
    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let h = History::open(
        &HistorySpec {
            dir: dir.to_owned(),
            keep,
            cache_bytes: super::DEFAULT_CACHE_BYTES,
        },
        None,
        None,
        &tasks,
        shutdown.clone(),
    )
    .unwrap();
    (h, shutdown, tasks)
}

#[tokio::test]
async fn versions_are_deduplicated_content_addressed_and_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let (h, shutdown, _tasks) = open(dir.path(), 2);
    let big = "x".repeat(1000);
    let v1 = snap(vec![res("ns/a", "1", &big), res("ns/b", "1", "b1")]);
    assert_eq!(
        h.append(&publication("west", v1.clone(), "a.yaml"))
            .unwrap(),
        Some(1)
    );
    // The same content again (a restart, another group's change): no version.
    assert_eq!(
        h.append(&publication("west", v1.clone(), "a.yaml"))
            .unwrap(),
        None
    );
    let stats = h.inner.db.stats().unwrap();
    assert_eq!((stats.versions, stats.bodies), (1, 2));
    assert_eq!(stats.bytes, 1002);

    // Only b changes: a's body is stored once.
    let v2 = snap(vec![res("ns/a", "1", &big), res("ns/b", "2", "b2")]);
    assert_eq!(
        h.append(&publication("west", v2, "b.yaml")).unwrap(),
        Some(2)
    );
    let stats = h.inner.db.stats().unwrap();
    assert_eq!((stats.versions, stats.bodies, stats.bytes), (2, 3, 1004));

    // A third version pushes the first out; b1's body goes with it, a's
    // (still referred to) stays.
    let v3 = snap(vec![res("ns/a", "1", &big)]);
    assert_eq!(
        h.append(&publication("west", v3, "b.yaml")).unwrap(),
        Some(3)
    );
    let stats = h.inner.db.stats().unwrap();
    assert_eq!((stats.versions, stats.bodies, stats.bytes), (2, 2, 1002));
    let list = h.list("west").unwrap();
    assert_eq!(list.iter().map(|v| v.seq).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(list[1].origins[0].unit, "b.yaml");
    assert_eq!(list[0].counts()["vs"], 2);
    assert!(h.list("east").unwrap().is_empty());

    // Find by id, prefix and sequence number.
    let id2 = list[0].id.clone();
    assert_eq!(h.find("west", &id2).unwrap().seq, 2);
    assert_eq!(h.find("west", &id2[..6]).unwrap().seq, 2);
    assert_eq!(h.find("west", "#3").unwrap().seq, 3);
    assert!(matches!(
        h.find("west", "#1"),
        Err(HistoryError::NoVersion { .. })
    ));
    assert!(matches!(
        h.find("west", "ab"),
        Err(HistoryError::NoVersion { .. })
    ));
    shutdown.cancel();
}

#[tokio::test]
async fn a_pin_serves_old_content_under_new_versions_survives_reopen_and_is_not_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let (h, shutdown, tasks) = open(dir.path(), 2);
    let v1 = snap(vec![res("ns/a", "1", "a1")]);
    h.append(&publication("west", v1.clone(), "a.yaml"))
        .unwrap();
    h.append(&publication(
        "west",
        snap(vec![res("ns/a", "2", "a2")]),
        "a.yaml",
    ))
    .unwrap();
    let mut pins = h.pins();
    let audit = crate::audit::AuditLog::disabled();
    let record = h.pin("west", "#1", "alice", &audit).await.unwrap();
    assert!(pins.has_changed().unwrap());
    let active = pins.borrow_and_update().get("west").cloned().unwrap();
    assert_eq!(active.record, record);
    assert_eq!(record.by, "alice");
    let served = active.snapshot.collection("vs");
    let old = v1.collection("vs");
    assert_eq!(served.resources(), old.resources(), "the old bodies");
    assert_eq!(served.keys(), old.keys());
    assert_ne!(
        served.version(),
        old.version(),
        "under a version of its own"
    );
    assert!(served.version().starts_with(old.version()));

    // Newer versions are recorded; the pinned one is kept beyond `keep`.
    for i in 3..6 {
        h.append(&publication(
            "west",
            snap(vec![res("ns/a", &i.to_string(), "an")]),
            "a.yaml",
        ))
        .unwrap();
    }
    let seqs: Vec<u64> = h.list("west").unwrap().iter().map(|v| v.seq).collect();
    assert_eq!(seqs, [1, 4, 5], "the newest 2, plus the pinned one");
    let view = &h.pin_views()[0];
    assert_eq!(view.behind, 2);
    assert_eq!(
        view.latest.as_deref(),
        Some(h.list("west").unwrap()[2].id.as_str())
    );
    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    drop(h);

    // Reopened: the pin is restored with the same served versions.
    let (h, shutdown, _tasks) = open(dir.path(), 2);
    let restored = h.pins().borrow().get("west").cloned().unwrap();
    assert_eq!(restored.record, record);
    assert_eq!(
        restored.snapshot.collection("vs").version(),
        served.version()
    );
    let audit = crate::audit::AuditLog::disabled();
    assert_eq!(h.unpin("west", "bob", &audit).await.unwrap(), record);
    assert!(h.pins().borrow().is_empty());
    assert!(matches!(
        h.unpin("west", "bob", &audit).await,
        Err(HistoryError::NotPinned(_))
    ));

    // Shared pins (another replica's record, its own sequence number and
    // time): resolved by id here, served with the record's time.
    let v5 = h.find("west", "#5").unwrap();
    let theirs = PinRecord {
        cluster: "west".into(),
        version: v5.id.clone(),
        seq: 42,
        since: "2026-01-01T00:00:00Z".into(),
        since_unix_ms: 0x1234,
        by: "bob".into(),
    };
    let desired: BTreeMap<_, _> = [("west".to_owned(), theirs.clone())].into();
    assert_eq!(h.reconcile(desired.clone()), 1);
    assert_eq!(h.reconcile(desired), 0, "unchanged");
    let active = h.pins().borrow().get("west").cloned().unwrap();
    assert_eq!(active.record.seq, 5, "this replica's sequence number");
    assert!(
        active
            .snapshot
            .collection("vs")
            .version()
            .ends_with(".pin-1234")
    );
    let unknown = PinRecord {
        version: "ffffffffffff".into(),
        since_unix_ms: 1,
        ..theirs
    };
    assert!(h.unresolved_pins().is_empty());
    assert_eq!(h.reconcile([("west".to_owned(), unknown)].into()), 0);
    assert_eq!(
        h.pins().borrow()["west"].record.since_unix_ms,
        0x1234,
        "kept"
    );
    // Shown, with what is served instead, until the pin is lifted.
    let unresolved = h.unresolved_pins();
    assert_eq!(unresolved.len(), 1, "{unresolved:?}");
    assert_eq!(unresolved[0].record.version, "ffffffffffff");
    assert_eq!(unresolved[0].record.by, "bob");
    assert_eq!(unresolved[0].serving, format!("the earlier pin {}", v5.id));
    assert!(
        unresolved[0].reason.contains("ffffffffffff"),
        "{unresolved:?}"
    );
    assert_eq!(h.reconcile(BTreeMap::new()), 1);
    assert!(h.pins().borrow().is_empty());
    assert!(h.unresolved_pins().is_empty(), "lifted");
    shutdown.cancel();
}

#[test]
fn version_ids_follow_collection_versions() {
    let a = snap(vec![res("ns/a", "1", "x")]);
    let b = snap(vec![res("ns/a", "1", "y")]);
    let c = snap(vec![res("ns/a", "2", "x")]);
    assert_eq!(version_id(&a), version_id(&b), "versions, not bytes");
    assert_ne!(version_id(&a), version_id(&c));
    assert_eq!(version_id(&a).len(), 12);
}

#[test]
fn config_defaults_and_checks() {
    let base = Path::new("/etc/meshhub");
    let spec = RawHistory::default().check(base).unwrap();
    assert_eq!(spec.dir, Path::new(DEFAULT_DIR));
    assert_eq!(spec.keep, DEFAULT_KEEP);
    assert_eq!(spec.cache_bytes, super::DEFAULT_CACHE_BYTES);
    let raw: RawHistory = serde_json::from_value(
        serde_json::json!({"dir": "data", "keep": 5, "cacheBytes": 8_388_608}),
    )
    .unwrap();
    let spec = raw.check(base).unwrap();
    assert_eq!(spec.dir, Path::new("/etc/meshhub/data"));
    assert_eq!(spec.cache_bytes, 8 << 20);
    let raw: RawHistory = serde_json::from_value(serde_json::json!({"cacheBytes": 4096})).unwrap();
    let e = raw.check(base).unwrap_err();
    assert_eq!(e.field, "cacheBytes");
    let raw: RawHistory = serde_json::from_value(serde_json::json!({"keep": 1})).unwrap();
    assert_eq!(raw.check(base).unwrap_err().field, "keep");
    assert!(serde_json::from_value::<RawHistory>(serde_json::json!({"kept": 1})).is_err());
}

#[tokio::test]
async fn recording_a_large_version_is_quick_and_the_next_one_costs_only_its_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (h, shutdown, _tasks) = open(dir.path(), 50);
    let body = "y".repeat(600);
    let make = |changed: usize| {
        snap(
            (0..2000)
                .map(|i| {
                    let v = if i < changed { "2" } else { "1" };
                    res(&format!("ns/vs-{i:04}"), v, &format!("{body}{i}{v}"))
                })
                .collect(),
        )
    };
    let started = std::time::Instant::now();
    h.append(&publication("west", make(0), "all")).unwrap();
    let first = started.elapsed();
    let bytes = h.inner.db.stats().unwrap().bytes;
    let started = std::time::Instant::now();
    h.append(&publication("west", make(10), "ten")).unwrap();
    let second = started.elapsed();
    let stats = h.inner.db.stats().unwrap();
    eprintln!(
        "2000 resources: first version {first:?} ({bytes} body bytes), 10 changed {second:?} (+{} bytes)",
        stats.bytes - bytes
    );
    assert_eq!(stats.bodies, 2010, "only the ten changed bodies were added");
    assert!(stats.bytes - bytes < 10 * 700);
    assert!(first < std::time::Duration::from_secs(10), "{first:?}");
    shutdown.cancel();
}

#[tokio::test]
async fn versions_the_rollout_refers_to_are_never_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let (h, shutdown, _tasks) = open(dir.path(), 2);
    let v = |n: u32| snap(vec![res("ns/a", &n.to_string(), &format!("a{n}"))]);
    h.append(&publication("west", v(1), "1")).unwrap();
    // The rollout holds west on v1 (its previous version).
    h.protect(
        "decided",
        HashSet::from([("west".to_owned(), version_id(&v(1)))]),
    );
    for n in 2..=5 {
        h.append(&publication("west", v(n), "n")).unwrap();
    }
    let ids: Vec<String> = h.list("west").unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(
        ids,
        [version_id(&v(1)), version_id(&v(4)), version_id(&v(5))],
        "v1 kept beyond `keep` while referred to"
    );
    assert!(h.snapshot("west", &version_id(&v(1))).is_ok());
    // No longer referred to: pruned with the next version.
    h.protect("decided", HashSet::new());
    h.append(&publication("west", v(6), "n")).unwrap();
    assert!(h.find("west", &version_id(&v(1))).is_err());
    shutdown.cancel();
}

#[tokio::test]
async fn every_group_s_newest_build_is_recorded_however_many_change_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (h, shutdown, tasks) = open(dir.path(), 5);
    // 600 groups, each built twice in a burst (the old queue held 256).
    let v = |g: usize, n: u32| snap(vec![res("ns/a", &format!("{g}-{n}"), "x")]);
    for n in 1..=2 {
        for g in 0..600 {
            h.record(publication(&format!("g{g}"), v(g, n), "burst"));
        }
    }
    // Shutdown writes what waits before the recorder ends.
    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    for g in 0..600 {
        let newest = h.list(&format!("g{g}")).unwrap().pop().map(|s| s.id);
        assert_eq!(newest, Some(version_id(&v(g, 2))), "group g{g}");
    }
}

#[tokio::test]
async fn a_version_exported_by_one_replica_is_served_alike_by_another_that_never_built_it() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (leader, s1, t1) = open(a.path(), 5);
    let (fresh, s2, t2) = open(b.path(), 5);
    let built = snap(vec![res("ns/a", "1", "body-a"), res("ns/b", "2", "body-b")]);
    let id = version_id(&built);
    leader
        .append(&publication("east", built.clone(), "f.yaml"))
        .unwrap();
    // Some history of its own first: the import takes the next number.
    fresh
        .append(&publication(
            "east",
            snap(vec![res("ns/c", "9", "c")]),
            "g.yaml",
        ))
        .unwrap();
    assert!(matches!(
        fresh.snapshot("east", &id),
        Err(HistoryError::NoVersion { .. })
    ));
    let exported = leader.export("east", &id).unwrap();
    assert_eq!(exported.bodies.len(), 2);
    // Through the archive's bytes, as another replica reads them.
    let blob = archive::encode(&exported).unwrap();
    let back = archive::decode(&blob, "east", &id).unwrap();
    fresh.import(back).unwrap();
    let served = fresh.snapshot("east", &id).unwrap();
    assert_eq!(version_id(&served), id);
    assert_eq!(
        served.collection("vs").resources().as_ref(),
        built.collection("vs").resources().as_ref(),
        "the same bodies"
    );
    let listed = fresh.list("east").unwrap();
    let imported = listed.last().unwrap();
    assert!(imported.from_archive);
    assert_eq!(imported.seq, 2, "this replica's own numbering");
    // Without an archive, a missing version stays missing (and is said so).
    let still = fresh
        .fetch_missing(vec![
            ("east".into(), id.clone()),
            ("east".into(), "ffffffffffff".into()),
        ])
        .await;
    assert_eq!(still, [("east".to_owned(), "ffffffffffff".to_owned())]);
    for (s, t) in [(s1, t1), (s2, t2)] {
        s.cancel();
        t.close();
        t.wait().await;
    }
}

#[test]
fn opening_a_database_another_holder_has_waits_for_it_to_let_go() {
    use super::db::Db;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.redb");
    let first = Db::open(&path, 1 << 20).unwrap();
    // Not waiting: refused while held.
    assert!(Db::open_waiting(&path, 1 << 20, Duration::ZERO).is_err());
    // The old pod lets go while the new one waits.
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn({
        let path = path.clone();
        move || {
            tx.send(()).unwrap();
            let started = Instant::now();
            let db = Db::open_waiting(&path, 1 << 20, Duration::from_secs(30));
            (db.is_ok(), started.elapsed())
        }
    });
    rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(first);
    let (opened, took) = waiter.join().unwrap();
    assert!(opened, "opened once the first holder closed it");
    assert!(took < Duration::from_secs(30), "{took:?}");
}
