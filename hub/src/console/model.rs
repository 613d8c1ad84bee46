//! The fleet as the console shows it: one row per configured cluster with
//! what an operator asks first — is it connected, which Istio runs there,
//! which replica dials it, is it served the newest version (and if not,
//! what holds it), and per collection whether it was ACKed, NACKed (with
//! the message), DROPPED by its istiod, still pending — sorted so trouble
//! comes first.
//!
//! Built by the console's feed ([`super::feed`]) from the same reader
//! handles `/status` and `/metrics` read; pages filter and page it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use meshhub_api::analysis::ClusterAnalysis;
use meshhub_api::history::PinView;
use meshhub_api::rollout::Standing;
use meshhub_api::status::RemoteView;
use meshhub_mcp::ledger::{PeerStatus, SyncState};
use meshhub_rollout::{ClusterState, Failure, Phase, Rollout, Target};
use serde::Deserialize;

mod consumers;

pub use consumers::Consumer;

/// How a cluster stands, worst first (the fleet's sort order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Health {
    /// A collection NACKed, dropped by istiod or too large to send, or the
    /// rollout failed on it.
    Failing,
    /// No stream to its agent.
    Disconnected,
    /// Kept on an older version by the rollout or the analysis.
    Held,
    /// Pinned by an operator.
    Pinned,
    /// Sent, not yet ACKed (or nothing sent yet).
    Pending,
    /// Every collection ACKed at the version served.
    Synced,
}

impl Health {
    /// Every state, in the order shown.
    pub const ALL: [Health; 6] = [
        Self::Failing,
        Self::Disconnected,
        Self::Held,
        Self::Pinned,
        Self::Pending,
        Self::Synced,
    ];

    /// Its name in URLs and CSS classes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failing => "failing",
            Self::Disconnected => "disconnected",
            Self::Held => "held",
            Self::Pinned => "pinned",
            Self::Pending => "pending",
            Self::Synced => "synced",
        }
    }

    /// Its name for people.
    pub fn label(self) -> &'static str {
        match self {
            Self::Failing => "Failing",
            Self::Disconnected => "Disconnected",
            Self::Held => "Held",
            Self::Pinned => "Pinned",
            Self::Pending => "Pending",
            Self::Synced => "Synced",
        }
    }
}

/// One collection of one cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CellState {
    /// The cluster's agent NACKed the version sent.
    Nacked,
    /// ACKed, but the cluster's istiod does not hold some of its objects.
    Dropped,
    /// Too large to send.
    Blocked,
    /// Sent, no ACK yet.
    Pending,
    /// Nothing sent yet.
    NotSent,
    /// ACKed.
    Acked,
}

impl CellState {
    /// Its name as the issue and `meshhubctl` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Nacked => "NACKED",
            Self::Dropped => "DROPPED",
            Self::Blocked => "BLOCKED",
            Self::Pending => "PENDING",
            Self::NotSent => "NOT SENT",
            Self::Acked => "ACKED",
        }
    }

    fn of(s: SyncState) -> Self {
        match s {
            SyncState::NotSent => Self::NotSent,
            SyncState::Stale => Self::Pending,
            SyncState::Synced => Self::Acked,
            SyncState::Nacked => Self::Nacked,
            SyncState::Blocked => Self::Blocked,
            SyncState::Dropped => Self::Dropped,
        }
    }

    fn failing(self) -> bool {
        matches!(self, Self::Nacked | Self::Dropped | Self::Blocked)
    }
}

/// One collection's cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// The collection (`networking.istio.io/v1/VirtualService`).
    pub collection: String,
    /// Its state.
    pub state: CellState,
    /// The NACK's or block's message, what istiod dropped.
    pub message: String,
}

/// Why a cluster is not served the newest version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The rollout keeps it (its state there: held, failed, …).
    Rollout(&'static str),
    /// The analysis holds the newest version back (the codes).
    Analysis(Vec<String>),
    /// An operator pinned it to this version.
    Pinned(String),
}

impl Hold {
    /// What the fleet's table says.
    pub fn text(&self) -> String {
        match self {
            Self::Rollout(state) => format!("HELD by rollout ({state})"),
            Self::Analysis(codes) => format!("HELD by analysis ({})", codes.join(", ")),
            Self::Pinned(v) => format!("PINNED to {v}"),
        }
    }
}

