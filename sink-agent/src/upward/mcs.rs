//! The cluster's exported Services (Kubernetes Multi-Cluster Services,
//! KEP-1645): the agent watches `ServiceExport`
//! (`multicluster.x-k8s.io/v1alpha1`) objects and the Services they name,
//! and publishes one [`ServiceExport`] message per export: the Service's
//! ports and type, and the addresses through which other clusters reach it
//! (the cluster's east-west gateway: from configuration, or read from a
//! Service of type LoadBalancer or NodePort).
//!
//! The hub aggregates the exports of every cluster and generates the
//! `ServiceEntry` objects of the consuming clusters; no cluster reads
//! another cluster's API.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use meshhub_proto::upward::{GatewayAddress, ServiceExport, ServicePort};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// The API group of the MCS API.
pub const GROUP: &str = "multicluster.x-k8s.io";
/// The version watched.
pub const VERSION: &str = "v1alpha1";

/// Where the cluster's gateway for other clusters is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gateway {
    /// Fixed addresses (`host:port`).
    Addresses(Vec<GatewayAddress>),
    /// A Service of type LoadBalancer (its ingress addresses) or NodePort
    /// (its external IPs and node port), `namespace/name`, and the name of
    /// its port for cross-cluster traffic (`None`: the first port).
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The port's name.
        port: Option<String>,
    },
}

/// MCS settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McsConfig {
    /// The cluster's API.
    pub connection: meshhub_kube::Connection,
    /// Its east-west gateway.
    pub gateway: Gateway,
}

type Key = (String, String);

/// What the watches hold.
#[derive(Debug, Default)]
struct State {
    /// Export → its creation time.
    exports: BTreeMap<Key, Option<SystemTime>>,
    services: BTreeMap<Key, Service>,
    /// Buffers of a re-list in progress (watcher `Init` … `InitDone`).
    exports_init: Option<BTreeMap<Key, Option<SystemTime>>>,
    services_init: Option<BTreeMap<Key, Service>>,
}

fn key_of(meta: &kube::api::ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Watches exports and Services until `shutdown`, publishing the exports.
pub async fn run(
    config: McsConfig,
    client: kube::Client,
    tx: watch::Sender<Arc<Vec<ServiceExport>>>,
    shutdown: CancellationToken,
) {
    let gvk = GroupVersionKind::gvk(GROUP, VERSION, "ServiceExport");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "serviceexports");
    let exports: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let services: Api<Service> = Api::all(client);
    let mut exports = watcher::watcher(exports, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut services = watcher::watcher(services, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut state = State::default();
    let mut failing = (false, false);
    info!("watching ServiceExports and Services");
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            Some(ev) = exports.next() => match ev {
                Ok(ev) => {
                    failing.0 = false;
                    on_export(&mut state, ev);
                }
                Err(e) => {
                    if !failing.0 {
                        warn!(error = %e, "watch of ServiceExports failing (is the MCS CRD installed?); retrying");
                    }
                    failing.0 = true;
                    continue;
                }
            },
            Some(ev) = services.next() => match ev {
                Ok(ev) => {
                    failing.1 = false;
                    on_service(&mut state, ev);
                }
                Err(e) => {
                    if !failing.1 {
                        warn!(error = %e, "watch of Services failing; retrying");
                    }
                    failing.1 = true;
                    continue;
                }
            },
        }
        let now = Arc::new(exports_of(&state, &config.gateway));
        tx.send_if_modified(|old| {
            let changed = **old != *now;
            if changed {
                metrics::gauge!("meshhub_agent_service_exports").set(now.len() as f64);
                *old = now;
            }
            changed
        });
    }
}

fn created(meta: &kube::api::ObjectMeta) -> Option<SystemTime> {
    meta.creation_timestamp
        .as_ref()
        .map(|t| SystemTime::from(t.0))
}

fn on_export(s: &mut State, ev: Event<DynamicObject>) {
    match ev {
        Event::Apply(o) => {
            s.exports.insert(key_of(&o.metadata), created(&o.metadata));
        }
        Event::Delete(o) => {
            s.exports.remove(&key_of(&o.metadata));
        }
        Event::Init => s.exports_init = Some(BTreeMap::new()),
        Event::InitApply(o) => {
            if let Some(b) = s.exports_init.as_mut() {
                b.insert(key_of(&o.metadata), created(&o.metadata));
            }
        }
        Event::InitDone => {
            if let Some(b) = s.exports_init.take() {
                s.exports = b;
            }
        }
    }
}

fn on_service(s: &mut State, ev: Event<Service>) {
    match ev {
        Event::Apply(o) => {
            s.services.insert(key_of(&o.metadata), o);
        }
        Event::Delete(o) => {
            s.services.remove(&key_of(&o.metadata));
        }
        Event::Init => s.services_init = Some(BTreeMap::new()),
        Event::InitApply(o) => {
            if let Some(b) = s.services_init.as_mut() {
                b.insert(key_of(&o.metadata), o);
            }
        }
        Event::InitDone => {
            if let Some(b) = s.services_init.take() {
                s.services = b;
            }
        }
    }
}

