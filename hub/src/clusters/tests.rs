use std::time::Duration;

use meshhub_mcp::dial::DialSpec;
use meshhub_mcp::reconnect::ReconnectPolicy;

use super::*;

fn agent(cluster: &str) -> AgentSpec {
    AgentSpec {
        cluster: cluster.into(),
        dial: DialSpec {
            address: format!("http://{cluster}.example:9911"),
            tls: None,
            connect_timeout: Duration::from_secs(5),
            reconnect: ReconnectPolicy::default(),
        },
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
