//! A hostile agent for the upward channel's trust tests (issue 38): a
//! `ResourceSource` of the upward collections written here, not the
//! agent's, that answers the hub's subscription with whatever the test
//! crafts — reports for another cluster, exports the cluster may not make,
//! incomplete sets, a flood — and tells the test how the hub answered each
//! response (ACK or NACK).
//!
//! The hub dials the address configured for a cluster and subscribes, as
//! an MCP sink, to `meshhub/v1alpha1/clusterstatus` and
//! `meshhub/v1alpha1/serviceexports` (hub/src/upward.rs). This server
//! speaks that protocol directly: a subscription (a request without a
//! nonce) gets the collection's current content, every publication is sent
//! on every open stream, and every ACK/NACK is passed to the test. It does
//! not serve `ResourceSink`: the hub's push to it is refused
//! `UNIMPLEMENTED`, as by an agent that takes nothing.
//!
//! [`Rogue::restart`] stops the server, cutting every stream, and starts
//! it again on the same address with a new publication: what the hub sees
//! of an agent process restarting.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use meshhub_proto::mcp::resource_source_server::{ResourceSource, ResourceSourceServer};
use meshhub_proto::mcp::{Metadata, RequestResources, Resource, Resources};
use meshhub_proto::upward::{
    CLUSTER_STATUS, CLUSTER_STATUS_MESSAGE, ClusterStatus, ExportsState, SERVICE_EXPORT_MESSAGE,
    SERVICE_EXPORTS, ServiceExport,
};
use prost::Message as _;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// The message limit both ways (the hub's default).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// What the rogue publishes: its report and its exports.
#[derive(Clone, Debug)]
pub struct Publication {
    /// The report (`None`: the collection holds no resource).
    pub status: Option<ClusterStatus>,
    /// The exports.
    pub exports: Vec<ServiceExport>,
    /// The exports collection's version.
    pub exports_version: String,
}

impl Publication {
    /// A report for `cluster` saying that `exports`, at `version`, are its
    /// whole set (complete), and those exports.
    pub fn complete(cluster: &str, version: &str, exports: Vec<ServiceExport>) -> Self {
        Self::with_state(cluster, version, exports, true, &[])
    }

    /// A report for `cluster` saying that `exports`, at `version`, are not
    /// complete yet (`waiting_for` these watches): what an agent says
    /// while it lists.
    pub fn incomplete(
        cluster: &str,
        version: &str,
        exports: Vec<ServiceExport>,
        waiting_for: &[&str],
    ) -> Self {
        Self::with_state(cluster, version, exports, false, waiting_for)
    }

    fn with_state(
        cluster: &str,
        version: &str,
        exports: Vec<ServiceExport>,
        complete: bool,
        waiting_for: &[&str],
    ) -> Self {
        Self {
            status: Some(ClusterStatus {
                cluster: cluster.to_owned(),
                observed: Some(std::time::SystemTime::now().into()),
                exports_state: Some(ExportsState {
                    complete,
                    exports_version: version.to_owned(),
                    waiting_for: waiting_for.iter().map(|w| (*w).to_owned()).collect(),
                }),
                ..ClusterStatus::default()
            }),
            exports,
            exports_version: version.to_owned(),
        }
    }
}

/// A publication encoded once, with its versions.
#[derive(Debug)]
struct Encoded {
    /// Per collection: its version and its resources.
    collections: BTreeMap<&'static str, (String, Vec<Resource>)>,
}

fn any(message: &str, value: Vec<u8>) -> prost_types::Any {
    prost_types::Any {
        type_url: meshhub_proto::type_url(message),
        value,
    }
}

impl Encoded {
    fn of(p: &Publication, seq: u64) -> Self {
        let status: Vec<Resource> = p
            .status
            .iter()
            .map(|s| Resource {
                metadata: Some(Metadata {
                    name: s.cluster.clone(),
                    version: format!("{seq}"),
                    ..Default::default()
                }),
                body: Some(any(CLUSTER_STATUS_MESSAGE, s.encode_to_vec())),
            })
            .collect();
        let exports: Vec<Resource> = p
            .exports
            .iter()
            .map(|e| Resource {
                metadata: Some(Metadata {
                    name: format!("{}/{}", e.namespace, e.name),
                    version: p.exports_version.clone(),
                    ..Default::default()
                }),
                body: Some(any(SERVICE_EXPORT_MESSAGE, e.encode_to_vec())),
            })
            .collect();
        Self {
            collections: [
                (CLUSTER_STATUS, (format!("status-{seq}"), status)),
                (SERVICE_EXPORTS, (p.exports_version.clone(), exports)),
            ]
            .into(),
        }
    }
}

/// How the hub answered one response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The collection.
    pub collection: String,
    /// The version of the response answered.
    pub version: String,
    /// The NACK's message (`None`: an ACK).
    pub nack: Option<String>,
}

