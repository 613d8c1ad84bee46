//! P2's floor: what one idle MCP stream costs in h2 and tonic alone.
//!
//! A `ResourceSource` server written the way tonic's generated servers are
//! (`tonic::server::Grpc` with the prost codec and its default buffers, a
//! task per stream feeding a `ReceiverStream`), over the same transport
//! settings as meshhub (`meshhub_mcp::transport::server`). It keeps no
//! state: it answers each subscription with an empty response and ignores
//! ACKs. Run by P2 beside the hub, with the same load generator, so that
//! the hub's own per-stream cost is its figure minus this one.
//!
//! Events: `listening` (the gRPC address). Runs until stdin closes.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::task::{Context, Poll};

use anyhow::{Context as _, Result};
use bytes::Bytes;
use futures::StreamExt;
use meshhub_proto::mcp::{RequestResources, Resources};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

use crate::proc::{Commands, emit};

const PATH: &str = "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream";

/// Runs the floor server until stdin closes.
pub async fn run() -> Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = meshhub_mcp::transport::server()
        .add_service(Floor)
        .serve_with_incoming_shutdown(
            TcpListenerStream::new(listener),
            shutdown.clone().cancelled_owned(),
        );
    let server = tokio::spawn(server);
    emit(&json!({"event": "listening", "grpc": addr.to_string(), "start_ns": 0}));
    let mut commands = Commands::stdin();
    while commands.next().await?.is_some() {}
    shutdown.cancel();
    server.await?.context("floor server")?;
    Ok(())
}

/// The `ResourceSource` service.
#[derive(Clone)]
struct Floor;

impl NamedService for Floor {
    const NAME: &'static str = "istio.mcp.v1alpha1.ResourceSource";
}

impl StreamingService<RequestResources> for Floor {
    type Response = Resources;
    type ResponseStream = ReceiverStream<Result<Resources, Status>>;
    type Future = Ready<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<Streaming<RequestResources>>) -> Self::Future {
        let mut requests = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            let mut nonce = 0u64;
            while let Some(Ok(req)) = requests.next().await {
                if !req.response_nonce.is_empty() {
                    continue; // an ACK or NACK
                }
                nonce += 1;
                let response = Resources {
                    system_version_info: "floor".into(),
                    collection: req.collection,
                    nonce: nonce.to_string(),
                    ..Default::default()
                };
                if tx.send(Ok(response)).await.is_err() {
                    return;
                }
            }
        });
        ready(Ok(Response::new(ReceiverStream::new(rx))))
    }
}

impl<B> tower::Service<http::Request<B>> for Floor
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != PATH {
            return Box::pin(ready(Ok(Status::unimplemented("").into_http())));
        }
        let mut grpc = Grpc::new(ProstCodec::<Resources, RequestResources>::default());
        Box::pin(async move { Ok(grpc.streaming(Floor, req).await) })
    }
}
