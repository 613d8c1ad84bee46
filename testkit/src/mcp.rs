//! A hand-driven MCP `ResourceSource` consumer: the test decides when to
//! ACK or NACK, and sees every response and every error as it comes.

use std::net::SocketAddr;

use meshhub_proto::RpcStatus;
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{RequestResources, Resources, SinkNode};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Status, Streaming};

use crate::wait::{DEADLINE, within};

/// One open `EstablishResourceStream`.
pub struct Subscription {
    requests: mpsc::Sender<RequestResources>,
    responses: Streaming<Resources>,
    collection: String,
}

impl Subscription {
    /// Opens a stream on `channel` whose first request is `first` (its
    /// collection is the one ACKs and NACKs name).
    pub async fn open(channel: Channel, first: RequestResources) -> Result<Self, Status> {
        let collection = first.collection.clone();
        let (requests, rx) = mpsc::channel(16);
        requests
            .send(first)
            .await
            .expect("the request stream is open");
        let responses = ResourceSourceClient::new(channel)
            .establish_resource_stream(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Self {
            requests,
            responses,
            collection,
        })
    }

    /// Dials `addr` in plaintext and subscribes to `collection` as `node`
    /// (`None`: without a sink node).
    pub async fn connect(
        addr: SocketAddr,
        collection: &str,
        node: Option<SinkNode>,
    ) -> Result<Self, Status> {
        Self::open(channel(addr).await, subscribe(collection, node)).await
    }

    /// The next response: `Err` with the stream's status when it failed,
    /// UNAVAILABLE "stream ended" when it ended; panics when nothing comes
    /// within the deadline.
    pub async fn next(&mut self) -> Result<Resources, Status> {
        within("an MCP response", self.responses.message())
            .await?
            .ok_or_else(|| Status::unavailable("stream ended"))
    }

    /// [`Subscription::next`], which must be a response.
    pub async fn recv(&mut self) -> Resources {
        self.next().await.expect("an MCP response")
    }

    /// The next response, ACKed: its version and its resources' names,
    /// sorted.
    pub async fn next_acked(&mut self) -> Result<(String, Vec<String>), Status> {
        let r = self.next().await?;
        self.ack(&r).await;
        let mut names = names(&r);
        names.sort();
        Ok((r.system_version_info, names))
    }

    /// Reads (and ACKs) responses until one holds exactly `names`
    /// (sorted); its version. Panics, naming the last names seen, when
    /// none does within the deadline.
    pub async fn until_names(&mut self, names: &[&str]) -> String {
        let mut last = Vec::new();
        let found = tokio::time::timeout(DEADLINE, async {
            loop {
                let (version, got) = self.next_acked().await.expect("an MCP response");
                if got == names {
                    return version;
                }
                last = got;
            }
        })
        .await;
        found.unwrap_or_else(|_| {
            panic!("timed out after {DEADLINE:?} waiting for {names:?}; last {last:?}")
        })
    }

    /// The stream's next event as tonic gives it, without a deadline: for
    /// tests that bound the wait themselves.
    pub async fn message(&mut self) -> Result<Option<Resources>, Status> {
        self.responses.message().await
    }

    /// Sends any request on the stream.
    pub async fn send(&self, request: RequestResources) {
        self.requests
            .send(request)
            .await
            .expect("the request stream is open");
    }

    /// ACKs `response`.
    pub async fn ack(&self, response: &Resources) {
        self.send(RequestResources {
            collection: self.collection.clone(),
            response_nonce: response.nonce.clone(),
            ..Default::default()
        })
        .await;
    }

    /// NACKs `response` with `message` (INVALID_ARGUMENT, as a sink that
    /// cannot apply it).
    pub async fn nack(&self, response: &Resources, message: &str) {
        self.send(RequestResources {
            collection: self.collection.clone(),
            response_nonce: response.nonce.clone(),
            error_detail: Some(RpcStatus {
                code: tonic::Code::InvalidArgument as i32,
                message: message.into(),
                details: vec![],
            }),
            ..Default::default()
        })
        .await;
    }
}

/// The first request of a subscription to `collection` as `node`.
pub fn subscribe(collection: &str, node: Option<SinkNode>) -> RequestResources {
    RequestResources {
        sink_node: node,
        collection: collection.into(),
        ..Default::default()
    }
}

/// A sink node `id` without annotations.
pub fn node(id: &str) -> SinkNode {
    SinkNode {
        id: id.into(),
        annotations: Default::default(),
    }
}

/// A plaintext channel to `addr`, connected.
pub async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"))
}

/// The names of a response's resources, in order.
pub fn names(r: &Resources) -> Vec<String> {
    r.resources
        .iter()
        .map(|r| r.metadata.as_ref().expect("metadata").name.clone())
        .collect()
}

/// The version of a response's first resource.
pub fn first_version(r: &Resources) -> &str {
    &r.resources[0].metadata.as_ref().expect("metadata").version
}

/// An MCP resource `name` at version `1` whose body is `value` of
/// `type_url`.
pub fn resource(name: &str, type_url: &str, value: Vec<u8>) -> meshhub_proto::mcp::Resource {
    meshhub_proto::mcp::Resource {
        metadata: Some(meshhub_proto::mcp::Metadata {
            name: name.into(),
            version: "1".into(),
            ..Default::default()
        }),
        body: Some(prost_types::Any {
            type_url: type_url.into(),
            value,
        }),
    }
}
