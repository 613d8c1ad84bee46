//! Flow control of a dial-in gRPC port: how fast new streams may open (in
//! total and per connection), how many may be open, how large a message may
//! be, keepalive, and how long a response may wait for a consumer that
//! stopped reading.
//!
//! * New-stream rates are token buckets ([`governor`]): `newStreamsPerSecond`
//!   with `newStreamsBurst` for the whole port, and
//!   `connectionStreamsPerSecond`/`connectionStreamsBurst` per connection
//!   (keyed by the peer's address and port). A stream over either is
//!   refused at once with `RESOURCE_EXHAUSTED`; established streams are not
//!   touched. `grpc.health.v1` calls are never limited (probes).
//! * `maxStreams` bounds the open streams of the port (a semaphore permit
//!   lives as long as the response body); `maxStreamsPerConnection` is
//!   HTTP/2's `SETTINGS_MAX_CONCURRENT_STREAMS`.
//! * `streamRequestsPerSecond`/`streamRequestsBurst`: a token bucket per
//!   stream for the requests (subscriptions, ACKs, NACKs) a peer sends on
//!   it ([`RequestRate`]). A stream over it is ended with
//!   `RESOURCE_EXHAUSTED` and counted in [`METRIC_REQUEST_RATE`]; the
//!   other streams are not touched. An
//!   honest peer sends one request per response it gets, plus one per
//!   collection it subscribes.
//! * `sendTimeout`: a response that the consumer has not taken off the
//!   connection (HTTP/2 flow control: it stopped reading) within this time
//!   ends its stream and closes its connection, so that it cannot pin old
//!   snapshots. See [`SendProgress`] and `listen`.
//!
//! Every refusal is counted in [`crate::authz::METRIC_REFUSED`] with a
//! `reason`; every cut in [`METRIC_CUT`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt as _};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use http_body_util::BodyExt as _;
use tokio::sync::Semaphore;
use tonic::Status;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::authz::METRIC_REFUSED;

mod raw;

pub use raw::{LimitsError, RawLimits};

/// Counter: streams ended by the server because the consumer stopped
/// reading, by `protocol`.
pub const METRIC_CUT: &str = "meshhub_mcp_streams_cut_total";
/// Counts streams ended for sending requests faster than allowed.
pub const METRIC_REQUEST_RATE: &str = "meshhub_mcp_streams_request_rate_exceeded_total";

/// Flow-control settings of one gRPC port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// New streams per second on the port (refill rate).
    pub new_streams_per_second: NonZeroU32,
    /// New streams the port accepts at once (bucket size).
    pub new_streams_burst: NonZeroU32,
    /// New streams per second on one connection.
    pub connection_streams_per_second: NonZeroU32,
    /// New streams one connection may open at once.
    pub connection_streams_burst: NonZeroU32,
    /// Open streams on the port.
    pub max_streams: usize,
    /// Open streams on one connection (HTTP/2 `MAX_CONCURRENT_STREAMS`).
    pub max_streams_per_connection: u32,
    /// Largest message received or sent.
    pub max_message_bytes: usize,
    /// HTTP/2 keepalive ping interval.
    pub keepalive_interval: Duration,
    /// How long a keepalive ping may go unanswered before the connection
    /// is closed.
    pub keepalive_timeout: Duration,
    /// How long a response may wait for a consumer that stopped reading
    /// (`None`: forever).
    pub send_timeout: Option<Duration>,
    /// Requests per second one stream may send (refill rate).
    pub stream_requests_per_second: NonZeroU32,
    /// Requests one stream may send at once.
    pub stream_requests_burst: NonZeroU32,
}

impl Limits {
    /// The per-stream request rate of these limits.
    pub fn request_rate(&self) -> RequestRate {
        RequestRate {
            per_second: self.stream_requests_per_second,
            burst: self.stream_requests_burst,
        }
    }
}

/// How fast one stream's peer may send requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestRate {
    /// Refill rate.
    pub per_second: NonZeroU32,
    /// Bucket size.
    pub burst: NonZeroU32,
}

