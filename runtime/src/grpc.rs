//! The base of every meshhub gRPC port: the engine's transport settings
//! (one source of truth: `meshhub_mcp::transport`), `grpc.health.v1` and
//! gRPC server reflection (v1 and v1alpha, for grpcurl and friends) over
//! the descriptors of `istio.mcp.v1alpha1` and `grpc.health.v1`.

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::transport::server::Router;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tracing::error;

pub use meshhub_mcp::transport::server;

/// Why reflection can't be built (a descriptor set that does not decode).
#[derive(Debug, thiserror::Error)]
#[error("can't build gRPC reflection")]
pub struct ReflectionError(#[source] tonic_reflection::server::Error);

/// A port's router with health (not serving until told) and reflection.
pub struct Base {
    /// Sets the port's health.
    pub health: HealthReporter,
    /// Add the port's own services to this.
    pub router: Router,
}

impl std::fmt::Debug for Base {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Base").finish_non_exhaustive()
    }
}

/// `server` (see [`server()`]) with health and reflection added.
pub async fn base(mut server: Server) -> Result<Base, ReflectionError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(meshhub_proto::descriptor::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let v1 = builder().build_v1().map_err(ReflectionError)?;
    let v1alpha = builder().build_v1alpha().map_err(ReflectionError)?;
    let router = server
        .add_service(health_service)
        .add_service(v1)
        .add_service(v1alpha);
    Ok(Base { health, router })
}

/// Serves `router` on `listener` until `shutdown`; a failure is logged.
pub async fn serve(router: Router, listener: TcpListener, shutdown: CancellationToken) {
    let incoming = TcpListenerStream::new(listener);
    if let Err(e) = router
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await
    {
        error!(error = %e, "gRPC server failed");
    }
}
