//! The sink's requests on a dialed stream, read from the HTTP/2 body with
//! a receive buffer that does not stay at its largest.
//!
//! tonic's `Streaming` keeps its receive buffer at the size of the largest
//! message it has read, for the life of the stream. A sink's first request
//! declares everything it holds (`initial_resource_versions`: ~20 KiB at
//! 200 objects; an agent with persisted state declares it on every
//! connection); every later one is an ACK of a few hundred bytes. Kept per
//! cluster, that one message was ~21 KiB of each idle stream (heap profile
//! at 504 clusters, docs/scaling.md). Here a buffer that grew past
//! [`KEEP`] bytes is given back once it is empty.
//!
//! The gRPC rules are tonic's: 5-byte frames (a compression flag, which
//! must be 0 as no compression is agreed, and a length within the limit),
//! the call's status from the trailers, and without one, a status inferred
//! from the HTTP status as tonic infers it (an answer other than HTTP 200
//! is not read as gRPC at all).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, BytesMut};
use futures::Stream;
use http::StatusCode;
use http_body::Body;
use meshhub_proto::mcp::RequestResources;
use prost::Message as _;
use tonic::{Code, Status};

/// A buffer whose capacity never went past this is kept between messages
/// (an ACK fits).
const KEEP: usize = 1024;
/// A gRPC message's frame header: a flag byte and a 4-byte length.
const HEADER: usize = 5;

/// The requests of one dialed stream.
pub(super) struct Acks<B> {
    body: B,
    buf: BytesMut,
    max_message_bytes: usize,
    http_status: StatusCode,
    /// The buffer's capacity went past [`KEEP`] since it was last let go.
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
        match self.buf[0] {
            0 => {}
            1 => {
                return Err(Status::internal(
                    "protocol error: a compressed message, but no compression was agreed",
                ));
            }
            flag => {
                return Err(Status::internal(format!(
                    "protocol error: invalid compression flag {flag} (0 and 1 are valid)"
                )));
            }
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        let end = usize::try_from(len)
            .ok()
            .filter(|len| *len <= self.max_message_bytes)
            .and_then(|len| len.checked_add(HEADER))
            .ok_or_else(|| {
                Status::out_of_range(format!(
                    "a message of {len} bytes, over the limit of {} bytes",
                    self.max_message_bytes
                ))
            })?;
        let Some(rest) = self.buf.get(HEADER..end) else {
            self.buf.reserve(end - self.buf.len());
            self.grown |= self.buf.capacity() > KEEP;
            return Ok(None);
        };
        let message = RequestResources::decode(rest)
            .map_err(|e| Status::internal(format!("decoding a request: {e}")))?;
        self.buf.advance(end);
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
        match trailers.and_then(status_of) {
            // The sink's own word first, whatever was left unread.
            Some(status) if status.code() != Code::Ok => return Some(status),
            _ if !self.buf.is_empty() => {
                return Some(Status::internal(
                    "protocol error: the stream ended inside a message",
                ));
            }
            Some(_) => return None,
            None => {}
        }
        Some(self.inferred())
    }

    /// The status of a call whose answer has none: tonic's inference from
    /// the HTTP status (gRPC's HTTP-to-gRPC status mapping).
    fn inferred(&self) -> Status {
        let code = match self.http_status {
            StatusCode::OK => {
                return Status::unknown(
                    "protocol error: missing grpc-status trailer, stream was terminated without a final status",
                );
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
        Status::new(
            code,
            format!(
                "grpc-status header missing, mapped from HTTP status code {}",
                self.http_status.as_u16()
            ),
        )
    }
}

/// The gRPC status in `headers` (trailers, or the headers of a
/// trailers-only answer). Status details are not used here and are left
/// out: tonic panics on details that are not base64, and a sink's bytes
/// must not end the dialer.
pub(super) fn status_of(headers: &http::HeaderMap) -> Option<Status> {
    if headers.contains_key(DETAILS) {
        let mut headers = headers.clone();
        headers.remove(DETAILS);
        return Status::from_header_map(&headers);
    }
    Status::from_header_map(headers)
}

/// gRPC's status details header.
const DETAILS: &str = "grpc-status-details-bin";

impl<B> Stream for Acks<B>
where
    B: Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Item = Result<RequestResources, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        // Not a gRPC answer (a proxy's error page): its body is not read
        // as frames; the HTTP status says what happened.
        if !this.done && this.http_status != StatusCode::OK {
            this.done = true;
            return Poll::Ready(Some(Err(this.inferred())));
        }
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
                        this.grown |= this.buf.capacity() > KEEP;
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