/// The running rogue agent; stops when dropped.
pub struct Rogue {
    /// Where it listens (the cluster's agent address in the hub's
    /// configuration).
    pub addr: SocketAddr,
    publication: watch::Sender<(u64, Arc<Encoded>)>,
    replies_tx: mpsc::UnboundedSender<Reply>,
    replies: mpsc::UnboundedReceiver<Reply>,
    /// Answers received and not waited for yet.
    received: Vec<Reply>,
    stop: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Rogue {
    /// Listens on a loopback port chosen by the kernel, publishing `first`.
    pub async fn start(first: &Publication) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let (replies_tx, replies) = mpsc::unbounded_channel();
        let (publication, _) = watch::channel((1, Arc::new(Encoded::of(first, 1))));
        let mut rogue = Self {
            addr,
            publication,
            replies_tx,
            replies,
            received: Vec::new(),
            stop: CancellationToken::new(),
            server: None,
        };
        rogue.serve(listener);
        rogue
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let service = RogueService {
            publication: self.publication.subscribe(),
            replies: self.replies_tx.clone(),
            stop: self.stop.clone(),
        };
        let stop = self.stop.clone();
        self.server = Some(tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(
                    ResourceSourceServer::new(service)
                        .max_decoding_message_size(MAX_MESSAGE)
                        .max_encoding_message_size(MAX_MESSAGE),
                )
                .serve_with_incoming_shutdown(
                    TcpListenerStream::new(listener),
                    stop.cancelled_owned(),
                )
                .await;
        }));
    }

    /// Publishes `p` on every open stream (and to every later subscriber);
    /// returns the versions it has: (clusterstatus, serviceexports).
    pub fn publish(&self, p: &Publication) -> (String, String) {
        let mut versions = None;
        self.publication.send_modify(|(seq, encoded)| {
            *seq += 1;
            let e = Encoded::of(p, *seq);
            versions = Some((
                e.collections[CLUSTER_STATUS].0.clone(),
                e.collections[SERVICE_EXPORTS].0.clone(),
            ));
            *encoded = Arc::new(e);
        });
        versions.expect("set above")
    }

    /// Stops the server (every stream ends) and starts it again on the same
    /// address, publishing `p`: an agent process restarting.
    pub async fn restart(&mut self, p: &Publication) -> (String, String) {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            tokio::time::timeout(meshhub_testkit::DEADLINE, server)
                .await
                .expect("the rogue server stops")
                .expect("the rogue server task");
        }
        self.stop = CancellationToken::new();
        let versions = self.publish(p);
        // The port was ours a moment ago; bind it again (tokio sets
        // SO_REUSEADDR). A few tries: the kernel may hold it briefly.
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if tries < 50 => {
                    tries += 1;
                    eprintln!("rogue: binding {} again: {e}", self.addr);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("rogue: can't bind {} again: {e}", self.addr),
            }
        };
        self.serve(listener);
        versions
    }

    /// Waits (at most [`meshhub_testkit::DEADLINE`]) for the hub's answer
    /// to `version` of `collection` (answers are kept until asked for).
    pub async fn reply(&mut self, collection: &str, version: &str) -> Reply {
        let matches = |r: &Reply| r.collection == collection && r.version == version;
        if let Some(i) = self.received.iter().position(matches) {
            return self.received.remove(i);
        }
        let wait = async {
            loop {
                let r = self.replies.recv().await.expect("the rogue is running");
                if matches(&r) {
                    return r;
                }
                self.received.push(r);
            }
        };
        tokio::time::timeout(meshhub_testkit::DEADLINE, wait)
            .await
            .unwrap_or_else(|_| {
                panic!("the hub did not answer {collection} {version} of the rogue agent")
            })
    }
}

impl Drop for Rogue {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct RogueService {
    publication: watch::Receiver<(u64, Arc<Encoded>)>,
    replies: mpsc::UnboundedSender<Reply>,
    stop: CancellationToken,
}

#[tonic::async_trait]
impl ResourceSource for RogueService {
    type EstablishResourceStreamStream = ReceiverStream<Result<Resources, Status>>;

    async fn establish_resource_stream(
        &self,
        request: Request<Streaming<RequestResources>>,
    ) -> Result<Response<Self::EstablishResourceStreamStream>, Status> {
        let requests = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(stream(
            requests,
            tx,
            self.publication.clone(),
            self.replies.clone(),
            self.stop.clone(),
        ));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// One stream: sends each subscribed collection's content whenever it
/// changes (or is asked for again), and reports the hub's answers.
async fn stream(
    mut requests: Streaming<RequestResources>,
    tx: mpsc::Sender<Result<Resources, Status>>,
    mut publication: watch::Receiver<(u64, Arc<Encoded>)>,
    replies: mpsc::UnboundedSender<Reply>,
    stop: CancellationToken,
) {
    // Per subscribed collection: the version last sent (`None`: to send).
    let mut subscribed: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut nonces: HashMap<String, (String, String)> = HashMap::new();
    let mut next_nonce = 0_u64;
    loop {
        let current = publication.borrow_and_update().1.clone();
        for (collection, last) in &mut subscribed {
            let Some((version, resources)) = current.collections.get(collection.as_str()) else {
                continue;
            };
            if last.as_ref() == Some(version) {
                continue;
            }
            next_nonce += 1;
            let nonce = format!("rogue-{next_nonce}");
            nonces.insert(nonce.clone(), (collection.clone(), version.clone()));
            let response = Resources {
                system_version_info: version.clone(),
                collection: collection.clone(),
                resources: resources.clone(),
                removed_resources: Vec::new(),
                nonce,
                incremental: false,
            };
            if tx.send(Ok(response)).await.is_err() {
                return;
            }
            *last = Some(version.clone());
        }
        tokio::select! {
            () = stop.cancelled() => return,
            r = publication.changed() => if r.is_err() { return },
            r = requests.message() => match r {
                Ok(Some(req)) if req.response_nonce.is_empty() => {
                    // A subscription (or one asked for again): send it.
                    subscribed.insert(req.collection, None);
                }
                Ok(Some(req)) => {
                    if let Some((collection, version)) = nonces.remove(&req.response_nonce) {
                        let _ = replies.send(Reply {
                            collection,
                            version,
                            nack: req.error_detail.map(|e| e.message),
                        });
                    }
                }
                Ok(None) | Err(_) => return,
            },
        }
    }
}
