//! Delta (incremental) ADS: `DeltaAggregatedResources`, per Envoy's
//! incremental xDS protocol, carrying MCP resources.
//!
//! istiod never uses it (its config-source client is SotW only, reference
//! §3.2); it is here for other xDS clients (`meshhubctl watch --ads
//! --delta`, go-control-plane or Envoy-style clients) that want
//! per-resource changes instead of full state.
//!
//! [`DeltaStream`] wraps the MCP [`SourceStream`] in its incremental mode
//! rather than keeping a second copy of the protocol rules: one subscription
//! per type URL, at most one un-ACKed response per type with intermediate
//! changes coalesced, NACKed versions parked until the content changes,
//! what the client holds tracked as the snapshot it last ACKed (or what it
//! declared in `initial_resource_versions`), changes and removals computed
//! by the same delta code MCP incremental sinks get. What this layer adds:
//! * **Subscriptions.** The first request of a type subscribes it, whatever
//!   its nonce: with no `resource_names_subscribe` (legacy) or with `*` it
//!   is a wildcard, otherwise it names resources (`namespace/name`).
//!   `resource_names_subscribe` / `_unsubscribe` on later requests change
//!   the set; the machine is fed the collection filtered to it, so a
//!   subscription change is just another update (coalesced like one).
//!   Names subscribed (again) are sent even if the client should hold them,
//!   as Envoy requires; names that do not exist are listed in
//!   `removed_resources` so the client knows. Removals of names the client
//!   no longer wants are not sent (it dropped them itself).
//! * **Requests without a nonce** on a subscribed type only change the
//!   subscription; a nonce is an ACK or NACK (`error_detail`), recorded in
//!   the ledger like SotW ones.
//! * **Responses** name exactly the requested type URL; each resource is
//!   `Resource{name: "ns/name", version: metadata.version, resource:
//!   Any(istio.mcp.v1alpha1.Resource)}`, so a resource is resent only when
//!   its `metadata.version` changes.
//!
//! Responses are [`EncodedDeltaDiscoveryResponse`]s written from the shared,
//! pre-encoded resource bytes like SotW ADS and MCP responses, not
//! re-encoded through envoy-types messages: a first (full) response on a
//! large collection would otherwise copy every resource per stream. Only
//! the small envelope (name, version, `Any` header) is per stream; the name
//! and version are read from the resource bytes themselves, so the envelope
//! cannot disagree with what the client decodes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use meshhub_proto::RpcStatus;
use meshhub_proto::ads::DeltaDiscoveryRequest;
use meshhub_proto::mcp::RequestResources;
use meshhub_proto::wire::{EncodedDeltaDiscoveryResponse, EncodedDeltaResource, EncodedResources};

use super::MESH_CONFIG_TYPE_URL;
use crate::snapshot::CollectionSnapshot;
use crate::source::drive::Machine;
use crate::source::{SourceConfig, SourceStream, Step};

/// The resource name that subscribes to every resource of a type.
pub const WILDCARD: &str = "*";

/// Which requests the stream answers: not `core/v1alpha1/MeshConfig`
/// (meshhub does not own mesh config; same as SotW) and not requests
/// without a type URL (xDS-TP locators, which we do not serve).
pub fn accept(req: DeltaDiscoveryRequest) -> Option<DeltaDiscoveryRequest> {
    (!req.type_url.is_empty() && req.type_url != MESH_CONFIG_TYPE_URL).then_some(req)
}

/// What a client wants of one type.
#[derive(Debug, Default)]
struct Interest {
    /// Every resource of the type.
    wildcard: bool,
    /// Resources named explicitly.
    names: BTreeSet<String>,
    /// The collection as the cache has it, once known.
    full: Option<Arc<CollectionSnapshot>>,
}

impl Interest {
    fn wants(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name)
    }

    /// What the client should hold: the collection, filtered to its names.
    fn view(&self) -> Option<Arc<CollectionSnapshot>> {
        let full = self.full.as_ref()?;
        if self.wildcard {
            return Some(full.clone());
        }
        Some(Arc::new(full.subset(|n| self.names.contains(n))))
    }

    /// Applies a request's subscription changes. Returns the names to send
    /// again whatever the client is thought to hold, and whether the view
    /// changed.
    fn change(&mut self, subscribe: &[String], unsubscribe: &[String]) -> (Vec<String>, bool) {
        let before = (self.wildcard, self.names.clone());
        let mut resend = Vec::new();
        for name in unsubscribe {
            if name == WILDCARD {
                self.wildcard = false;
            } else {
                self.names.remove(name);
                // Still wanted through the wildcard: Envoy drops it on
                // unsubscribe and expects its state back.
                if self.wildcard {
                    resend.push(name.clone());
                }
            }
        }
        for name in subscribe {
            if name == WILDCARD {
                self.wildcard = true;
            } else {
                self.names.insert(name.clone());
                resend.push(name.clone());
            }
        }
        let changed = if before.0 && self.wildcard {
            false
        } else {
            before != (self.wildcard, self.names.clone())
        };
        resend.sort();
        resend.dedup();
        (resend, changed)
    }
}

/// The Delta ADS side of one stream: [`SourceStream`] keyed by type URL,
/// plus each type's subscription.
#[derive(Debug)]
pub struct DeltaStream {
    inner: SourceStream,
    types: BTreeMap<String, Interest>,
}

