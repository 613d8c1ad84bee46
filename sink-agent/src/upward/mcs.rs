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
use std::time::{Duration, SystemTime};

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

/// The watches the exports are built from, as named in
/// `ExportsState.waiting_for`.
pub const WATCH_EXPORTS: &str = "serviceexports";
/// The Services watch (the exported Services and the gateway Service).
pub const WATCH_SERVICES: &str = "services";

/// What the agent publishes of its exports: the set, and whether it can
/// be trusted as the cluster's whole set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exports {
    /// The exports. While incomplete, the last complete set (empty before
    /// the first), so that a hub that does not read `complete` (an older
    /// one) is not handed a partial set either.
    pub exports: Vec<ServiceExport>,
    /// Every watch listed, and none failed since.
    pub complete: bool,
    /// The watches that have not (re-)listed.
    pub waiting_for: Vec<String>,
}

impl Exports {
    /// Before any watch listed.
    pub fn starting() -> Self {
        Self {
            exports: Vec::new(),
            complete: false,
            waiting_for: vec![WATCH_EXPORTS.to_owned(), WATCH_SERVICES.to_owned()],
        }
    }
}

/// What the watches hold.
#[derive(Debug, Default)]
struct State {
    /// Export → its creation time.
    exports: BTreeMap<Key, Option<SystemTime>>,
    services: BTreeMap<Key, Service>,
    /// Buffers of a re-list in progress (watcher `Init` … `InitDone`).
    exports_init: Option<BTreeMap<Key, Option<SystemTime>>>,
    services_init: Option<BTreeMap<Key, Service>>,
    /// Whether each watch listed and has not failed since.
    exports_listed: bool,
    services_listed: bool,
    /// The last set built while both watches were listed.
    last_complete: Vec<ServiceExport>,
}

impl State {
    /// What to publish now.
    fn published(&mut self, gateway: &Gateway) -> Exports {
        let complete = self.exports_listed && self.services_listed;
        if complete {
            self.last_complete = exports_of(self, gateway);
        }
        let waiting_for = [
            (!self.exports_listed).then_some(WATCH_EXPORTS),
            (!self.services_listed).then_some(WATCH_SERVICES),
        ]
        .into_iter()
        .flatten()
        .map(str::to_owned)
        .collect();
        Exports {
            exports: self.last_complete.clone(),
            complete,
            waiting_for,
        }
    }
}

