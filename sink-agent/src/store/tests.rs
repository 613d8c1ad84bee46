use std::collections::BTreeSet;

use bytes::Bytes;
use meshhub_proto::kinds::Kind;
use meshhub_proto::mcp::{Metadata, Resource};
use meshhub_proto::wire::EncodedResources;
use prost::Message as _;

use super::*;

const VS: &str = "istio/networking/v1alpha3/virtualservices";

fn vs_kind() -> Kind {
    KindTable::builtin().by_collection(VS).unwrap().clone()
}

fn resource(name: &str, type_url: &str, value: Vec<u8>) -> Resource {
    Resource {
        metadata: Some(Metadata {
            name: name.into(),
            version: "1".into(),
            ..Default::default()
        }),
        body: Some(prost_types::Any {
            type_url: type_url.into(),
            value,
        }),
    }
}

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
async fn changes_apply_persist_publish_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        data_dir: dir.path().to_owned(),
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
        .apply(change(
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
        .apply(change(
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
        .apply(change(
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
        .apply(Change {
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