/// One cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Its name.
    pub cluster: String,
    /// Its labels (`clusters[].clusterLabels`).
    pub labels: BTreeMap<String, String>,
    /// Whether the stream to its agent is up.
    pub connected: bool,
    /// Why the last stream ended or the last dial failed.
    pub last_error: Option<String>,
    /// The Istio versions its istiods report.
    pub istio: Vec<String>,
    /// Its shard (sharded dial-out).
    pub shard: Option<u32>,
    /// The replica dialing it.
    pub dialed_by: Option<String>,
    /// The version id it is served now.
    pub served: Option<String>,
    /// The newest version built for it.
    pub newest: Option<String>,
    /// What keeps it from the newest.
    pub hold: Option<Hold>,
    /// Why the rollout failed on it: the NACK's message, what its istiod
    /// dropped (the cluster is held on its previous version since, so its
    /// collections show that version's state).
    pub refusal: Option<String>,
    /// Per collection.
    pub cells: Vec<Cell>,
    /// The last send, ACK or NACK seen.
    pub last_change: Option<SystemTime>,
    /// How it stands.
    pub health: Health,
}

impl Row {
    /// Whether it has cells in `state`.
    pub fn has(&self, state: CellState) -> bool {
        self.cells.iter().any(|c| c.state == state)
    }
}

/// The whole fleet, trouble first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fleet {
    /// Every configured cluster.
    pub rows: Vec<Row>,
    /// Clusters by health.
    pub counts: BTreeMap<Health, usize>,
    /// The label keys seen (for the filter's hints).
    pub label_keys: BTreeSet<String>,
    /// The consumers that dial the hub themselves, trouble first.
    pub consumers: Vec<Consumer>,
    /// Consumers by health.
    pub consumer_counts: BTreeMap<Health, usize>,
}

/// What the fleet is built from (each a snapshot of a reader handle).
pub struct Facts<'a> {
    /// The configured clusters as `/status` shows them.
    pub remotes: Vec<RemoteView>,
    /// Each cluster's labels.
    pub labels: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// The current (or last) rollout.
    pub rollout: Option<&'a Rollout>,
    /// Clusters left out of rollouts since they refused a version.
    pub standing: &'a BTreeMap<String, Standing>,
    /// The analysis per cluster.
    pub analysis: &'a [Arc<ClusterAnalysis>],
    /// The pins.
    pub pins: &'a [PinView],
    /// The version id each cluster is served now.
    pub served: &'a dyn Fn(&str) -> Option<String>,
    /// The ledger's streams of consumers that dial the hub (`/status`'s
    /// `consumers`).
    pub consumers: Vec<PeerStatus>,
    /// What a group is served now: each collection's version.
    pub group: &'a dyn Fn(&str) -> Option<BTreeMap<String, String>>,
}

/// The rollout state's name as the pages spell it (`rolled back`).
pub fn rollout_state(s: &ClusterState) -> &'static str {
    match s {
        ClusterState::RolledBack => "rolled back",
        other => other.name(),
    }
}

impl Fleet {
    /// The fleet of `facts`.
    pub fn build(facts: Facts<'_>) -> Self {
        let analysis: BTreeMap<&str, &ClusterAnalysis> = facts
            .analysis
            .iter()
            .map(|a| (a.cluster.as_str(), &**a))
            .collect();
        let pins: BTreeMap<&str, &PinView> = facts
            .pins
            .iter()
            .map(|p| (p.record.cluster.as_str(), p))
            .collect();
        let failure = facts.rollout.and_then(|r| match &r.phase {
            Phase::Halted { failure } | Phase::RolledBack { failure } => Some(failure),
            _ => None,
        });
        let mut rows: Vec<Row> = facts
            .remotes
            .into_iter()
            .map(|r| {
                let target = facts.rollout.and_then(|ro| ro.targets.get(&r.cluster));
                // The cluster that failed the rollout (the others it rolled
                // back are held, not failing).
                let failed = failure.filter(|f| f.cluster.as_deref() == Some(r.cluster.as_str()));
                let standing = facts.standing.get(&r.cluster);
                row(
                    r,
                    facts.labels,
                    (target, standing, failed),
                    &analysis,
                    &pins,
                    facts.served,
                )
            })
            .collect();
        rows.sort_by(|a, b| (a.health, &a.cluster).cmp(&(b.health, &b.cluster)));
        let mut counts = BTreeMap::new();
        let mut label_keys = BTreeSet::new();
        for r in &rows {
            *counts.entry(r.health).or_default() += 1;
            label_keys.extend(r.labels.keys().cloned());
        }
        let consumers = consumers::build(facts.consumers, facts.group);
        let mut consumer_counts = BTreeMap::new();
        for c in &consumers {
            *consumer_counts.entry(c.health).or_default() += 1;
        }
        Self {
            rows,
            counts,
            label_keys,
            consumers,
            consumer_counts,
        }
    }

    /// The consumers `q` selects (its first page's worth), and how many
    /// there are in all.
    pub fn select_consumers(&self, q: &Query) -> (Vec<&Consumer>, usize) {
        consumers::select(&self.consumers, q)
    }