impl Default for RequestRate {
    fn default() -> Self {
        Limits::default().request_rate()
    }
}

impl RequestRate {
    /// A fresh bucket for one stream.
    pub fn limiter(&self) -> RequestLimiter {
        RequestLimiter {
            rate: *self,
            bucket: RateLimiter::direct(Quota::per_second(self.per_second).allow_burst(self.burst)),
        }
    }
}

/// One stream's request bucket.
pub struct RequestLimiter {
    rate: RequestRate,
    bucket: DefaultDirectRateLimiter,
}

impl std::fmt::Debug for RequestLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLimiter")
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}

impl RequestLimiter {
    /// Takes a token for one request; `RESOURCE_EXHAUSTED` (and the cut
    /// counted) when the stream is over its rate.
    pub fn check(&self) -> Result<(), tonic::Status> {
        self.bucket.check().map_err(|_| {
            metrics::counter!(METRIC_REQUEST_RATE).increment(1);
            tracing::warn!(
                limit.per_second = self.rate.per_second.get(),
                limit.burst = self.rate.burst.get(),
                "peer sends requests faster than allowed; ending its stream"
            );
            tonic::Status::resource_exhausted(format!(
                "this stream sent requests faster than {}/s (burst {}); reconnect with backoff",
                self.rate.per_second, self.rate.burst
            ))
        })
    }
}

const fn nz(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => panic!("zero"),
    }
}

// The connection-level defaults live here, not in `transport`, because
// `transport` builds servers from a `Limits` (one direction of import).
/// HTTP/2 keepalive ping interval.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a keepalive ping may go unanswered.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Streams one connection may carry (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`).
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;

impl Default for Limits {
    /// Sized for a hub with 10,000 consumers: all of them reconnect within
    /// a minute after a hub restart (200/s, bursts of 1,000), each opens a
    /// handful of streams (20 at once, 5/s after), 20,000 open streams.
    fn default() -> Self {
        Self {
            new_streams_per_second: nz(200),
            new_streams_burst: nz(1000),
            connection_streams_per_second: nz(5),
            connection_streams_burst: nz(20),
            max_streams: 20_000,
            max_streams_per_connection: MAX_CONCURRENT_STREAMS,
            max_message_bytes: 64 * 1024 * 1024,
            keepalive_interval: KEEPALIVE_INTERVAL,
            keepalive_timeout: KEEPALIVE_TIMEOUT,
            send_timeout: Some(Duration::from_secs(120)),
            // An honest peer sends one request per response; this leaves
            // room for hundreds of collections changing every second.
            stream_requests_per_second: nz(200),
            stream_requests_burst: nz(2000),
        }
    }
}

/// The shared state of a port's limits.
#[derive(Debug)]
struct Limiter {
    port: DefaultDirectRateLimiter,
    connections: DefaultKeyedRateLimiter<SocketAddr>,
    streams: Arc<Semaphore>,
    checks: AtomicU64,
}

/// A tower layer enforcing [`Limits`] on every new stream of a tonic server
/// (`Server::layer`).
#[derive(Clone, Debug)]
pub struct StreamLimitLayer(Arc<Limiter>);

impl StreamLimitLayer {
    /// The layer for these limits (one per port: the buckets are shared by
    /// every connection of the server it wraps).
    pub fn new(limits: &Limits) -> Self {
        Self(Arc::new(Limiter {
            port: RateLimiter::direct(
                Quota::per_second(limits.new_streams_per_second)
                    .allow_burst(limits.new_streams_burst),
            ),
            connections: RateLimiter::keyed(
                Quota::per_second(limits.connection_streams_per_second)
                    .allow_burst(limits.connection_streams_burst),
            ),
            streams: Arc::new(Semaphore::new(limits.max_streams)),
            checks: AtomicU64::new(0),
        }))
    }
}

