//! A stand-in sink agent for in-process tests: the engine's
//! `ResourceSink` on loopback for one cluster's virtual services, whose
//! updater refuses what a test names, as an agent refuses what it can't
//! validate or apply.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::sink::server::SinkServer;
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_testkit::mcp::node;
use meshhub_testkit::objects::VS;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// An updater that refuses any change holding a virtual service whose name
/// contains "bad", holds what it accepted, and counts what it was offered
/// per version.
#[derive(Default)]
pub struct Picky {
    /// Times each version was offered.
    pub offered: Mutex<HashMap<String, usize>>,
    /// Collection → name → version accepted.
    pub held: Mutex<HashMap<String, HashMap<String, String>>>,
}

impl Updater for Picky {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        *self
            .offered
            .lock()
            .unwrap()
            .entry(change.version.clone())
            .or_default() += 1;
        for r in &change.resources {
            let name = r.metadata.as_ref().map_or("", |m| m.name.as_str());
            if name.contains("bad") {
                return Err(ApplyError::Invalid(format!(
                    "VirtualService {name}: rejected by the test sink"
                )));
            }
        }
        let map = change
            .resources
            .iter()
            .filter_map(|r| r.metadata.as_ref())
            .map(|m| (m.name.clone(), m.version.clone()))
            .collect();
        self.held
            .lock()
            .unwrap()
            .insert(change.collection.clone(), map);
        Ok(())
    }

    fn held(&self, collection: &str) -> HashMap<String, String> {
        self.held
            .lock()
            .unwrap()
            .get(collection)
            .cloned()
            .unwrap_or_default()
    }
}

impl Picky {
    /// The names of the virtual services it holds, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.held(VS).into_keys().collect();
        n.sort();
        n
    }
}

/// A `ResourceSink` for one cluster's virtual services on loopback,
/// applying with `updater`: the agent a hub dials.
pub struct StandIn {
    /// Where the hub dials.
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl StandIn {
    /// Starts serving as cluster east's agent.
    pub async fn start(updater: Arc<Picky>) -> Self {
        Self::start_for("east", updater).await
    }

    /// Starts serving as `cluster`'s agent.
    pub async fn start_for(cluster: &str, updater: Arc<Picky>) -> Self {
        let shutdown = CancellationToken::new();
        let sink = SinkServer::new(
            updater,
            Arc::new(SinkConfig {
                node: node(cluster),
                collections: vec![SinkCollection {
                    name: VS.into(),
                    incremental: false,
                }],
            }),
            Ledger::new(),
            shutdown.clone(),
            TaskTracker::new(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(sink.into_service(16 * 1024 * 1024))
                .serve_with_incoming_shutdown(
                    TcpListenerStream::new(listener),
                    shutdown.clone().cancelled_owned(),
                ),
        );
        Self {
            addr,
            shutdown,
            server,
        }
    }

    /// Stops serving; the server ends cleanly.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.server.await.unwrap().unwrap();
    }
}
