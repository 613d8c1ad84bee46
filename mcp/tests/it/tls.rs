//! Mutual TLS with real certificates (generated with rcgen): the consumer's
//! verified SPIFFE identity places it in its group; peers without a trusted
//! certificate are refused.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use meshhub_mcp::cache::Group;
use meshhub_mcp::group::{Consumer, GroupError, GroupIndex};
use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::snapshot::EncodedResource;
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::server::SourceServer;
use meshhub_mcp::tls;
use meshhub_proto::mcp::RequestResources;
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_testkit::eventually;
use meshhub_testkit::objects::VS;
use meshhub_testkit::pki::Ca;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Endpoint, Server};

use crate::support::{shared, snapshot};

const EAST_ID: &str = "spiffe://cluster.local/ns/istio-system/sa/meshhub-east";

/// Places consumers by their verified SPIFFE identity only.
struct ByIdentity;
impl GroupIndex for ByIdentity {
    fn group(&self, c: &Consumer) -> Result<Group, GroupError> {
        if c.identities.iter().any(|i| i == EAST_ID) {
            Ok("east".into())
        } else {
            Err(GroupError::new(format!(
                "no known identity in {:?}",
                c.identities
            )))
        }
    }
}

/// A CA's files in a temporary directory: `ca.pem`, a server certificate
/// for 127.0.0.1/localhost (`server.pem`, `server-key.pem`) and a client
/// certificate for `EAST_ID` (`client.pem`, `client-key.pem`); plus a
/// second, untrusted CA's client (`rogue-client.pem`, `rogue-client-key.pem`).
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = Ca::new("meshhub test root");
        root.write(&dir.path().join("ca.pem"));
        root.server(&["localhost", "127.0.0.1"])
            .write_pem(dir.path(), "server");
        root.client(EAST_ID).write_pem(dir.path(), "client");
        Ca::new("rogue root")
            .client(EAST_ID)
            .write_pem(dir.path(), "rogue-client");
        Self { dir }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }
}

async fn start(pki: &Pki) -> (SocketAddr, CancellationToken) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (writer, shared) = shared(ByIdentity, SourceConfig::default());
    let resource = EncodedResource {
        name: "ns/east-only".into(),
        version: "1".into(),
        encoded: bytes::Bytes::new(),
    };
    writer.set("east", snapshot(vec![(VS, vec![resource])]));
    let shutdown = shared.shutdown.clone();
    let service = SourceServer::new(shared).into_service(1 << 20);
    let tls = tls::server_config(
        &pki.path("server.pem"),
        &pki.path("server-key.pem"),
        Some(&pki.path("ca.pem")),
        // Optional at the handshake, so that the refusal of a peer without
        // identity is the group index's, with a reason.
        true,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop.cancelled_owned())
            .await
            .unwrap();
    });
    (addr, shutdown)
}