impl DeltaStream {
    /// A new stream; `config.incremental` should allow every type.
    pub fn new(config: Arc<SourceConfig>) -> Self {
        Self {
            inner: SourceStream::new(config),
            types: BTreeMap::new(),
        }
    }

    /// Handles one request from the client.
    pub fn on_request(
        &mut self,
        req: &DeltaDiscoveryRequest,
    ) -> Step<EncodedDeltaDiscoveryResponse> {
        let type_url = req.type_url.as_str();
        let mut step = Step::default();
        match self.types.get_mut(type_url) {
            None => {
                // A new subscription, whatever the nonce says.
                let mut interest = Interest {
                    wildcard: req.resource_names_subscribe.is_empty(),
                    ..Default::default()
                };
                interest.change(
                    &req.resource_names_subscribe,
                    &req.resource_names_unsubscribe,
                );
                let initial: HashMap<String, String> = req
                    .initial_resource_versions
                    .iter()
                    .filter(|(name, _)| interest.wants(name))
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect();
                // Named resources the client does not hold: send them, or
                // say they do not exist.
                let missing: Vec<String> = interest
                    .names
                    .iter()
                    .filter(|n| !initial.contains_key(*n))
                    .cloned()
                    .collect();
                self.types.insert(type_url.to_owned(), interest);
                let inner = self.inner.on_request(&RequestResources {
                    sink_node: None,
                    collection: type_url.to_owned(),
                    initial_resource_versions: initial,
                    response_nonce: String::new(),
                    error_detail: None,
                    incremental: true,
                });
                self.absorb(inner, &mut step);
                // Nothing is known of the collection yet: the first update
                // carries these.
                self.inner.resend(type_url, missing);
            }
            Some(interest) => {
                let (resend, changed) = interest.change(
                    &req.resource_names_subscribe,
                    &req.resource_names_unsubscribe,
                );
                // Subscription changes first, as one update: while a response
                // is pending they wait, and the ACK below sends them.
                let forced = !resend.is_empty();
                self.inner.resend(type_url, resend);
                if (changed || forced)
                    && let Some(view) = interest.view()
                {
                    let inner = self.inner.on_update(type_url, view);
                    self.absorb(inner, &mut step);
                }
                if !req.response_nonce.is_empty() {
                    let inner = self.inner.on_request(&RequestResources {
                        sink_node: None,
                        collection: type_url.to_owned(),
                        initial_resource_versions: HashMap::new(),
                        response_nonce: req.response_nonce.clone(),
                        error_detail: req.error_detail.as_ref().map(|e| RpcStatus {
                            code: e.code,
                            message: e.message.clone(),
                            details: vec![],
                        }),
                        incremental: true,
                    });
                    self.absorb(inner, &mut step);
                }
            }
        }
        step
    }

    /// Feeds the current content of a subscribed type's collection.
    pub fn on_update(
        &mut self,
        type_url: &str,
        snapshot: Arc<CollectionSnapshot>,
    ) -> Step<EncodedDeltaDiscoveryResponse> {
        let mut step = Step::default();
        if let Some(interest) = self.types.get_mut(type_url) {
            interest.full = Some(snapshot);
            if let Some(view) = interest.view() {
                let inner = self.inner.on_update(type_url, view);
                self.absorb(inner, &mut step);
            }
        }
        step
    }

    /// Moves the inner machine's step into ours, its responses as Delta
    /// responses.
    fn absorb(&self, inner: Step, step: &mut Step<EncodedDeltaDiscoveryResponse>) {
        step.events.extend(inner.events);
        if inner.watch.is_some() {
            step.watch = inner.watch;
        }
        step.responses
            .extend(inner.responses.into_iter().map(|r| self.response(r)));
    }

    fn response(&self, r: EncodedResources) -> EncodedDeltaDiscoveryResponse {
        let interest = self.types.get(&r.collection);
        let resources = r
            .resources
            .iter()
            .map(|bytes| {
                EncodedDeltaResource::from_mcp(bytes.clone()).unwrap_or_else(|e| {
                    // Our own encoding: cannot happen. Send it unnamed
                    // rather than drop it.
                    tracing::error!(error = %e, "resource without readable metadata");
                    EncodedDeltaResource {
                        resource: bytes.clone(),
                        ..Default::default()
                    }
                })
            })
            .collect();
        let removed_resources = r
            .removed_resources
            .into_iter()
            .filter(|name| interest.is_none_or(|i| i.wants(name)))
            .collect();
        EncodedDeltaDiscoveryResponse {
            system_version_info: r.system_version_info,
            resources,
            type_url: r.collection,
            nonce: r.nonce,
            removed_resources,
        }
    }
}

impl Machine for DeltaStream {
    type Request = DeltaDiscoveryRequest;
    type Response = EncodedDeltaDiscoveryResponse;

    fn on_request(&mut self, req: &DeltaDiscoveryRequest) -> Step<EncodedDeltaDiscoveryResponse> {
        DeltaStream::on_request(self, req)
    }

    fn on_update(
        &mut self,
        key: &str,
        snapshot: Arc<CollectionSnapshot>,
    ) -> Step<EncodedDeltaDiscoveryResponse> {
        DeltaStream::on_update(self, key, snapshot)
    }
}

#[cfg(test)]
mod tests;
