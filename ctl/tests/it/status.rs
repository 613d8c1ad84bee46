//! `meshhubctl status` against a hub that dials a `ResourceSink` whose
//! updater rejects a resource (real gRPC on loopback): the NACK shows, as a
//! table and as JSON, and an unreachable admin port is named.

use std::sync::Arc;

use meshhub_e2e::inproc::{dialer, hub_of_file, tree, write_hub_config};
use meshhub_e2e::yaml::cluster;
use meshhub_mcp::ledger::{PeerStatus, SyncState};
use meshhub_testkit::eventually;
use meshhub_testkit::objects::{VS, vs};

use crate::support::{Picky, StandIn, meshhubctl as ctl};

fn vs_state(p: &PeerStatus) -> Option<SyncState> {
    p.collections.get(VS).map(|c| c.state)
}

#[tokio::test]
async fn a_nack_shows_in_meshhubctl_status_is_not_resent_and_a_fix_is_acked() {
    // The sink: a real ResourceSink server on loopback.
    let picky = Arc::new(Picky::default());
    let sink = StandIn::start(picky.clone()).await;
    let sink_addr = sink.addr;

    let (dir, config) = tree();
    let objects = dir.path().join("objects");
    std::fs::write(objects.join("a.yaml"), vs("a", "a")).unwrap();
    write_hub_config(
        &config,
        &cluster("east", "", format!("http://{sink_addr}"), ""),
        "",
    );
    let hub = hub_of_file(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    eventually("the first version is ACKed", || async {
        dialer(&hub, "east").and_then(|p| vs_state(&p)) == Some(SyncState::Synced)
    })
    .await;

    // A resource the sink rejects.
    std::fs::write(objects.join("bad.yaml"), vs("bad", "b")).unwrap();
    eventually("the NACK", || async {
        dialer(&hub, "east").and_then(|p| vs_state(&p)) == Some(SyncState::Nacked)
    })
    .await;
    let p = dialer(&hub, "east").unwrap();
    let c = &p.collections[VS];
    let nacked = c.nacked.clone().unwrap();
    assert!(
        nacked.message.contains("bookinfo/bad"),
        "{}",
        nacked.message
    );
    assert_eq!(c.sent.as_ref().unwrap().version, nacked.version);

    let out = ctl(&["status", "--admin", &admin]).await;
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8(out.stdout).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with("east") && l.contains(VS))
        .unwrap_or_else(|| panic!("no east/{VS} row in\n{table}"));
    assert!(row.contains("NACKED"), "{row}");
    assert!(row.contains("rejected by the test sink"), "{row}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("east ") && l.contains("yes")),
        "{table}"
    );

    // JSON for scripts: full versions, the message.
    let out = ctl(&["status", "--admin", &admin, "-o", "json"]).await;
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let vs_row = &json["clusters"][0]["collections"][VS];
    assert_eq!(json["clusters"][0]["name"], "east");
    assert_eq!(json["clusters"][0]["connected"], true);
    assert_eq!(vs_row["state"], "NACKED");
    assert_eq!(vs_row["nacked"], nacked.version.as_str());
    assert!(
        vs_row["message"]
            .as_str()
            .unwrap()
            .contains("rejected by the test sink")
    );

    // Unrelated changes of other collections don't resend the NACKed version.
    std::fs::write(
        objects.join("dr.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r, namespace: bookinfo}\nspec: {host: r}\n",
    )
    .unwrap();
    eventually("the DR change is published", || async {
        hub.cache().snapshot("east").is_some_and(|s| {
            !s.collection("istio/networking/v1alpha3/destinationrules")
                .is_empty()
        })
    })
    .await;

    // The fix: a new version, delivered and ACKed.
    std::fs::write(objects.join("bad.yaml"), vs("good", "b")).unwrap();
    eventually("the fix is ACKed", || async {
        dialer(&hub, "east").is_some_and(|p| {
            let c = &p.collections[VS];
            c.state == SyncState::Synced && c.acked.as_ref().unwrap().version != nacked.version
        })
    })
    .await;
    assert_eq!(
        picky.offered.lock().unwrap()[&nacked.version],
        1,
        "the NACKed version was offered exactly once"
    );
    let p = dialer(&hub, "east").unwrap();
    assert_eq!(p.streams, 1, "one stream throughout");
    assert_eq!(p.collections[VS].nacks, 1);
    let out = ctl(&["status", "--admin", &admin]).await;
    let table = String::from_utf8(out.stdout).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with("east") && l.contains(VS))
        .unwrap();
    assert!(row.contains("SYNCED"), "{row}");

    assert!(hub.shutdown().await);
    sink.stop().await;
}

#[tokio::test]
async fn meshhubctl_status_fails_clearly_when_the_admin_port_is_unreachable() {
    // A port that was just free.
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let out = ctl(&[
        "status",
        "--admin",
        &format!("http://{addr}"),
        "--timeout",
        "5s",
    ])
    .await;
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("cannot reach the hub's admin port") && err.contains(&addr.to_string()),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}
