//! A consumer that stops reading: an in-process MCP `ResourceSource`
//! client that subscribes and never polls its stream while its HTTP/2
//! connection stays alive (pings answered),
//! which is what a wedged consumer looks like to the hub. (A SIGSTOPped
//! process answers no keepalive ping and is cut by keepalive instead.)

use std::net::SocketAddr;
use std::time::Duration;

use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{RequestResources, Resources, SinkNode};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The stuck consumer: its runtime keeps the connection (and its pings)
/// going while nothing reads the responses.
pub struct StuckConsumer {
    rt: tokio::runtime::Runtime,
    responses: tonic::Streaming<Resources>,
    _requests: mpsc::Sender<RequestResources>,
}

impl std::fmt::Debug for StuckConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StuckConsumer")
    }
}

impl StuckConsumer {
    /// Subscribes to `collection` at `addr` as a consumer of `cluster` and
    /// never reads: the first response (the full state) is the one it is
    /// stuck on.
    pub fn subscribe_unread(addr: SocketAddr, cluster: &str, collection: &str) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (requests, responses) = rt.block_on(async {
            let mut client = ResourceSourceClient::connect(format!("http://{addr}"))
                .await
                .expect("stuck consumer connects");
            let (tx, rx) = mpsc::channel(4);
            tx.send(RequestResources {
                sink_node: Some(SinkNode {
                    id: cluster.to_owned(),
                    ..Default::default()
                }),
                collection: collection.to_owned(),
                ..Default::default()
            })
            .await
            .expect("request");
            let responses = client
                .establish_resource_stream(ReceiverStream::new(rx))
                .await
                .expect("stream")
                .into_inner();
            (tx, responses)
        });
        Self {
            rt,
            responses,
            _requests: requests,
        }
    }

    /// Reads again: `Err` with the status that ended the stream, or `Ok`
    /// with the number of responses read if it is still open after
    /// `within`.
    pub fn drain(&mut self, within: Duration) -> Result<usize, tonic::Status> {
        let responses = &mut self.responses;
        self.rt.block_on(async {
            let mut read = 0;
            let until = tokio::time::Instant::now() + within;
            loop {
                match tokio::time::timeout_at(until, responses.message()).await {
                    Err(_) => return Ok(read),
                    Ok(Ok(Some(_))) => read += 1,
                    Ok(Ok(None)) => return Err(tonic::Status::cancelled("stream ended")),
                    Ok(Err(status)) => return Err(status),
                }
            }
        })
    }
}
