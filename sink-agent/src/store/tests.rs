use std::collections::BTreeSet;

use bytes::Bytes;
use meshhub_proto::kinds::Kind;
use meshhub_proto::mcp::Resource;
use meshhub_proto::wire::EncodedResources;
use prost::Message as _;

use super::*;
use std::time::Duration;

const VS: &str = "istio/networking/v1alpha3/virtualservices";

fn vs_kind() -> Kind {
    KindTable::builtin().by_collection(VS).unwrap().clone()
}

use meshhub_testkit::mcp::resource;

const VS_URL: &str = "type.googleapis.com/istio.networking.v1alpha3.VirtualService";

#[test]
fn file_names_escape_and_round_trip() {
    assert_eq!(
        file_name(VS),
        "istio%2Fnetworking%2Fv1alpha3%2Fvirtualservices.pb"
    );
    for c in [VS, "k8s/core/v1/configmaps", "a%b c", "ünï"] {
        assert_eq!(collection_of(&file_name(c)).as_deref(), Some(c));
    }
    assert_eq!(collection_of("LOCK"), None);
    assert_eq!(collection_of("x%zz.pb"), None);
    assert_eq!(collection_of(".pb"), None);
}

#[test]
fn validation_names_each_bad_resource_and_counts_the_rest() {
    let kind = vs_kind();
    let good = resource("ns/good", VS_URL, vec![]);
    let ok = validate(&kind, vec![good.clone()]).unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].encoded, Bytes::from(good.encode_to_vec()));

    let e = validate(
        &kind,
        vec![
            good.clone(),
            resource(
                "ns/dr",
                "type.googleapis.com/istio.networking.v1alpha3.DestinationRule",
                vec![],
            ),
        ],
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with("VirtualService ns/dr: body type"),
        "{}",
        e.to_string()
    );

    let e = validate(
        &kind,
        vec![resource("ns/junk", VS_URL, vec![0xff, 0xff, 0xff])],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("VirtualService ns/junk: undecodable body"),
        "{}",
        e.to_string()
    );

    let mut nameless = good.clone();
    nameless.metadata.as_mut().unwrap().name.clear();
    let e = validate(&kind, vec![nameless]).unwrap_err();
    assert!(
        e.to_string().ends_with("(resources[0])"),
        "{}",
        e.to_string()
    );
    let e = validate(
        &kind,
        vec![Resource {
            metadata: None,
            body: None,
        }],
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("no metadata") && e.to_string().ends_with("(resources[0])"),
        "{}",
        e.to_string()
    );

    let many: Vec<Resource> = (0..5)
        .map(|i| resource(&format!("ns/b{i}"), "type.googleapis.com/x.Y", vec![]))
        .collect();
    let e = validate(&kind, many).unwrap_err();
    assert!(
        e.to_string().contains("ns/b0")
            && e.to_string().contains("ns/b2")
            && !e.to_string().contains("ns/b3"),
        "{}",
        e.to_string()
    );
    assert!(
        e.to_string().ends_with("and 2 more rejected resource(s)"),
        "{}",
        e.to_string()
    );
}

#[test]
fn atomic_writes_replace_and_leave_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file_name(VS));
    write_atomic(&path, b"one").unwrap();
    write_atomic(&path, b"two").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"two");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let e = write_atomic(&dir.path().join("missing/x.pb"), b"x").unwrap_err();
    assert!(error_chain(&e).contains("missing/x.pb: can't write"));
}

