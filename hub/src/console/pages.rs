//! The console's pages: each handler reads the hub's state through the
//! console's reader handles (off the async threads where the history
//! database is read) and renders one page.

pub mod cluster;
pub mod fleet;
pub mod object;
pub mod rollout;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use meshhub_api::kinds::find_kind;
use meshhub_api::object::ObjectQuery;
use serde::Deserialize;

use super::layout::{Nav, Root, encode, error, page};
use super::model;
use super::{ConsoleState, Inputs, build_fleet, build_one};

/// Runs `f` off the async threads (for a page at `root`).
async fn blocking<T: Send + 'static>(
    root: Root,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            root,
            "Internal error",
            &e.to_string(),
        )
    })
}

/// A query the page at `root` can't read.
fn bad_query(root: Root, e: &impl std::fmt::Display) -> Response {
    error(StatusCode::BAD_REQUEST, root, "Bad request", &e.to_string())
}

/// `GET /console`.
pub async fn fleet(
    State(s): State<ConsoleState>,
    q: Result<Query<model::Query>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(q) = match q {
        Ok(q) => q,
        Err(e) => return bad_query(Root::TOP, &e),
    };
    let inputs = s.inputs.clone();
    let events = match q.with_page(q.page() + 1) {
        query if query.is_empty() => "console/events/fleet".to_owned(),
        query => format!("console/events/fleet?{query}"),
    };
    // The feed's fleet while a console follows it; built afresh otherwise.
    let current = s.feed.current();
    let content = blocking(Root::TOP, move || {
        let built;
        let fleet = match &current {
            Some(f) => f.as_ref(),
            None => {
                built = build_fleet(&inputs);
                &built
            }
        };
        fleet::content(fleet, &q)
    })
    .await;
    match content {
        Ok(c) => page("Fleet", Nav::Fleet, Root::TOP, Some(&events), c),
        Err(r) => r,
    }
}

/// `GET /console/rollout`.
pub async fn rollout(State(s): State<ConsoleState>) -> Response {
    let view = s.inputs.rollout.borrow().clone();
    page(
        "Rollout",
        Nav::Rollout,
        Root::CONSOLE,
        Some("console/events/rollout"),
        rollout::content(&view),
    )
}

/// The versions a cluster page compares.
#[derive(Debug, Default, Deserialize)]
pub struct Compare {
    from: Option<String>,
    to: Option<String>,
}

/// The live part of `cluster`'s page (its row from `fleet` when given),
/// `None` when no such cluster is configured (may read the history
/// database: blocking).
pub fn cluster_live(
    inputs: &Inputs,
    cluster: &str,
    fleet: Option<&model::Fleet>,
) -> Option<maud::Markup> {
    let (remote, row) = build_one(inputs, cluster, fleet)?;
    Some(cluster::live(&remote, &row))
}

/// `GET /console/clusters/{cluster}`.
pub async fn cluster(
    State(s): State<ConsoleState>,
    Path(name): Path<String>,
    q: Result<Query<Compare>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(q) = match q {
        Ok(q) => q,
        Err(e) => return bad_query(Root::CLUSTER, &e),
    };
    let inputs = s.inputs.clone();
    let cluster = name.clone();
    let current = s.feed.current();
    let built = blocking(Root::CLUSTER, move || {
        let live = cluster_live(&inputs, &cluster, current.as_deref())?;
        let admin = &inputs.admin;
        let analysis = admin
            .status
            .borrow()
            .analysis
            .iter()
            .find(|a| a.cluster == cluster)
            .map(|a| meshhub_api::analysis::ClusterAnalysis::clone(a));
        let history = admin.history.as_ref();
        let pin = history.and_then(|h| {
            h.pin_views()
                .into_iter()
                .find(|p| p.record.cluster == cluster)
        });
        let versions = history.map(|h| {
            h.list(&cluster)
                .map(|mut v| {
                    v.reverse();
                    v
                })
                .map_err(|e| e.to_string())
        });
        let diff = match (history, &q.from, &q.to) {
            (Some(h), Some(from), Some(to)) => Some(
                h.find(&cluster, from)
                    .and_then(|f| Ok((f, h.find(&cluster, to)?)))
                    .map(|(f, t)| {
                        // Older first, whichever order they were picked in.
                        let (f, t) = if f.seq <= t.seq { (f, t) } else { (t, f) };
                        crate::history::diff::diff(h, &admin.kinds, &f, &t)
                    })
                    .map_err(|e| e.to_string()),
            ),
            _ => None,
        };
        let fixed = cluster::Static {
            analysis,
            pin,
            history: versions,
            diff,
            compare: (q.from, q.to),
        };
        Some(cluster::content(&cluster, live, &fixed))
    })
    .await;
    match built {
        Ok(Some(c)) => {
            let events = format!("console/events/clusters/{}", encode(&name));
            page(
                &format!("Cluster {name}"),
                Nav::Cluster,
                Root::CLUSTER,
                Some(&events),
                c,
            )
        }
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            Root::CLUSTER,
            "No such cluster",
            &format!("no cluster {name:?} is configured with an agent (clusters[].agent)"),
        ),
        Err(r) => r,
    }
}

/// `GET /console/object`.
pub async fn object(
    State(s): State<ConsoleState>,
    q: Result<Query<ObjectQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    // An empty form (or none) shows the form alone.
    let q = q
        .ok()
        .map(|Query(q)| q)
        .filter(|q| !q.kind.trim().is_empty());
    let found = q.clone().map(|q| {
        let kind = find_kind(&s.inputs.admin.kinds, q.kind.trim()).map_err(|e| e.to_string())?;
        crate::admin::objects::describe(&s.inputs.admin, kind, &q).ok_or_else(|| {
            format!(
                "no {} {} in any source (served or rejected)",
                kind.kind(),
                q.name
            )
        })
    });
    page(
        "Object",
        Nav::Object,
        Root::CONSOLE,
        None,
        object::content(q.as_ref(), found),
    )
}
