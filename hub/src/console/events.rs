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

fn event<T: Serialize>(name: &str, data: &T) -> Event {
    Event::default()
        .event(name)
        .json_data(data)
        .unwrap_or_else(|e| Event::default().event("error").data(e.to_string()))
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
/// the summary, rows and pager of that page.
pub async fn fleet(State(s): State<ConsoleState>, Query(q): Query<model::Query>) -> Response {
    let events = fleets(&s).map(move |f| event("fleet", &fragments(&f, &q)));
    respond(&s, "fleet", events)
}

/// `GET /console/events/rollout`: `rollout` events with the rollout
/// section.
pub async fn rollout(State(s): State<ConsoleState>) -> Response {
    let events = WatchStream::new(s.inputs.rollout.clone()).map(|view| {
        event(
            "rollout",
            &Html {
                html: section(&view).into_string(),
            },
        )
    });
    respond(&s, "rollout", events)
}

/// `GET /console/events/clusters/{cluster}`: `cluster` events with the
/// cluster's live section, whenever the fleet changed.
pub async fn cluster(State(s): State<ConsoleState>, Path(cluster): Path<String>) -> Response {
    let inputs = s.inputs.clone();
    let events = fleets(&s)
        .then(move |_| {
            let inputs = inputs.clone();
            let cluster = cluster.clone();
            async move {
                tokio::task::spawn_blocking(move || cluster_live(&inputs, &cluster))
                    .await
                    .ok()
                    .flatten()
            }
        })
        .filter_map(|live| async move {
            live.map(|m| {
                event(
                    "cluster",
                    &Html {
                        html: m.into_string(),
                    },
                )
            })
        });
    respond(&s, "cluster", events)
}
