//! The upstream MCP source over real gRPC on loopback: a downstream hub
//! subscribes to an upstream meshhub serving files (edits, deletions, the
//! upstream restarting on the same port, readiness before the upstream
//! answers), to a raw engine source serving a corrupt resource, and to a
//! Galley-like server that refuses a collection; precedence with a file
//! source defining the same object.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use meshhub::app::Hub;
use meshhub::config::Config;
use meshhub::pipeline::SourceStatus;
use meshhub_e2e::inproc::{self, hub_args, ready};
use meshhub_e2e::upstream::{Upstream, encoded};
use meshhub_mcp::ledger::{Ledger, Role, SyncState};
use meshhub_mcp::reconnect::ReconnectPolicy;
use meshhub_mcp::sink::client::{self as sink_client, SourceTarget};
use meshhub_mcp::sink::{InMemoryUpdater, SinkCollection, SinkConfig};
use meshhub_mcp::snapshot::{CollectionSnapshot, Snapshot};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::{RequestResources, Resource, Resources};
use meshhub_proto::transcode;
use meshhub_testkit::eventually;
use meshhub_testkit::objects::{DR, VS, virtual_service};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

use crate::support::{names, virtual_services};

/// A virtual service in `bookinfo`, labelled `app: <name>`.
fn vs(name: &str, host: &str) -> String {
    virtual_service(
        name,
        "bookinfo",
        host,
        &format!("  labels: {{app: {name}}}\n"),
    )
}

/// `sources[]` entry of a file source.
fn file_source(name: &str, path: &Path) -> String {
    format!("  - name: {name}\n    file: {{path: {}}}\n", path.display())
}

/// `sources[]` entry of an MCP source dialing `addr`, with quick reconnects.
fn mcp_source(name: &str, addr: SocketAddr, extra: &str) -> String {
    format!(
        "  - name: {name}\n    mcp:\n      address: http://{addr}\n      connectTimeout: 1s\n      reconnect: {{initial: 50ms, max: 300ms}}\n{extra}"
    )
}

/// Starts a hub with these sources, its configuration in `dir`, gRPC on
/// `grpc` (not waiting for readiness).
async fn start_hub(dir: &Path, grpc: &str, sources: &str) -> Hub {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("meshhub.yaml");
    let text = format!("sources:\n{sources}debounce:\n  quiet: 20ms\n  maxWait: 200ms\n");
    std::fs::write(&path, &text).unwrap();
    let config = Config::from_yaml(&hub_args(grpc, &[]), &path, &text).unwrap();
    inproc::start_hub(config).await
}

/// An upstream meshhub serving the files of `objects`.
async fn start_upstream(dir: &Path, objects: &Path, grpc: &str) -> Hub {
    let hub = start_hub(dir, grpc, &file_source("files", objects)).await;
    ready(&hub).await;
    hub
}

/// A temp tree with `objects/` (file sources) and `up/`, `down/` (hub
/// configurations).
fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    (dir, objects)
}