fn key_of(meta: &kube::api::ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The shortest and longest wait before a failed watch is started again.
const RELIST_MIN: Duration = Duration::from_secs(1);
const RELIST_MAX: Duration = Duration::from_secs(30);
/// A watch that stayed listed this long before failing starts again at
/// [`RELIST_MIN`].
const RELIST_RESET: Duration = Duration::from_secs(60);

/// When a watch that failed is started again (from a fresh list: kube's
/// watcher resumes a failed watch from its resource version without
/// listing again, and the exports are trusted only after a list).
#[derive(Debug)]
struct Relist {
    at: Option<tokio::time::Instant>,
    delay: Duration,
    listed_at: Option<tokio::time::Instant>,
}

impl Relist {
    fn new() -> Self {
        Self {
            at: None,
            delay: RELIST_MIN,
            listed_at: None,
        }
    }

    /// The watch failed while listed: when to start it again.
    fn failed(&mut self) {
        let now = tokio::time::Instant::now();
        if self.listed_at.is_some_and(|t| now - t >= RELIST_RESET) {
            self.delay = RELIST_MIN;
        }
        self.at = Some(now + self.delay);
        self.delay = (self.delay * 2).min(RELIST_MAX);
        self.listed_at = None;
    }

    fn listed(&mut self) {
        self.listed_at = Some(tokio::time::Instant::now());
    }

    async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// Watches exports and Services until `shutdown`, publishing the exports
/// and whether they are complete.
pub async fn run(
    config: McsConfig,
    client: kube::Client,
    tx: watch::Sender<Arc<Exports>>,
    shutdown: CancellationToken,
) {
    let gvk = GroupVersionKind::gvk(GROUP, VERSION, "ServiceExport");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "serviceexports");
    let exports_api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let services_api: Api<Service> = Api::all(client);
    let watch_exports = || {
        watcher::watcher(exports_api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed()
    };
    let watch_services = || {
        watcher::watcher(services_api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed()
    };
    let mut exports = watch_exports();
    let mut services = watch_services();
    let mut relist = (Relist::new(), Relist::new());
    let mut state = State::default();
    let mut failing = (false, false);
    info!("watching ServiceExports and Services");
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = relist.0.due() => {
                relist.0.at = None;
                exports = watch_exports();
                continue;
            }
            () = relist.1.due() => {
                relist.1.at = None;
                services = watch_services();
                continue;
            }
            Some(ev) = exports.next(), if relist.0.at.is_none() => match ev {
                Ok(ev) => {
                    failing.0 = false;
                    if on_export(&mut state, ev) {
                        relist.0.listed();
                    }
                }
                Err(e) => {
                    if !failing.0 {
                        warn!(error = %e, "watch of ServiceExports failing (is the MCS CRD installed?); the exports are incomplete until it listed again");
                    }
                    failing.0 = true;
                    if std::mem::take(&mut state.exports_listed) {
                        relist.0.failed();
                    }
                }
            },
            Some(ev) = services.next(), if relist.1.at.is_none() => match ev {
                Ok(ev) => {
                    failing.1 = false;
                    if on_service(&mut state, ev) {
                        relist.1.listed();
                    }
                }
                Err(e) => {
                    if !failing.1 {
                        warn!(error = %e, "watch of Services failing; the exports are incomplete until it listed again");
                    }
                    failing.1 = true;
                    if std::mem::take(&mut state.services_listed) {
                        relist.1.failed();
                    }
                }
            },
        }
        let now = Arc::new(state.published(&config.gateway));
        tx.send_if_modified(|old| {
            let changed = **old != *now;
            if changed {
                metrics::gauge!("meshhub_agent_service_exports").set(now.exports.len() as f64);
                metrics::gauge!("meshhub_agent_service_exports_complete").set(if now.complete {
                    1.0
                } else {
                    0.0
                });
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

/// Takes a ServiceExport event; whether it completed a list.
fn on_export(s: &mut State, ev: Event<DynamicObject>) -> bool {
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
            s.exports_listed = true;
            return true;
        }
    }
    false
}

/// Takes a Service event; whether it completed a list.
fn on_service(s: &mut State, ev: Event<Service>) -> bool {
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
            s.services_listed = true;
            return true;
        }
    }
    false
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

    fn export_obj(ns: &str, name: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
            "metadata": {"name": name, "namespace": ns},
        }))
        .unwrap()
    }

    fn cart() -> Service {
        svc(serde_json::json!({
            "metadata": {"name": "cart", "namespace": "shop"},
            "spec": {"clusterIP": "10.0.0.1", "ports": [{"name": "http", "port": 80}]},
        }))
    }

    /// The restart of issue 38: the exports listed, the Services not yet.
    #[test]
    fn exports_are_complete_only_once_every_watch_listed_and_again_after_an_error() {
        let gw = Gateway::Addresses(vec![GatewayAddress {
            address: "192.0.2.1".into(),
            port: 15443,
        }]);
        let mut s = State::default();
        let p = s.published(&gw);
        assert!(!p.complete);
        assert_eq!(p.waiting_for, ["serviceexports", "services"]);
        assert!(!on_export(&mut s, Event::Init));
        on_export(&mut s, Event::InitApply(export_obj("shop", "cart")));
        assert!(on_export(&mut s, Event::InitDone));
        // The Services have not listed: nothing published as ServiceNotFound.
        let p = s.published(&gw);
        assert!(!p.complete);
        assert_eq!(p.waiting_for, ["services"]);
        assert!(p.exports.is_empty(), "{p:?}");
        on_service(&mut s, Event::Init);
        on_service(&mut s, Event::InitApply(cart()));
        assert!(on_service(&mut s, Event::InitDone));
        let p = s.published(&gw);
        assert!(p.complete && p.waiting_for.is_empty());
        assert_eq!(p.exports.len(), 1);
        assert_eq!(p.exports[0].problem, "");
        // The Services watch fails (as `run` takes it): incomplete, and
        // the last complete set is what is published meanwhile, even when
        // the watches deliver in between.
        s.services_listed = false;
        on_service(&mut s, Event::Delete(cart()));
        let p = s.published(&gw);
        assert!(!p.complete);
        assert_eq!(p.waiting_for, ["services"]);
        assert_eq!(p.exports.len(), 1);
        assert_eq!(p.exports[0].problem, "", "the last complete set");
        // Listed again: the current state, whole.
        on_service(&mut s, Event::Init);
        assert!(on_service(&mut s, Event::InitDone));
        let p = s.published(&gw);
        assert!(p.complete);
        assert!(p.exports[0].problem.starts_with("ServiceNotFound"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_watch_starts_again_later_and_later() {
        let mut r = Relist::new();
        r.listed();
        r.failed();
        let t0 = tokio::time::Instant::now();
        assert_eq!(r.at, Some(t0 + RELIST_MIN));
        r.failed();
        assert_eq!(r.at, Some(t0 + RELIST_MIN * 2));
        for _ in 0..10 {
            r.failed();
        }
        assert_eq!(r.at, Some(t0 + RELIST_MAX));
        // Listed for long enough: from the start again.
        r.listed();
        tokio::time::advance(RELIST_RESET).await;
        r.failed();
        assert_eq!(r.at, Some(tokio::time::Instant::now() + RELIST_MIN));
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
