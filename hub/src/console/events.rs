//! The console's server-sent events: each open page follows one stream,
//! which sends the page's changing fragments, rendered on the hub, when
//! what they show changed — the fleet from the feed's one watch of the
//! hub's state ([`super::feed`]), the rollout from the controller's view.
//! A stream ends with the hub's shutdown; the browser reconnects by
//! itself when the hub comes back.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio_stream::wrappers::WatchStream;

use super::model::{self, Fleet};
use super::pages::{cluster_live, fleet::fragments, rollout::section};
use super::{ConsoleState, layout};

/// Open event streams, for `/metrics`.
const STREAMS: &str = "meshhub_console_streams";

/// Counts a stream while it is open.
struct Open(&'static str);

impl Open {
    fn new(page: &'static str) -> Self {
        metrics::gauge!(STREAMS, "page" => page).increment(1.0);
        Self(page)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        metrics::gauge!(STREAMS, "page" => self.0).decrement(1.0);
    }
}

/// One fragment of HTML.
#[derive(Serialize)]
struct Html {
    html: String,
}

/// The stream as a response: kept alive, ended by the hub's shutdown,
/// counted while open.
fn respond(
    s: &ConsoleState,
    page: &'static str,
    events: impl Stream<Item = Event> + Send + 'static,
) -> Response {
    let open = Open::new(page);
    let events = events
        .take_until(s.shutdown.clone().cancelled_owned())
        .map(move |e| {
            let _open = &open;
            Ok::<_, Infallible>(e)
        });
    layout::secure(
        Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response(),
    )
}

/// The fleet's builds, the first as soon as there is one.
fn fleets(s: &ConsoleState) -> impl Stream<Item = Arc<Fleet>> + Send + 'static {
    WatchStream::new(s.feed.subscribe()).filter_map(|f| async move { f })
}

/// `GET /console/events/fleet?<the page's query>`: `fleet` events with
/// the summary, rows and pager of that page, when they changed.
pub async fn fleet(State(s): State<ConsoleState>, Query(q): Query<model::Query>) -> Response {
    let fragments = fleets(&s).map(move |f| serde_json::to_string(&fragments(&f, &q)).ok());
    let events = dedup(fragments).map(|json| Event::default().event("fleet").data(json));
    respond(&s, "fleet", events)
}

/// `GET /console/events/rollout`: `rollout` events with the rollout
/// section, when the rollout changed.
pub async fn rollout(State(s): State<ConsoleState>) -> Response {
    let views = WatchStream::new(s.inputs.rollout.clone()).map(|view| {
        serde_json::to_string(&Html {
            html: section(&view).into_string(),
        })
        .ok()
    });
    let events = dedup(views).map(|json| Event::default().event("rollout").data(json));
    respond(&s, "rollout", events)
}

/// `GET /console/events/clusters/{cluster}`: `cluster` events with the
/// cluster's live section, after every round of the feed in which it
/// changed (its page shows more than its fleet row: what its istiod
/// holds, the applier, the local consumers).
pub async fn cluster(State(s): State<ConsoleState>, Path(cluster): Path<String>) -> Response {
    let inputs = s.inputs.clone();
    let (rounds, fleet) = s.feed.subscribe_rounds();
    let sections = WatchStream::new(rounds).then(move |_| {
        let inputs = inputs.clone();
        let cluster = cluster.clone();
        let current = fleet.borrow().clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let live = cluster_live(&inputs, &cluster, current.as_deref())?;
                serde_json::to_string(&Html {
                    html: live.into_string(),
                })
                .ok()
            })
            .await
            .ok()
            .flatten()
        }
    });
    let events = dedup(sections).map(|json| Event::default().event("cluster").data(json));
    respond(&s, "cluster", events)
}

/// The texts of `items` that differ from the last one passed (`None`s,
/// what could not be rendered, left out).
fn dedup(
    items: impl Stream<Item = Option<String>> + Send + 'static,
) -> impl Stream<Item = String> + Send + 'static {
    let mut last: Option<String> = None;
    items.filter_map(move |item| {
        let fresh = match item {
            Some(text) if last.as_deref() != Some(text.as_str()) => {
                last = Some(text.clone());
                Some(text)
            }
            _ => None,
        };
        async move { fresh }
    })
}
