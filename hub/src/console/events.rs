//! The console's server-sent events: each open page follows one stream,
//! which sends the page's changing fragments, rendered on the hub, when
//! what they show changed — the fleet from the feed's one watch of the
//! hub's state ([`super::feed`]), the rollout from the controller's view.
//! Streams showing the same page state share one render of it per value
//! ([`super::renders`]); each sends only what changed for it. A stream
//! ends with the hub's shutdown; the browser reconnects by itself when
//! the hub comes back.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio_stream::wrappers::WatchStream;

use super::feed::Feed;
use super::model;
use super::pages::{cluster_live, fleet::fragments, rollout::section};
use super::renders::Renders;
use super::{ConsoleState, layout};
use crate::rollout::View;
use tokio::sync::watch;

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

/// `GET /console/events/fleet?<the page's query>`: `fleet` events with
/// the summary, rows and pager of that page, when they changed.
pub async fn fleet(State(s): State<ConsoleState>, Query(q): Query<model::Query>) -> Response {
    let events = fleet_texts(&s.feed, &q).map(|json| Event::default().event("fleet").data(json));
    respond(&s, "fleet", events)
}

/// The fleet page's fragments for `q` (JSON), on every fleet the feed
/// publishes in which they changed. Streams showing the same page (the
/// same query, normalized) share one render per fleet ([`Feed::renders`]).
pub fn fleet_texts(feed: &Feed, q: &model::Query) -> impl Stream<Item = Arc<str>> + Send + use<> {
    let q = q.normalized();
    let renders = feed.renders().clone();
    let texts = WatchStream::new(feed.subscribe())
        .filter_map(|f| async move { f })
        .then(move |f| {
            let (renders, q) = (renders.clone(), q.clone());
            async move {
                renders
                    .get(&f, &q, |f, q| serde_json::to_string(&fragments(f, q)).ok())
                    .await
            }
        });
    dedup(texts)
}

/// `GET /console/events/rollout`: `rollout` events with the rollout
/// section, when the rollout changed.
pub async fn rollout(State(s): State<ConsoleState>) -> Response {
    let texts = rollout_texts(s.rollout_renders.clone(), s.inputs.rollout.clone());
    let events = texts.map(|json| Event::default().event("rollout").data(json));
    respond(&s, "rollout", events)
}

/// The rollout section (JSON) on every view of the controller in which it
/// changed, one render per view for every stream.
fn rollout_texts(
    renders: Arc<Renders<View, ()>>,
    views: watch::Receiver<Arc<View>>,
) -> impl Stream<Item = Arc<str>> + Send + 'static {
    let texts = WatchStream::new(views).then(move |view| {
        let renders = renders.clone();
        async move {
            renders
                .get(&view, &(), |view, ()| {
                    serde_json::to_string(&Html {
                        html: section(view).into_string(),
                    })
                    .ok()
                })
                .await
        }
    });
    dedup(texts)
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
fn dedup<T>(
    items: impl Stream<Item = Option<T>> + Send + 'static,
) -> impl Stream<Item = T> + Send + 'static
where
    T: PartialEq + Clone + Send + 'static,
{
    let mut last: Option<T> = None;
    items.filter_map(move |item| {
        let fresh = match item {
            Some(text) if last.as_ref() != Some(&text) => {
                last = Some(text.clone());
                Some(text)
            }
            _ => None,
        };
        async move { fresh }
    })
}

#[cfg(test)]
mod tests;