#[tokio::test]
async fn changes_are_accepted_persisted_published_and_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        data_dir: dir.path().to_owned(),
        data_dir_wait: std::time::Duration::ZERO,
        group: "local".into(),
        collections: vec![VS.to_owned()],
        kinds: KindTable::builtin(),
        applier: None,
        tasks: TaskTracker::new(),
        shutdown: CancellationToken::new(),
    };
    let (writer, cache) = meshhub_mcp::cache::new();
    let store = Store::open(config.clone(), writer).await.unwrap();
    assert!(cache.snapshot("local").is_some(), "published at once");
    assert!(store.status().borrow().loaded);
    let change =
        |resources: Vec<Resource>, removed: Vec<&str>, incremental, version: &str| Change {
            collection: VS.into(),
            version: version.into(),
            resources,
            removed: removed.into_iter().map(str::to_owned).collect(),
            incremental,
            nonce: "1".into(),
        };
    store
        .accept(change(
            vec![
                resource("ns/a", VS_URL, vec![]),
                resource("ns/b", VS_URL, vec![]),
            ],
            vec![],
            false,
            "v1",
        ))
        .await
        .unwrap();
    store
        .accept(change(
            vec![resource("ns/c", VS_URL, vec![])],
            vec!["ns/a"],
            true,
            "v2",
        ))
        .await
        .unwrap();
    let held: BTreeSet<String> = store.held(VS).into_keys().collect();
    assert_eq!(held, BTreeSet::from(["ns/b".to_owned(), "ns/c".to_owned()]));
    let e = store
        .accept(change(
            vec![resource("ns/x", "type.googleapis.com/x.Y", vec![])],
            vec![],
            false,
            "v3",
        ))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("ns/x"));
    assert_eq!(store.held(VS).len(), 2, "kept");
    let e = store
        .accept(Change {
            collection: "istio/networking/v1alpha3/gateways".into(),
            ..change(vec![], vec![], false, "v1")
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not accepted"), "{}", e.to_string());
    let served = cache
        .snapshot("local")
        .unwrap()
        .collection(VS)
        .version()
        .to_owned();
    drop(store);

    let (writer, cache) = meshhub_mcp::cache::new();
    let store = Store::open(config, writer).await.unwrap();
    let status = store.status().borrow().clone();
    assert_eq!(status.collections[VS].version, "v2");
    assert_eq!(status.collections[VS].origin, Origin::Disk);
    assert_eq!(
        status.collections[VS].acked_version, "v2",
        "the state loaded is the one a new stream declares as ACKed"
    );
    assert_eq!(
        cache.snapshot("local").unwrap().collection(VS).version(),
        served,
        "the served version is stable across restarts"
    );
}

/// A data directory written before seals existed: its files are served on
/// the first start of an upgraded agent, sealed in place, and from then on
/// a file without a seal (a cut one) is torn.
#[tokio::test]
async fn files_written_before_seals_are_served_once_sealed_and_then_required() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        data_dir: dir.path().to_owned(),
        data_dir_wait: std::time::Duration::ZERO,
        group: "local".into(),
        collections: vec![VS.to_owned()],
        kinds: KindTable::builtin(),
        applier: None,
        tasks: TaskTracker::new(),
        shutdown: CancellationToken::new(),
    };
    // What an older agent wrote: the same message, no seal, no marker.
    let collections = dir.path().join(FORMAT_DIR).join(COLLECTIONS_DIR);
    std::fs::create_dir_all(&collections).unwrap();
    let path = collections.join(file_name(VS));
    let encoded = resource("ns/a", VS_URL, vec![]).encode_to_vec();
    let legacy = EncodedResources {
        system_version_info: "old".into(),
        collection: VS.into(),
        resources: Arc::new(vec![Bytes::from(encoded)].into()),
        ..Default::default()
    }
    .encode_to_vec();
    std::fs::write(&path, &legacy).unwrap();
    let marker = dir.path().join(FORMAT_DIR).join(SEALED_MARKER);

    let (writer, cache) = meshhub_mcp::cache::new();
    let store = Store::open(config.clone(), writer).await.unwrap();
    assert!(store.status().borrow().load_errors.is_empty());
    assert_eq!(cache.snapshot("local").unwrap().collection(VS).len(), 1);
    assert!(marker.exists(), "marker written after the migration");
    let sealed = std::fs::read(&path).unwrap();
    assert_eq!(seal::check(&sealed), Ok(&legacy[..]), "sealed in place");
    drop(store);

    // Now a file without a seal is a torn one.
    std::fs::write(&path, &legacy).unwrap();
    let (writer, cache) = meshhub_mcp::cache::new();
    let store = Store::open(config, writer).await.unwrap();
    let errors = store.status().borrow().load_errors.clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("no seal"), "{errors:?}");
    assert!(cache.snapshot("local").unwrap().collection(VS).is_empty());
}

const DR: &str = "istio/networking/v1alpha3/destinationrules";
const DR_URL: &str = "type.googleapis.com/istio.networking.v1alpha3.DestinationRule";

fn store_config(dir: &std::path::Path, applier: Option<Applier>) -> StoreConfig {
    StoreConfig {
        data_dir: dir.to_owned(),
        data_dir_wait: std::time::Duration::ZERO,
        group: "local".into(),
        collections: vec![VS.to_owned(), DR.to_owned()],
        kinds: KindTable::builtin(),
        applier,
        tasks: TaskTracker::new(),
        shutdown: CancellationToken::new(),
    }
}

