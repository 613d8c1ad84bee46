use meshhub_proto::mcp::Resource;
use meshhub_proto::upward::{ClusterStatus, ServiceExport};

use prost::Message as _;

use super::*;

fn resource(name: &str, message: &str, body: Vec<u8>) -> Resource {
    meshhub_testkit::mcp::resource(name, &meshhub_proto::type_url(message), body)
}

fn change(collection: &str, resources: Vec<Resource>) -> Change {
    Change {
        collection: collection.into(),
        version: "v".into(),
        resources,
        removed: Vec::new(),
        incremental: false,
        nonce: "n".into(),
    }
}

#[tokio::test]
async fn an_agent_may_only_publish_for_its_own_cluster() {
    let (tx, mut rx) = mpsc::channel(4);
    let u = ClusterUpdater {
        cluster: "east".into(),
        tx,
    };
    let west = ClusterStatus {
        cluster: "west".into(),
        ..Default::default()
    };
    let r = resource("west", CLUSTER_STATUS_MESSAGE, west.encode_to_vec());
    let e = u.apply(change(CLUSTER_STATUS, vec![r])).await.unwrap_err();
    assert!(
        matches!(&e, ApplyError::Invalid(m) if m.contains("only publish for cluster \"east\"")),
        "{e:?}"
    );
    assert!(rx.try_recv().is_err(), "nothing taken");

    let east = ClusterStatus {
        cluster: "east".into(),
        ..Default::default()
    };
    let r = resource("east", CLUSTER_STATUS_MESSAGE, east.encode_to_vec());
    u.apply(change(CLUSTER_STATUS, vec![r])).await.unwrap();
    assert!(
        matches!(rx.try_recv(), Ok(Update::Status { cluster, report: Some(_) }) if cluster == "east")
    );

    // An export's name must be its namespace/name; the body its message.
    let e = ServiceExport {
        namespace: "shop".into(),
        name: "cart".into(),
        ..Default::default()
    };
    let bad = resource("shop/other", SERVICE_EXPORT_MESSAGE, e.encode_to_vec());
    assert!(u.apply(change(SERVICE_EXPORTS, vec![bad])).await.is_err());
    let wrong = resource("shop/cart", CLUSTER_STATUS_MESSAGE, e.encode_to_vec());
    assert!(u.apply(change(SERVICE_EXPORTS, vec![wrong])).await.is_err());
    let ok = resource("shop/cart", SERVICE_EXPORT_MESSAGE, e.encode_to_vec());
    u.apply(change(SERVICE_EXPORTS, vec![ok])).await.unwrap();
    assert!(matches!(rx.try_recv(), Ok(Update::Exports { exports, .. }) if exports.len() == 1));
}
