//! The source side of one MCP stream, as a pure state machine.
//!
//! No I/O and no clock: requests and snapshot updates go in, responses and
//! events come out. The gRPC drivers ([`server`] for `ResourceSource`,
//! [`dialer`] for dialing a `ResourceSink`) pump messages between a transport
//! and this machine, so every protocol rule is testable as a plain sequence.
//!
//! Rules kept (reference §2.3–§2.5, §2.16, and where Istio's peers failed):
//! * nonces are unique per stream (a decimal counter);
//! * at most one un-ACKed response per collection; updates that arrive
//!   meanwhile are coalesced: only the newest is sent after the ACK/NACK;
//! * an ACK records what the sink holds (name → version);
//! * a NACK is recorded and parks the collection: the NACKed version is
//!   never sent again on this stream, only a newer one;
//! * a request whose nonce matches nothing pending is stale: counted, ignored;
//! * an empty-nonce request subscribes (or re-subscribes) a collection;
//! * `initial_resource_versions` seeds what the sink holds, so an incremental
//!   sink that reconnects gets a correct delta; without it the first response
//!   per collection is full state;
//! * incremental responses only when the sink asked and the policy allows;
//! * names the sink says it dropped ([`SourceStream::resend`], Delta xDS
//!   re-subscriptions) are sent again, or reported removed if they do not
//!   exist, in the next response;
//! * an unknown collection is answered (empty, with a version) like any
//!   other and never ends the stream;
//! * a response larger than the peer accepts is not sent: the collection is
//!   parked at that version and reported, the other collections go on.

pub mod body;
pub mod dialer;
pub mod drive;
pub mod server;
pub mod service;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use meshhub_proto::mcp::RequestResources;
use meshhub_proto::wire::EncodedResources;
use prost::Message;

use crate::snapshot::{CollectionSnapshot, Delta, ResourceKey};

pub use crate::event::Event;

/// The collection a dialing source sends first to open the stream
/// (reference §2.2); the sink NACKs it with `UNIMPLEMENTED`.
pub const TRIGGER_COLLECTION: &str = "$triggerCollection";

/// gRPC code `UNIMPLEMENTED`.
const CODE_UNIMPLEMENTED: i32 = 12;

/// Which collections may be served incrementally.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum IncrementalPolicy {
    /// Always full state.
    Never,
    /// Whenever the sink asks.
    #[default]
    Always,
    /// Only these collections.
    Only(HashSet<String>),
}

impl IncrementalPolicy {
    fn allows(&self, collection: &str) -> bool {
        match self {
            Self::Never => false,
            Self::Always => true,
            Self::Only(set) => set.contains(collection),
        }
    }
}

/// Settings of the source side.
#[derive(Clone, Debug)]
pub struct SourceConfig {
    /// Incremental delivery policy.
    pub incremental: IncrementalPolicy,
    /// Largest encoded response the peer accepts (its receive limit).
    pub max_response_bytes: usize,
    /// How long a response may wait for a dial-in consumer that stopped
    /// reading before its stream and connection are closed (`None`: no
    /// limit).
    pub send_timeout: Option<std::time::Duration>,
    /// How fast the peer may send requests on one stream (`None`: no
    /// limit); see [`crate::limits::RequestRate`].
    pub request_rate: Option<crate::limits::RequestRate>,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            incremental: IncrementalPolicy::Always,
            // Pilot's default receive limit is 4 MiB; we raise our own peers'.
            max_response_bytes: 64 * 1024 * 1024,
            send_timeout: crate::limits::Limits::default().send_timeout,
            request_rate: Some(crate::limits::RequestRate::default()),
        }
    }
}

/// What the machine asks its driver to do after an input. `R` is the
/// response message (the MCP `Resources` twin here; the Delta ADS machine
/// wraps this one and answers in its own message).
#[derive(Debug)]
pub struct Step<R = EncodedResources> {
    /// Responses to send, in order.
    pub responses: Vec<R>,
    /// Things to record.
    pub events: Vec<Event>,
    /// A collection newly subscribed: the driver starts watching it and
    /// feeds its current state and every change to [`SourceStream::on_update`].
    pub watch: Option<String>,
}

impl<R> Default for Step<R> {
    fn default() -> Self {
        Self {
            responses: Vec::new(),
            events: Vec::new(),
            watch: None,
        }
    }
}

#[derive(Debug)]
struct Pending {
    nonce: String,
    snapshot: Arc<CollectionSnapshot>,
    /// Names forced into this response: forced again if it is NACKed.
    forced: BTreeSet<String>,
}

/// What a sink holds of one collection.
#[derive(Clone, Debug)]
enum Held {
    /// Not known: the next response is full state.
    Unknown,
    /// Exactly this snapshot: the last one it ACKed. Shared with the cache
    /// and every other stream, so knowing it costs nothing per stream.
    Snapshot(Arc<CollectionSnapshot>),
    /// What it declared in `initial_resource_versions`, sorted by name.
    Declared(Vec<ResourceKey>),
}