/// A consumer of a hub over gRPC: the engine's sink client holding the
/// latest state of VS and DR in memory.
struct Consumer {
    state: InMemoryUpdater,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Consumer {
    fn start(addr: SocketAddr) -> Self {
        let state = InMemoryUpdater::new();
        let stop = CancellationToken::new();
        let target = SourceTarget {
            name: "consumer".into(),
            endpoint: meshhub_mcp::dial::DialTarget::plaintext(
                Endpoint::from_shared(format!("http://{addr}")).unwrap(),
            ),
            config: Arc::new(SinkConfig {
                node: Default::default(),
                collections: [VS, DR]
                    .map(|c| SinkCollection {
                        name: c.into(),
                        incremental: false,
                    })
                    .into(),
            }),
            reconnect: ReconnectPolicy {
                initial: Duration::from_millis(50),
                max: Duration::from_millis(300),
                factor: 2.0,
            },
            max_message_bytes: 64 * 1024 * 1024,
        };
        let task = tokio::spawn(sink_client::run(
            target,
            Arc::new(state.clone()),
            Ledger::new(),
            stop.clone(),
        ));
        Self { state, stop, task }
    }

    /// Virtual services held: name → (first host, version).
    fn virtual_services(&self) -> BTreeMap<String, (String, String)> {
        let kinds = KindTable::builtin();
        let kind = kinds.by_collection(VS).unwrap();
        self.state
            .collection(VS)
            .into_iter()
            .map(|(name, r)| {
                let obj = transcode::resource_to_object(kind, &r).unwrap();
                let host = obj.content["spec"]["hosts"][0]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                (name, (host, r.metadata.unwrap().version))
            })
            .collect()
    }

    /// Virtual services held: name → first host.
    fn hosts(&self) -> BTreeMap<String, String> {
        self.virtual_services()
            .into_iter()
            .map(|(n, (h, _))| (n, h))
            .collect()
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

fn hosts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(n, h)| ((*n).to_owned(), (*h).to_owned()))
        .collect()
}

/// The pipeline's view of one source.
fn source(hub: &Hub, name: &str) -> SourceStatus {
    hub.status()
        .borrow()
        .sources
        .iter()
        .find(|s| s.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no source {name}"))
}

/// Names of the virtual services a hub serves to its default group.
fn served(hub: &Hub) -> Vec<String> {
    names(hub.cache(), "default")
}

/// Versions of the virtual services a hub serves to its default group.
fn served_versions(hub: &Hub) -> BTreeMap<String, String> {
    virtual_services(hub.cache(), "default")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_an_upstream_meshhub_are_served_downstream_and_follow_edits_and_deletions() {
    let (dir, objects) = tree();
    std::fs::write(objects.join("a.yaml"), vs("a", "a")).unwrap();
    std::fs::write(objects.join("b.yaml"), vs("b", "b")).unwrap();
    let upstream = start_upstream(&dir.path().join("up"), &objects, "127.0.0.1:0").await;
    let down = start_hub(
        &dir.path().join("down"),
        "127.0.0.1:0",
        &mcp_source("upstream", upstream.grpc_addr(), ""),
    )
    .await;
    ready(&down).await;
    let s = source(&down, "upstream");
    assert!(s.synced && s.problems.is_empty(), "{s:?}");
    assert_eq!(s.units, 2, "one unit per object");

    let consumer = Consumer::start(down.grpc_addr());
    eventually("both objects downstream", || async {
        consumer.hosts() == hosts(&[("bookinfo/a", "a"), ("bookinfo/b", "b")])
    })
    .await;
    // The upstream's versions are served as they are.
    let held = consumer.virtual_services();
    for (name, version) in served_versions(&upstream) {
        assert_eq!(held[&name].1, version, "{name}");
    }
    // Labels travel too.
    let kinds = KindTable::builtin();
    let a = &consumer.state.collection(VS)["bookinfo/a"];
    let a = transcode::resource_to_object(kinds.by_collection(VS).unwrap(), a).unwrap();
    assert_eq!(a.metadata.labels.get("app").map(String::as_str), Some("a"));

    // An edit, then a deletion, in the upstream's files.
    std::fs::write(objects.join("a.yaml"), vs("a", "a2")).unwrap();
    eventually("the edit downstream", || async {
        consumer.hosts() == hosts(&[("bookinfo/a", "a2"), ("bookinfo/b", "b")])
    })
    .await;
    std::fs::remove_file(objects.join("b.yaml")).unwrap();
    eventually("the deletion downstream", || async {
        consumer.hosts() == hosts(&[("bookinfo/a", "a2")])
    })
    .await;
    assert_eq!(source(&down, "upstream").units, 1);

    // The upstream sees the downstream as a consumer that ACKed; the
    // downstream lists the upstream in its ledger, not as a consumer.
    let up_peers = upstream.ledger().view();
    assert!(
        up_peers.iter().any(|p| p.connected
            && p.collections
                .get(VS)
                .is_some_and(|c| c.state == SyncState::Synced)),
        "{up_peers:?}"
    );
    let down_peers = down.ledger().view();
    let sink = down_peers
        .iter()
        .find(|p| p.role == Role::Sink)
        .expect("the upstream in the downstream's ledger");
    assert!(sink.connected && sink.peer == format!("http://{}", upstream.grpc_addr()));

    consumer.stop().await;
    // Shutdown ends the downstream's stream: the upstream sees it go.
    assert!(down.shutdown().await, "downstream tasks ended in time");
    eventually("the upstream to see the downstream leave", || async {
        !upstream
            .ledger()
            .view()
            .iter()
            .any(|p| p.connected && p.collections.contains_key(DR))
    })
    .await;
    assert!(upstream.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarting_upstream_is_reported_its_objects_kept_and_reconciled_after() {
    restart_and_reconcile("").await;
}

/// The same with deltas: the reconnect sends the versions held, and the
/// restarted meshhub answers with exactly what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_subscription_reconciles_by_delta_after_an_upstream_restart() {
    restart_and_reconcile("      incremental: true\n").await;
}

async fn restart_and_reconcile(extra: &str) {
    let (dir, objects) = tree();
    std::fs::write(objects.join("a.yaml"), vs("a", "a")).unwrap();
    std::fs::write(objects.join("b.yaml"), vs("b", "b")).unwrap();
    let up_dir = dir.path().join("up");
    // Not a kernel-chosen port: the kernel could hand that to someone else
    // while the upstream is down, and it restarts on it.
    let addr = meshhub_testkit::ports::free_addr();
    let upstream = start_upstream(&up_dir, &objects, &addr.to_string()).await;
    let down = start_hub(
        &dir.path().join("down"),
        "127.0.0.1:0",
        &mcp_source("upstream", addr, extra),
    )
    .await;
    ready(&down).await;
    let consumer = Consumer::start(down.grpc_addr());
    eventually("both objects downstream", || async {
        consumer.hosts() == hosts(&[("bookinfo/a", "a"), ("bookinfo/b", "b")])
    })
    .await;

    // The upstream stops: the downstream reports it and keeps serving.
    assert!(upstream.shutdown().await);
    let problem = format!("disconnected from http://{addr}: ");
    eventually("the disconnection reported", || async {
        source(&down, "upstream")
            .problems
            .iter()
            .any(|p| p.starts_with(&problem))
    })
    .await;
    assert_eq!(served(&down), ["bookinfo/a", "bookinfo/b"]);
    // While it is down, its files change: b deleted, a edited, c added.
    std::fs::remove_file(objects.join("b.yaml")).unwrap();
    std::fs::write(objects.join("a.yaml"), vs("a", "a2")).unwrap();
    std::fs::write(objects.join("c.yaml"), vs("c", "c")).unwrap();
    // Failed reconnects keep it reported, with the reason, and the objects
    // stay (checked again after the reconnect attempts).
    eventually("a failed reconnect reported", || async {
        let p = source(&down, "upstream").problems;
        p.len() == 1 && p[0].starts_with(&format!("{problem}connect: "))
    })
    .await;
    assert_eq!(served(&down), ["bookinfo/a", "bookinfo/b"]);
    assert_eq!(
        consumer.hosts(),
        hosts(&[("bookinfo/a", "a"), ("bookinfo/b", "b")])
    );
    assert!(down.status().borrow().ready, "a synced hub stays ready");

    // The upstream comes back on the same port: the full state reconciles.
    let upstream = start_upstream(&up_dir, &objects, &addr.to_string()).await;
    eventually("the reconciled state downstream", || async {
        consumer.hosts() == hosts(&[("bookinfo/a", "a2"), ("bookinfo/c", "c")])
    })
    .await;
    eventually("the problem cleared", || async {
        source(&down, "upstream").problems.is_empty()
    })
    .await;
    assert_eq!(source(&down, "upstream").units, 2);

    consumer.stop().await;
    assert!(down.shutdown().await);
    assert!(upstream.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_downstream_is_not_ready_until_the_upstream_answered() {
    let (dir, objects) = tree();
    std::fs::write(objects.join("a.yaml"), vs("a", "a")).unwrap();
    // A free port, nobody listening yet.
    let addr = meshhub_testkit::ports::free_addr();
    let down = start_hub(
        &dir.path().join("down"),
        "127.0.0.1:0",
        &mcp_source("upstream", addr, ""),
    )
    .await;
    let problem = format!("disconnected from http://{addr}: connect");
    eventually("the unreachable upstream reported", || async {
        source(&down, "upstream")
            .problems
            .iter()
            .any(|p| p.starts_with(&problem))
    })
    .await;
    let s = source(&down, "upstream");
    assert!(!s.synced && !down.status().borrow().ready, "{s:?}");

    let upstream = start_upstream(&dir.path().join("up"), &objects, &addr.to_string()).await;
    ready(&down).await;
    assert_eq!(served(&down), ["bookinfo/a"]);
    assert!(source(&down, "upstream").problems.is_empty());
    assert!(down.shutdown().await);
    assert!(upstream.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_source_and_the_upstream_merge_by_the_stores_precedence() {
    let (dir, objects) = tree();
    std::fs::write(objects.join("a.yaml"), vs("a", "upstream-a")).unwrap();
    std::fs::write(objects.join("b.yaml"), vs("b", "upstream-b")).unwrap();
    let upstream = start_upstream(&dir.path().join("up"), &objects, "127.0.0.1:0").await;
    let local = dir.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(local.join("a.yaml"), vs("a", "local-a")).unwrap();
    // "local" < "upstream": the file's definition of a wins.
    let down = start_hub(
        &dir.path().join("down"),
        "127.0.0.1:0",
        &format!(
            "{}{}",
            mcp_source("upstream", upstream.grpc_addr(), ""),
            file_source("local", &local)
        ),
    )
    .await;
    ready(&down).await;
    let consumer = Consumer::start(down.grpc_addr());
    eventually("the merged state", || async {
        consumer.hosts() == hosts(&[("bookinfo/a", "local-a"), ("bookinfo/b", "upstream-b")])
    })
    .await;
    let conflicts = down.status().borrow().conflicts.clone();
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert_eq!(&*conflicts[0].key.name, "bookinfo/a");
    assert_eq!(&*conflicts[0].winner.source, "local");
    assert_eq!(&*conflicts[0].ignored[0].source, "upstream");
    assert_eq!(&*conflicts[0].ignored[0].unit, format!("{VS}/bookinfo/a"));

    // The local definition goes: the upstream's is served.
    std::fs::remove_file(local.join("a.yaml")).unwrap();
    eventually("the upstream's a", || async {
        consumer.hosts() == hosts(&[("bookinfo/a", "upstream-a"), ("bookinfo/b", "upstream-b")])
    })
    .await;
    // The status is published after the snapshot it describes.
    eventually("the conflict cleared", || async {
        down.status().borrow().conflicts.is_empty()
    })
    .await;

    consumer.stop().await;
    assert!(down.shutdown().await);
    assert!(upstream.shutdown().await);
}

/// A raw engine `ResourceSource` serving hand-made VS resources to
/// group `default`; other collections are answered empty.
async fn start_raw_upstream(resources: Vec<Resource>) -> Upstream {
    let vs = CollectionSnapshot::new(resources.iter().map(encoded).collect());
    Upstream::start(
        "default",
        Arc::new(Snapshot::new().with_collection(VS, Arc::new(vs))),
    )
    .await
}

/// A VirtualService resource (`bookinfo/<name>`) as an upstream serves it.
fn vs_resource(name: &str, host: &str, version: &str) -> Resource {
    let kinds = KindTable::builtin();
    let obj = transcode::parse_yaml(&vs(name, host)).remove(0).unwrap();
    let mut r = transcode::object_to_resource(kinds.by_collection(VS).unwrap(), &obj).unwrap();
    r.metadata.as_mut().unwrap().version = version.to_owned();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_resource_is_reported_acked_and_the_others_are_served() {
    let mut corrupt = vs_resource("bad", "bad", "7");
    corrupt.body.as_mut().unwrap().value = vec![0x0a, 0xff, 0xff, 0xff];
    let raw = start_raw_upstream(vec![vs_resource("good", "good", "3"), corrupt]).await;
    let dir = tempfile::tempdir().unwrap();
    let down = start_hub(dir.path(), "127.0.0.1:0", &mcp_source("raw", raw.addr, "")).await;
    ready(&down).await;
    let consumer = Consumer::start(down.grpc_addr());
    eventually("the good object downstream", || async {
        consumer.hosts() == hosts(&[("bookinfo/good", "good")])
    })
    .await;
    assert_eq!(consumer.virtual_services()["bookinfo/good"].1, "3");

    // Reported with its origin and reason.
    let rejected = down.status().borrow().rejected.clone();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let origin = rejected[0].origin.as_ref().unwrap();
    assert_eq!(&*origin.source, "raw");
    assert_eq!(&*origin.unit, format!("{VS}/bookinfo/bad"));
    assert!(
        rejected[0].reasons[0].contains("bookinfo/bad")
            && rejected[0].reasons[0].contains("undecodable"),
        "{rejected:?}"
    );
    // ACKed, not NACKed: the upstream sees the collection synced.
    let peers = raw.ledger.view();
    let vs_state = peers
        .iter()
        .find_map(|p| p.collections.get(VS))
        .expect("the downstream subscribed");
    assert_eq!(vs_state.state, SyncState::Synced, "{vs_state:?}");
    assert_eq!(vs_state.nacks, 0);

    consumer.stop().await;
    assert!(down.shutdown().await);
    raw.shutdown.cancel();
    raw.server.await.unwrap();
}

mod galley {
    //! A Galley-1.5-like `ResourceSource`: answers the collections it
    //! serves, and ends the stream with `INVALID_ARGUMENT unsupported
    //! collection "<name>"` at the first request for another one.

    use std::collections::BTreeMap;
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use tokio::sync::mpsc;
    use tonic::codegen::{Body, BoxFuture, Service, StdError, http};
    use tonic::server::{Grpc, NamedService, StreamingService};
    use tonic::{Request, Response, Status, Streaming};

    use super::{ReceiverStream, RequestResources, Resource, Resources};

    /// Serves `collections` (name → resources); counts refusals.
    #[derive(Clone)]
    pub struct Galley {
        pub collections: Arc<BTreeMap<String, Vec<Resource>>>,
        pub refusals: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl NamedService for Galley {
        const NAME: &'static str = "istio.mcp.v1alpha1.ResourceSource";
    }

    impl StreamingService<RequestResources> for Galley {
        type Response = Resources;
        type ResponseStream = ReceiverStream<Result<Resources, Status>>;
        type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

        fn call(&mut self, request: Request<Streaming<RequestResources>>) -> Self::Future {
            let me = self.clone();
            Box::pin(async move {
                let mut requests = request.into_inner();
                let (tx, rx) = mpsc::channel(16);
                tokio::spawn(async move {
                    let mut nonce = 0u64;
                    while let Ok(Some(req)) = requests.message().await {
                        if !req.response_nonce.is_empty() {
                            continue; // ACK or NACK
                        }
                        let Some(resources) = me.collections.get(&req.collection) else {
                            me.refusals
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let _ = tx
                                .send(Err(Status::invalid_argument(format!(
                                    "unsupported collection {:?}",
                                    req.collection
                                ))))
                                .await;
                            return;
                        };
                        nonce += 1;
                        let response = Resources {
                            system_version_info: "1".into(),
                            collection: req.collection.clone(),
                            resources: resources.clone(),
                            nonce: nonce.to_string(),
                            ..Default::default()
                        };
                        if tx.send(Ok(response)).await.is_err() {
                            return;
                        }
                    }
                });
                Ok(Response::new(ReceiverStream::new(rx)))
            })
        }
    }

    impl<B> Service<http::Request<B>> for Galley
    where
        B: Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        type Response = http::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = BoxFuture<Self::Response, Self::Error>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            let me = self.clone();
            Box::pin(async move {
                let codec = tonic_prost::ProstCodec::<Resources, RequestResources>::default();
                Ok(Grpc::new(codec).streaming(me, req).await)
            })
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_the_upstream_refuses_is_reported_and_the_others_go_on() {
    let refusals = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fake = galley::Galley {
        collections: Arc::new(BTreeMap::from([(
            VS.to_owned(),
            vec![vs_resource("a", "a", "1")],
        )])),
        refusals: refusals.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(fake)
                .serve_with_incoming_shutdown(
                    TcpListenerStream::new(listener),
                    stop.cancelled_owned(),
                )
                .await
                .unwrap();
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let down = start_hub(
        dir.path(),
        "127.0.0.1:0",
        &mcp_source(
            "galley",
            addr,
            &format!("      collections: [{VS}, {DR}]\n"),
        ),
    )
    .await;
    // Ready although one collection is never answered.
    ready(&down).await;
    let consumer = Consumer::start(down.grpc_addr());
    eventually("the served collection downstream", || async {
        consumer.hosts() == hosts(&[("bookinfo/a", "a")])
    })
    .await;
    let s = source(&down, "galley");
    assert_eq!(s.problems.len(), 1, "{s:?}");
    assert!(
        s.problems[0].contains(DR) && s.problems[0].contains("unsupported collection"),
        "{s:?}"
    );
    // Dropped from the subscription: asked once, not again and again.
    assert_eq!(refusals.load(std::sync::atomic::Ordering::Relaxed), 1);

    consumer.stop().await;
    assert!(down.shutdown().await);
    stop.cancel();
    server.await.unwrap();
}
