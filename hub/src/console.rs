//! The web console on the admin port (`/console`): the fleet (one row per
//! cluster, trouble first, paged), the rollout (its waves as a timeline,
//! with promote / abort / resume), a cluster (its collections, what its
//! istiod holds, the applier, analysis, history with diffs, its pin) and an
//! object (what `meshhubctl describe` shows).
//!
//! Pages are rendered on the hub and readable without JavaScript; with it,
//! they follow the hub by server-sent events (`/console/events/*`) fed by
//! one watch of the hub's state ([`feed`]), whatever the number of open
//! consoles. Everything is in the binary (no external assets: clusters
//! have no internet), served with a strict Content-Security-Policy.
//!
//! Reading needs what `/status` needs (nothing); the buttons appear only
//! once `/console/session` — behind the admin authorization, like the
//! endpoints they call — accepts the browser's token, and the actions are
//! the admin API's own POSTs (`/rollout/*`), refused without it.

mod assets;
pub mod events;
pub mod feed;
mod layout;
pub mod model;
mod pages;
pub mod renders;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use meshhub_runtime::auth::AdminAuth;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::AdminState;
use crate::clusters::{is_dialer, remote_views};
use crate::history::pins::Pins;
use crate::rollout::View;

use self::feed::Feed;
use self::model::{Facts, Fleet, Row};
use meshhub_api::status::RemoteView;
use meshhub_mcp::ledger::{PeerStatus, Role};

/// Each cluster's labels (`clusters[].clusterLabels`), as reloaded.
pub type Labels = Arc<BTreeMap<String, BTreeMap<String, String>>>;

/// What the console reads: cheap reader handles.
#[derive(Clone)]
pub struct Inputs {
    /// What the admin port reads.
    pub admin: AdminState,
    /// The rollout controller's view.
    pub rollout: watch::Receiver<Arc<View>>,
    /// The clusters' labels.
    pub labels: watch::Receiver<Labels>,
    /// The pins in force (with a history).
    pub pins: Option<watch::Receiver<Pins>>,
}

impl Inputs {
    /// Marks every input's current value seen.
    fn mark_seen(&mut self) {
        self.admin.status.mark_unchanged();
        self.admin.reports.mark_unchanged();
        self.admin.agents.mark_unchanged();
        self.admin.leader.mark_unchanged();
        self.rollout.mark_unchanged();
        self.labels.mark_unchanged();
        if let Some(p) = &mut self.pins {
            p.mark_unchanged();
        }
    }
}

/// The fleet as the inputs show it now (reads the history database:
/// blocking).
pub fn build_fleet(inputs: &Inputs) -> Fleet {
    build(inputs, None)
}

/// One cluster as `/status` shows it and its fleet row (from `fleet`, the
/// feed's, when it has the cluster); `None` when no such cluster is
/// configured with an agent (blocking, like [`build_fleet`]).
pub fn build_one(
    inputs: &Inputs,
    cluster: &str,
    fleet: Option<&Fleet>,
) -> Option<(RemoteView, Row)> {
    let remote = remotes(inputs, Some(cluster)).pop()?;
    let row = match fleet.and_then(|f| f.row(cluster)) {
        Some(row) => row.clone(),
        None => build(inputs, Some(cluster)).rows.into_iter().next()?,
    };
    Some((remote, row))
}

fn remotes(inputs: &Inputs, only: Option<&str>) -> Vec<RemoteView> {
    remotes_of(inputs, only, &inputs.admin.ledger.view())
}

fn remotes_of(inputs: &Inputs, only: Option<&str>, ledger: &[PeerStatus]) -> Vec<RemoteView> {
    let s = &inputs.admin;
    let all = s.agents.borrow().clone();
    let one: Vec<_>;
    let agents: &[crate::clusters::AgentSpec] = match only {
        None => &all,
        Some(c) => {
            one = all.iter().filter(|a| a.cluster == c).cloned().collect();
            &one
        }
    };
    let leader = s.leader.borrow().clone();
    let reports: BTreeMap<_, _> = s
        .reports
        .borrow()
        .iter()
        .filter(|(c, _)| only.is_none_or(|o| o == c.as_str()))
        .map(|(c, r)| (c.clone(), r.view.clone()))
        .collect();
    remote_views(agents, &leader, ledger, &reports, crate::upward::peer_name)
}

