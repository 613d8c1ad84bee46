//! `meshhubctl status`: a plain HTTP GET of the admin `/status`,
//! reduced to one row per remote cluster and per consumer.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use meshhub_api::analysis::{ClusterAnalysis, Level};
use meshhub_api::history::{PinView, UnresolvedPin};
use meshhub_api::status::{RemoteView, ShardView, WithheldView};
use meshhub_mcp::ledger::{At, CollectionStatus, PeerStatus, SyncState};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::admin::Admin;

mod gateway_api;
use crate::output::{Format, render, structured};
use gateway_api::{GatewayApiSummary, gateway_api_summary};

/// Flags of `meshhubctl status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// The hub's admin address.
    #[arg(long, env = "MESHHUB_ADMIN", default_value = "http://127.0.0.1:9902")]
    admin: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Format,
    /// Keep running: ask again every `--interval` and redraw when the
    /// answer changed (Ctrl-C ends).
    #[arg(long, short = 'w')]
    watch: bool,
    /// With `--watch`: how often to ask (e.g. 2s).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, requires = "watch")]
    interval: Duration,
    /// Also list consumers that disconnected (the hub keeps the newest 256).
    #[arg(long)]
    all: bool,
    /// Give up after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// What `-o json` prints.
#[derive(Debug, Serialize)]
struct Report {
    clusters: Vec<Row>,
    consumers: Vec<Row>,
    /// Pinned clusters, as the hub reports them.
    pins: Vec<PinView>,
    /// Shared pins this hub replica can't serve.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unresolved_pins: Vec<UnresolvedPin>,
    /// Per cluster, the analysis of its latest build and the version held
    /// back, if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    analysis: Vec<ClusterAnalysis>,
    /// Sharded dial-out: every shard and the replica holding it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    shards: Vec<ShardView>,
    /// Objects a cluster is not delivered (it lacks their kind's CRD).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    withheld: Vec<WithheldView>,
    /// Per cluster whose agent reports it: what its Gateway API
    /// controllers said of the objects applied there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    gateway_api: Vec<GatewayApiSummary>,
}

#[derive(Debug, Serialize)]
struct Row {
    name: String,
    /// Agent address (clusters) or socket address (consumers).
    address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_id: Option<String>,
    /// How a consumer subscribed: `mcp`, `ads` or `delta-ads`.
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<String>,
    group: String,
    /// Clusters: the replica dialing it (leader election or shards).
    #[serde(skip_serializing_if = "Option::is_none")]
    dialed_by: Option<String>,
    /// Clusters, sharded dial-out: its shard.
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<u32>,
    connected: bool,
    connected_since: Option<At>,
    disconnected_at: Option<At>,
    last_error: Option<String>,
    /// Clusters: what the cluster's istiod holds of what its agent serves
    /// (`12/13, 1 dropped`), from the cluster's upward report.
    #[serde(skip_serializing_if = "Option::is_none")]
    held_by_istiod: Option<String>,
    /// Clusters: the Istio releases its agent sees (`1.28.3`,
    /// `1.23.2 (canary), 1.28.3`, `unknown`).
    #[serde(skip_serializing_if = "Option::is_none")]
    istio: Option<String>,
    collections: BTreeMap<String, CollectionRow>,
}