/// Sends a validated change straight to the writer (as [`Store::accept`]
/// does after validating); the receiver gets its ACK or NACK.
async fn send(
    store: &Store,
    collection: &str,
    version: &str,
    upserts: Vec<Resource>,
    removed: &[&str],
    incremental: bool,
) -> oneshot::Receiver<Result<(), ApplyError>> {
    let kind = KindTable::builtin()
        .by_collection(collection)
        .unwrap()
        .clone();
    let (reply, answer) = oneshot::channel();
    store
        .writer
        .send(writer::Change {
            collection: collection.to_owned(),
            upserts: validate(&kind, upserts),
            kind,
            version: version.to_owned(),
            removed: removed.iter().map(|s| (*s).to_owned()).collect(),
            incremental,
            reply,
        })
        .await
        .unwrap();
    answer
}

fn names(store: &Store, collection: &str) -> BTreeSet<String> {
    store.held(collection).into_keys().collect()
}

#[tokio::test]
async fn changes_sent_at_once_are_taken_in_order_per_collection() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(store_config(dir.path(), None), meshhub_mcp::cache::new().0)
        .await
        .unwrap();
    // Every change is in the writer's queue before the first is written:
    // each delta must still build on the one before it.
    let v1 = send(
        &store,
        VS,
        "v1",
        vec![
            resource("ns/a", VS_URL, vec![]),
            resource("ns/b", VS_URL, vec![]),
        ],
        &[],
        false,
    )
    .await;
    let dr = send(
        &store,
        DR,
        "d1",
        vec![resource("ns/r", DR_URL, vec![])],
        &[],
        false,
    )
    .await;
    let v2 = send(
        &store,
        VS,
        "v2",
        vec![resource("ns/c", VS_URL, vec![])],
        &["ns/a"],
        true,
    )
    .await;
    let bad = send(
        &store,
        VS,
        "v3",
        vec![resource("ns/x", DR_URL, vec![])],
        &[],
        true,
    )
    .await;
    let v4 = send(
        &store,
        VS,
        "v4",
        vec![resource("ns/d", VS_URL, vec![])],
        &["ns/b"],
        true,
    )
    .await;
    assert_eq!(v1.await.unwrap(), Ok(()));
    assert_eq!(dr.await.unwrap(), Ok(()));
    assert_eq!(v2.await.unwrap(), Ok(()));
    let Err(ApplyError::Invalid(message)) = bad.await.unwrap() else {
        panic!("an invalid change is Invalid, not retried")
    };
    assert!(message.contains("ns/x"), "{message}");
    assert_eq!(v4.await.unwrap(), Ok(()));

    let want = BTreeSet::from(["ns/c".to_owned(), "ns/d".to_owned()]);
    assert_eq!(names(&store, VS), want);
    assert_eq!(names(&store, DR), BTreeSet::from(["ns/r".to_owned()]));
    let status = store.status().borrow().clone();
    assert_eq!(status.collections[VS].version, "v4");
    assert_eq!(status.collections[VS].acked_version, "v4");
    assert_eq!(
        status.collections[VS]
            .refused
            .as_ref()
            .map(|r| r.version.as_str()),
        None,
        "v4 replaced the state v3's refusal was recorded on"
    );
    let (_, version, on_disk) = load_one(&store.path_of(VS), VS, &KindTable::builtin()).unwrap();
    assert_eq!(version, "v4");
    let on_disk: BTreeSet<String> = on_disk.iter().map(|r| r.name.to_string()).collect();
    assert_eq!(on_disk, want);
}

/// A Kubernetes API whose every request waits until `open` turns true,
/// then answers that it serves no API group (so no Istio kind), and 404 to
/// anything else. `seen` gets each path.
fn gated_api(open: watch::Receiver<bool>, seen: mpsc::UnboundedSender<String>) -> kube::Client {
    use tonic::codegen::http::{Request, Response};
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let mut open = open.clone();
        let path = req.uri().path().to_owned();
        let _ = seen.send(path.clone());
        async move {
            let _ = open.wait_for(|o| *o).await;
            let (status, body): (u16, &[u8]) = if path == "/apis" {
                (
                    200,
                    br#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#,
                )
            } else {
                (
                    404,
                    br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"not found","reason":"NotFound","code":404}"#,
                )
            };
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body.to_vec()))
                    .unwrap(),
            )
        }
    });
    kube::Client::new(service, "default")
}

