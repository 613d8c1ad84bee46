//! TLS on a dial-in port served by `listen::serve` with a
//! `ReloadingServerTls` (real gRPC over loopback, rcgen certificates): a
//! plaintext client is refused, a rotated certificate is picked up by new
//! connections while established streams keep receiving updates, and a bad
//! new certificate is reported while the current one stays.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use meshhub_mcp::cache::SnapshotWriter;
use meshhub_mcp::group::SingleGroup;
use meshhub_mcp::listen;
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::server::SourceServer;
use meshhub_mcp::tls::{self, reload::ReloadingServerTls, reload::ServerTlsFiles};
use meshhub_testkit::mcp::{self, Subscription, first_version};
use meshhub_testkit::objects::VS;
use meshhub_testkit::pki::Ca;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

use crate::support::{one, shared};

const CLIENT_ID: &str = "spiffe://cluster.local/ns/istio-system/sa/istiod";

/// Writes `<prefix>ca.pem`, `<prefix>server.pem`, `<prefix>server-key.pem`,
/// `<prefix>client.pem`, `<prefix>client-key.pem` from a fresh CA.
fn pki(dir: &Path, prefix: &str) {
    let ca = Ca::new(&format!("{prefix}root"));
    ca.write(&dir.join(format!("{prefix}ca.pem")));
    ca.server(&["localhost"])
        .write_pem(dir, &format!("{prefix}server"));
    ca.client(CLIENT_ID)
        .write_pem(dir, &format!("{prefix}client"));
}

struct Server {
    addr: SocketAddr,
    writer: SnapshotWriter,
    tls: Arc<ReloadingServerTls>,
    shutdown: CancellationToken,
    dir: tempfile::TempDir,
}

impl Server {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn publish(&self, version: &str) {
        self.writer.set("east", one(version, None));
    }
}

/// A `ResourceSource` on loopback with mutual TLS from `a-` files (the
/// server's files are `server.pem` etc., copies of the `a-` ones).
async fn start() -> Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path(), "a-");
    pki(dir.path(), "b-");
    for f in ["server.pem", "server-key.pem", "ca.pem"] {
        std::fs::copy(dir.path().join(format!("a-{f}")), dir.path().join(f)).unwrap();
    }
    let files = ServerTlsFiles {
        cert: dir.path().join("server.pem"),
        key: dir.path().join("server-key.pem"),
        client_ca: Some(dir.path().join("ca.pem")),
    };
    let tls = ReloadingServerTls::load("grpc", files).unwrap();
    let (writer, shared) = shared(SingleGroup("east".into()), SourceConfig::default());
    let (shutdown, tasks) = (shared.shutdown.clone(), shared.tasks.clone());
    let service = SourceServer::new(shared).into_service(1 << 20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_nudge_tx, nudge) = mpsc::channel(1);
    tasks.spawn(tls.clone().watch(nudge, shutdown.clone()));
    let router = meshhub_mcp::transport::server().add_service(service);
    tasks.spawn(listen::serve(
        router,
        listener,
        Some(tls.clone()),
        "grpc",
        tasks.clone(),
        shutdown.clone(),
    ));
    let server = Server {
        addr,
        writer,
        tls,
        shutdown,
        dir,
    };
    server.publish("1");
    server
}

/// Subscribes over TLS trusting `<prefix>ca.pem` with `<prefix>client.pem`.
async fn subscribe(server: &Server, prefix: &str) -> Result<Subscription, String> {
    let config = tls::client_config(
        &server.path(&format!("{prefix}ca.pem")),
        Some((
            &server.path(&format!("{prefix}client.pem")),
            &server.path(&format!("{prefix}client-key.pem")),
        )),
        Some("localhost"),
    )
    .map_err(|e| e.to_string())?;
    let endpoint = Endpoint::from_shared(format!("https://{}", server.addr))
        .unwrap()
        .tls_config(config)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5));
    open(endpoint).await
}

/// Subscribes to virtual services over `endpoint`.
async fn open(endpoint: Endpoint) -> Result<Subscription, String> {
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| meshhub_mcp::transport::connect_error(&e))?;
    Subscription::open(channel, mcp::subscribe(VS, None))
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

