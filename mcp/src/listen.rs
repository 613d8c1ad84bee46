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

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::body::Body;
use tonic::service::Routes;
use tonic::transport::server::Router;
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
            router
                .serve_with_incoming_shutdown(
                    TcpListenerStream::new(listener),
                    shutdown.cancelled_owned(),
                )
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
) -> ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>> {
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