#[derive(Debug)]
struct Subscription {
    /// The sink asked for deltas and the policy allows them.
    incremental: bool,
    /// What the sink holds.
    held: Held,
    /// The last version the sink answered (ACK or NACK) or that could not
    /// be sent: never sent again.
    answered: Option<String>,
    /// Boxed: `None` on an idle stream.
    pending: Option<Box<Pending>>,
    latest: Option<Arc<CollectionSnapshot>>,
    /// Names the sink may not hold whatever we think it holds: the next
    /// response carries them, or their removal if they do not exist, even
    /// if the version did not change.
    forced: BTreeSet<String>,
    /// Forced names of a NACKed response: carried by the next response,
    /// but not a reason to send one (the NACKed version stays parked).
    owed: BTreeSet<String>,
}

/// The source side of one stream.
#[derive(Debug)]
pub struct SourceStream {
    config: Arc<SourceConfig>,
    nonce: u64,
    /// Boxed: the tree's nodes have room for 11 entries, and an idle
    /// stream holds its subscriptions for its whole life.
    subscriptions: BTreeMap<String, Box<Subscription>>,
}

impl SourceStream {
    /// A new stream.
    pub fn new(config: Arc<SourceConfig>) -> Self {
        Self {
            config,
            nonce: 0,
            subscriptions: BTreeMap::new(),
        }
    }

    /// Collections subscribed on this stream.
    pub fn collections(&self) -> impl Iterator<Item = &str> {
        self.subscriptions.keys().map(String::as_str)
    }

    /// Whether a response for `collection` awaits its ACK/NACK.
    pub fn is_pending(&self, collection: &str) -> bool {
        self.subscriptions
            .get(collection)
            .is_some_and(|s| s.pending.is_some())
    }

    /// Handles one request from the sink.
    pub fn on_request(&mut self, req: &RequestResources) -> Step {
        let mut step = Step::default();
        let collection = req.collection.as_str();
        if collection == TRIGGER_COLLECTION
            && req
                .error_detail
                .as_ref()
                .is_some_and(|e| e.code == CODE_UNIMPLEMENTED)
        {
            // The sink's answer to our own stream-opening probe.
            return step;
        }
        let nack = req.error_detail.as_ref();
        let known = self.subscriptions.contains_key(collection);
        if req.response_nonce.is_empty() || !known {
            // A new subscription, or the sink starting over on this one.
            let incremental = req.incremental && self.config.incremental.allows(collection);
            let held = if incremental && !req.initial_resource_versions.is_empty() {
                let mut keys: Vec<ResourceKey> = req
                    .initial_resource_versions
                    .iter()
                    .map(|(k, v)| ResourceKey {
                        name: Arc::from(k.as_str()),
                        version: Arc::from(v.as_str()),
                    })
                    .collect();
                keys.sort_by(|a, b| a.name.cmp(&b.name));
                Held::Declared(keys)
            } else {
                Held::Unknown
            };
            let latest = self.subscriptions.remove(collection).and_then(|s| s.latest);
            step.events.push(Event::Subscribed {
                collection: collection.to_owned(),
                incremental,
                initial_resources: req.initial_resource_versions.len(),
            });
            if !known {
                step.watch = Some(collection.to_owned());
            }
            self.subscriptions.insert(
                collection.to_owned(),
                Box::new(Subscription {
                    incremental,
                    held,
                    answered: None,
                    pending: None,
                    latest,
                    forced: BTreeSet::new(),
                    owed: BTreeSet::new(),
                }),
            );
            self.respond(collection, &mut step);
            return step;
        }

        let sub = self
            .subscriptions
            .get_mut(collection)
            .expect("known subscription");
        let matches = sub
            .pending
            .as_ref()
            .is_some_and(|p| p.nonce == req.response_nonce);
        if !matches {
            step.events.push(Event::Stale {
                collection: collection.to_owned(),
                nonce: req.response_nonce.clone(),
                nack: nack.is_some(),
            });
            return step;
        }
        let pending = sub.pending.take().expect("matched a pending response");
        let version = pending.snapshot.version().to_owned();
        match nack {
            None => {
                // After an ACK the sink holds exactly what it was sent
                // (a full state, or a delta that brought it there).
                sub.held = Held::Snapshot(pending.snapshot.clone());
                step.events.push(Event::Acked {
                    collection: collection.to_owned(),
                    version: version.clone(),
                    nonce: pending.nonce,
                });
            }
            Some(status) => {
                // What the sink holds is unchanged; the version is parked.
                sub.owed.extend(pending.forced);
                step.events.push(Event::Nacked {
                    collection: collection.to_owned(),
                    version: version.clone(),
                    nonce: pending.nonce,
                    code: status.code,
                    message: status.message.clone(),
                });
            }
        }
        sub.answered = Some(version);
        self.respond(collection, &mut step);
        step
    }

