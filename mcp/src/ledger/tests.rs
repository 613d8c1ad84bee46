use super::*;

#[test]
fn states_follow_sends_acks_and_nacks() {
    let ledger = Ledger::new();
    let rec = ledger.register(Role::Source, "127.0.0.1:1", "default");
    rec.connected();
    rec.record(&Event::Subscribed {
        collection: "c".into(),
        incremental: false,
        initial_resources: 0,
    });
    let state = |l: &Ledger| l.view()[0].collections["c"].state;
    assert_eq!(state(&ledger), SyncState::NotSent);
    rec.sent("c", "v1", "1");
    assert_eq!(state(&ledger), SyncState::Stale);
    rec.acked("c", "v1", "1");
    assert_eq!(state(&ledger), SyncState::Synced);
    rec.sent("c", "v2", "2");
    assert_eq!(state(&ledger), SyncState::Stale);
    rec.nacked("c", "v2", 3, "bad host");
    assert_eq!(state(&ledger), SyncState::Nacked);
    let view = ledger.view();
    let c = &view[0].collections["c"];
    assert_eq!(c.nacked.as_ref().unwrap().message, "bad host");
    assert_eq!(
        c.acked.as_ref().unwrap().version,
        "v1",
        "the last ACKed version stays"
    );
    assert_eq!((c.acks, c.nacks), (1, 1));
    rec.sent("c", "v3", "3");
    rec.acked("c", "v3", "3");
    assert_eq!(state(&ledger), SyncState::Synced);
}

#[test]
fn dropped_records_are_retained_as_disconnected() {
    let ledger = Ledger::new();
    {
        let rec = ledger.register(Role::Sink, "hub", "cluster-a");
        rec.connected();
        assert!(ledger.view()[0].connected);
    }
    let view = ledger.view();
    assert_eq!(view.len(), 1);
    assert!(!view[0].connected);
    assert!(view[0].disconnected_at.is_some());
    for i in 0..(RETAINED_DISCONNECTED + 10) {
        drop(ledger.register(Role::Source, format!("p{i}"), "g"));
    }
    assert_eq!(ledger.view().len(), RETAINED_DISCONNECTED);
}

#[test]
fn acks_and_nacks_are_announced_to_subscribers() {
    let ledger = Ledger::new();
    let rec = ledger.register(Role::Source, "west", "west");
    // Nobody listens: recording still works.
    rec.acked("c", "v0", "0");
    let mut rx = ledger.deliveries();
    rec.sent("c", "v1", "1");
    rec.acked("c", "v1", "1");
    rec.nacked("c", "v2", 3, "bad host");
    let ack = rx.try_recv().unwrap();
    assert_eq!((ack.outcome, ack.version.as_str()), (Outcome::Ack, "v1"));
    assert_eq!(ack.peer, "west");
    let nack = rx.try_recv().unwrap();
    assert_eq!(nack.outcome, Outcome::Nack);
    assert_eq!(nack.message.as_deref(), Some("bad host"));
    assert_eq!(nack.code, Some(3));
    assert!(rx.try_recv().is_err(), "sends are not announced");
}

#[test]
fn status_serializes_to_json() {
    let ledger = Ledger::new();
    let rec = ledger.register(Role::Source, "p", "g");
    rec.sent("c", "v1", "1");
    let v = serde_json::to_value(ledger.view()).unwrap();
    assert_eq!(v[0]["collections"]["c"]["state"], "STALE");
    assert!(
        v[0]["collections"]["c"]["sent"]["at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
}

#[test]
fn every_change_of_a_record_bumps_the_ledgers_counter() {
    let ledger = Ledger::new();
    let changes = ledger.changes();
    let seen = |last: &mut u64| {
        let now = *changes.borrow();
        let moved = now != *last;
        *last = now;
        moved
    };
    let mut last = *changes.borrow();
    let rec = ledger.register(Role::Source, "west", "west");
    assert!(seen(&mut last), "registered");
    assert!(!seen(&mut last), "nothing since");
    rec.connected();
    assert!(seen(&mut last), "connected");
    rec.sent("c", "v1", "1");
    assert!(seen(&mut last), "sent");
    rec.acked("c", "v1", "1");
    assert!(seen(&mut last), "ACKed");
    rec.disconnected(Some("reset".into()));
    assert!(seen(&mut last), "disconnected");
    rec.disconnected(Some("reset".into()));
    assert!(
        !seen(&mut last),
        "a dial failing again as before changes nothing"
    );
    rec.disconnected(Some("refused".into()));
    assert!(seen(&mut last), "another error");
    drop(rec);
    assert!(seen(&mut last), "gone");
}

#[test]
fn a_view_of_some_peers_holds_those_live_and_gone_with_their_collections() {
    let ledger = Ledger::new();
    let west = ledger.register(Role::Source, "west", "west");
    west.sent("c", "v1", "1");
    let _east = ledger.register(Role::Source, "east", "east");
    drop(ledger.register(Role::Source, "north", "north"));
    let names = |v: &[PeerStatus]| v.iter().map(|p| p.peer.clone()).collect::<Vec<_>>();
    let view = ledger.view_of(|p| p.peer == "west" || p.peer == "north");
    assert_eq!(names(&view), ["west", "north"]);
    assert_eq!(
        view[0].collections["c"].sent.as_ref().unwrap().version,
        "v1"
    );
    assert!(!view[1].connected);
    assert_eq!(names(&ledger.view_of(|_| true)), names(&ledger.view()));
    assert!(ledger.view_of(|_| false).is_empty());
}
