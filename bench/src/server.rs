//! The hub side of a run: the real hub (`meshhub::app::Hub`, the same
//! `start` the `meshhub` binary runs) over a generated configuration, in a
//! process of its own so that its RSS is the hub's alone.
//!
//! Events: `listening` (after `Hub::start`, with the time `start` was
//! called), `ready` (every source synced, first snapshot published: objects,
//! rejections, encoded size), `published` (a watched collection changed
//! version, with the time). Commands: `expected` (per collection version,
//! digest, digest of the encoded bytes (`raw_digest`), count, encoded bytes
//! of the default group), `acks` (wait until `peers` streams ACKed `version`
//! of `collection`; the ACK and send times from the ledger),
//! `groups_expected` (per cluster group, per collection of `collections`,
//! `version|digest`: what every sink of scenario `clusters` must hold),
//! `dialers` (the named clusters' dial-out streams from the ledger: whether
//! each ACKed its group's current version of every collection, and when),
//! `analysed` (wait until every group's analysis is of the version it is
//! served).
//!
//! The `published` events watch one group: `default`, or the one named
//! with `--group`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Parser as _;
use meshhub::app::Hub;
use meshhub::config::{Args, Config};
use meshhub_proto::mcp::Resource;
use prost::Message as _;
use serde_json::{Value, json};

use crate::digest::{Digest, resource_hash};
use crate::envelope::raw_hash;
use crate::proc::{Commands, emit, now_ns, system_ns};

/// The hub's count of the clusters' reports it took
/// (`meshhub_upward_updates_total` of the report collection, read from its
/// own `/metrics`).
async fn upward_updates(admin: std::net::SocketAddr) -> Value {
    let read =
        tokio::task::spawn_blocking(move || meshhub_testkit::http::get_blocking(admin, "/metrics"))
            .await
            .ok()
            .flatten();
    let Some((200, text)) = read else {
        return json!({"event": "error", "message": "the hub's /metrics did not answer"});
    };
    let count: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("meshhub_upward_updates_total{")
                && l.contains("meshhub/v1alpha1/clusterstatus")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    json!({"event": "upward_updates", "count": count})
}

/// The group every benchmark consumer lands in (no cluster configured).
pub const DEFAULT_GROUP: &str = "default";

/// Runs the hub until stdin closes or says quit, timestamping the
/// publishes of `group`.
pub async fn run(config: PathBuf, group: String) -> Result<()> {
    let args = Args::parse_from(
        [
            "meshhub",
            "--grpc-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--shutdown-grace",
            "2s",
            "--config",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([config.display().to_string()]),
    );
    let config = Config::from_args(args).context("hub configuration")?;
    let start_ns = now_ns();
    let hub = Hub::start(config).await.context("starting the hub")?;
    emit(&json!({
        "event": "listening",
        "grpc": hub.grpc_addr().to_string(),
        "admin": hub.admin_addr().to_string(),
        "start_ns": start_ns,
    }));
    hub.ready().await;
    let ready_ns = now_ns();
    let status = hub.status().borrow().clone();
    let snapshot = hub
        .cache()
        .snapshot(DEFAULT_GROUP)
        .context("ready without a default snapshot")?;
    let encoded: usize = snapshot.collections().map(|(_, c)| c.encoded_bytes()).sum();
    let snapshot = hub
        .cache()
        .snapshot(&group)
        .with_context(|| format!("ready without a snapshot of group {group}"))?;
    emit(&json!({
        "event": "ready",
        "ready_ns": ready_ns,
        "objects": status.objects,
        "rejected": status.rejected.len(),
        "conflicts": status.conflicts.len(),
        "encoded_bytes": encoded,
    }));
    // One watcher per collection timestamps every publish.
    for (name, _) in snapshot.collections() {
        let mut rx = hub.cache().watch(&group, name);
        rx.borrow_and_update();
        let name = name.to_owned();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let at = now_ns();
                let version = rx.borrow_and_update().version().map(str::to_owned);
                emit(
                    &json!({"event": "published", "collection": name, "version": version, "at_ns": at}),
                );
            }
        });
    }

    let mut commands = Commands::stdin();
    while let Some(cmd) = commands.next().await? {
        match cmd["cmd"].as_str() {
            Some("expected") => emit(&expected(&hub)?),
            Some("acks") => emit(&acks(&hub, &cmd).await),
            Some("groups_expected") => emit(&groups_expected(&hub, &cmd)?),
            Some("dialers") => emit(&dialers(&hub, &cmd)),
            Some("upward_updates") => emit(&upward_updates(hub.admin_addr()).await),
            Some("analysed") => emit(&analysed(&hub, &cmd).await),
            other => {
                emit(&json!({"event": "error", "message": format!("unknown command {other:?}")}))
            }
        }
    }
    hub.shutdown().await;
    Ok(())
}