/// Subscribes to VS and returns the first message or the error.
async fn first_response(
    addr: SocketAddr,
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<meshhub_proto::mcp::Resources, String> {
    let tls = tls::client_config(ca, client, Some("localhost")).map_err(|e| e.to_string())?;
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    let mut client = ResourceSourceClient::new(channel);
    let req = RequestResources {
        collection: VS.into(),
        ..Default::default()
    };
    let mut stream = client
        .establish_resource_stream(tokio_stream::iter(vec![req]).chain(tokio_stream::pending()))
        .await
        .map_err(|s| s.to_string())?
        .into_inner();
    match tokio::time::timeout(Duration::from_secs(10), stream.message()).await {
        Ok(Ok(Some(m))) => Ok(m),
        Ok(Ok(None)) => Err("stream ended".into()),
        Ok(Err(s)) => Err(format!("{:?}: {}", s.code(), s.message())),
        Err(_) => Err("timeout".into()),
    }
}

use tokio_stream::StreamExt as _;

#[tokio::test]
async fn verified_identity_selects_the_group() {
    let pki = Pki::new();
    let (addr, stop) = start(&pki).await;
    let r = first_response(
        addr,
        &pki.path("ca.pem"),
        Some((&pki.path("client.pem"), &pki.path("client-key.pem"))),
    )
    .await
    .unwrap();
    assert_eq!(r.resources.len(), 1, "the east group's content");
    stop.cancel();
}

#[tokio::test]
async fn peers_without_a_trusted_identity_are_refused() {
    let pki = Pki::new();
    let (addr, stop) = start(&pki).await;
    // No client certificate: TLS is up, the group index refuses with a reason.
    let err = first_response(addr, &pki.path("ca.pem"), None)
        .await
        .unwrap_err();
    assert!(
        err.contains("FailedPrecondition") && err.contains("no known identity"),
        "{err}"
    );
    // A certificate from an untrusted CA: the handshake fails.
    let err = first_response(
        addr,
        &pki.path("ca.pem"),
        Some((
            &pki.path("rogue-client.pem"),
            &pki.path("rogue-client-key.pem"),
        )),
    )
    .await
    .unwrap_err();
    assert!(
        !err.contains("FailedPrecondition"),
        "refused at the handshake: {err}"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_client_rejects_a_server_it_does_not_trust() {
    let pki = Pki::new();
    let other = Pki::new();
    let (addr, stop) = start(&pki).await;
    let err = first_response(
        addr,
        &other.path("ca.pem"),
        Some((&pki.path("client.pem"), &pki.path("client-key.pem"))),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("connect")
            || err.to_lowercase().contains("certificate")
            || err.contains("transport"),
        "{err}"
    );
    stop.cancel();
}

#[test]
fn bad_pem_files_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let e = tls::client_config(&junk, None, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("junk.pem") && e.contains("CA certificate"),
        "{e}"
    );
    let missing = dir.path().join("missing.pem");
    let e = tls::server_config(&missing, &junk, None, false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot read") && e.contains("missing.pem"),
        "{e}"
    );
}

/// Records the collections applied; signals each.
struct Applied(tokio::sync::mpsc::UnboundedSender<String>);
impl meshhub_mcp::sink::Updater for Applied {
    async fn apply(
        &self,
        change: meshhub_mcp::sink::Change,
    ) -> Result<(), meshhub_mcp::sink::ApplyError> {
        let _ = self.0.send(change.collection);
        Ok(())
    }
    fn held(&self, _: &str) -> std::collections::HashMap<String, String> {
        std::collections::HashMap::new()
    }
}

/// A dialer reads its client certificate at every attempt: one that was
/// refused (signed by a CA the server does not trust) is replaced on disk,
/// and the next attempt connects — no restart, no reload.
#[tokio::test]
async fn a_dialer_presents_a_rotated_client_certificate_at_its_next_attempt() {
    use meshhub_mcp::dial::{ClientTlsFiles, DialTarget};
    use meshhub_mcp::sink::client::{SourceTarget, run};
    use meshhub_mcp::sink::{SinkCollection, SinkConfig};

    let pki = Pki::new();
    let (addr, shutdown) = start(&pki).await;
    let (cert, key) = (pki.path("dialer.pem"), pki.path("dialer-key.pem"));
    std::fs::copy(pki.path("rogue-client.pem"), &cert).unwrap();
    std::fs::copy(pki.path("rogue-client-key.pem"), &key).unwrap();
    let endpoint = DialTarget::new(
        Endpoint::from_shared(format!("https://{addr}")).unwrap(),
        Some(ClientTlsFiles {
            ca: pki.path("ca.pem"),
            cert: Some(cert.clone()),
            key: Some(key.clone()),
            server_name: Some("localhost".into()),
        }),
    )
    .unwrap();
    let target = SourceTarget {
        name: "hub".into(),
        endpoint,
        config: Arc::new(SinkConfig {
            node: meshhub_proto::mcp::SinkNode::default(),
            collections: vec![SinkCollection {
                name: VS.into(),
                incremental: false,
            }],
        }),
        reconnect: meshhub_mcp::reconnect::ReconnectPolicy {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(200),
            factor: 2.0,
        },
        max_message_bytes: 1 << 20,
    };
    let (tx, mut applied) = tokio::sync::mpsc::unbounded_channel();
    let ledger = Ledger::new();
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(
        target,
        Arc::new(Applied(tx)),
        ledger.clone(),
        stop.clone(),
    ));

    // Refused while the rogue certificate is on disk: attempts fail with a
    // recorded error and nothing is applied.
    eventually("a failed attempt recorded", async || {
        ledger.view().into_iter().any(|p| p.last_error.is_some())
    })
    .await;
    assert!(applied.try_recv().is_err(), "nothing before the rotation");

    // Rotated in place (as cert-manager does: new files, same paths).
    std::fs::copy(pki.path("client.pem"), &cert).unwrap();
    std::fs::copy(pki.path("client-key.pem"), &key).unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), applied.recv())
        .await
        .expect("the next attempt presents the rotated certificate")
        .unwrap();
    assert_eq!(got, VS);
    stop.cancel();
    task.await.unwrap();
    shutdown.cancel();
}
