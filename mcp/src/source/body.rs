//! A gRPC message body that never holds a whole message in one buffer: the
//! servers' responses, and the dial-out's request stream (a client stream
//! carries the same MCP `Resources`).
//!
//! tonic's codec writes each message into one per-stream buffer that grows
//! to the largest message and keeps that memory for the life of the stream:
//! with full-state MCP responses of megabytes, every idle stream would hold
//! megabytes (measured on the dial-out: 66 KiB per idle cluster at 202
//! objects per group, docs/scaling.md). This body instead walks a response lazily, when HTTP/2 asks
//! for data (so flow control paces it). The resources of an MCP or ADS
//! response are the same bytes for every stream that sends that list: they
//! go out as the list's shared section ([`ResourceList::section`]), framed
//! once for all streams and freed when the last has written it. Otherwise
//! (delta ADS, whose envelope names each resource, and small lists) small
//! fields and resource prefixes are copied into chunks of at most [`CHUNK`]
//! bytes, and large resources are handed to HTTP/2 as the shared [`Bytes`]
//! themselves, with no copy. Nothing per stream outlives the chunk being
//! written.
//!
//! The bytes on the wire are exactly the message's protobuf encoding behind
//! the 5-byte gRPC message prefix (tests compare them with prost's).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use http::HeaderMap;
use http_body::Frame;
use meshhub_proto::wire::{
    EncodedDeltaDiscoveryResponse, EncodedDiscoveryResponse, EncodedResources, Framing,
    ResourceList, write_framed_prefix,
};
use prost::Message;
use prost::encoding::{self, WireType, encode_key, encode_varint};
use tonic::Status;

use crate::limits::SendProgress;

/// Largest chunk built by copying.
pub const CHUNK: usize = 32 * 1024;
/// Resources at least this large are sent as they are, not copied.
pub const ZERO_COPY_MIN: usize = 2 * 1024;

/// A response message laid out as head fields, resources, tail fields.
pub trait Layout: Send + Unpin + 'static {
    /// The encoded length of the message.
    fn message_len(&self) -> usize;
    /// Fields before the resources.
    fn head(&self, buf: &mut BytesMut);
    /// Number of resources.
    fn resource_count(&self) -> usize;
    /// The prefix written before resource `i` (its tag and length, and any
    /// wrapper).
    fn resource_prefix(&self, i: usize, buf: &mut BytesMut);
    /// Resource `i`'s encoded bytes.
    fn resource(&self, i: usize) -> &Bytes;
    /// What follows resource `i`'s bytes (fields of a wrapper with a
    /// higher tag); nothing by default.
    fn resource_suffix(&self, _i: usize, _buf: &mut BytesMut) {}
    /// Fields after the resources.
    fn tail(&self, buf: &mut BytesMut);
    /// The resources as one shared list and how this message frames them,
    /// when every resource is framed alike (see [`ResourceList::section`]).
    fn shared_section(&self) -> Option<(&ResourceList, Framing)> {
        None
    }
}

fn put_str(tag: u32, s: &str, buf: &mut BytesMut) {
    if !s.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(s.len() as u64, buf);
        buf.put_slice(s.as_bytes());
    }
}

impl Layout for EncodedResources {
    fn message_len(&self) -> usize {
        self.encoded_len()
    }
    fn head(&self, buf: &mut BytesMut) {
        put_str(1, &self.system_version_info, buf);
        put_str(2, &self.collection, buf);
    }
    fn resource_count(&self) -> usize {
        self.resources.len()
    }
    fn resource_prefix(&self, i: usize, buf: &mut BytesMut) {
        write_framed_prefix(Framing::Mcp, &self.resources[i], buf);
    }
    fn resource(&self, i: usize) -> &Bytes {
        &self.resources[i]
    }
    fn shared_section(&self) -> Option<(&ResourceList, Framing)> {
        Some((&self.resources, Framing::Mcp))
    }
    fn tail(&self, buf: &mut BytesMut) {
        encoding::string::encode_repeated(4, &self.removed_resources, buf);
        put_str(5, &self.nonce, buf);
        if self.incremental {
            encoding::bool::encode(6, &self.incremental, buf);
        }
    }
}