#[derive(Debug, Serialize)]
struct CollectionRow {
    state: SyncState,
    sent: Option<String>,
    acked: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nacked: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn collections(c: BTreeMap<String, CollectionStatus>) -> BTreeMap<String, CollectionRow> {
    c.into_iter()
        .map(|(name, c)| {
            // The rejection that explains the state, if any.
            let problem = match c.state {
                SyncState::Nacked => c.nacked,
                SyncState::Blocked => c.blocked,
                SyncState::NotSent | SyncState::Stale | SyncState::Synced | SyncState::Dropped => {
                    None
                }
            };
            let row = CollectionRow {
                state: c.state,
                sent: c.sent.map(|v| v.version),
                acked: c.acked.map(|v| v.version),
                nacked: problem.as_ref().map(|n| n.version.clone()),
                message: problem.map(|n| n.message),
            };
            (name, row)
        })
        .collect()
}

/// What the cluster's istiod holds, as the status table shows it.
fn held_by_istiod(r: &RemoteView) -> String {
    if r.report.as_ref().is_some_and(|r| r.unserved) {
        return "unknown (no upward report: the agent does not serve it)".to_owned();
    }
    let Some(istiod) = r.report.as_ref().and_then(|r| r.istiod.as_ref()) else {
        return "-".to_owned();
    };
    if !istiod.reachable {
        return format!("unknown ({})", istiod.error);
    }
    let total = istiod.held as usize + istiod.dropped.len();
    if istiod.dropped.is_empty() {
        format!("{}/{total}", istiod.held)
    } else {
        format!("{}/{total}, {} dropped", istiod.held, istiod.dropped.len())
    }
}

/// The cluster's Istio releases, as the status table shows them.
fn istio(r: &RemoteView) -> String {
    r.report
        .as_ref()
        .and_then(|r| r.istio.as_ref())
        .map_or_else(|| "unknown".to_owned(), |i| i.summary())
}

fn cluster_row(r: RemoteView) -> Row {
    let held = held_by_istiod(&r);
    let istio = istio(&r);
    let mut collections = collections(r.collections);
    for (name, dropped) in &r.dropped {
        if let Some(row) = collections.get_mut(name) {
            let objects: Vec<String> = dropped.iter().map(|d| d.name.clone()).collect();
            row.message = Some(format!(
                "istiod dropped {}: {}",
                objects.join(", "),
                dropped.first().map_or("", |d| d.reason.as_str())
            ));
        }
    }
    Row {
        held_by_istiod: Some(held),
        istio: Some(istio),
        dialed_by: r.dialed_by,
        shard: r.shard,
        group: r.cluster.clone(),
        name: r.cluster,
        address: r.address,
        node_id: None,
        protocol: None,
        connected: r.connected,
        connected_since: r.connected_since,
        disconnected_at: r.disconnected_at,
        last_error: r.last_error,
        collections,
    }
}

fn consumer_row(p: PeerStatus) -> Row {
    Row {
        address: p.peer.clone(),
        name: p.peer,
        node_id: Some(p.node_id),
        protocol: Some(p.protocol.to_string()),
        group: p.group,
        dialed_by: None,
        shard: None,
        connected: p.connected,
        connected_since: p.connected_since,
        disconnected_at: p.disconnected_at,
        last_error: p.last_error,
        held_by_istiod: None,
        istio: None,
        collections: collections(p.collections),
    }
}

/// One answer of `/status`, rendered.
async fn frame(args: &StatusArgs) -> Result<String, String> {
    let doc = Admin::hub(&args.admin, args.timeout).status().await?;
    let gateway_api = doc.remotes.iter().filter_map(gateway_api_summary).collect();
    let mut clusters: Vec<Row> = doc.remotes.into_iter().map(cluster_row).collect();
    // A withheld collection is served empty (and ACKed): its row says why.
    for w in &doc.withheld {
        let row = clusters
            .iter_mut()
            .find(|r| r.name == w.cluster)
            .and_then(|r| r.collections.get_mut(&w.collection));
        if let Some(row) = row {
            row.message
                .get_or_insert_with(|| format!("{} object(s) withheld: {}", w.objects, w.reason));
        }
    }
    let report = Report {
        clusters,
        consumers: doc
            .consumers
            .into_iter()
            .filter(|p| args.all || p.connected)
            .map(consumer_row)
            .collect(),
        pins: doc.pins,
        unresolved_pins: doc.unresolved_pins,
        analysis: doc.analysis,
        shards: doc.shards,
        withheld: doc.withheld,
        gateway_api,
    };
    match structured(&report, args.output) {
        Some(text) => text,
        None => Ok(table(&report)),
    }
}

pub async fn run(args: StatusArgs) -> Result<(), String> {
    if !args.watch {
        print!("{}", frame(&args).await?);
        return Ok(());
    }
    let stop = CancellationToken::new();
    let ctrl_c = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });
    // On a terminal each frame replaces the last; in a pipe frames
    // follow each other (YAML documents, JSON values, blank-line
    // separated tables).
    let terminal = std::io::stdout().is_terminal();
    let mut tick = tokio::time::interval(args.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<String> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        // A hub that goes away is shown, not fatal: it may come back.
        let now = frame(&args)
            .await
            .unwrap_or_else(|e| format!("meshhubctl: {e}\n"));
        if last.as_ref() == Some(&now) {
            continue;
        }
        let mut out = std::io::stdout().lock();
        let separator = match (terminal, args.output, last.is_some()) {
            (true, _, _) => "\x1b[2J\x1b[H",
            (false, Format::Yaml, _) => "---\n",
            (false, Format::Table, true) => "\n",
            _ => "",
        };
        let _ = write!(out, "{separator}{now}");
        let _ = out.flush();
        last = Some(now);
    }
}