fn build(inputs: &Inputs, only: Option<&str>) -> Fleet {
    let s = &inputs.admin;
    let ledger = s.ledger.view();
    let remotes = remotes_of(inputs, only, &ledger);
    // The streams of consumers that dial the hub, as `/status` lists them
    // (the fleet's; one cluster's row has none).
    let consumers = match only {
        None => ledger
            .into_iter()
            .filter(|p| p.role == Role::Source && !is_dialer(p))
            .collect(),
        Some(_) => Vec::new(),
    };
    let labels = inputs.labels.borrow().clone();
    let view = inputs.rollout.borrow().clone();
    let status = s.status.borrow().clone();
    let pins = s
        .history
        .as_ref()
        .map(crate::history::History::pin_views)
        .unwrap_or_default();
    let cache = s.cache.clone();
    let served = |cluster: &str| {
        cache
            .snapshot(cluster)
            .map(|snap| crate::history::version_id(&snap))
    };
    // ADS consumers key the ledger by type URL, and are served what the
    // type URL serves (TrafficExtension: with the WasmPlugins translated
    // in): beside each collection's version, each type URL's.
    let ads = &s.ads;
    let type_urls: Vec<String> = s
        .kinds
        .iter()
        .filter(|k| k.offered_over_ads())
        .flat_map(|k| k.type_urls())
        .collect();
    let group = |group: &str| {
        cache.snapshot(group).map(|snap| {
            let mut versions: BTreeMap<String, String> = snap
                .collections()
                .map(|(name, c)| (name.to_owned(), c.version().to_owned()))
                .collect();
            for url in &type_urls {
                if let Some(served) = ads(url) {
                    versions.insert(url.clone(), served.read(&snap).version().to_owned());
                }
            }
            versions
        })
    };
    let rollout = view
        .rollout
        .as_ref()
        .filter(|r| !matches!(r.phase, meshhub_rollout::Phase::Superseded { .. }));
    Fleet::build(Facts {
        remotes,
        labels: &labels,
        rollout,
        standing: &view.standing,
        analysis: &status.analysis,
        pins: &pins,
        served: &served,
        consumers,
        group: &group,
    })
}

/// The console's state: its inputs and the feed.
#[derive(Clone)]
pub struct ConsoleState {
    /// What it reads.
    pub inputs: Inputs,
    /// The fleet as the feed builds it.
    pub feed: Feed,
    /// Ends the event streams.
    pub shutdown: CancellationToken,
    /// The rollout section per view, shared by the rollout page's streams.
    pub rollout_renders: Arc<renders::Renders<View, ()>>,
}

impl ConsoleState {
    /// The console over `inputs`, its feed's task on `tasks`.
    pub fn start(inputs: Inputs, tasks: &TaskTracker, shutdown: CancellationToken) -> Self {
        let feed = feed::spawn(inputs.clone(), tasks, shutdown.clone());
        Self {
            inputs,
            feed,
            shutdown,
            rollout_renders: Arc::new(renders::Renders::new("rollout")),
        }
    }
}

/// The console's routes: its pages for this machine's names only on a
/// loopback port ([`AdminAuth::local_pages`]), `/console/session` behind
/// the admin authorization.
pub fn routes(state: ConsoleState, auth: &AdminAuth) -> Router {
    let session = auth.protect(Router::new().route(
        "/console/session",
        get(|| async { StatusCode::NO_CONTENT.into_response() }),
    ));
    let pages = Router::new()
        // Relative, like every URL of the console (behind a proxy that
        // serves the port under a path).
        .route("/", get(|| async { Redirect::to("console") }))
        .route("/console", get(pages::fleet))
        .route("/console/", get(|| async { Redirect::to("../console") }))
        .route("/console/rollout", get(pages::rollout))
        .route("/console/clusters/{cluster}", get(pages::cluster))
        .route("/console/object", get(pages::object))
        .route("/console/events/fleet", get(events::fleet))
        .route("/console/events/rollout", get(events::rollout))
        .route("/console/events/clusters/{cluster}", get(events::cluster))
        .route("/console/assets/{file}", get(assets::get))
        .with_state(state);
    auth.local_pages(pages).merge(session)
}

#[cfg(test)]
mod tests;
