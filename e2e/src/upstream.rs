//! A bare MCP `ResourceSource` (the engine's server, no hub around it) on
//! loopback, serving one group to every consumer: an upstream for the
//! hub's MCP source, a hub for an agent in pull mode.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use meshhub_mcp::cache::{self, SnapshotWriter};
use meshhub_mcp::group::SingleGroup;
use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::snapshot::{EncodedResource, Snapshot};
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_proto::mcp::Resource;
use prost::Message as _;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The largest message it sends or accepts.
const MAX: usize = 64 * 1024 * 1024;

/// A running `ResourceSource`.
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Publishes what it serves.
    pub writer: SnapshotWriter,
    /// Its consumers' streams.
    pub ledger: Ledger,
    /// Ends it (and every stream).
    pub shutdown: CancellationToken,
    /// The server: ends after `shutdown`.
    pub server: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Serves `initial` as group `group`, which every consumer is in.
    pub async fn start(group: &str, initial: Arc<Snapshot>) -> Self {
        let (writer, cache) = cache::new();
        writer.set(group, initial);
        let ledger = Ledger::new();
        let shutdown = CancellationToken::new();
        let shared = Shared {
            cache,
            groups: Arc::new(SingleGroup(group.into())),
            ledger: ledger.clone(),
            config: Arc::new(SourceConfig::default()),
            shutdown: shutdown.clone(),
            tasks: TaskTracker::new(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("bound");
        let service = SourceServer::new(shared).into_service(MAX);
        let stop = shutdown.clone();
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    TcpListenerStream::new(listener),
                    stop.cancelled_owned(),
                )
                .await
                .expect("the upstream serves");
        });
        Self {
            addr,
            writer,
            ledger,
            shutdown,
            server,
        }
    }
}

/// `r`, encoded as a source serves it.
pub fn encoded(r: &Resource) -> EncodedResource {
    let meta = r.metadata.clone().expect("metadata");
    EncodedResource {
        name: meta.name.into(),
        version: meta.version.into(),
        encoded: Bytes::from(r.encode_to_vec()),
    }
}