/// The exports as published.
fn exports_of(s: &State, gateway: &Gateway) -> Vec<ServiceExport> {
    let gateways = match gateway {
        Gateway::Addresses(a) => a.clone(),
        Gateway::Service {
            namespace,
            name,
            port,
        } => s
            .services
            .get(&(namespace.clone(), name.clone()))
            .map(|svc| gateway_addresses(svc, port.as_deref()))
            .unwrap_or_default(),
    };
    s.exports
        .iter()
        .map(|((namespace, name), created)| {
            let mut e = ServiceExport {
                namespace: namespace.clone(),
                name: name.clone(),
                created: created.map(Into::into),
                ..Default::default()
            };
            match s.services.get(&(namespace.clone(), name.clone())) {
                None => {
                    e.problem = "ServiceNotFound: no Service of that name in the namespace".into()
                }
                Some(svc) => {
                    let spec = svc.spec.clone().unwrap_or_default();
                    e.r#type = if spec.cluster_ip.as_deref() == Some("None") {
                        "Headless"
                    } else {
                        "ClusterSetIP"
                    }
                    .to_owned();
                    e.ports = spec
                        .ports
                        .unwrap_or_default()
                        .into_iter()
                        .map(|p| ServicePort {
                            name: p.name.unwrap_or_default(),
                            port: u32::try_from(p.port).unwrap_or_default(),
                            protocol: p.protocol.unwrap_or_else(|| "TCP".to_owned()),
                            app_protocol: p.app_protocol.unwrap_or_default(),
                        })
                        .collect();
                    e.gateways = gateways.clone();
                    if e.gateways.is_empty() {
                        e.problem =
                            "no gateway address: the gateway Service has no external address yet"
                                .into();
                    }
                }
            }
            e
        })
        .collect()
}

/// The addresses of a gateway Service: a LoadBalancer's ingress (IP or
/// host name) with the port's port, or a NodePort's external IPs with its
/// node port.
pub fn gateway_addresses(svc: &Service, port_name: Option<&str>) -> Vec<GatewayAddress> {
    let spec = svc.spec.clone().unwrap_or_default();
    let ports = spec.ports.clone().unwrap_or_default();
    let port = match port_name {
        Some(n) => ports.iter().find(|p| p.name.as_deref() == Some(n)),
        None => ports.first(),
    };
    let Some(port) = port else {
        return Vec::new();
    };
    match spec.type_.as_deref() {
        Some("LoadBalancer") => svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| i.ip.or(i.hostname))
            .map(|address| GatewayAddress {
                address,
                port: u32::try_from(port.port).unwrap_or_default(),
            })
            .collect(),
        Some("NodePort") => spec
            .external_ips
            .unwrap_or_default()
            .into_iter()
            .filter_map(|address| {
                let node_port = u32::try_from(port.node_port?).ok()?;
                Some(GatewayAddress {
                    address,
                    port: node_port,
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(json: serde_json::Value) -> Service {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_load_balancer_gateway_gives_its_ingress_and_port() {
        let gw = svc(serde_json::json!({
            "metadata": {"name": "eastwest", "namespace": "istio-system"},
            "spec": {"type": "LoadBalancer", "ports": [
                {"name": "status", "port": 15021},
                {"name": "tls", "port": 15443}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}, {"hostname": "gw.example"}]}},
        }));
        let a = gateway_addresses(&gw, Some("tls"));
        assert_eq!(a.len(), 2);
        assert_eq!((a[0].address.as_str(), a[0].port), ("192.0.2.7", 15443));
        assert_eq!(a[1].address, "gw.example");
        let np = svc(serde_json::json!({
            "metadata": {"name": "eastwest", "namespace": "istio-system"},
            "spec": {"type": "NodePort", "externalIPs": ["198.51.100.1"],
                     "ports": [{"name": "tls", "port": 15443, "nodePort": 31443}]},
        }));
        let a = gateway_addresses(&np, None);
        assert_eq!((a[0].address.as_str(), a[0].port), ("198.51.100.1", 31443));
        assert!(gateway_addresses(&np, Some("nope")).is_empty());
    }

    #[test]
    fn an_export_without_its_service_is_reported() {
        let mut s = State::default();
        s.exports.insert(("shop".into(), "cart".into()), None);
        let gw = Gateway::Addresses(vec![GatewayAddress {
            address: "192.0.2.1".into(),
            port: 15443,
        }]);
        let e = exports_of(&s, &gw);
        assert!(e[0].problem.starts_with("ServiceNotFound"), "{e:?}");
        s.services.insert(
            ("shop".into(), "cart".into()),
            svc(serde_json::json!({
                "metadata": {"name": "cart", "namespace": "shop"},
                "spec": {"clusterIP": "10.0.0.1", "ports": [{"name": "http", "port": 80}]},
            })),
        );
        let e = exports_of(&s, &gw);
        assert_eq!(e[0].problem, "");
        assert_eq!(e[0].r#type, "ClusterSetIP");
        assert_eq!(e[0].ports[0].port, 80);
        assert_eq!(e[0].ports[0].protocol, "TCP");
        assert_eq!(e[0].gateways[0].port, 15443);
    }
}