fn dash(s: &Option<String>) -> String {
    s.clone().unwrap_or_else(|| "-".to_owned())
}

/// Versions are digests; the table shows a prefix (`-o json` has them
/// whole).
fn short(v: &Option<String>) -> String {
    match v {
        // A pinned (rolled back) version: say so in the table too.
        Some(v) if v.contains(".pin-") => format!("{}(pin)", crate::output::short(v)),
        _ => crate::output::short(v.as_deref().unwrap_or_default()),
    }
}

/// As the hub writes it (`-o json` shows the same).
fn time(at: Option<At>) -> String {
    at.map_or_else(
        || "-".to_owned(),
        |at| humantime::format_rfc3339_millis(at.0).to_string(),
    )
}

fn since(r: &Row) -> String {
    if r.connected {
        time(r.connected_since)
    } else {
        time(r.disconnected_at)
    }
}

/// The state as the table shows it.
fn state(s: SyncState) -> &'static str {
    match s {
        SyncState::NotSent => "NOT SENT",
        SyncState::Stale => "STALE",
        SyncState::Synced => "SYNCED",
        SyncState::Nacked => "NACKED",
        SyncState::Blocked => "BLOCKED",
        SyncState::Dropped => "DROPPED",
    }
}

fn table(report: &Report) -> String {
    let mut out = String::new();
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_owned();
    // Several replicas: who dials each cluster (and its shard).
    let replicas = report.clusters.iter().any(|r| r.dialed_by.is_some());
    let mut head = vec![
        "CLUSTER".to_owned(),
        "AGENT".to_owned(),
        "CONNECTED".to_owned(),
        "SINCE".to_owned(),
        "ISTIO".to_owned(),
        "HELD BY ISTIOD".to_owned(),
        "LAST ERROR".to_owned(),
    ];
    if replicas {
        head.insert(2, "DIALED BY".to_owned());
    }
    let mut peers = vec![head];
    for r in &report.clusters {
        let mut row = vec![
            r.name.clone(),
            r.address.clone(),
            yes_no(r.connected),
            since(r),
            dash(&r.istio),
            dash(&r.held_by_istiod),
            dash(&r.last_error),
        ];
        if replicas {
            let by = match r.shard {
                Some(s) => format!("{} (shard {s})", dash(&r.dialed_by)),
                None => dash(&r.dialed_by),
            };
            row.insert(2, by);
        }
        peers.push(row);
    }
    if report.clusters.is_empty() {
        out.push_str("no remote clusters (no cluster has an agent)\n");
    } else {
        out.push_str(&render(&peers));
    }
    out.push('\n');
    if !report.shards.is_empty() {
        let mut shards = vec![vec![
            "SHARD".to_owned(),
            "HOLDER".to_owned(),
            "CLUSTERS".to_owned(),
        ]];
        for s in &report.shards {
            shards.push(vec![
                s.shard.to_string(),
                dash(&s.holder),
                s.clusters.to_string(),
            ]);
        }
        out.push_str(&render(&shards));
        out.push('\n');
    }
    let mut consumers = vec![vec![
        "CONSUMER".to_owned(),
        "PROTOCOL".to_owned(),
        "NODE".to_owned(),
        "GROUP".to_owned(),
        "CONNECTED".to_owned(),
        "SINCE".to_owned(),
        "LAST ERROR".to_owned(),
    ]];
    for r in &report.consumers {
        consumers.push(vec![
            r.name.clone(),
            dash(&r.protocol),
            r.node_id
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or("-".to_owned()),
            r.group.clone(),
            yes_no(r.connected),
            since(r),
            dash(&r.last_error),
        ]);
    }
    if report.consumers.is_empty() {
        out.push_str("no consumers connected\n");
    } else {
        out.push_str(&render(&consumers));
    }
    let mut colls = vec![vec![
        "PEER".to_owned(),
        "COLLECTION".to_owned(),
        "STATE".to_owned(),
        "SENT".to_owned(),
        "ACKED".to_owned(),
        "MESSAGE".to_owned(),
    ]];
    for r in report.clusters.iter().chain(&report.consumers) {
        for (name, c) in &r.collections {
            colls.push(vec![
                r.name.clone(),
                name.clone(),
                state(c.state).to_owned(),
                short(&c.sent),
                short(&c.acked),
                c.message
                    .as_ref()
                    .map(|m| m.replace('\n', " "))
                    .unwrap_or_else(|| "-".to_owned()),
            ]);
        }
    }
    if colls.len() > 1 {
        out.push('\n');
        out.push_str(&render(&colls));
    }
    for p in &report.pins {
        let r = &p.record;
        out.push_str(&format!(
            "\nPINNED: cluster {} is served version {} (#{}) since {} by {}; {} version(s) behind the sources (latest {})\n",
            r.cluster,
            r.version,
            r.seq,
            r.since,
            r.by,
            p.behind,
            p.latest.as_deref().unwrap_or("?"),
        ));
    }
    let noted: Vec<&ClusterAnalysis> = report
        .analysis
        .iter()
        .filter(|a| !a.messages.is_empty() || a.held_back.is_some())
        .collect();
    if !noted.is_empty() {
        let mut rows = vec![vec![
            "ANALYSIS".to_owned(),
            "VERSION".to_owned(),
            "ERRORS".to_owned(),
            "WARNINGS".to_owned(),
            "INFO".to_owned(),
            "HELD BACK".to_owned(),
        ]];
        for a in &noted {
            rows.push(vec![
                a.cluster.clone(),
                crate::output::short(&a.version),
                a.count(Level::Error).to_string(),
                a.count(Level::Warning).to_string(),
                a.count(Level::Info).to_string(),
                a.held_back
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |h| h.codes.join(",")),
            ]);
        }
        out.push('\n');
        out.push_str(&render(&rows));
    }
    for a in &report.analysis {
        if let Some(h) = &a.held_back {
            out.push_str(&format!(
                "\nHELD BACK: cluster {} is not served version {} (analysis found {}; since {}); {} (see meshhubctl analyze --cluster {})\n",
                a.cluster,
                h.version,
                h.codes.join(", "),
                h.since,
                match &h.serving {
                    Some(v) => format!("serving its last good version {v}"),
                    None => "it has no good version yet: nothing is served".to_owned(),
                },
                a.cluster,
            ));
        }
    }
    for w in &report.withheld {
        out.push_str(&format!(
            "\nWITHHELD: {} object(s) of {} from cluster {}: {}\n",
            w.objects, w.collection, w.cluster, w.reason
        ));
    }
    gateway_api::render(&report.gateway_api, &mut out);
    for p in &report.unresolved_pins {
        let r = &p.record;
        out.push_str(&format!(
            "\nPIN NOT SERVED BY THIS REPLICA: cluster {} is pinned to {} since {} by {}, but {}; serving {} instead (pin a version this replica has, or unpin)\n",
            r.cluster, r.version, r.since, r.by, p.reason, p.serving,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(name: &str, dialed_by: Option<&str>, shard: Option<u32>) -> Row {
        Row {
            name: name.to_owned(),
            address: format!("http://{name}:9911"),
            node_id: None,
            protocol: None,
            group: name.to_owned(),
            dialed_by: dialed_by.map(str::to_owned),
            shard,
            connected: dialed_by.is_some(),
            connected_since: None,
            disconnected_at: None,
            last_error: None,
            held_by_istiod: None,
            istio: None,
            collections: BTreeMap::new(),
        }
    }

    fn report(clusters: Vec<Row>, shards: Vec<ShardView>) -> Report {
        Report {
            clusters,
            consumers: vec![],
            pins: vec![],
            unresolved_pins: vec![],
            analysis: vec![],
            shards,
            withheld: vec![],
            gateway_api: vec![],
        }
    }

    #[test]
    fn withheld_objects_are_said_per_cluster() {
        let mut r = report(vec![cluster("bare", Some("hub-0"), None)], vec![]);
        r.withheld = vec![WithheldView {
            cluster: "bare".into(),
            collection: "k8s/gateway.networking.k8s.io/v1/httproutes".into(),
            objects: 2,
            reason: "cluster bare lacks the CRD httproutes.gateway.networking.k8s.io".into(),
        }];
        let text = table(&r);
        assert!(
            text.contains("WITHHELD: 2 object(s) of k8s/gateway.networking.k8s.io/v1/httproutes from cluster bare: cluster bare lacks the CRD"),
            "{text}"
        );
    }

    #[test]
    fn sharded_hubs_show_who_dials_each_cluster_and_each_shards_holder() {
        let text = table(&report(
            vec![
                cluster("east", Some("hub-a"), Some(3)),
                cluster("west", None, Some(1)),
            ],
            vec![
                ShardView {
                    shard: 1,
                    holder: None,
                    clusters: 1,
                },
                ShardView {
                    shard: 3,
                    holder: Some("hub-a".into()),
                    clusters: 1,
                },
            ],
        ));
        assert!(text.contains("DIALED BY"), "{text}");
        assert!(text.contains("hub-a (shard 3)"), "{text}");
        assert!(text.contains("- (shard 1)"), "{text}");
        let shard_rows: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("SHARD"))
            .take(3)
            .collect();
        assert_eq!(shard_rows.len(), 3, "{text}");
        assert!(shard_rows[2].contains("hub-a"), "{text}");
    }

    #[test]
    fn clusters_show_their_istio_releases() {
        use meshhub_api::upward::{ClusterReportView, IstioRuntimeView, IstiodInstanceView};
        let remote = |istio: Option<IstioRuntimeView>| RemoteView {
            cluster: "east".into(),
            address: "http://east:15010".into(),
            connected: true,
            streams: 1,
            report: Some(ClusterReportView {
                istio,
                ..Default::default()
            }),
            ..Default::default()
        };
        let seen = IstioRuntimeView {
            istiods: vec![IstiodInstanceView {
                source: "version-endpoint".into(),
                name: "http://istiod:15014".into(),
                version: "1.28.3".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(istio(&remote(Some(seen))), "1.28.3");
        assert_eq!(istio(&remote(None)), "unknown");
        let mut row = cluster("east", None, None);
        row.istio = Some("1.23.2 (canary), 1.28.3".into());
        let text = table(&report(vec![row], vec![]));
        let head = text.lines().next().unwrap();
        assert!(head.contains("ISTIO"), "{text}");
        assert!(text.contains("1.23.2 (canary), 1.28.3"), "{text}");
    }

    #[test]
    fn a_single_hub_shows_no_replica_column_nor_shards() {
        let text = table(&report(vec![cluster("east", None, None)], vec![]));
        assert!(!text.contains("DIALED BY"), "{text}");
        assert!(!text.contains("SHARD"), "{text}");
    }
}
