use std::collections::BTreeMap;

use meshhub_mcp::ledger::{Ledger, Role, StreamProtocol};

use super::*;

const VS: &str = "networking.istio.io/v1/VirtualService";

/// A consumer's stream on `ledger`: `node` dialing in from `addr` for
/// group `g`, up.
fn dial_in(ledger: &Ledger, node: &str, addr: &str) -> meshhub_mcp::ledger::PeerRecord {
    let p = ledger.register(Role::Source, addr, "g");
    p.identify(node, "g");
    p.protocol(StreamProtocol::Ads);
    p.node_meta([(&"ISTIO_VERSION".to_owned(), &"1.28.3".to_owned())]);
    p.connected();
    p
}

fn parse(s: &str) -> Query {
    let uri: axum::http::Uri = format!("/console?{s}").parse().unwrap();
    axum::extract::Query::<Query>::try_from_uri(&uri).unwrap().0
}

#[test]
fn consumers_show_trouble_first_once_each_and_what_they_lag() {
    let ledger = Ledger::new();
    // On the newest version of its group.
    let a = dial_in(&ledger, "istiod-a", "10.0.0.1:1");
    a.sent(VS, "v2", "1");
    a.acked(VS, "v2", "1");
    // An earlier stream of the same istiod, ended: not shown.
    drop(dial_in(&ledger, "istiod-a", "10.0.0.1:0"));
    // ACKed the version before: behind.
    let b = dial_in(&ledger, "istiod-b", "10.0.0.2:1");
    b.sent(VS, "v1", "1");
    b.acked(VS, "v1", "1");
    // NACKed.
    let c = dial_in(&ledger, "istiod-c", "10.0.0.3:1");
    c.sent(VS, "v2", "1");
    c.nacked(VS, "v2", 3, "bad host");
    // Gone, twice: shown once, disconnected.
    for port in [1, 2] {
        let d = dial_in(&ledger, "istiod-d", &format!("10.0.0.4:{port}"));
        d.disconnected(Some("reset".into()));
    }
    let group = |g: &str| (g == "g").then(|| BTreeMap::from([(VS.to_owned(), "v2".to_owned())]));
    let consumers = build(ledger.view(), &group);

    let names: Vec<&str> = consumers.iter().map(Consumer::name).collect();
    assert_eq!(names, ["istiod-c", "istiod-d", "istiod-b", "istiod-a"]);
    let health: Vec<Health> = consumers.iter().map(|c| c.health).collect();
    assert_eq!(
        health,
        [
            Health::Failing,
            Health::Disconnected,
            Health::Pending,
            Health::Synced
        ]
    );
    let [c, d, b, a] = &consumers[..] else {
        unreachable!()
    };
    assert_eq!(c.cells[0].state, CellState::Nacked);
    assert_eq!(c.cells[0].message, "bad host");
    assert_eq!(d.last_error.as_deref(), Some("reset"));
    assert!(!d.connected);
    // What it was sent vs what its group is served, by one id.
    let v2 = crate::history::version_id_of([(VS, "v2")]);
    assert_eq!(a.served.as_deref(), Some(v2.as_str()));
    assert_eq!(a.newest, a.served);
    assert_eq!(b.newest.as_deref(), Some(v2.as_str()));
    assert_ne!(b.served, b.newest);
    assert_eq!(b.cells[0].state, CellState::Pending, "ACKed an older one");
    assert_eq!(
        (
            a.protocol,
            a.istio.as_deref(),
            a.group.as_str(),
            a.peer.as_str()
        ),
        ("ads", Some("1.28.3"), "g", "10.0.0.1:1")
    );

    let shown = |q: &str| -> Vec<&str> {
        select(&consumers, &parse(q))
            .0
            .iter()
            .map(|c| c.name())
            .collect()
    };
    assert_eq!(shown("state=trouble"), ["istiod-c", "istiod-d"]);
    assert_eq!(shown("state=nacked"), ["istiod-c"]);
    assert!(shown("state=dropped").is_empty());
    assert_eq!(shown("name=10.0.0.2"), ["istiod-b"]);
    assert!(shown("label=tier").is_empty(), "consumers have no labels");
    let (page, total) = select(&consumers, &parse("size=1"));
    assert_eq!((page.len(), total), (1, 4));
    assert_eq!(select(&consumers, &parse("")).0.len(), 4);
}