impl Layout for EncodedDiscoveryResponse {
    fn message_len(&self) -> usize {
        self.encoded_len()
    }
    fn head(&self, buf: &mut BytesMut) {
        put_str(1, &self.version_info, buf);
    }
    fn resource_count(&self) -> usize {
        self.resources.len()
    }
    fn resource_prefix(&self, i: usize, buf: &mut BytesMut) {
        // Any{type_url = MCP_RESOURCE_TYPE_URL, value = resource}
        write_framed_prefix(Framing::Any, &self.resources[i], buf);
    }
    fn resource(&self, i: usize) -> &Bytes {
        &self.resources[i]
    }
    fn shared_section(&self) -> Option<(&ResourceList, Framing)> {
        Some((&self.resources, Framing::Any))
    }
    fn tail(&self, buf: &mut BytesMut) {
        put_str(4, &self.type_url, buf);
        put_str(5, &self.nonce, buf);
    }
}

impl Layout for EncodedDeltaDiscoveryResponse {
    fn message_len(&self) -> usize {
        self.encoded_len()
    }
    fn head(&self, buf: &mut BytesMut) {
        put_str(1, &self.system_version_info, buf);
    }
    fn resource_count(&self) -> usize {
        self.resources.len()
    }
    fn resource_prefix(&self, i: usize, buf: &mut BytesMut) {
        // Resource{version, resource: Any{type_url, value = …
        self.resources[i].write_prefix(buf);
    }
    fn resource(&self, i: usize) -> &Bytes {
        &self.resources[i].resource
    }
    fn resource_suffix(&self, i: usize, buf: &mut BytesMut) {
        // … }, name}
        self.resources[i].write_suffix(buf);
    }
    fn tail(&self, buf: &mut BytesMut) {
        self.write_tail(buf);
    }
}

/// Where the body is within the current message.
enum Stage {
    /// Next: the gRPC prefix and head.
    Start,
    /// Next: every resource, as the list's shared section.
    Section,
    /// Next: resource `i` (its prefix, then its bytes).
    Resource(usize),
    /// Next: the bytes of resource `i`, sent on their own.
    Shared(usize),
    /// Next: what follows resource `i`'s bytes.
    Suffix(usize),
    /// Next: the tail.
    Tail,
}

/// The response body of one stream (or, made with
/// [`ResponseBody::request`], the request body of a client stream).
pub struct ResponseBody<M, S> {
    messages: S,
    current: Option<(M, Stage)>,
    /// Bytes of the current message (with its prefix) not yet handed
    /// over: a chunk buffer is never larger than what is left, so a small
    /// response (an incremental change) does not cost a 32 KiB buffer.
    left: usize,
    max_message_bytes: usize,
    /// Trailers to send once the messages end.
    finished: Option<Status>,
    /// A request body: no trailers (gRPC clients end their stream with
    /// END_STREAM alone); a failure resets the stream instead.
    request: bool,
    done: bool,
    progress: Option<SendProgress>,
}