/// Waits (bounded) until the hub's status shows every group's (or the
/// named `clusters'`; at least `groups` of them) analysis of the version it serves (analysis runs beside serving: a change's ACKs
/// come before its analyses are done); the time it took. Watches the
/// status, which the hub republishes when its analyses ran out.
async fn analysed(hub: &Hub, cmd: &Value) -> Value {
    let timeout = Duration::from_millis(cmd["timeout_ms"].as_u64().unwrap_or(120_000));
    // Only these clusters (all when not named): looking costs a version id
    // per cluster, which would count as the hub's CPU.
    let only: Option<Vec<&str>> = cmd["clusters"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect());
    // How many groups must be shown at least (after a start: every
    // cluster's, none of which is shown before its first analysis).
    let groups = cmd["groups"].as_u64().unwrap_or(0) as usize;
    let started = now_ns();
    let mut status = hub.status();
    let settled = tokio::time::timeout(timeout, async {
        loop {
            // A copy: the digests below are not worked out under the
            // status' lock (the pipeline's next publication would wait).
            let now = status.borrow_and_update().clone();
            let shown: Vec<_> = now
                .analysis
                .iter()
                .filter(|a| {
                    only.as_ref()
                        .is_none_or(|o| o.contains(&a.cluster.as_str()))
                })
                .collect();
            // A group not analysed even once is not shown at all.
            let unshown = groups.saturating_sub(shown.len());
            let behind = unshown
                + shown
                    .iter()
                    .filter(|a| {
                        hub.cache()
                            .snapshot(&a.cluster)
                            .is_some_and(|s| meshhub::history::version_id(&s) != a.version)
                    })
                    .count();
            if behind == 0 || status.changed().await.is_err() {
                return behind;
            }
        }
    })
    .await;
    json!({
        "event": "analysed",
        "complete": matches!(settled, Ok(0)),
        "at_ns": now_ns(),
        "took_ms": (now_ns() - started) as f64 / 1e6,
    })
}

/// What every consumer must hold: per collection of the default group.
fn expected(hub: &Hub) -> Result<Value> {
    let snapshot = hub.cache().snapshot(DEFAULT_GROUP).context("no snapshot")?;
    let mut out = serde_json::Map::new();
    for (name, c) in snapshot.collections() {
        let mut entries = Vec::with_capacity(c.len());
        let mut raw = Vec::with_capacity(c.len());
        for bytes in c.resources().iter() {
            let r = Resource::decode(bytes.clone()).context("published bytes do not decode")?;
            entries.push(resource_hash(&r).1);
            raw.push(raw_hash(bytes));
        }
        out.insert(
            name.to_owned(),
            json!({
                "version": c.version(),
                "digest": Digest::of(&entries).key(),
                "raw_digest": Digest::of(&raw).key(),
                "count": c.len(),
                "bytes": c.encoded_bytes(),
            }),
        );
    }
    Ok(json!({"event": "expected", "collections": out}))
}

