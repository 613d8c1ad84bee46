//! A cluster's page: how it stands and per collection what it was sent,
//! ACKed or NACKed, what its agent holds and serves, what its istiod holds
//! (and dropped), the applier's results — the `#cluster-live` fragment the
//! event stream sends again — then its analysis messages, its pin and its
//! history, with the differences between two versions.

use maud::{Markup, html};
use meshhub_api::analysis::ClusterAnalysis;
use meshhub_api::history::{DiffView, PinView};
use meshhub_api::status::RemoteView;

use crate::console::layout::{Root, age, badge, short};
use crate::console::model::{CellState, Row};
use crate::history::StoredVersion;

/// What the page shows besides the live part.
pub struct Static {
    /// The analysis of its latest build.
    pub analysis: Option<ClusterAnalysis>,
    /// Its pin.
    pub pin: Option<PinView>,
    /// Its recorded versions, newest first (`None`: no history configured).
    pub history: Option<Result<Vec<StoredVersion>, String>>,
    /// The differences asked for.
    pub diff: Option<Result<DiffView, String>>,
    /// The versions compared, as asked.
    pub compare: (Option<String>, Option<String>),
}

/// The page's content.
pub fn content(cluster: &str, live_part: Markup, s: &Static) -> Markup {
    html! {
        h1 { "Cluster " (cluster) }
        section #cluster-live aria-label="State" { (live_part) }
        section aria-labelledby="h-analysis" {
            h2 #h-analysis { "Analysis" }
            (analysis(s.analysis.as_ref()))
        }
        section aria-labelledby="h-history" {
            h2 #h-history { "History" }
            @if let Some(p) = &s.pin {
                p.note {
                    "Pinned to " code { (p.record.version) } " by " (p.record.by) " since " (p.record.since)
                    @if p.behind > 0 { " — " (p.behind) " newer versions held back" }
                }
            }
            (history(cluster, s))
        }
    }
}

