//! Serving a tonic router on a bound listener, in plaintext or with TLS
//! that follows its files ([`crate::tls::reload`]).
//!
//! tonic's own TLS reads its certificate once; meshhub accepts TCP itself,
//! shakes hands with tokio-rustls using the configuration current at that
//! moment, and hands tonic the finished `TlsStream`: tonic's `Connected`
//! impl for it puts the peer certificates in every request
//! (`Request::peer_certs`). Each handshake runs in its own task with a
//! deadline, so a slow or silent client delays nobody else; a failed
//! handshake (a plaintext client, an untrusted certificate) is counted in
//! [`METRIC_HANDSHAKE_FAILURES`] and logged at debug level.
//!
//! Plaintext must be asked for: [`check_plaintext`] refuses a listener on
//! a non-loopback address without TLS unless the operator said `insecure`.
//!
//! Every connection can be closed from inside: [`cut`] (used when a
//! consumer stopped reading, see `limits`) makes its next read or write
//! fail, which ends the connection and frees what its streams hold.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{LazyLock, Mutex};
use std::task::{Context, Poll};

use futures::StreamExt as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tokio_util::sync::WaitForCancellationFutureOwned;
use tokio_util::task::TaskTracker;
use tonic::body::Body;
use tonic::service::Routes;
use tonic::transport::server::Router;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tower::{Layer, Service};
use tracing::{Instrument as _, debug, warn};

use crate::tls::reload::ReloadingServerTls;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Counter: TLS handshakes that failed or timed out, by `port`.
pub const METRIC_HANDSHAKE_FAILURES: &str = "meshhub_tls_handshake_failures_total";

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for the server to take them.
const READY_QUEUE: usize = 64;

/// A plaintext listener on a non-loopback address that nobody allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} listens on {addr} without TLS: configure TLS, or say `insecure: true` (--insecure) to serve plaintext beyond loopback"
)]
pub struct PlaintextRefused {
    /// The port's name (`grpc`, `sink`).
    pub what: &'static str,
    /// Its address.
    pub addr: SocketAddr,
}

/// Whether a listener may run: TLS, a loopback address, or `insecure`.
pub fn check_plaintext(
    what: &'static str,
    addr: SocketAddr,
    tls: bool,
    insecure: bool,
) -> Result<(), PlaintextRefused> {
    if tls || insecure || addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(PlaintextRefused { what, addr })
    }
}

/// Serves `router` on `listener` until `shutdown`: plaintext when `tls` is
/// `None`, otherwise TLS with the configuration current at each handshake.
/// `port` names the server in metrics and logs.
pub async fn serve<L, ResBody>(
    router: Router<L>,
    listener: TcpListener,
    tls: Option<Arc<ReloadingServerTls>>,
    port: &'static str,
    tasks: TaskTracker,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error>
where
    L: Layer<Routes>,
    L::Service: Service<Request<Body>, Response = Response<ResBody>> + Clone + Send + 'static,
    <L::Service as Service<Request<Body>>>::Future: Send,
    <L::Service as Service<Request<Body>>>::Error: Into<BoxError> + Send,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    match tls {
        None => {
            let incoming = TcpListenerStream::new(listener).map(|r| r.map(Guarded::new));
            router
                .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
                .await
        }
        Some(tls) => {
            let incoming = tls_incoming(listener, tls, port, tasks, shutdown.clone());
            router
                .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
                .await
        }
    }
}

/// Accepted connections after a successful handshake.
fn tls_incoming(
    listener: TcpListener,
    tls: Arc<ReloadingServerTls>,
    port: &'static str,
    tasks: TaskTracker,
    shutdown: CancellationToken,
) -> ReceiverStream<Result<TlsStream<Guarded>, std::io::Error>> {
    let (tx, rx) = mpsc::channel(READY_QUEUE);
    let accept_tasks = tasks.clone();
    tasks.spawn(
        async move {
            loop {
                let (tcp, peer) = tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tx.closed() => break,
                    r = listener.accept() => match r {
                        Ok(c) => c,
                        Err(e) => {
                            // Out of file descriptors and the like: pause, go on.
                            warn!(error = %e, "accept failed");
                            tokio::select! {
                                () = shutdown.cancelled() => break,
                                () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                            }
                        }
                    },
                };
                let _ = tcp.set_nodelay(true);
                let tcp = Guarded::new(tcp);
                let acceptor = TlsAcceptor::from(tls.current());
                let tx = tx.clone();
                let shutdown = shutdown.clone();
                accept_tasks.spawn(
                    async move {
                        let result = tokio::select! {
                            () = shutdown.cancelled() => return,
                            r = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)) => r,
                        };
                        match result {
                            Ok(Ok(stream)) => {
                                let _ = tx.send(Ok(stream)).await;
                            }
                            Ok(Err(e)) => {
                                metrics::counter!(METRIC_HANDSHAKE_FAILURES, "port" => port)
                                    .increment(1);
                                debug!(error = %e, "TLS handshake failed");
                            }
                            Err(_) => {
                                metrics::counter!(METRIC_HANDSHAKE_FAILURES, "port" => port)
                                    .increment(1);
                                debug!("TLS handshake timed out");
                            }
                        }
                    }
                    .instrument(tracing::debug_span!("tls.handshake", peer.addr = %peer)),
                );
            }
        }
        .instrument(tracing::info_span!("tls.accept", port)),
    );
    ReceiverStream::new(rx)
}

/// Open connections of every server of the process, by (local, remote)
/// address: what [`cut`] closes.
static CONNECTIONS: LazyLock<Mutex<HashMap<(SocketAddr, SocketAddr), CancellationToken>>> =
    LazyLock::new(Mutex::default);

/// Closes the connection from `remote` to our `local` address, if open:
/// its next read or write fails. Returns whether it was found.
pub fn cut(local: SocketAddr, remote: SocketAddr) -> bool {
    let connections = CONNECTIONS.lock().unwrap_or_else(|e| e.into_inner());
    match connections.get(&(local, remote)) {
        Some(token) => {
            token.cancel();
            true
        }
        None => false,
    }
}

/// A TCP connection that [`cut`] can close.
pub struct Guarded {
    inner: TcpStream,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
    key: Option<(SocketAddr, SocketAddr)>,
}

impl Guarded {
    fn new(inner: TcpStream) -> Self {
        let token = CancellationToken::new();
        let key = inner.local_addr().ok().zip(inner.peer_addr().ok());
        if let Some(key) = key {
            CONNECTIONS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, token.clone());
        }
        Self {
            inner,
            cut: Box::pin(token.cancelled_owned()),
            key,
        }
    }

    fn closed(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.cut.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection closed by the server (a stream stopped reading)",
            )
        })
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            CONNECTIONS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.closed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.closed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.closed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}
