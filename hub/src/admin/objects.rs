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
use meshhub_api::ErrorView;
use meshhub_api::analysis::AnalysisMessage;
use meshhub_api::kinds::find_kind;
use meshhub_api::object::{
    ClusterDelivery, Definition, DefinitionState, Delivery, ObjectQuery, ObjectView, PeerDelivery,
    PeerRole, Validation, ValidationResult,
};
use meshhub_mcp::ads::TypeMap;
use meshhub_mcp::ledger::{CollectionStatus, PeerStatus, Role};
use meshhub_mcp::snapshot::EncodedResource;
use meshhub_proto::kinds::Kind;

use super::AdminState;
use crate::clusters::is_dialer;
use crate::store::ObjectKey;

/// The route of this module, to merge into the admin router.
pub fn routes() -> axum::Router<AdminState> {
    axum::Router::new().route("/debug/object", get(object))
}

fn not_found(error: String) -> Response {
    (StatusCode::NOT_FOUND, Json(ErrorView { error })).into_response()
}

async fn object(State(s): State<AdminState>, Query(q): Query<ObjectQuery>) -> Response {
    let kind = match find_kind(&s.kinds, &q.kind) {
        Ok(k) => k,
        Err(e) => return not_found(e.to_string()),
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
            state: DefinitionState::Served,
            reasons: Vec::new(),
        });
        for c in status.conflicts.iter().filter(|c| c.key == key) {
            definitions.extend(c.ignored.iter().map(|origin| Definition {
                origin: Some(origin.clone()),
                resource_version: None,
                state: DefinitionState::Ignored,
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
            state: DefinitionState::Rejected,
            reasons: r.reasons.clone(),
        });
    }
    if definitions.is_empty() {
        return None;
    }
    let validation = Validation {
        result: if served.is_some() {
            ValidationResult::Accepted
        } else {
            ValidationResult::Rejected
        },
        messages,
        warnings: served
            .map(|(object, _)| object.warnings.clone())
            .unwrap_or_default(),
    };
    let ledger = s.ledger.view();
    // What an ADS consumer is served of a type URL is not always the
    // collection (TrafficExtension: with the WasmPlugins translated in).
    let ads = &s.ads;
    let clusters = served
        .map(|(object, _)| {
            object
                .groups
                .iter()
                .map(|g| delivery(s, kind, &object.resource, g, &ledger, ads))
                .collect()
        })
        .unwrap_or_default();
    let origin = format!("{} {name}", kind.kind());
    let analysis = status
        .analysis
        .iter()
        .map(|a| {
            let about: Vec<_> = a
                .messages
                .iter()
                .filter(|m| m.origin == origin)
                .map(|m| AnalysisMessage::clone(m))
                .collect();
            (a.cluster.clone(), about)
        })
        .filter(|(_, about)| !about.is_empty())
        .collect();
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
        analysis,
    })
}

/// The object in group `group`: the group's collection version and what
/// each of its peers has. The group holds the object only when it holds
/// its current definition (`current`): a group a rollout keeps on its
/// previous version serves an older one, or none.
fn delivery(
    s: &AdminState,
    kind: &Kind,
    current: &EncodedResource,
    group: &str,
    ledger: &[PeerStatus],
    ads: &TypeMap,
) -> ClusterDelivery {
    let name = &*current.name;
    let snapshot = s.cache.snapshot(group);
    let collection = snapshot
        .as_ref()
        .map(|snap| snap.collection(kind.collection()));
    let version = collection
        .as_ref()
        .map(|c| c.version().to_owned())
        .unwrap_or_default();
    let in_snapshot = collection.as_ref().is_some_and(|c| {
        c.keys()
            .iter()
            .any(|k| k.name == current.name && k.version == current.version)
    });
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
        .map(|p| {
            // ADS peers key the ledger by type URL and are served what the
            // type URL serves.
            let served = |type_url: &str| {
                let snap = snapshot.as_ref()?;
                Some(ads(type_url)?.read(snap).version().to_owned())
            };
            peer_delivery(p, kind, &version, served)
        })
        .collect();
    let withheld = s
        .status
        .borrow()
        .withheld
        .iter()
        .find(|w| w.cluster == group && w.collection == kind.collection())
        .map(|w| w.reason.clone());
    let reported = s.reports.borrow().get(group).map(|r| {
        let mut out = reported(&r.view, kind.collection(), name, &version, in_snapshot);
        // Judged for a Gateway API kind delivered there (a cluster
        // without the CRDs is withheld it: nothing to accept).
        if let Some(g) = r.view.gateway_api_status.as_ref().filter(|_| {
            withheld.is_none()
                && meshhub_proto::kinds::gateway_api::has_status(kind.group(), kind.kind())
        }) {
            out.accepted = Some(
                g.acceptance_of(kind.collection(), name, &current.version)
                    .to_string(),
            );
            out.controller_status = g.object(kind.collection(), name).cloned();
        }
        out
    });
    ClusterDelivery {
        cluster: group.to_owned(),
        collection_version: version,
        in_snapshot,
        withheld,
        peers,
        reported,
    }
}