#[tokio::test]
async fn a_kubernetes_round_trip_holds_up_no_other_collection() {
    let dir = tempfile::tempdir().unwrap();
    let (open_tx, open_rx) = watch::channel(false);
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let tasks = TaskTracker::new();
    let shutdown = CancellationToken::new();
    let applier = Applier::start(
        crate::apply::ApplyConfig {
            connection: meshhub_kube::Connection::default(),
            force: false,
            source_cluster: "primary".to_owned(),
            resync: Duration::from_secs(3600),
            namespaces: BTreeSet::new(),
        },
        gated_api(open_rx, seen_tx),
        &tasks,
        shutdown.clone(),
    );
    let (cache_writer, cache) = meshhub_mcp::cache::new();
    let store = Arc::new(
        Store::open(store_config(dir.path(), Some(applier)), cache_writer)
            .await
            .unwrap(),
    );
    let change = |collection: &str, r: Resource| Change {
        collection: collection.into(),
        version: "1".into(),
        resources: vec![r],
        removed: vec![],
        incremental: false,
        nonce: "1".into(),
    };

    // The virtual services' sync waits on the API server...
    let vs = tokio::spawn({
        let store = store.clone();
        let change = change(VS, resource("ns/a", VS_URL, vec![]));
        async move { store.accept(change).await }
    });
    seen.recv().await.expect("the applier asked the API server");
    // ...meanwhile another collection is persisted and published, and
    // what the store holds is read without waiting.
    let dr = tokio::spawn({
        let store = store.clone();
        let change = change(DR, resource("ns/r", DR_URL, vec![]));
        async move { store.accept(change).await }
    });
    let mut status = store.status();
    // A bound, not a synchronisation: with a lock held across the sync,
    // this would wait forever.
    tokio::time::timeout(
        Duration::from_secs(20),
        status.wait_for(|s| s.collections.contains_key(DR)),
    )
    .await
    .expect("published while the other collection's sync waits")
    .unwrap();
    let published = cache.snapshot("local").unwrap();
    assert_eq!(published.collection(DR).len(), 1);
    assert_eq!(
        published.collection(VS).len(),
        1,
        "published before its sync"
    );
    assert!(store.path_of(DR).exists(), "persisted");
    // What a new stream would declare to the hub is the last ACKed state:
    // nothing of the change not ACKed yet.
    assert_eq!(names(&store, VS), BTreeSet::new());
    assert!(
        !vs.is_finished() && !dr.is_finished(),
        "ACKs wait for the API"
    );

    // The API answers: the kind is not served, a refusal (no retry asked).
    open_tx.send(true).unwrap();
    for (task, kind) in [(vs, "VirtualService"), (dr, "DestinationRule")] {
        let Err(ApplyError::Invalid(message)) = task.await.unwrap() else {
            panic!("{kind}: a kind the cluster does not serve is Invalid")
        };
        assert!(
            message.contains(&format!("does not serve networking.istio.io/{kind}")),
            "{message}"
        );
    }
    let status = store.status().borrow().clone();
    assert!(status.collections[VS].refused.is_some());
    assert_eq!(
        status.collections[VS].acked_version, "",
        "held (and served) but never ACKed"
    );
    // Refused: still published (the applier retries it), but the hub's
    // next delta is from the last ACKed state, which a new stream declares.
    assert_eq!(cache.snapshot("local").unwrap().collection(VS).len(), 1);
    assert_eq!(names(&store, VS), BTreeSet::new());
    shutdown.cancel();
}

#[test]
fn a_refused_version_is_no_longer_the_one_acked() {
    let info = |acked: &str| status::CollectionInfo {
        version: acked.into(),
        served_version: String::new(),
        resources: 0,
        bytes: 0,
        origin: status::Origin::Disk,
        updated_at: At(SystemTime::UNIX_EPOCH),
        refused: None,
        acked_version: acked.into(),
    };
    let (tx, rx) = watch::channel(Arc::new(StoreStatus {
        collections: [(VS.to_owned(), info("v2"))].into_iter().collect(),
        ..StoreStatus::default()
    }));
    // Another version refused: v2 is still what the cluster ACKed.
    status::refused(&tx, VS, "v3", "bad route");
    assert_eq!(rx.borrow().collections[VS].acked_version, "v2");
    // v2 itself refused (loaded from disk, then refused by the API): no
    // longer counted as ACKed, so the refusal shows.
    status::refused(&tx, VS, "v2", "bad route");
    let s = rx.borrow().clone();
    assert_eq!(s.collections[VS].acked_version, "");
    assert_eq!(s.collections[VS].refused.as_ref().unwrap().version, "v2");
}
