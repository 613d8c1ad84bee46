use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::join_all;
use meshhub_mcp::ledger::{Ledger, Role};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;
use crate::console::feed::{self, tests::inputs};
use crate::console::model::Query;

fn q(s: &str) -> Query {
    let uri: axum::http::Uri = format!("/console?{s}").parse().unwrap();
    axum::extract::Query::<Query>::try_from_uri(&uri).unwrap().0
}

/// The next text of each of `streams`.
async fn next_of<S: Stream<Item = Arc<str>> + Unpin>(streams: &mut [S]) -> Vec<Arc<str>> {
    join_all(streams.iter_mut().map(|s| s.next()))
        .await
        .into_iter()
        .map(|t| t.expect("a stream ended"))
        .collect()
}

fn one_text(texts: &[Arc<str>]) -> bool {
    texts.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1]))
}

#[tokio::test(start_paused = true)]
async fn streams_of_one_page_share_one_render_per_fleet_and_other_pages_render_apart() {
    let ledger = Ledger::new();
    let peers: Vec<_> = (0..5)
        .map(|i| {
            let p = ledger.register(Role::Source, format!("c{i}"), format!("c{i}"));
            p.connected();
            p.sent("a", "v1", "1");
            p
        })
        .collect();
    let (inputs, _keep) = inputs(&ledger, &["c0", "c1", "c2", "c3", "c4", "idle"]);
    let tasks = TaskTracker::new();
    let shutdown = CancellationToken::new();
    let feed = feed::spawn(inputs, &tasks, shutdown.clone());
    let made = || feed.renders().made();

    // Ten consoles on the fleet's first page (the query spelled four
    // ways), three on the pending clusters, one on the cluster `idle`.
    let spellings = ["", "page=1", "size=100", "name=+&label=&state=all"];
    let mut first: Vec<_> = (0..10)
        .map(|i| Box::pin(fleet_texts(&feed, &q(spellings[i % 4]))))
        .collect();
    let mut pending: Vec<_> = (0..3)
        .map(|_| Box::pin(fleet_texts(&feed, &q("state=pending"))))
        .collect();
    let mut idle = [Box::pin(fleet_texts(&feed, &q("name=idle")))];

    let texts = next_of(&mut first).await;
    assert!(one_text(&texts), "ten streams, one text");
    assert!(texts[0].contains("c0") && texts[0].contains("idle"));
    let pending_texts = next_of(&mut pending).await;
    assert!(one_text(&pending_texts));
    assert!(!pending_texts[0].contains("idle"), "{}", pending_texts[0]);
    next_of(&mut idle).await;
    assert_eq!(made(), 3, "one render per page state, 14 streams");

    // An ACK: a new fleet, which changes every page (the summary's
    // counts): one render per page again.
    peers[0].acked("a", "v1", "1");
    let again = next_of(&mut first).await;
    assert!(one_text(&again) && again[0] != texts[0]);
    next_of(&mut pending).await;
    next_of(&mut idle).await;
    assert_eq!(made(), 6);

    // A change no page of `idle` shows (c1 sent again, still pending): it
    // renders once, finds its fragments unchanged and sends nothing.
    let before = feed.current().unwrap();
    let mut fleets = feed.subscribe();
    peers[1].sent("a", "v1", "2");
    fleets
        .wait_for(|f| f.as_ref().is_some_and(|f| !Arc::ptr_eq(f, &before)))
        .await
        .unwrap();
    assert!(
        idle[0].next().now_or_never().is_none(),
        "sent an unchanged page"
    );
    assert_eq!(made(), 7);
    // The ten others render it once between them, whether they send.
    for s in &mut first {
        let _ = s.next().now_or_never();
    }
    assert_eq!(made(), 8, "ten streams of one page: one render");

    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
}

#[tokio::test]
async fn rollout_streams_share_one_render_per_view() {
    let (tx, views) = watch::channel(Arc::new(View::default()));
    let renders = Arc::new(Renders::new("rollout"));
    let mut streams: Vec<_> = (0..5)
        .map(|_| Box::pin(rollout_texts(renders.clone(), views.clone())))
        .collect();
    let texts = next_of(&mut streams).await;
    assert!(one_text(&texts));
    assert_eq!(renders.made(), 1);

    tx.send_replace(Arc::new(View {
        enabled: true,
        ..View::default()
    }));
    let changed = next_of(&mut streams).await;
    assert!(one_text(&changed) && changed[0] != texts[0]);
    assert_eq!(renders.made(), 2);

    // The same view again (a new value): rendered once, sent by none.
    tx.send_replace(Arc::new(View {
        enabled: true,
        ..View::default()
    }));
    for s in &mut streams {
        assert!(s.next().now_or_never().is_none());
    }
    assert_eq!(renders.made(), 3);
}