/// What a cluster's report says of one object.
fn reported(
    r: &meshhub_api::upward::ClusterReportView,
    collection: &str,
    name: &str,
    version: &str,
    in_snapshot: bool,
) -> meshhub_api::object::ReportedDelivery {
    let delivered = r
        .collections
        .get(collection)
        .is_some_and(|c| !version.is_empty() && c.hub_version == version);
    let applied = match r.applied.get(collection) {
        None => "-".to_owned(),
        Some(a) => match a.failures.iter().find(|f| f.name == name) {
            Some(f) => format!("no: {}", f.reason),
            None if delivered && a.ok => "yes".to_owned(),
            None => "pending".to_owned(),
        },
    };
    let held_by_istiod = match &r.istiod {
        Some(i) if i.reachable && in_snapshot && i.collections.iter().any(|c| c == collection) => {
            match i
                .dropped
                .iter()
                .find(|d| d.collection == collection && d.name == name)
            {
                Some(d) => format!("DROPPED: {}", d.reason),
                None => "yes".to_owned(),
            }
        }
        _ => "-".to_owned(),
    };
    meshhub_api::object::ReportedDelivery {
        delivered,
        applied,
        held_by_istiod,
        accepted: None,
        controller_status: None,
    }
}

/// Where peer `p` stands on `kind`'s collection at version `current`
/// (`ads_current`: the version an ADS peer is served of a type URL).
fn peer_delivery(
    p: &PeerStatus,
    kind: &Kind,
    current: &str,
    ads_current: impl Fn(&str) -> Option<String>,
) -> PeerDelivery {
    // MCP peers key the ledger by collection; ADS peers by type URL.
    let (c, current): (Option<&CollectionStatus>, String) =
        match p.collections.get(kind.collection()) {
            Some(c) => (Some(c), current.to_owned()),
            None => match kind
                .type_urls()
                .find_map(|t| p.collections.get(t.as_str()).map(|c| (t, c)))
            {
                Some((t, c)) => (
                    Some(c),
                    ads_current(&t).unwrap_or_else(|| current.to_owned()),
                ),
                None => (None, current.to_owned()),
            },
        };
    let current = current.as_str();
    let is_current = |v: Option<&str>| !current.is_empty() && v == Some(current);
    let sent = c.and_then(|c| c.sent.as_ref().map(|v| v.version.clone()));
    let acked = c.and_then(|c| c.acked.as_ref().map(|v| v.version.clone()));
    let nacked = c.and_then(|c| c.nacked.as_ref());
    let delivery = if is_current(acked.as_deref()) {
        Delivery::Acked
    } else if is_current(nacked.map(|n| n.version.as_str())) {
        Delivery::Nacked
    } else if is_current(sent.as_deref()) {
        Delivery::Sent
    } else {
        Delivery::Behind
    };
    PeerDelivery {
        peer: p.peer.clone(),
        role: if is_dialer(p) {
            PeerRole::Agent
        } else {
            PeerRole::Consumer
        },
        protocol: p.protocol,
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::SystemTime;

    use meshhub_mcp::ledger::{At, StreamProtocol, Versioned};
    use meshhub_proto::kinds::KindTable;

    use super::*;

    const TE_URL: &str = "extensions.istio.io/v1alpha1/TrafficExtension";

    fn istiod(acked: &str) -> PeerStatus {
        PeerStatus {
            id: 1,
            role: Role::Source,
            protocol: StreamProtocol::Ads,
            peer: "127.0.0.1:1".into(),
            node_id: "sidecar~10.0.0.1~istiod-0.istio-system~cluster.local".into(),
            group: "default".into(),
            connected: true,
            connected_since: None,
            disconnected_at: None,
            last_error: None,
            streams: 1,
            collections: BTreeMap::from([(
                TE_URL.to_owned(),
                CollectionStatus {
                    acked: Some(Versioned {
                        version: acked.into(),
                        nonce: "1".into(),
                        at: At(SystemTime::UNIX_EPOCH),
                    }),
                    ..CollectionStatus::default()
                },
            )]),
            replica: None,
            node_meta: Default::default(),
        }
    }

    #[test]
    fn an_ads_peer_is_judged_by_what_its_type_url_serves() {
        let kinds = KindTable::builtin();
        let te = kinds.by_type_url(TE_URL).unwrap();
        // The collection is at `coll`; what the type URL serves (the
        // TrafficExtensions with the WasmPlugins translated in) at `view`.
        let served = |url: &str| (url == TE_URL).then(|| "view".to_owned());
        let judged = peer_delivery(&istiod("view"), te, "coll", served);
        assert_eq!(judged.delivery, Delivery::Acked);
        let judged = peer_delivery(&istiod("coll"), te, "coll", served);
        assert_eq!(
            judged.delivery,
            Delivery::Behind,
            "acked the collection, not what it is served"
        );
        // Without a view the collection's version is what counts.
        let judged = peer_delivery(&istiod("coll"), te, "coll", |_| None);
        assert_eq!(judged.delivery, Delivery::Acked);
    }
}
