//! The dial-in services as tower services that answer with
//! [`ResponseBody`]: requests are decoded by tonic's own decoder, responses
//! are written lazily from the shared resource bytes (see `body.rs`).

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use meshhub_proto::ads::{DeltaDiscoveryRequest, DiscoveryRequest};
use meshhub_proto::mcp::RequestResources;
use meshhub_proto::wire::{
    EncodedDeltaDiscoveryResponse, EncodedDiscoveryResponse, EncodedResources,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::{BufferSettings, Streaming};
use tonic::server::NamedService;
use tonic::{Request, Status};
use tonic_prost::ProstCodec;

use futures::StreamExt as _;

use super::body::{Layout, ResponseBody};
use super::drive::Queued;
use crate::limits::SendProgress;

/// Initial decode buffer of a request stream.
const REQUEST_BUFFER: usize = 512;

/// A stream's responses, as its task queued them.
pub(crate) type Responses<Out> =
    futures::stream::Map<ReceiverStream<Queued<Out>>, fn(Queued<Out>) -> Result<Out, Status>>;

/// The responses of the stream task that sends on `rx`'s channel.
pub(crate) fn responses<Out>(rx: tokio::sync::mpsc::Receiver<Queued<Out>>) -> Responses<Out> {
    ReceiverStream::new(rx).map((|queued| *queued) as fn(Queued<Out>) -> Result<Out, Status>)
}

/// Turns a decoded request stream into the stream of responses.
type Handler<In, Out> = Arc<dyn Fn(Request<Streaming<In>>) -> Responses<Out> + Send + Sync>;

/// One bidirectional-streaming method served with [`ResponseBody`].
pub struct StreamMethod<In, Out> {
    path: &'static str,
    handler: Handler<In, Out>,
    max_message_bytes: usize,
}

impl<In, Out> Clone for StreamMethod<In, Out> {
    fn clone(&self) -> Self {
        Self {
            path: self.path,
            handler: self.handler.clone(),
            max_message_bytes: self.max_message_bytes,
        }
    }
}

impl<In, Out> StreamMethod<In, Out>
where
    In: prost::Message + Default + Send + 'static,
    Out: Layout + prost::Message + Default,
{
    pub(crate) fn new(
        path: &'static str,
        handler: Handler<In, Out>,
        max_message_bytes: usize,
    ) -> Self {
        Self {
            path,
            handler,
            max_message_bytes,
        }
    }

    fn call<B>(&self, req: http::Request<B>) -> http::Response<tonic::body::Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
    {
        if req.uri().path() != self.path {
            return Status::unimplemented(format!("unknown method {}", req.uri().path()))
                .into_http();
        }
        if let Some(encoding) = req.headers().get("grpc-encoding")
            && encoding != "identity"
        {
            return Status::unimplemented(format!(
                "request compression {encoding:?} is not supported; send uncompressed messages"
            ))
            .into_http();
        }
        let (parts, body) = req.into_parts();
        // Requests are small (a collection name and a nonce); tonic's default
        // 8 KiB decode buffer per stream would be much of an idle stream's
        // memory. It grows if a request needs more.
        let decoder =
            ProstCodec::<Out, In>::raw_decoder(BufferSettings::new(REQUEST_BUFFER, 32 * 1024));
        let decoded = Streaming::new_request(decoder, body, None, Some(self.max_message_bytes));
        let mut request = Request::from_http(http::Request::from_parts(parts, decoded));
        let progress = SendProgress::default();
        request.extensions_mut().insert(progress.clone());
        let responses = (self.handler)(request);
        let body = ResponseBody::new(responses, self.max_message_bytes).with_progress(progress);
        let mut response = http::Response::new(tonic::body::Body::new(body));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            tonic::metadata::GRPC_CONTENT_TYPE,
        );
        response
    }
}

macro_rules! service {
    ($(#[$doc:meta])* $name:ident, $service:literal, $in:ty, $out:ty) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name(pub(crate) StreamMethod<$in, $out>);

        impl NamedService for $name {
            const NAME: &'static str = $service;
        }

        impl<B> tower::Service<http::Request<B>> for $name
        where
            B: http_body::Body<Data = Bytes> + Send + 'static,
            B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
        {
            type Response = http::Response<tonic::body::Body>;
            type Error = Infallible;
            type Future = Ready<Result<Self::Response, Infallible>>;

            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, req: http::Request<B>) -> Self::Future {
                ready(Ok(self.0.call(req)))
            }
        }
    };
}

service!(
    /// `istio.mcp.v1alpha1.ResourceSource`.
    ResourceSourceService,
    "istio.mcp.v1alpha1.ResourceSource",
    RequestResources,
    EncodedResources
);

/// `envoy.service.discovery.v3.AggregatedDiscoveryService`: both methods,
/// `StreamAggregatedResources` (SotW) and `DeltaAggregatedResources`.
#[derive(Clone)]
pub struct AdsService {
    pub(crate) sotw: StreamMethod<DiscoveryRequest, EncodedDiscoveryResponse>,
    pub(crate) delta: StreamMethod<DeltaDiscoveryRequest, EncodedDeltaDiscoveryResponse>,
}

impl NamedService for AdsService {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

impl<B> tower::Service<http::Request<B>> for AdsService
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // Any other path gets UNIMPLEMENTED from the SotW method.
        if req.uri().path() == self.delta.path {
            ready(Ok(self.delta.call(req)))
        } else {
            ready(Ok(self.sotw.call(req)))
        }
    }
}