    /// The rows `q` selects, and how many there are in all.
    pub fn select<'a>(&'a self, q: &Query) -> (Vec<&'a Row>, usize) {
        let label = q.label_pair();
        let name = q.name.as_deref().map(str::trim).filter(|n| !n.is_empty());
        let matching: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| q.state.is_none_or(|s| s.selects(r)))
            .filter(|r| name.is_none_or(|n| r.cluster.contains(n)))
            .filter(|r| {
                label.as_ref().is_none_or(|(k, v)| match v {
                    Some(v) => r.labels.get(*k).is_some_and(|x| x == v),
                    None => r.labels.contains_key(*k),
                })
            })
            .collect();
        let total = matching.len();
        let size = q.page_size();
        // A page beyond the last (the set shrank while the page was open)
        // shows the last, as the pager says.
        let last = total.saturating_sub(1) / size;
        let page: Vec<&Row> = matching
            .into_iter()
            .skip(q.page().min(last).saturating_mul(size))
            .take(size)
            .collect();
        (page, total)
    }

    /// One cluster's row.
    pub fn row(&self, cluster: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.cluster == cluster)
    }
}

fn row(
    r: RemoteView,
    labels: &BTreeMap<String, BTreeMap<String, String>>,
    (target, standing, failed): (Option<&Target>, Option<&Standing>, Option<&Failure>),
    analysis: &BTreeMap<&str, &ClusterAnalysis>,
    pins: &BTreeMap<&str, &PinView>,
    served: &dyn Fn(&str) -> Option<String>,
) -> Row {
    let mut cells: Vec<Cell> = r
        .collections
        .iter()
        .map(|(name, c)| {
            let state = CellState::of(c.state);
            let message = match state {
                CellState::Nacked => c.nacked.as_ref().map(|n| n.message.clone()),
                CellState::Blocked => c.blocked.as_ref().map(|b| b.message.clone()),
                CellState::Dropped => r.dropped.get(name).map(|objects| {
                    objects
                        .iter()
                        .map(|o| format!("{}: {}", o.name, o.reason))
                        .collect::<Vec<_>>()
                        .join("; ")
                }),
                _ => None,
            };
            Cell {
                collection: name.clone(),
                state,
                message: message.unwrap_or_default(),
            }
        })
        .collect();
    cells.sort_by(|a, b| (a.state, &a.collection).cmp(&(b.state, &b.collection)));
    let last_change = r
        .collections
        .values()
        .flat_map(|c| {
            [
                c.sent.as_ref().map(|v| v.at.0),
                c.acked.as_ref().map(|v| v.at.0),
                c.nacked.as_ref().map(|n| n.at.0),
            ]
        })
        .flatten()
        .max();
    let istio: Vec<String> = r
        .report
        .as_ref()
        .and_then(|rep| rep.istio.as_ref())
        .map(|i| {
            i.istiods
                .iter()
                .map(|d| d.version.clone())
                .filter(|v| !v.is_empty())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        })
        .unwrap_or_default();
    let served_now = served(&r.cluster);
    let a = analysis.get(r.cluster.as_str());
    let pin = pins.get(r.cluster.as_str());
    let hold = if let Some(p) = pin {
        Some(Hold::Pinned(p.record.version.clone()))
    } else if let Some(h) = a.and_then(|a| a.held_back.as_ref()) {
        Some(Hold::Analysis(h.codes.clone()))
    } else {
        target
            .filter(|t| t.state.wants_previous())
            .map(|t| Hold::Rollout(rollout_state(&t.state)))
            .or_else(|| standing.map(|_| Hold::Rollout("refused an earlier version")))
    };
    let newest = a
        .map(|a| a.version.clone())
        .filter(|v| !v.is_empty())
        .or_else(|| pin.and_then(|p| p.latest.clone()))
        .or_else(|| target.map(|t| t.step.to.clone()))
        .or_else(|| served_now.clone());
    let rollout_failed = failed.is_some()
        || target.is_some_and(|t| {
            matches!(
                t.state,
                ClusterState::Failed { .. } | ClusterState::Refused { .. }
            )
        });
    let refusal = match target.map(|t| &t.state) {
        Some(ClusterState::Failed { message } | ClusterState::Refused { message }) => {
            Some(message.clone())
        }
        _ => failed.map(|f| f.message.clone()).or_else(|| {
            standing
                .filter(|_| target.is_none())
                .map(|s| s.message.clone())
        }),
    };
    let rollout_failed = rollout_failed || (target.is_none() && standing.is_some());
    let health = if rollout_failed || cells.iter().any(|c| c.state.failing()) {
        Health::Failing
    } else if !r.connected {
        Health::Disconnected
    } else if matches!(hold, Some(Hold::Pinned(_))) {
        Health::Pinned
    } else if hold.is_some() {
        Health::Held
    } else if cells.is_empty() || cells.iter().any(|c| c.state != CellState::Acked) {
        Health::Pending
    } else {
        Health::Synced
    };
    Row {
        labels: labels.get(&r.cluster).cloned().unwrap_or_default(),
        connected: r.connected,
        last_error: r.last_error,
        istio,
        shard: r.shard,
        dialed_by: r.dialed_by,
        served: served_now,
        newest,
        hold,
        refusal,
        cells,
        last_change,
        health,
        cluster: r.cluster,
    }
}

