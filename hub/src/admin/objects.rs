//! `GET /debug/object?kind=K&namespace=NS&name=N`: everything the hub knows
//! of one object, for `meshhubctl describe` — which sources define it (and
//! which definition is served), its validation result, which clusters'
//! groups receive it and, per cluster, the group's collection version and
//! what each peer of that group (the agent's dialer, consumers) sent, ACKed
//! or NACKed of it.
//!
//! Read-only: everything comes from the pipeline's status, the snapshot
//! cache and the ledger, through the admin port's reader handles.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use meshhub_mcp::ledger::{CollectionStatus, PeerStatus, Role, SyncState};
use meshhub_proto::kinds::Kind;
use serde::{Deserialize, Serialize};

use super::AdminState;
use crate::clusters::is_dialer;
use crate::lookup::find_kind;
use crate::source::Origin;
use crate::store::ObjectKey;

/// The route of this module, to merge into the admin router.
pub fn routes() -> axum::Router<AdminState> {
    axum::Router::new().route("/debug/object", get(object))
}

/// The query: a kind (any name [`find_kind`] knows), and the object.
#[derive(Debug, Deserialize)]
pub struct ObjectQuery {
    /// The kind.
    pub kind: String,
    /// The namespace (or give `name` as `namespace/name`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

/// The answer.
#[derive(Debug, Serialize)]
pub struct ObjectView {
    /// The kind (`VirtualService`).
    pub kind: String,
    /// Its API version (`networking.istio.io/v1`).
    pub api_version: String,
    /// The MCP collection.
    pub collection: String,
    /// The MCP name, `namespace/name`.
    pub name: String,
    /// Whether it is served, and why not.
    pub validation: Validation,
    /// Every definition of it, the served one first.
    pub definitions: Vec<Definition>,
    /// The MCP resource version served (empty when not served).
    pub version: String,
    /// Every group that receives it.
    pub clusters: Vec<ClusterDelivery>,
}

/// The validation result.
#[derive(Debug, Serialize)]
pub struct Validation {
    /// `accepted` (served) or `rejected` (kept out of every snapshot).
    pub result: &'static str,
    /// Why it was rejected (every reason of every rejected definition).
    pub messages: Vec<String>,
    /// Warnings about the served definition (fields pruned).
    pub warnings: Vec<String>,
}

/// One definition of the object.
#[derive(Debug, Serialize)]
pub struct Definition {
    /// Where: source, unit (file path, Kubernetes object), document, line
    /// (always known for what the store resolved).
    pub origin: Option<Origin>,
    /// The Kubernetes `resourceVersion`, for objects from an API server.
    pub resource_version: Option<String>,
    /// `served`, `ignored` (another definition wins), or `rejected`.
    pub state: &'static str,
    /// Why it was rejected.
    pub reasons: Vec<String>,
}

/// The object in one cluster's group.
#[derive(Debug, Serialize)]
pub struct ClusterDelivery {
    /// The group (cluster) name.
    pub cluster: String,
    /// The group's current version of the collection (empty when the group
    /// is not published).
    pub collection_version: String,
    /// Whether the group's current snapshot holds the object.
    pub in_snapshot: bool,
    /// Every peer of the group: the agent's dialer, connected consumers.
    pub peers: Vec<PeerDelivery>,
}

/// What one peer of a group has of the object's collection.
#[derive(Debug, Serialize)]
pub struct PeerDelivery {
    /// The cluster name (agent dialer) or socket address (consumer).
    pub peer: String,
    /// `agent` (the hub dials it) or `consumer`.
    pub role: &'static str,
    /// `mcp`, `ads` or `delta-ads`.
    pub protocol: String,
    /// Its node id.
    pub node_id: String,
    /// Whether its stream is up.
    pub connected: bool,
    /// `ACKED` (the current collection version, so the object, was
    /// ACKed), `NACKED` (the current version was NACKed), `SENT` (sent, not
    /// answered yet) or `BEHIND` (the current version was not sent yet: the
    /// peer has an older version, or nothing).
    pub delivery: &'static str,
    /// The ledger's sync state of the collection.
    pub state: SyncState,
    /// Last version sent.
    pub sent: Option<String>,
    /// Last version ACKed.
    pub acked: Option<String>,
    /// Last version NACKed.
    pub nacked: Option<String>,
    /// The NACK's message.
    pub message: Option<String>,
}

/// An error answer: a message saying what to do.
#[derive(Debug, Serialize)]
struct ErrorView {
    error: String,
}

fn not_found(error: String) -> Response {
    (StatusCode::NOT_FOUND, Json(ErrorView { error })).into_response()
}

async fn object(State(s): State<AdminState>, Query(q): Query<ObjectQuery>) -> Response {
    let kind = match find_kind(&s.kinds, &q.kind) {
        Ok(k) => k,
        Err(e) => return not_found(e),
    };
    match describe(&s, kind, &q) {
        Some(view) => Json(view).into_response(),
        None => not_found(format!(
            "no {} {} in any source (served or rejected); `meshhubctl get {}` lists what is served",
            kind.kind(),
            mcp_name(kind, &q),
            kind.kind()
        )),
    }
}

/// The MCP name the query asks for.
fn mcp_name(kind: &Kind, q: &ObjectQuery) -> String {
    let name = q.name.trim();
    if name.contains('/') || !kind.namespaced() {
        return if kind.namespaced() || name.starts_with('/') {
            name.to_owned()
        } else {
            format!("/{name}")
        };
    }
    let ns = q.namespace.as_deref().filter(|n| !n.is_empty());
    format!("{}/{name}", ns.unwrap_or("default"))
}

/// Everything known of the object; `None` when nothing is.
pub fn describe(s: &AdminState, kind: &Kind, q: &ObjectQuery) -> Option<ObjectView> {
    let status = s.status.borrow().clone();
    let name = mcp_name(kind, q);
    let key = ObjectKey {
        collection: kind.collection().into(),
        name: name.as_str().into(),
    };
    let served = status.served.get(&key).zip(status.served.origin(&key));
    let mut definitions = Vec::new();
    let mut messages = Vec::new();
    if let Some((object, origin)) = served {
        definitions.push(Definition {
            origin: Some(origin.clone()),
            resource_version: object.resource_version.as_deref().map(str::to_owned),
            state: "served",
            reasons: Vec::new(),
        });
        for c in status.conflicts.iter().filter(|c| c.key == key) {
            definitions.extend(c.ignored.iter().map(|origin| Definition {
                origin: Some(origin.clone()),
                resource_version: None,
                state: "ignored",
                reasons: vec![format!("also defined by {}, which is served", c.winner)],
            }));
        }
    }
    for r in status.rejected.iter().filter(|r| {
        r.kind.as_deref() == Some(kind.kind())
            && r.name.as_deref().is_some_and(|n| {
                n == name || (!kind.namespaced() && n.trim_start_matches('/') == q.name.trim())
            })
    }) {
        messages.extend(r.reasons.iter().cloned());
        definitions.push(Definition {
            origin: r.origin.clone(),
            resource_version: None,
            state: "rejected",
            reasons: r.reasons.clone(),
        });
    }
    if definitions.is_empty() {
        return None;
    }
    let validation = Validation {
        result: if served.is_some() {
            "accepted"
        } else {
            "rejected"
        },
        messages,
        warnings: served
            .map(|(object, _)| object.warnings.clone())
            .unwrap_or_default(),
    };
    let ledger = s.ledger.view();
    let clusters = served
        .map(|(object, _)| {
            object
                .groups
                .iter()
                .map(|g| delivery(s, kind, &name, g, &ledger))
                .collect()
        })
        .unwrap_or_default();
    Some(ObjectView {
        kind: kind.kind().to_owned(),
        api_version: kind.api_version(),
        collection: kind.collection().to_owned(),
        name: name.clone(),
        validation,
        definitions,
        version: served
            .map(|(object, _)| object.resource.version.to_string())
            .unwrap_or_default(),
        clusters,
    })
}

/// The object in group `group`: the group's collection version and what
/// each of its peers has.
fn delivery(
    s: &AdminState,
    kind: &Kind,
    name: &str,
    group: &str,
    ledger: &[PeerStatus],
) -> ClusterDelivery {
    let snapshot = s.cache.snapshot(group);
    let collection = snapshot.map(|snap| snap.collection(kind.collection()));
    let version = collection
        .as_ref()
        .map(|c| c.version().to_owned())
        .unwrap_or_default();
    let in_snapshot = collection
        .as_ref()
        .is_some_and(|c| c.keys().iter().any(|k| &*k.name == name));
    let peers = ledger
        .iter()
        .filter(|p| p.role == Role::Source && p.group == group && (p.connected || is_dialer(p)))
        // A dialer reconnects: its newest entry is enough.
        .fold(Vec::<&PeerStatus>::new(), |mut out, p| {
            if !(is_dialer(p) && out.iter().any(|o| is_dialer(o) && o.peer == p.peer)) {
                out.push(p);
            }
            out
        })
        .into_iter()
        .map(|p| peer_delivery(p, kind, &version))
        .collect();
    ClusterDelivery {
        cluster: group.to_owned(),
        collection_version: version,
        in_snapshot,
        peers,
    }
}

fn peer_delivery(p: &PeerStatus, kind: &Kind, current: &str) -> PeerDelivery {
    // MCP peers key the ledger by collection; ADS peers by type URL.
    let c: Option<&CollectionStatus> = p
        .collections
        .get(kind.collection())
        .or_else(|| kind.type_urls().find_map(|t| p.collections.get(t.as_str())));
    let is_current = |v: Option<&str>| !current.is_empty() && v == Some(current);
    let sent = c.and_then(|c| c.sent.as_ref().map(|v| v.version.clone()));
    let acked = c.and_then(|c| c.acked.as_ref().map(|v| v.version.clone()));
    let nacked = c.and_then(|c| c.nacked.as_ref());
    let delivery = if is_current(acked.as_deref()) {
        "ACKED"
    } else if is_current(nacked.map(|n| n.version.as_str())) {
        "NACKED"
    } else if is_current(sent.as_deref()) {
        "SENT"
    } else {
        "BEHIND"
    };
    PeerDelivery {
        peer: p.peer.clone(),
        role: if is_dialer(p) { "agent" } else { "consumer" },
        protocol: p.protocol.clone(),
        node_id: p.node_id.clone(),
        connected: p.connected,
        delivery,
        state: c.map(|c| c.state).unwrap_or_default(),
        sent,
        acked,
        nacked: nacked.map(|n| n.version.clone()),
        message: nacked.map(|n| n.message.clone()),
    }
}
