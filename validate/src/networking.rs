//! Rules for the `networking.istio.io` kinds, one module per kind, plus the
//! parts several kinds share (destinations, connection pools, HTTP routes).

pub(crate) mod connection_pool;
pub(crate) mod destination;
pub(crate) mod destination_rule;
pub(crate) mod envoy_filter;
pub(crate) mod gateway;
pub(crate) mod http_route;
pub(crate) mod proxy_config;
pub(crate) mod service_entry;
pub(crate) mod sidecar;
pub(crate) mod virtual_service;
pub(crate) mod workload;
