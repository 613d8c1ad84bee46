//! The base of every meshhub gRPC port: the engine's transport settings
//! (one source of truth: `meshhub_mcp::transport`), `grpc.health.v1` and
//! gRPC server reflection (v1 and v1alpha, for grpcurl and friends) over
//! the descriptors of `istio.mcp.v1alpha1` and `grpc.health.v1`.
//!
//! Reflection lists the services a port really serves (the caller names
//! them) with health and reflection. Envoy's ADS
//! (`envoy.service.discovery.v3`) is served but not listed: meshhub has no
//! descriptor of Envoy's protos (`envoy-types` ships generated Rust only).

use std::sync::Arc;

use meshhub_mcp::ads::extensions::PluginsAsExtensions;
use meshhub_mcp::ads::{AdsServer, TypeMap};
use meshhub_mcp::limits::{Limits, StreamLimitLayer};
use meshhub_mcp::snapshot::{Served, View};
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::translate::WasmPluginTranslation;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::transport::server::Router;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tower::layer::util::{Identity, Stack};
use tracing::error;

pub use meshhub_mcp::transport::server;

use crate::port::ReflectionError;

/// A port's router with health (not serving until told) and reflection;
/// `L` is the server's layer stack (flow control).
pub struct Base<L = tower::layer::util::Identity> {
    /// Sets the port's health.
    pub health: HealthReporter,
    /// Add the port's own services to this.
    pub router: Router<L>,
}

impl<L> std::fmt::Debug for Base<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Base").finish_non_exhaustive()
    }
}

/// MCP's `ResourceSource` service.
pub const RESOURCE_SOURCE: &str = "istio.mcp.v1alpha1.ResourceSource";
/// MCP's `ResourceSink` service.
pub const RESOURCE_SINK: &str = "istio.mcp.v1alpha1.ResourceSink";
/// The health service.
pub const HEALTH: &str = "grpc.health.v1.Health";

/// `server` (see [`server()`]) with health and reflection added;
/// reflection lists `services` (the port's own), health and itself.
pub async fn base<L: Clone>(
    mut server: Server<L>,
    services: &[&str],
) -> Result<Base<L>, crate::port::PortError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    let builder = |reflection: &str| {
        services.iter().copied().chain([HEALTH, reflection]).fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(
                    meshhub_proto::descriptor::FILE_DESCRIPTOR_SET,
                )
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
            tonic_reflection::server::Builder::with_service_name,
        )
    };
    let v1 = builder("grpc.reflection.v1.ServerReflection")
        .build_v1()
        .map_err(ReflectionError)?;
    let v1alpha = builder("grpc.reflection.v1alpha.ServerReflection")
        .build_v1alpha()
        .map_err(ReflectionError)?;
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

/// What the ADS service serves for each type URL, as `kinds` map them:
/// the kind's collection, the kinds [`Kind::offered_over_ads`](meshhub_proto::kinds::Kind::offered_over_ads)
/// only. Kinds istiod never asks an `xds://` source for (the Gateway
/// API's) map to no collection: a request for one is answered like any
/// unknown type URL. TrafficExtension (asked for by istiod 1.30+ only) is
/// served with the WasmPlugins translated in, as such an istiod reads
/// them (`meshhub_mcp::ads::extensions`). The serving port and whatever
/// shows what a consumer was served (the hub's object pages) read it
/// alike.
pub fn ads_types(kinds: KindTable) -> TypeMap {
    let extensions = WasmPluginTranslation::new(&kinds).map(|t| {
        let collection = t.extension().collection().to_owned();
        let view: Arc<dyn View> = Arc::new(PluginsAsExtensions::new(t));
        (collection, view)
    });
    Arc::new(move |type_url: &str| {
        let kind = kinds
            .by_type_url(type_url)
            .filter(|k| k.offered_over_ads())?;
        Some(match &extensions {
            Some((collection, view)) if collection == kind.collection() => {
                Served::View(view.clone())
            }
            _ => Served::Collection(kind.collection().to_owned()),
        })
    })
}

/// The transport stack of a port that serves consumers: the engine's
/// per-stream flow control over its transport settings.
pub type ServingLayer = Stack<StreamLimitLayer, Identity>;

/// The port that serves a snapshot cache to consumers, as the hub's gRPC
/// port and the agent's re-serve port both do: `ResourceSource` and ADS
/// (MCP-over-xDS, type URLs mapped to collections by `kinds`, the kinds
/// [`Kind::offered_over_ads`](meshhub_proto::kinds::Kind::offered_over_ads) only) over
/// `shared`, with the engine's transport settings and flow control
/// (`limits`), health and reflection. Messages up to `max_message_bytes`
/// are decoded.
pub async fn serving_port(
    shared: Shared,
    kinds: KindTable,
    limits: &Limits,
    max_message_bytes: usize,
) -> Result<Base<ServingLayer>, crate::port::PortError> {
    let types = ads_types(kinds);
    let base = base(
        meshhub_mcp::transport::server_with(limits).layer(StreamLimitLayer::new(limits)),
        &[RESOURCE_SOURCE],
    )
    .await?;
    Ok(Base {
        health: base.health,
        router: base
            .router
            .add_service(SourceServer::new(shared.clone()).into_service(max_message_bytes))
            .add_service(AdsServer::new(shared, types).into_service(max_message_bytes)),
    })
}