    /// Feeds the current content of a watched collection.
    pub fn on_update(&mut self, collection: &str, snapshot: Arc<CollectionSnapshot>) -> Step {
        let mut step = Step::default();
        if let Some(sub) = self.subscriptions.get_mut(collection) {
            sub.latest = Some(snapshot);
            self.respond(collection, &mut step);
        }
        step
    }

    /// The sink (of an incremental subscription) says it may have dropped
    /// `names`, whatever it held: the next response carries each of them
    /// that exists and lists the others as removed, and is sent even if
    /// the version did not change. Delta xDS requires this when a client
    /// subscribes to a name again. A sink whose holdings are unknown is
    /// taken to hold nothing. Nothing is sent here: the next
    /// [`Self::on_update`] (with the same or a newer snapshot) or ACK sends
    /// it, so a subscription change and its new content go out as one
    /// response. Ignored for full-state subscriptions (every response
    /// carries everything) and unknown collections.
    pub fn resend(&mut self, collection: &str, names: impl IntoIterator<Item = String>) {
        if let Some(sub) = self.subscriptions.get_mut(collection)
            && sub.incremental
        {
            sub.forced.extend(names);
        }
    }

    /// Sends the latest content of `collection` if nothing is pending and
    /// the sink has not already answered that version (or names were
    /// forced).
    fn respond(&mut self, collection: &str, step: &mut Step) {
        let Some(sub) = self.subscriptions.get_mut(collection) else {
            return;
        };
        let Some(latest) = sub.latest.clone() else {
            return;
        };
        if sub.pending.is_some()
            || (sub.forced.is_empty() && sub.answered.as_deref() == Some(latest.version()))
        {
            return;
        }
        let mut response = EncodedResources {
            system_version_info: latest.version().to_owned(),
            collection: collection.to_owned(),
            ..Default::default()
        };
        let delta = match (&sub.held, sub.incremental) {
            (_, false) => None,
            (held, true) if !sub.forced.is_empty() || !sub.owed.is_empty() => {
                let forced: BTreeSet<String> = sub.forced.union(&sub.owed).cloned().collect();
                Some(Arc::new(forced_delta(held, &forced, &latest)))
            }
            (Held::Unknown, true) => None,
            (Held::Snapshot(base), true) => Some(latest.delta_from(base)),
            (Held::Declared(keys), true) => Some(Arc::new(Delta::between(keys, &latest))),
        };
        match delta {
            Some(delta) => {
                response.incremental = true;
                response.resources = delta.changed.clone();
                response.removed_resources = delta.removed.clone();
            }
            None => response.resources = latest.resources().clone(),
        }
        let bytes = response.encoded_len();
        if bytes > self.config.max_response_bytes {
            step.events.push(Event::TooLarge {
                collection: collection.to_owned(),
                version: latest.version().to_owned(),
                bytes,
                limit: self.config.max_response_bytes,
            });
            sub.answered = Some(latest.version().to_owned());
            sub.owed.append(&mut sub.forced);
            return;
        }
        self.nonce += 1;
        response.nonce = self.nonce.to_string();
        sub.pending = Some(Box::new(Pending {
            nonce: response.nonce.clone(),
            snapshot: latest,
            forced: {
                let mut forced = std::mem::take(&mut sub.forced);
                forced.append(&mut sub.owed);
                forced
            },
        }));
        step.events.push(Event::Sent {
            collection: collection.to_owned(),
            version: response.system_version_info.clone(),
            nonce: response.nonce.clone(),
            resources: response.resources.len(),
            removed: response.removed_resources.len(),
            incremental: response.incremental,
            bytes,
        });
        step.responses.push(response);
    }
}

/// The delta from what the sink holds, less the `forced` names, to
/// `latest`; forced names that do not exist are listed as removed (a sink
/// ignores removals of names it does not hold).
fn forced_delta(held: &Held, forced: &BTreeSet<String>, latest: &CollectionSnapshot) -> Delta {
    let held: &[ResourceKey] = match held {
        Held::Unknown => &[],
        Held::Snapshot(s) => s.keys(),
        Held::Declared(keys) => keys,
    };
    let kept: Vec<ResourceKey> = held
        .iter()
        .filter(|k| !forced.contains(k.name.as_ref()))
        .cloned()
        .collect();
    let mut delta = Delta::between(&kept, latest);
    let keys = latest.keys();
    let missing = forced
        .iter()
        .filter(|name| {
            keys.binary_search_by(|k| k.name.as_ref().cmp(name.as_str()))
                .is_err()
        })
        .cloned();
    delta.removed.extend(missing);
    delta.removed.sort();
    delta
}

#[cfg(test)]
mod tests;
