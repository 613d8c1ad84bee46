//! What the engine's tests share: resources and snapshots to serve, the
//! state of a `ResourceSource`, and one on loopback built as the hub builds
//! its port (limits and all).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use meshhub_mcp::cache::{self, SnapshotWriter};
use meshhub_mcp::group::{GroupIndex, SingleGroup};
use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::limits::{Limits, StreamLimitLayer};
use meshhub_mcp::listen;
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_testkit::objects::{VS, encoded_resource};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The largest message the tests' servers accept.
pub const MAX: usize = 16 * 1024 * 1024;

/// The resource `name` at `version` with `body`, encoded as served.
pub fn encoded(name: &str, version: &str, body: Option<prost_types::Any>) -> EncodedResource {
    EncodedResource {
        name: name.into(),
        version: version.into(),
        encoded: Bytes::from(encoded_resource(name, version, body)),
    }
}

/// A snapshot of these collections.
pub fn snapshot(collections: Vec<(&str, Vec<EncodedResource>)>) -> Arc<Snapshot> {
    Arc::new(
        collections
            .into_iter()
            .fold(Snapshot::new(), |s, (name, resources)| {
                s.with_collection(name, Arc::new(CollectionSnapshot::new(resources)))
            }),
    )
}

/// A snapshot of one virtual service, `ns/a` at `version` with `body`.
pub fn one(version: &str, body: Option<prost_types::Any>) -> Arc<Snapshot> {
    snapshot(vec![(VS, vec![encoded("ns/a", version, body)])])
}

/// The state of a source serving `groups` with `config` (a fresh ledger,
/// shutdown token and task tracker), and the writer of its snapshots.
pub fn shared(groups: impl GroupIndex + 'static, config: SourceConfig) -> (SnapshotWriter, Shared) {
    let (writer, cache) = cache::new();
    let shared = Shared {
        cache,
        groups: Arc::new(groups),
        ledger: Ledger::new(),
        config: Arc::new(config),
        shutdown: CancellationToken::new(),
        tasks: TaskTracker::new(),
    };
    (writer, shared)
}

/// A `ResourceSource` on loopback serving group `east`, behind the
/// stream limits as the hub's port is; ends when dropped.
pub struct Source {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Publishes what it serves.
    pub writer: SnapshotWriter,
    /// Its streams.
    pub ledger: Ledger,
    /// Ends it.
    pub shutdown: CancellationToken,
}

impl Source {
    /// Starts it with `limits`, the per-stream settings `config` (the
    /// limits' send timeout included), serving [`one`] `ns/a` at version 1
    /// with a 10-byte body.
    pub async fn start(limits: Limits, config: SourceConfig) -> Self {
        let (writer, shared) = shared(
            SingleGroup("east".into()),
            SourceConfig {
                send_timeout: limits.send_timeout,
                ..config
            },
        );
        let (ledger, shutdown, tasks) = (
            shared.ledger.clone(),
            shared.shutdown.clone(),
            shared.tasks.clone(),
        );
        let service = SourceServer::new(shared).into_service(limits.max_message_bytes);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = meshhub_mcp::transport::server_with(&limits)
            .layer(StreamLimitLayer::new(&limits))
            .add_service(service);
        tasks.spawn(listen::serve(
            router,
            listener,
            None,
            "grpc",
            tasks.clone(),
            shutdown.clone(),
        ));
        let source = Self {
            addr,
            writer,
            ledger,
            shutdown,
        };
        source.publish("1", 10);
        source
    }

    /// Publishes `ns/a` at `version` with a body of `size` bytes.
    pub fn publish(&self, version: &str, size: usize) {
        self.writer
            .set("east", one(version, Some(bytes_value(size))));
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A body of `size` bytes (a `BytesValue`, opaque to the engine).
pub fn bytes_value(size: usize) -> prost_types::Any {
    meshhub_testkit::objects::any(
        "type.googleapis.com/google.protobuf.BytesValue",
        vec![7; size],
    )
}
