//! The sink's requests on a dialed stream, read from the HTTP/2 body with
//! a receive buffer that does not stay at its largest.
//!
//! tonic's `Streaming` keeps its receive buffer at the size of the largest
//! message it has read, for the life of the stream. A sink's first request
//! declares everything it holds (`initial_resource_versions`: ~20 KiB at
//! 200 objects; an agent with persisted state declares it on every
//! connection); every later one is an ACK of a few hundred bytes. Kept per
//! cluster, that one message was ~21 KiB of each idle stream (heap profile
//! at 504 clusters, docs/scaling.md). Here a buffer that held more than
//! [`KEEP`] bytes is given back once it is empty.
//!
//! The gRPC rules are tonic's: 5-byte frames (a compression flag, which
//! must be 0 as no compression is agreed, and a length within the limit),
//! the call's status from the trailers, and without one, a status inferred
//! from the HTTP status as tonic infers it.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, BytesMut};
use futures::Stream;
use http::StatusCode;
use http_body::Body;
use meshhub_proto::mcp::RequestResources;
use prost::Message as _;
use tonic::{Code, Status};

/// A buffer that never held more than this is kept between messages (an
/// ACK fits).
const KEEP: usize = 1024;
/// A gRPC message's frame header: a flag byte and a 4-byte length.
const HEADER: usize = 5;

/// The requests of one dialed stream.
pub(super) struct Acks<B> {
    body: B,
    buf: BytesMut,
    max_message_bytes: usize,
    http_status: StatusCode,
    /// The buffer has held more than [`KEEP`] bytes since it was last let go.
    grown: bool,
    done: bool,
}

impl<B> Acks<B> {
    /// The requests carried by `body`, the answer to the call.
    pub(super) fn new(body: B, http_status: StatusCode, max_message_bytes: usize) -> Self {
        Self {
            body,
            buf: BytesMut::new(),
            max_message_bytes,
            http_status,
            grown: false,
            done: false,
        }
    }

    /// No requests: the call was answered with a status only.
    pub(super) fn empty(body: B) -> Self {
        Self {
            done: true,
            ..Self::new(body, StatusCode::OK, 0)
        }
    }

    /// The next whole message in the buffer.
    fn decode(&mut self) -> Result<Option<RequestResources>, Status> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        if self.buf[0] != 0 {
            return Err(Status::internal(
                "protocol error: a compressed message, but no compression was agreed",
            ));
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > self.max_message_bytes {
            return Err(Status::out_of_range(format!(
                "a message of {len} bytes, over the limit of {} bytes",
                self.max_message_bytes
            )));
        }
        let Some(rest) = self.buf.get(HEADER..HEADER + len) else {
            self.buf.reserve(HEADER + len - self.buf.len());
            self.grown |= HEADER + len > KEEP;
            return Ok(None);
        };
        let message = RequestResources::decode(rest)
            .map_err(|e| Status::internal(format!("decoding a request: {e}")))?;
        self.buf.advance(HEADER + len);
        // Grown for a large message or a large frame: once it is empty, let
        // it go (what is left of a `BytesMut` holds its whole allocation).
        if self.grown && self.buf.is_empty() {
            self.buf = BytesMut::new();
            self.grown = false;
        }
        Ok(Some(message))
    }

    /// How the call ended once the body has: `None` for a clean end.
    fn ended(&self, trailers: Option<&http::HeaderMap>) -> Option<Status> {
        if !self.buf.is_empty() {
            return Some(Status::internal(
                "protocol error: the stream ended inside a message",
            ));
        }
        if let Some(status) = trailers.and_then(Status::from_header_map) {
            return (status.code() != Code::Ok).then_some(status);
        }
        // tonic's inference (gRPC's HTTP-to-gRPC status mapping).
        let code = match self.http_status {
            StatusCode::OK => {
                return Some(Status::unknown(
                    "protocol error: missing grpc-status trailer, stream was terminated without a final status",
                ));
            }
            StatusCode::BAD_REQUEST => Code::Internal,
            StatusCode::UNAUTHORIZED => Code::Unauthenticated,
            StatusCode::FORBIDDEN => Code::PermissionDenied,
            StatusCode::NOT_FOUND => Code::Unimplemented,
            StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
            _ => Code::Unknown,
        };
        Some(Status::new(
            code,
            format!(
                "grpc-status header missing, mapped from HTTP status code {}",
                self.http_status.as_u16()
            ),
        ))
    }
}

impl<B> Stream for Acks<B>
where
    B: Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Item = Result<RequestResources, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match this.decode() {
                Ok(Some(message)) => return Poll::Ready(Some(Ok(message))),
                Ok(None) => {}
                Err(status) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(status)));
                }
            }
            let end = match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        this.buf.extend_from_slice(&data);
                        this.grown |= this.buf.len() > KEEP;
                        continue;
                    }
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) => this.ended(Some(&trailers)),
                        // Neither data nor trailers: not a frame of gRPC.
                        Err(_) => continue,
                    },
                },
                Some(Err(e)) => Some(Status::from_error(e.into())),
                None => this.ended(None),
            };
            this.done = true;
            return Poll::Ready(end.map(Err));
        }
    }
}

#[cfg(test)]
mod tests;
