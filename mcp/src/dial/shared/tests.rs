use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::Endpoint;

use super::*;

/// A peer that accepts TCP connections and holds them, counting them.
async fn peer() -> (String, watch::Receiver<usize>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = format!("http://{}", listener.local_addr().expect("address"));
    let (tx, rx) = watch::channel(0);
    let task = tokio::spawn(async move {
        let count = AtomicUsize::new(0);
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
            tx.send_replace(count.fetch_add(1, Ordering::Relaxed) + 1);
        }
    });
    (address, rx, task)
}

async fn accepted(rx: &mut watch::Receiver<usize>, n: usize) {
    rx.wait_for(|c| *c >= n).await.expect("the peer runs");
}

#[tokio::test]
async fn the_dialers_of_one_peer_share_one_connection_and_a_forgotten_one_is_replaced() {
    let (address, mut count, _peer) = peer().await;
    let target = DialTarget::plaintext(Endpoint::from_shared(address.clone()).expect("uri"));
    let connections = Connections::default();
    assert!(!target.is_shared());
    let push = connections.share("east", target.clone());
    let upward = connections.share("east", target.clone());
    assert!(push.is_shared() && upward.is_shared());

    let first = push.connect().await.expect("connects");
    accepted(&mut count, 1).await;
    let second = upward.connect().await.expect("connects");
    assert_eq!(
        first.id, second.id,
        "the second dialer takes the held channel"
    );

    // A forgotten channel is never handed out again: the next attempt
    // connects, and the other dialer joins the new connection.
    push.forget(&first);
    let third = push.connect().await.expect("connects");
    assert_ne!(third.id, first.id);
    accepted(&mut count, 2).await;
    assert_eq!(upward.connect().await.expect("connects").id, third.id);
    // Forgetting a channel that was replaced meanwhile keeps the new one.
    upward.forget(&second);
    assert_eq!(upward.connect().await.expect("connects").id, third.id);

    // The connection lives while a stream holds it: once every holder
    // let go, the next attempt connects.
    let held = third.id;
    drop((first, second, third));
    let fourth = upward.connect().await.expect("connects");
    assert_ne!(fourth.id, held, "nobody held the connection: a new one");
    accepted(&mut count, 3).await;

    // Another peer, or the same peer at another address: a slot of its own.
    let west = connections.share("west", target.clone());
    let w = west.connect().await.expect("connects");
    accepted(&mut count, 4).await;
    assert_eq!(w.id, 1, "a new slot's first channel");
    assert_eq!(connections.len(), 2);
    let moved = DialTarget::plaintext(Endpoint::from_static("http://127.0.0.1:1"));
    let moved = connections.share("east", moved);
    assert_eq!(connections.len(), 3, "east at another address");
    assert!(
        moved
            .shared
            .as_ref()
            .zip(push.shared.as_ref())
            .is_some_and(|(a, b)| !Arc::ptr_eq(a, b)),
        "another address is another connection"
    );
    // The targets of the old address keep theirs.
    assert_eq!(push.connect().await.expect("connects").id, fourth.id);

    // An unshared target connects every time.
    let alone = target.connect().await.expect("connects");
    assert_eq!(alone.id, 0);
    accepted(&mut count, 5).await;

    // The registry holds no slot once its targets are gone.
    drop((push, upward, west, moved));
    assert!(connections.is_empty());
}

#[test]
fn the_tls_material_changes_with_any_file_and_only_then() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    let tls = ClientTlsFiles {
        ca: file("ca.pem", "ca 1"),
        cert: Some(file("tls.crt", "cert 1")),
        key: Some(file("tls.key", "key 1")),
        server_name: None,
    };
    let m1 = material(Some(&tls)).expect("readable");
    assert_eq!(
        material(Some(&tls)).expect("readable"),
        m1,
        "the same files"
    );
    file("tls.crt", "cert 2");
    let m2 = material(Some(&tls)).expect("readable");
    assert_ne!(m2, m1, "a rotated certificate");
    file("ca.pem", "ca 2");
    assert_ne!(material(Some(&tls)).expect("readable"), m2, "a new CA");
    std::fs::remove_file(dir.path().join("tls.key")).expect("remove");
    assert!(material(Some(&tls)).is_err(), "a missing file is an error");
}