/// Waits (bounded) until `peers` streams ACKed `version` of `collection`;
/// returns the ACK times and the earliest send time of that version.
async fn acks(hub: &Hub, cmd: &Value) -> Value {
    let collection = cmd["collection"].as_str().unwrap_or_default();
    let version = cmd["version"].as_str().unwrap_or_default();
    let peers = cmd["peers"].as_u64().unwrap_or(0) as usize;
    let timeout = Duration::from_millis(cmd["timeout_ms"].as_u64().unwrap_or(30_000));
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let view = hub.ledger().view();
        let mut acked = Vec::new();
        let mut first_sent: Option<u64> = None;
        for p in view.iter().filter(|p| p.connected) {
            let Some(c) = p.collections.get(collection) else {
                continue;
            };
            if let Some(s) = c.sent.as_ref().filter(|s| s.version == version) {
                let at = system_ns(s.at.0);
                first_sent = Some(first_sent.map_or(at, |f| f.min(at)));
            }
            if let Some(a) = c.acked.as_ref().filter(|a| a.version == version) {
                acked.push(system_ns(a.at.0));
            }
        }
        let done = acked.len() >= peers;
        if done || tokio::time::Instant::now() >= deadline {
            return json!({
                "event": "acks",
                "complete": done,
                "at_ns": acked,
                "first_sent_ns": first_sent,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What every cluster's sink must hold: per cluster group, per collection
/// of `collections`, `version|digest`.
fn groups_expected(hub: &Hub, cmd: &Value) -> Result<Value> {
    let wanted: Vec<String> =
        serde_json::from_value(cmd["collections"].clone()).context("collections")?;
    let mut groups = serde_json::Map::new();
    for group in hub.cache().groups() {
        if &*group == DEFAULT_GROUP {
            continue;
        }
        let snapshot = hub.cache().snapshot(&group).context("a listed group")?;
        let mut per = serde_json::Map::new();
        for c in &wanted {
            let c_snap = snapshot.collection(c);
            let mut entries = Vec::with_capacity(c_snap.len());
            for bytes in c_snap.resources().iter() {
                let r = Resource::decode(bytes.clone()).context("published bytes do not decode")?;
                entries.push(resource_hash(&r).1);
            }
            per.insert(
                c.clone(),
                json!(format!(
                    "{}|{}",
                    c_snap.version(),
                    Digest::of(&entries).key()
                )),
            );
        }
        groups.insert(group.to_string(), Value::Object(per));
    }
    Ok(json!({"event": "groups_expected", "groups": groups}))
}

/// The named clusters' dial-out streams: per cluster, whether it is
/// connected and ACKed its group's current version of every collection it
/// subscribed (at or after `since_ns`; `collection` at or after
/// `changed_ns`), and the latest of those ACK times.
fn dialers(hub: &Hub, cmd: &Value) -> Value {
    let names: Vec<String> = serde_json::from_value(cmd["clusters"].clone()).unwrap_or_default();
    // Every ACK at or after `since_ns`; that of `collection` at or after
    // `changed_ns`.
    let since = cmd["since_ns"].as_u64().unwrap_or(0);
    let changed = cmd["collection"].as_str().unwrap_or_default();
    let changed_since = cmd["changed_ns"].as_u64().unwrap_or(0);
    // Only the named clusters' records: the whole ledger's view at 10,000
    // clusters, polled every 20 ms, would count as the hub's CPU.
    let view = hub.ledger().view_of(|p| names.contains(&p.peer));
    let mut out = serde_json::Map::new();
    for name in names {
        let Some(p) = view
            .iter()
            .find(|p| meshhub::clusters::is_dialer(p) && p.peer == name && p.connected)
        else {
            out.insert(name, json!({"connected": false, "synced": false}));
            continue;
        };
        let snapshot = hub.cache().snapshot(&p.group);
        let mut synced = !p.collections.is_empty();
        let mut last_ack = 0u64;
        for (c, s) in &p.collections {
            let current = snapshot
                .as_ref()
                .map(|s| s.collection(c).version().to_owned());
            match &s.acked {
                Some(a) if Some(&a.version) == current.as_ref() => {
                    let at = system_ns(a.at.0);
                    if at < since || (c == changed && at < changed_since) {
                        synced = false;
                    }
                    last_ack = last_ack.max(at);
                }
                _ => synced = false,
            }
        }
        out.insert(
            name,
            json!({"connected": true, "synced": synced, "last_ack_ns": last_ack}),
        );
    }
    json!({"event": "dialers", "clusters": out})
}