/// Whether a client of `<prefix>` files gets no response (refused at the
/// handshake, or its first read fails).
async fn refused(server: &Server, prefix: &str) -> bool {
    match subscribe(server, prefix).await {
        Err(_) => true,
        // A silence counts: the handshake may leave the stream unanswered.
        Ok(mut s) => !matches!(
            tokio::time::timeout(Duration::from_secs(10), s.message()).await,
            Ok(Ok(Some(_)))
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_client_is_refused_by_a_tls_port() {
    let server = start().await;
    let endpoint = Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(5));
    let result = match open(endpoint).await {
        Ok(mut sub) => sub.next().await.map(|_| ()).map_err(|s| s.to_string()),
        Err(e) => Err(e),
    };
    assert!(result.is_err(), "plaintext must not get through");
    // The TLS client still works.
    let mut sub = subscribe(&server, "a-").await.unwrap();
    assert_eq!(first_version(&sub.next().await.unwrap()), "1");
    server.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_and_established_streams_stay() {
    let server = start().await;
    let mut status = server.tls.status();
    let mut old = subscribe(&server, "a-").await.unwrap();
    let first = old.next().await.unwrap();
    assert_eq!(first_version(&first), "1");
    old.ack(&first).await;
    assert!(
        refused(&server, "b-").await,
        "the new CA is not trusted yet"
    );

    // Rotate: the server's certificate and key and the client CA, all from
    // the new CA (as cert-manager renews a Secret), each file replaced
    // atomically.
    for f in ["server-key.pem", "server.pem", "ca.pem"] {
        let tmp = server.path(&format!(".{f}.tmp"));
        std::fs::copy(server.path(&format!("b-{f}")), &tmp).unwrap();
        std::fs::rename(&tmp, server.path(f)).unwrap();
    }
    tokio::time::timeout(
        Duration::from_secs(10),
        status.wait_for(|s| s.reloads >= 1 && s.last_error.is_none()),
    )
    .await
    .expect("the watcher reloads the new files")
    .unwrap();

    // New connections get the new certificate and CA.
    let mut new = subscribe(&server, "b-").await.unwrap();
    assert_eq!(first_version(&new.next().await.unwrap()), "1");
    assert!(
        refused(&server, "a-").await,
        "the old CA's client is refused after the rotation"
    );
    // The stream established before the rotation still gets updates.
    server.publish("2");
    let update = old.next().await.unwrap();
    assert_eq!(first_version(&update), "2");
    server.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_new_certificate_is_reported_and_the_current_one_kept() {
    let server = start().await;
    let mut status = server.tls.status();
    std::fs::write(server.path("server.pem"), "not a certificate").unwrap();
    let s = tokio::time::timeout(
        Duration::from_secs(10),
        status.wait_for(|s| s.last_error.is_some()),
    )
    .await
    .expect("the refusal is reported")
    .unwrap()
    .clone();
    let error = s.last_error.unwrap();
    assert!(
        error.contains("server.pem") && error.contains("certificate"),
        "{error}"
    );
    assert_eq!(s.reloads, 0);
    // The current certificate is still served.
    let mut sub = subscribe(&server, "a-").await.unwrap();
    assert_eq!(first_version(&sub.next().await.unwrap()), "1");
    // Fixing the file clears the error.
    std::fs::copy(server.path("a-server.pem"), server.path("server.pem")).unwrap();
    server.tls.reload_and_report();
    assert!(server.tls.status().borrow().last_error.is_none());
    server.shutdown.cancel();
}

#[test]
fn plaintext_beyond_loopback_must_be_asked_for() {
    let lo: SocketAddr = "127.0.0.1:9901".parse().unwrap();
    let any: SocketAddr = "0.0.0.0:9901".parse().unwrap();
    let v6: SocketAddr = "[::1]:9901".parse().unwrap();
    assert!(listen::check_plaintext("grpc", lo, false, false).is_ok());
    assert!(listen::check_plaintext("grpc", v6, false, false).is_ok());
    assert!(listen::check_plaintext("grpc", any, true, false).is_ok());
    assert!(listen::check_plaintext("grpc", any, false, true).is_ok());
    let e = listen::check_plaintext("grpc", any, false, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("0.0.0.0:9901") && e.contains("insecure"), "{e}");
}