/// The fleet page's query: filters and the page.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq, Hash)]
pub struct Query {
    /// Only clusters in this state (`trouble`: failing or disconnected).
    #[serde(default, deserialize_with = "state_filter")]
    pub state: Option<StateFilter>,
    /// Only clusters with this label, `key=value` or `key`.
    #[serde(default)]
    pub label: Option<String>,
    /// Only clusters whose name contains this.
    #[serde(default)]
    pub name: Option<String>,
    /// The page, from 1.
    #[serde(default)]
    pub page: Option<usize>,
    /// Rows per page (default 100, at most 500).
    #[serde(default)]
    pub size: Option<usize>,
}

/// Rows per page unless the query says otherwise.
pub const PAGE_SIZE: usize = 100;
const MAX_PAGE_SIZE: usize = 500;

impl Query {
    /// The page index, from 0.
    pub fn page(&self) -> usize {
        self.page.unwrap_or(1).max(1) - 1
    }

    /// Rows per page.
    pub fn page_size(&self) -> usize {
        self.size.unwrap_or(PAGE_SIZE).clamp(1, MAX_PAGE_SIZE)
    }

    fn label_pair(&self) -> Option<(&str, Option<&str>)> {
        let l = self.label.as_deref()?.trim();
        if l.is_empty() {
            return None;
        }
        Some(match l.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (l, None),
        })
    }

    /// The same selection, spelled one way (what streams showing the same
    /// page share a render by): trimmed filters, empty ones and defaults
    /// left out, the page size bounded.
    pub fn normalized(&self) -> Self {
        let text = |t: &Option<String>| {
            t.as_deref()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
        };
        let page = self.page() + 1;
        let size = self.page_size();
        Self {
            state: self.state,
            label: text(&self.label),
            name: text(&self.name),
            page: (page > 1).then_some(page),
            size: (size != PAGE_SIZE).then_some(size),
        }
    }

    /// The query string of this query on page `page` (from 1), for links.
    pub fn with_page(&self, page: usize) -> String {
        let mut parts = form_urlencoded::Serializer::new(String::new());
        if let Some(s) = self.state {
            parts.append_pair("state", s.as_str());
        }
        if let Some(l) = self.label.as_deref().filter(|l| !l.trim().is_empty()) {
            parts.append_pair("label", l);
        }
        if let Some(n) = self.name.as_deref().filter(|n| !n.trim().is_empty()) {
            parts.append_pair("name", n);
        }
        if page > 1 {
            parts.append_pair("page", &page.to_string());
        }
        if let Some(s) = self.size {
            parts.append_pair("size", &s.to_string());
        }
        parts.finish()
    }
}

/// A state filter of the fleet page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateFilter {
    /// Failing or disconnected.
    Trouble,
    /// Exactly this health.
    Health(Health),
    /// Clusters with a NACKed collection.
    Nacked,
    /// Clusters with a collection their istiod dropped.
    Dropped,
}

impl StateFilter {
    /// Every filter, in the order offered.
    pub fn all() -> Vec<StateFilter> {
        let mut v = vec![Self::Trouble, Self::Nacked, Self::Dropped];
        v.extend(Health::ALL.iter().map(|h| Self::Health(*h)));
        v
    }

    /// Its name in URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trouble => "trouble",
            Self::Nacked => "nacked",
            Self::Dropped => "dropped",
            Self::Health(h) => h.as_str(),
        }
    }

    /// Its name for people.
    pub fn label(self) -> &'static str {
        match self {
            Self::Trouble => "Trouble (failing or disconnected)",
            Self::Nacked => "NACKed",
            Self::Dropped => "Dropped by istiod",
            Self::Health(h) => h.label(),
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::all().into_iter().find(|f| f.as_str() == s)
    }

    fn selects(self, r: &Row) -> bool {
        match self {
            Self::Trouble => matches!(r.health, Health::Failing | Health::Disconnected),
            Self::Nacked => r.has(CellState::Nacked),
            Self::Dropped => r.has(CellState::Dropped),
            Self::Health(h) => r.health == h,
        }
    }
}

fn state_filter<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<StateFilter>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    match s.as_deref().map(str::trim) {
        None | Some("") | Some("all") => Ok(None),
        Some(s) => StateFilter::parse(s).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown state {s:?}; one of: all, {}",
                StateFilter::all()
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }),
    }
}

/// The fleet shared by the feed and every page.
pub type SharedFleet = Arc<Fleet>;

#[cfg(test)]
mod tests;