impl<M: Layout, S> ResponseBody<M, S>
where
    S: Stream<Item = Result<M, Status>> + Unpin + Send + 'static,
{
    /// A body sending `messages`; a message larger than `max_message_bytes`
    /// ends the stream with `RESOURCE_EXHAUSTED`.
    pub fn new(messages: S, max_message_bytes: usize) -> Self {
        Self {
            messages,
            current: None,
            left: 0,
            max_message_bytes,
            finished: None,
            request: false,
            done: false,
            progress: None,
        }
    }

    /// A request body sending `messages`: it ends without trailers; a
    /// message larger than `max_message_bytes` or an error from `messages`
    /// fails the body, which resets the stream (as tonic's own client
    /// encoder does).
    pub fn request(messages: S, max_message_bytes: usize) -> Self {
        Self {
            request: true,
            ..Self::new(messages, max_message_bytes)
        }
    }

    /// Reports on `progress` whether what it was given is written.
    pub fn with_progress(mut self, progress: SendProgress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Copies pieces of the current message into `buf` until it is full,
    /// the message ends, or a large resource must go on its own.
    fn fill(&mut self, buf: &mut BytesMut) {
        while let Some((msg, stage)) = self.current.as_mut() {
            match *stage {
                Stage::Start => {
                    buf.put_u8(0); // not compressed
                    buf.put_u32(msg.message_len() as u32);
                    msg.head(buf);
                    *stage = match msg.shared_section() {
                        Some((list, framing)) if list.section_len(framing) >= ZERO_COPY_MIN => {
                            Stage::Section
                        }
                        _ => Stage::Resource(0),
                    };
                }
                Stage::Section => return,
                Stage::Resource(i) if i < msg.resource_count() => {
                    msg.resource_prefix(i, buf);
                    if msg.resource(i).len() >= ZERO_COPY_MIN {
                        *stage = Stage::Shared(i);
                        return;
                    }
                    buf.put_slice(msg.resource(i));
                    *stage = Stage::Suffix(i);
                }
                Stage::Suffix(i) => {
                    msg.resource_suffix(i, buf);
                    *stage = Stage::Resource(i + 1);
                }
                Stage::Resource(_) => *stage = Stage::Tail,
                Stage::Shared(_) => return,
                Stage::Tail => {
                    msg.tail(buf);
                    self.current = None;
                    return;
                }
            }
            if buf.len() >= CHUNK {
                return;
            }
        }
    }
}

impl<M: Layout, S> http_body::Body for ResponseBody<M, S>
where
    S: Stream<Item = Result<M, Status>> + Unpin + Send + 'static,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some((msg, stage)) = this.current.as_mut() {
                if let (Stage::Section, Some((list, framing))) = (&*stage, msg.shared_section()) {
                    // Every stream sending this list sends the same section.
                    let section = list.section(framing);
                    *stage = Stage::Tail;
                    this.left = this.left.saturating_sub(section.len());
                    return Poll::Ready(Some(Ok(Frame::data(section))));
                }
                if let Stage::Shared(i) = *stage {
                    // A large resource goes out as the shared bytes.
                    let r = msg.resource(i).clone();
                    *stage = Stage::Suffix(i);
                    this.left = this.left.saturating_sub(r.len());
                    return Poll::Ready(Some(Ok(Frame::data(r))));
                }
                let mut buf = BytesMut::with_capacity(this.left.min(CHUNK + 256));
                this.fill(&mut buf);
                if !buf.is_empty() {
                    this.left = this.left.saturating_sub(buf.len());
                    return Poll::Ready(Some(Ok(Frame::data(buf.freeze()))));
                }
                continue;
            }
            if let Some(status) = this.finished.take() {
                this.done = true;
                if !this.request {
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers(&status)))));
                }
                if status.code() != tonic::Code::Ok {
                    return Poll::Ready(Some(Err(status)));
                }
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.messages).poll_next(cx) {
                Poll::Pending => {
                    if let Some(p) = &this.progress {
                        p.idle();
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(msg))) => {
                    if let Some(p) = &this.progress {
                        p.busy();
                    }
                    let len = msg.message_len();
                    if len > this.max_message_bytes || len > u32::MAX as usize {
                        this.finished = Some(Status::resource_exhausted(format!(
                            "message of {len} bytes exceeds the limit of {}",
                            this.max_message_bytes
                        )));
                        continue;
                    }
                    this.left = len + 5;
                    this.current = Some((msg, Stage::Start));
                }
                Poll::Ready(Some(Err(status))) => this.finished = Some(status),
                Poll::Ready(None) => this.finished = Some(Status::ok("")),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// The gRPC trailers for a status.
fn trailers(status: &Status) -> HeaderMap {
    let mut map = HeaderMap::new();
    if let Err(e) = status.add_header(&mut map) {
        tracing::warn!(error = %e, "cannot render gRPC status trailers");
        map.insert(Status::GRPC_STATUS, (tonic::Code::Internal as i32).into());
    }
    map
}

#[cfg(test)]
mod tests;