impl<S> tower::Layer<S> for StreamLimitLayer {
    type Service = StreamLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        StreamLimit {
            inner,
            limiter: self.0.clone(),
        }
    }
}

/// See [`StreamLimitLayer`].
#[derive(Clone, Debug)]
pub struct StreamLimit<S> {
    inner: S,
    limiter: Arc<Limiter>,
}

/// The peer address of a request (plaintext or TLS connection).
fn peer(extensions: &http::Extensions) -> Option<SocketAddr> {
    extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|t| t.get_ref().remote_addr())
        })
}

fn refuse(reason: &'static str, message: String) -> http::Response<tonic::body::Body> {
    metrics::counter!(METRIC_REFUSED, "protocol" => "grpc", "reason" => reason).increment(1);
    tracing::debug!(reason, %message, "stream refused");
    Status::resource_exhausted(message).into_http()
}

impl<S, B> tower::Service<http::Request<B>> for StreamLimit<S>
where
    S: tower::Service<
            http::Request<B>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path().starts_with("/grpc.health.v1.Health/") {
            return self.inner.call(req).boxed();
        }
        let l = &self.limiter;
        // The connection's bucket first: an abusive connection is refused
        // without draining the port's.
        if let Some(addr) = peer(req.extensions()) {
            // Forget idle connections now and then (the map is keyed by
            // peer address and port).
            if l.checks.fetch_add(1, Ordering::Relaxed) % 4096 == 4095 {
                l.connections.retain_recent();
            }
            if l.connections.check_key(&addr).is_err() {
                let r = refuse(
                    "connection_rate_limited",
                    "too many new streams on this connection; retry with backoff".to_owned(),
                );
                return async move { Ok(r) }.boxed();
            }
        }
        if l.port.check().is_err() {
            let r = refuse(
                "rate_limited",
                "too many new streams on this server; retry with backoff".to_owned(),
            );
            return async move { Ok(r) }.boxed();
        }
        let Ok(permit) = l.streams.clone().try_acquire_owned() else {
            let r = refuse(
                "too_many_streams",
                "this server carries its maximum of open streams; retry later or elsewhere"
                    .to_owned(),
            );
            return async move { Ok(r) }.boxed();
        };
        let fut = self.inner.call(req);
        async move {
            let response = fut.await?;
            // The permit lives as long as the response body (the stream).
            Ok(response.map(|body| {
                tonic::body::Body::new(body.map_err(move |e| {
                    let _held = &permit;
                    e
                }))
            }))
        }
        .boxed()
    }
}

/// Whether a stream's responses are getting onto the connection: set by
/// the response body when it takes a message, cleared when it has written
/// everything it was given. Shared by a stream's task and its body.
#[derive(Clone, Debug)]
pub struct SendProgress(Arc<(tokio::time::Instant, AtomicU64)>);

impl Default for SendProgress {
    fn default() -> Self {
        Self(Arc::new((tokio::time::Instant::now(), AtomicU64::new(0))))
    }
}

impl SendProgress {
    /// The body took a message to write (keeps the earliest time).
    pub fn busy(&self) {
        let (base, since) = &*self.0;
        let now = base.elapsed().as_millis() as u64 + 1;
        let _ = since.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The body wrote everything it was given.
    pub fn idle(&self) {
        self.0.1.store(0, Ordering::Relaxed);
    }

    /// How long the body has been writing what it was given (`None`: idle).
    pub fn waiting(&self) -> Option<Duration> {
        let (base, since) = &*self.0;
        match since.load(Ordering::Relaxed) {
            0 => None,
            t => Some(base.elapsed().saturating_sub(Duration::from_millis(t - 1))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn progress_reports_how_long_a_response_waits() {
        let p = SendProgress::default();
        assert_eq!(p.waiting(), None);
        p.busy();
        tokio::time::advance(Duration::from_secs(3)).await;
        p.busy(); // the earliest time stays
        assert_eq!(p.waiting(), Some(Duration::from_secs(3)));
        p.idle();
        assert_eq!(p.waiting(), None);
    }
}
