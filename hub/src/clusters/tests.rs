use std::time::Duration;

use meshhub_mcp::dial::DialSpec;
use meshhub_mcp::reconnect::ReconnectPolicy;

use super::*;

pub(crate) fn agent(cluster: &str) -> AgentSpec {
    AgentSpec {
        cluster: cluster.into(),
        dial: DialSpec {
            address: format!("http://{cluster}.example:9911"),
            tls: None,
            connect_timeout: Duration::from_secs(5),
            reconnect: ReconnectPolicy::default(),
        },
        exports: Default::default(),
    }
}

#[test]
fn remote_views_pick_each_clusters_live_dialer_and_skip_consumers() {
    let ledger = Ledger::new();
    // An old dialer of east (restarted), the live one, and a consumer.
    let old = ledger.register(Role::Source, "east", "east");
    old.connected();
    old.disconnected(Some("agent settings changed".into()));
    drop(old);
    let live = ledger.register(Role::Source, "east", "east");
    live.connected();
    live.sent("c", "v1", "1");
    live.acked("c", "v1", "1");
    let consumer = ledger.register(Role::Source, "127.0.0.1:5000", "east");
    consumer.connected();

    let view = ledger.view();
    let consumers: Vec<&str> = view
        .iter()
        .filter(|p| !is_dialer(p))
        .map(|p| p.peer.as_str())
        .collect();
    assert_eq!(consumers, ["127.0.0.1:5000"]);

    let rows = remote_views(
        &[agent("east"), agent("west")],
        &LeaderStatus::disabled(),
        &view,
        &Default::default(),
        crate::upward::peer_name,
    );
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].cluster, "east");
    assert!(rows[0].connected);
    assert_eq!(rows[0].streams, 1);
    assert_eq!(
        rows[0].collections["c"].state,
        meshhub_mcp::ledger::SyncState::Synced
    );
    // West was never dialed: listed, not connected, nothing sent.
    assert_eq!(rows[1].cluster, "west");
    assert!(!rows[1].connected);
    assert!(rows[1].collections.is_empty());
    assert_eq!(rows[1].address, "http://west.example:9911");
}

#[test]
fn endpoints_carry_the_connect_timeout() {
    let e = endpoint(&agent("east")).unwrap();
    assert_eq!(e.uri().to_string(), "http://east.example:9911/");
}

#[test]
fn first_dials_spread_with_the_number_started_and_are_bounded() {
    assert_eq!(first_dial_spread(0), Duration::ZERO);
    assert_eq!(first_dial_spread(1), Duration::from_millis(1));
    assert_eq!(first_dial_spread(300), Duration::from_millis(300));
    assert_eq!(first_dial_spread(1_000), Duration::from_secs(1));
    assert_eq!(first_dial_spread(50_000), FIRST_DIAL_SPREAD_MAX);
}

#[test]
fn with_shards_each_cluster_shows_its_shard_and_who_dials_it() {
    use crate::leader::ShardsStatus;
    use meshhub_api::status::ShardView;
    let count = 4;
    let (east, west) = (shard_of("east", count), shard_of("west", count));
    let leader = LeaderStatus {
        enabled: true,
        identity: Some("hub-a".into()),
        shards: Some(ShardsStatus {
            count,
            members: vec!["hub-a".into(), "hub-b".into()],
            held: [east].into(),
            shards: (0..count)
                .map(|shard| ShardView {
                    shard,
                    holder: (shard == east)
                        .then(|| "hub-a".to_owned())
                        .or_else(|| (shard == west).then(|| "hub-b".to_owned())),
                    clusters: 0,
                })
                .collect(),
        }),
        ..LeaderStatus::default()
    };
    assert!(leader.dials_cluster("east"));
    assert_eq!(leader.dials_cluster("west"), west == east);
    let rows = remote_views(
        &[agent("east"), agent("west")],
        &leader,
        &[],
        &Default::default(),
        crate::upward::peer_name,
    );
    assert_eq!(rows[0].shard, Some(east));
    assert_eq!(rows[0].dialed_by.as_deref(), Some("hub-a"));
    assert_eq!(rows[1].shard, Some(west));
    let expected = if west == east { "hub-a" } else { "hub-b" };
    assert_eq!(rows[1].dialed_by.as_deref(), Some(expected));
}