/// The live part: state, collections, agent, istiod, applier.
pub fn live(remote: &RemoteView, row: &Row) -> Markup {
    let report = remote.report.as_ref();
    html! {
        dl.facts {
            dt { "Health" } dd { (badge(row.health.as_str(), row.health.label()))
                @if let Some(h) = &row.hold { " " (h.text()) }
                @if let Some(m) = &row.refusal { br; span.message { "Refused: " (m) } } }
            dt { "Agent" } dd { code { (remote.address) } " — "
                @if remote.connected { "connected " (age(remote.connected_since.as_ref().map(|a| a.0))) }
                @else { "disconnected " (age(remote.disconnected_at.as_ref().map(|a| a.0))) }
                @if let Some(e) = &remote.last_error { br; span.error { (e) } } }
            dt { "Dialed by" } dd { (remote.dialed_by.as_deref().unwrap_or("this hub"))
                @if let Some(s) = remote.shard { " (shard " (s) ")" } }
            dt { "Istio" } dd { @if row.istio.is_empty() { span.muted { "unknown (no istiod reported by its agent)" } } @else { (row.istio.join(", ")) } }
            dt { "Served" } dd { code { (row.served.as_deref().unwrap_or("nothing")) }
                @if let Some(n) = row.newest.as_ref().filter(|n| Some(*n) != row.served.as_ref()) {
                    " — newest " code { (n) } } }
            @if !row.labels.is_empty() {
                dt { "Labels" } dd { (row.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")) }
            }
        }
        h2 { "Collections" }
        table {
            thead { tr {
                th scope="col" { "Collection" } th scope="col" { "State" } th scope="col" { "Sent" }
                th scope="col" { "ACKed" } th scope="col" { "Agent holds / serves" } th scope="col" { "Message" }
            } }
            tbody {
                @for c in &row.cells {
                    @let st = remote.collections.get(&c.collection);
                    @let held = report.and_then(|r| r.collections.get(&c.collection));
                    tr {
                        th scope="row" { abbr title=(c.collection) { (short(&c.collection)) } }
                        td { (badge(&c.state.as_str().to_lowercase().replace(' ', "-"), c.state.as_str())) }
                        td { @if let Some(s) = st.and_then(|s| s.sent.as_ref()) { code { (s.version) } } }
                        td { @if let Some(a) = st.and_then(|s| s.acked.as_ref()) { code { (a.version) } " " (age(Some(a.at.0))) } }
                        td { @if let Some(h) = held { code { (h.hub_version) } " / " code { (h.served_version) } " · " (h.resources) " objects" } }
                        td.message {
                            (c.message)
                            @if let Some(n) = st.and_then(|s| s.nacked.as_ref()).filter(|_| c.state != CellState::Nacked) {
                                span.muted { "last NACK (of " code { (n.version) } ", " (age(Some(n.at.0))) "): " } (n.message)
                            }
                            @if let Some(h) = held.filter(|h| !h.refusal.is_empty() && c.state != CellState::Nacked) {
                                "refused " code { (h.refused_version) } ": " (h.refusal)
                            }
                        }
                    }
                }
            }
        }
        @if let Some(r) = report {
            @if let Some(i) = &r.istiod {
                h2 { "What its istiod holds" }
                p {
                    @if i.reachable { (i.held) " served objects held; " (i.dropped.len()) " dropped" }
                    @else { span.error { "istiod unreachable at " code { (i.address) } ": " (i.error) } }
                    " · checked " (age(i.checked.as_ref().map(|a| a.0)))
                }
                @if !i.dropped.is_empty() {
                    ul { @for d in &i.dropped { li { (badge("dropped", "DROPPED")) " " (short(&d.collection)) " " code { (d.name) } ": " span.message { (d.reason) } } } }
                }
            }
            @if !r.consumers.is_empty() {
                h2 { "Local consumers" }
                ul { @for c in &r.consumers {
                    li { code { (c.node_id) } " (" (c.protocol) ", " (c.peer) "): "
                        (c.collections.values().filter(|x| x.state == "SYNCED").count()) " synced of " (c.collections.len())
                        @for (name, x) in c.collections.iter().filter(|(_, x)| !x.nack_message.is_empty()) {
                            br; (badge("nacked", "NACKED")) " " (short(name)) ": " span.message { (x.nack_message) }
                        }
                    }
                } }
            }
            @if !r.applied.is_empty() {
                h2 { "Applied to its API" }
                ul { @for (name, a) in &r.applied {
                    li { (short(name)) ": " (a.desired) " desired, "
                        @if a.ok { "last sync ok" } @else { span.error { "last sync failed" } }
                        @for f in &a.failures { br; code { (f.name) } ": " span.message { (f.reason) } }
                    }
                } }
            }
        } @else {
            p.muted { "No report from its agent (the upward channel): what its istiod holds is unknown." }
        }
    }
}

fn analysis(a: Option<&ClusterAnalysis>) -> Markup {
    let Some(a) = a else {
        return html! { p.muted { "No analysis of this cluster's configuration." } };
    };
    html! {
        @if let Some(h) = &a.held_back {
            p.failure role="alert" { "Version " code { (h.version) } " held back since " (h.since)
                " by " (h.codes.join(", ")) "; serving "
                code { (h.serving.as_deref().unwrap_or("nothing")) } }
        }
        @if a.messages.is_empty() {
            p { "No messages for version " code { (a.version) } "." }
        } @else {
            table {
                thead { tr { th scope="col" { "Level" } th scope="col" { "Code" } th scope="col" { "Object" } th scope="col" { "Message" } } }
                tbody { @for m in &a.messages {
                    tr { td { (format!("{:?}", m.level)) } td { code { (m.code) } } td { code { (m.name) } } td.message { (m.message) } }
                } }
            }
        }
    }
}

fn history(cluster: &str, s: &Static) -> Markup {
    let versions = match &s.history {
        None => return html! { p.muted { "No history is configured (history.path)." } },
        Some(Err(e)) => return html! { p.error { "Can't read the history: " (e) } },
        Some(Ok(v)) => v,
    };
    let action = Root::CLUSTER.cluster(cluster);
    let (from, to) = &s.compare;
    html! {
        @if versions.is_empty() { p.muted { "No version recorded yet." } }
        @else {
            form method="get" action=(action) aria-label="Compare two versions" {
                label for="d-from" { "Compare" }
                select #d-from name="from" { @for (i, v) in versions.iter().enumerate() {
                    // By default the version before the newest.
                    option value=(v.id) selected[from.as_deref().map_or(i == 1, |f| f == v.id)] { "#" (v.seq) " " (v.id) } } }
                label for="d-to" { "with" }
                select #d-to name="to" { @for (i, v) in versions.iter().enumerate() {
                    option value=(v.id) selected[to.as_deref().map_or(i == 0, |t| t == v.id)] { "#" (v.seq) " " (v.id) } } }
                button type="submit" { "Show differences" }
            }
            @if let Some(d) = &s.diff { (diff(d)) }
            table {
                thead { tr { th scope="col" { "#" } th scope="col" { "Version" } th scope="col" { "Published" }
                    th scope="col" { "Objects" } th scope="col" { "From changes" } th scope="col" { "Held back" } } }
                tbody { @for v in versions {
                    tr {
                        td { (v.seq) } td { code { (v.id) } } td { (v.time) } td { (v.resources) }
                        td { (v.origins.iter().map(|o| format!("{}:{}{}", o.source, o.unit, if o.removed { " (removed)" } else { "" }))
                                .collect::<Vec<_>>().join(", "))
                            @if v.more_origins > 0 { " and " (v.more_origins) " more" } }
                        td.message { (v.held_back.join("; ")) }
                    }
                } }
            }
        }
    }
}

fn diff(d: &Result<DiffView, String>) -> Markup {
    match d {
        Err(e) => html! { p.error role="alert" { (e) } },
        Ok(d) => html! {
            section.diff aria-label="Differences" {
                h3 { "From " code { (d.from.0) } " (#" (d.from.1) ") to " code { (d.to.0) } " (#" (d.to.1) ")" }
                @if d.changes.is_empty() { p { "No object differs." } }
                @for c in &d.changes {
                    details open[c.diff.is_some()] {
                        summary { (badge(c.change.as_str(), c.change.as_str())) " " (short(&c.collection)) " " code { (c.name) } }
                        @if let Some(text) = &c.diff { pre { (text) } }
                    }
                }
            }
        },
    }
}
