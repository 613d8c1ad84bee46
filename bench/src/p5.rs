//! Scenario P5: meshhub side by side with the MCP-over-xDS server most
//! people would write instead — go-control-plane's snapshot cache and ADS
//! server (`bench/peers/gcp-ads`, built by `bench/peers/gcp-ads.sh`) — on
//! the same data, with the same ADS load generator (`adsload.rs`) and the
//! same oracle, one after the other on the same machine.
//!
//! meshhub runs first over a generated corpus. After each round (initial
//! state, each one-resource change, the change of every resource) the
//! orchestrator reads what meshhub served over ADS with one short-lived
//! stream and writes it to a file; the oracle checks those bytes against
//! what the hub published (`expected`). The peer then serves exactly those
//! files, round by round, with meshhub's versions, so both servers send
//! byte-identical resources and the same versions to the same consumers.
//!
//! Per server: initial sync of N streams, RSS per idle synced stream (P2
//! shape), fan-out of one change until every stream ACKed (P1 shape; from
//! the server's publish, so meshhub's debounce and the peer's snapshot
//! build are both excluded), server CPU per change (publish → all ACKed),
//! and full-state throughput when every resource changes (P3 shape).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use meshhub_proto::ads::DiscoveryRequest;
use meshhub_proto::ads::client::AggregatedDiscoveryServiceClient;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::Resource;
use prost::Message as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::digest::{Digest, resource_hash};
use crate::generate::Corpus;
use crate::proc::{Child, now_ns, rss_bytes};
use crate::report::Results;

mod galley;

const LONG: Duration = Duration::from_secs(300);

/// Sizes of P5.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Consumer streams.
    pub streams: usize,
    /// HTTP/2 connections they share.
    pub conns: usize,
    /// Resources.
    pub resources: usize,
    /// One-resource changes measured.
    pub changes: usize,
    /// Whether `all` runs P5 without `--only p5`.
    pub by_default: bool,
}

impl Sizes {
    /// The full suite's sizes.
    pub fn full() -> Self {
        Self {
            streams: 2_000,
            conns: 20,
            resources: 1_000,
            changes: 3,
            by_default: true,
        }
    }

    /// Quick sizes; the quick suite (CI) runs P5 only when asked, as the
    /// peer needs Go.
    pub fn quick() -> Self {
        Self {
            streams: 20,
            conns: 2,
            resources: 100,
            changes: 1,
            by_default: false,
        }
    }

    /// Overrides `p5.streams`, `p5.conns`, `p5.resources`, `p5.changes`.
    pub fn set(&mut self, key: &str, v: usize) -> Result<()> {
        match key {
            "p5.streams" => self.streams = v,
            "p5.conns" => self.conns = v,
            "p5.resources" => self.resources = v,
            "p5.changes" => self.changes = v,
            _ => bail!("unknown size {key:?}"),
        }
        Ok(())
    }
}

/// What one server measured.
#[derive(Debug, Default)]
struct Figures {
    sync_s: f64,
    per_stream_bytes: f64,
    ack_ms: Vec<f64>,
    cpu_per_change_s: f64,
    /// The consumers' (load generator's) CPU per change.
    load_cpu_per_change_s: f64,
    full_mib_s: f64,
    full_s: f64,
    full_cpu_s: f64,
}

/// One round's data as meshhub served it: the file the peer loads and, per
/// type URL, the version and content digest every consumer must hold.
struct Round {
    file: PathBuf,
    types: BTreeMap<String, (String, String)>,
}

/// Runs P5 (meshhub, then the go-control-plane peer if it is built).
pub async fn run(sizes: Sizes, results: &mut Results) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut corpus = Corpus::generate(&dir.path().join("corpus"), sizes.resources, 10)?;
    let kinds = KindTable::builtin();
    let mut types = BTreeMap::new();
    for c in &corpus.collections {
        let kind = kinds.by_collection(c).context("a corpus collection")?;
        types.insert(c.clone(), kind.current_type_url().to_owned());
    }
    let (hub, rounds) = meshhub(sizes, &mut corpus, &types, dir.path(), results)
        .await
        .context("meshhub")?;
    let label = format!(
        "N={}, R={}, {} conns, ADS SotW",
        sizes.streams, sizes.resources, sizes.conns
    );
    row(results, "meshhub", &label, &hub, None);
    match gcp_ads_binary() {
        Ok(bin) => {
            let gcp = peer(sizes, &bin, &types, &rounds, results)
                .await
                .context("gcp-ads")?;
            row(results, "go-control-plane", &label, &gcp, Some(&hub));
        }
        Err(e) => results.row(
            "P5 go-control-plane snapshot-cache ADS server".into(),
            format!("not run: {e:#} (build it with bench/peers/gcp-ads.sh)"),
            "",
            None,
        ),
    }
    galley::run(sizes, results).await.context("Galley 1.5")?;
    results.row(
        "P5 istiod's own config ingest".into(),
        "measured in scenario k8s (`all --only k8s`): istiod 1.28 reading R objects from kube-apiserver and from the hub".into(),
        "",
        None,
    );
    Ok(())
}

/// The peer binary: `MESHHUB_BENCH_GCP_ADS`, else what `gcp-ads.sh` builds
/// or finds in its cache.
fn gcp_ads_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("MESHHUB_BENCH_GCP_ADS") {
        return Ok(PathBuf::from(p));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/gcp-ads.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(out.status.success(), "{} failed", script.display());
    let path = String::from_utf8(out.stdout)?.trim().to_owned();
    ensure!(!path.is_empty(), "{} printed no path", script.display());
    Ok(PathBuf::from(path))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn row(results: &mut Results, name: &str, label: &str, f: &Figures, base: Option<&Figures>) {
    let mut acks = f.ack_ms.clone();
    acks.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&acks, 50.0), percentile(&acks, 99.0));
    let key = name.replace(' ', "_");
    let figs = &mut results.figures;
    figs.insert(format!("p5.{key}.ack_p50_ms"), p50);
    figs.insert(format!("p5.{key}.ack_p99_ms"), p99);
    figs.insert(format!("p5.{key}.rss_per_stream_bytes"), f.per_stream_bytes);
    figs.insert(format!("p5.{key}.cpu_per_change_s"), f.cpu_per_change_s);
    figs.insert(
        format!("p5.{key}.load_cpu_per_change_s"),
        f.load_cpu_per_change_s,
    );
    figs.insert(format!("p5.{key}.full_state_mib_s"), f.full_mib_s);
    figs.insert(format!("p5.{key}.initial_sync_s"), f.sync_s);
    let Some(hub) = base else {
        results.row(
            format!("P5 meshhub ({label}): fan-out p50/p99; RSS/stream; CPU/change (consumers'); full state; initial sync"),
            format!(
                "{p50:.1}/{p99:.1} ms; {:.1} KiB; {:.3} s ({:.3} s); {:.0} MiB/s ({:.2} s, {:.2} CPU-s); {:.1} s",
                f.per_stream_bytes / 1024.0,
                f.cpu_per_change_s,
                f.load_cpu_per_change_s,
                f.full_mib_s,
                f.full_s,
                f.full_cpu_s,
                f.sync_s
            ),
            "(baseline)",
            None,
        );
        return;
    };
    let mut hub_acks = hub.ack_ms.clone();
    hub_acks.sort_by(f64::total_cmp);
    let fan_ratio = p99 / percentile(&hub_acks, 99.0);
    let mem_ratio = hub.per_stream_bytes / f.per_stream_bytes;
    figs.insert(format!("p5.{key}.fanout_p99_ratio"), fan_ratio);
    figs.insert(format!("p5.{key}.memory_ratio"), mem_ratio);
    results.row(
        format!("P5 {name} (same data, consumers, machine): fan-out p50/p99; RSS/stream; CPU/change (consumers'); full state; initial sync"),
        format!(
            "{p50:.1}/{p99:.1} ms; {:.1} KiB; {:.3} s ({:.3} s); {:.0} MiB/s ({:.2} s, {:.2} CPU-s); {:.1} s",
            f.per_stream_bytes / 1024.0,
            f.cpu_per_change_s,
            f.load_cpu_per_change_s,
            f.full_mib_s,
            f.full_s,
            f.full_cpu_s,
            f.sync_s
        ),
        "",
        None,
    );
    results.row(
        format!("P5 meshhub vs {name}: fan-out p99 speed-up; memory per stream"),
        format!(
            "{fan_ratio:.1}× faster; {mem_ratio:.2}× the memory (CPU/change {:.1}×, full state {:.1}×)",
            f.cpu_per_change_s / hub.cpu_per_change_s,
            hub.full_mib_s / f.full_mib_s
        ),
        "≥ 5× faster; ≤ 0.2×",
        Some(fan_ratio >= 5.0 && mem_ratio <= 0.2),
    );
}

fn spawn_load(addr: &str, conns: usize, types: &BTreeMap<String, String>) -> Result<Child> {
    let urls: Vec<&str> = types.values().map(String::as_str).collect();
    Child::spawn(
        "ads-load",
        &[
            "ads-load".into(),
            "--addr".into(),
            addr.to_owned(),
            "--conns".into(),
            conns.to_string(),
            "--types".into(),
            urls.join(","),
        ],
    )
}

async fn load_cmd(load: &mut Child, cmd: Value) -> Result<Value> {
    load.send(&cmd).await?;
    let r = load.expect("report", LONG).await?;
    ensure!(
        r["complete"] == true,
        "consumers did not all sync: failures {}",
        r["failures"]
    );
    Ok(r)
}

/// The oracle: every stream holds, of every type, the round's version and
/// content digest.
fn check(report: &Value, round: &Round, results: &mut Results) -> Result<()> {
    let streams = report["streams"].as_u64().unwrap_or_default();
    for (url, (version, digest)) in &round.types {
        let want = format!("{version}|{digest}");
        let states = report["collections"][url]["states"]
            .as_object()
            .with_context(|| format!("no states of {url}"))?;
        if states.len() != 1 || states.get(&want).and_then(Value::as_u64) != Some(streams) {
            bail!("oracle: {url}: expected all {streams} streams at {want}, found {states:?}");
        }
        results.oracle_checks += streams;
    }
    Ok(())
}

/// Reads every type once over a fresh ADS stream and writes the peer's
/// input file; checks it against what the hub published (`expected`,
/// keyed by collection).
async fn dump(
    addr: &str,
    types: &BTreeMap<String, String>,
    expected: &Value,
    file: PathBuf,
) -> Result<Round> {
    let channel = crate::adsload::connect(addr.parse()?).await?;
    let mut client =
        AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(512 << 20);
    let (tx, rx) = mpsc::channel(types.len());
    for (k, url) in types.values().enumerate() {
        tx.send(DiscoveryRequest {
            node: (k == 0).then(|| crate::adsload::node(usize::MAX)),
            type_url: url.clone(),
            ..Default::default()
        })
        .await?;
    }
    let mut stream = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await?
        .into_inner();
    let mut out = serde_json::Map::new();
    let mut round = Round {
        file: file.clone(),
        types: BTreeMap::new(),
    };
    while out.len() < types.len() {
        let msg = tokio::time::timeout(Duration::from_secs(60), stream.message())
            .await
            .context("no ADS response within 60 s")??
            .context("the hub ended the stream")?;
        let mut entries = Vec::with_capacity(msg.resources.len());
        let mut hexes = Vec::with_capacity(msg.resources.len());
        for any in &msg.resources {
            entries.push(resource_hash(&Resource::decode(&any.value[..])?).1);
            hexes.push(hex::encode(&any.value));
        }
        let digest = Digest::of(&entries).key();
        let (collection, _) = types
            .iter()
            .find(|(_, u)| **u == msg.type_url)
            .with_context(|| format!("an unasked type {}", msg.type_url))?;
        let e = &expected[collection];
        ensure!(
            e["version"] == msg.version_info.as_str() && e["digest"] == digest.as_str(),
            "oracle: {}: ADS served {}|{digest}, the hub published {}|{}",
            msg.type_url,
            msg.version_info,
            e["version"],
            e["digest"]
        );
        round
            .types
            .insert(msg.type_url.clone(), (msg.version_info.clone(), digest));
        out.insert(
            msg.type_url,
            json!({"version": msg.version_info, "resources": hexes}),
        );
    }
    std::fs::write(&file, serde_json::to_vec(&json!({"types": out}))?)?;
    Ok(round)
}

async fn expected(hub: &mut Child) -> Result<Value> {
    hub.send(&json!({"cmd": "expected"})).await?;
    Ok(hub.expect("expected", LONG).await?["collections"].clone())
}

/// Opens `conns` then `n` streams; returns the sync time and RSS per
/// stream, having checked the oracle.
async fn open(
    server_pid: u32,
    load: &mut Child,
    sizes: Sizes,
    round: &Round,
    results: &mut Results,
) -> Result<(f64, f64)> {
    load_cmd(
        load,
        json!({"cmd": "open", "streams": sizes.conns, "timeout_ms": 120_000}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss1 = rss_bytes(server_pid)?;
    let t = now_ns();
    let report = load_cmd(
        load,
        json!({"cmd": "open", "streams": sizes.streams, "timeout_ms": 240_000}),
    )
    .await?;
    let sync_s = (now_ns() - t) as f64 / 1e9;
    check(&report, round, results)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss2 = rss_bytes(server_pid)?;
    let per_stream = (rss2 as f64 - rss1 as f64) / (sizes.streams - sizes.conns).max(1) as f64;
    Ok((sync_s, per_stream))
}

/// The versions a round moved to, against the previous round.
fn moved(prev: &Round, next: &Round) -> BTreeMap<String, String> {
    next.types
        .iter()
        .filter(|(u, (v, _))| prev.types.get(*u).is_none_or(|(pv, _)| pv != v))
        .map(|(u, (v, _))| (u.clone(), v.clone()))
        .collect()
}

/// Waits for every stream's ACK of each moved type (`acks` of the server's
/// own ledger) and returns the ACK delays from `publish_ns`.
async fn acks(
    server: &mut Child,
    moved: &BTreeMap<String, String>,
    streams: usize,
    publish_ns: u64,
    meshhub: bool,
) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for (url, version) in moved {
        // meshhub's ledger keys an ADS stream's state by the type URL too.
        let cmd = if meshhub {
            json!({"cmd": "acks", "collection": url, "version": version, "peers": streams, "timeout_ms": 60_000})
        } else {
            json!({"cmd": "acks", "type": url, "version": version, "peers": streams, "timeout_ms": 60_000})
        };
        server.send(&cmd).await?;
        let a = server.expect("acks", LONG).await?;
        ensure!(
            a["complete"] == true,
            "not every stream ACKed {url} {version} ({} did)",
            a["at_ns"].as_array().map_or(0, Vec::len)
        );
        for t in a["at_ns"].as_array().into_iter().flatten() {
            out.push((t.as_u64().unwrap_or_default() as f64 - publish_ns as f64) / 1e6);
        }
    }
    Ok(out)
}

/// Full-state throughput from a report: bytes over publish → last receipt.
fn throughput(report: &Value, publish_ns: u64) -> (f64, f64) {
    let last = report["collections"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(|c| c["last_recv_ns"].as_u64())
        .max()
        .unwrap_or(publish_ns);
    let secs = (last.saturating_sub(publish_ns)) as f64 / 1e9;
    let bytes = report["bytes"].as_u64().unwrap_or_default() as f64;
    (bytes / (1024.0 * 1024.0) / secs.max(1e-9), secs)
}

/// meshhub's run; returns its figures and the rounds it served.
async fn meshhub(
    sizes: Sizes,
    corpus: &mut Corpus,
    types: &BTreeMap<String, String>,
    dir: &Path,
    results: &mut Results,
) -> Result<(Figures, Vec<Round>)> {
    let mut hub = Child::spawn(
        "hub",
        &[
            "server".into(),
            "--config".into(),
            corpus.config().display().to_string(),
        ],
    )?;
    let listening = hub.expect("listening", Duration::from_secs(60)).await?;
    let addr = listening["grpc"].as_str().context("grpc")?.to_owned();
    hub.expect("ready", LONG).await?;
    let pid = hub.pid()?;
    let e = expected(&mut hub).await?;
    let mut rounds = vec![dump(&addr, types, &e, dir.join("round-0.json")).await?];
    let mut f = Figures::default();
    let mut load = spawn_load(&addr, sizes.conns, types)?;
    (f.sync_s, f.per_stream_bytes) = open(pid, &mut load, sizes, &rounds[0], results).await?;

    let (mut cpu, mut load_cpu) = (0.0, 0.0);
    for k in 0..sizes.changes {
        let idx = (k * 7919 + 13) % sizes.resources;
        // CPU from the change on (the publish included, as for the peer).
        let (cpu0, load0) = (hub.cpu(), load.cpu());
        corpus.change_one(idx)?;
        let published = hub.expect("published", Duration::from_secs(30)).await?;
        let at = published["at_ns"].as_u64().context("at_ns")?;
        let collection = published["collection"].as_str().context("collection")?;
        let version = published["version"].as_str().context("version")?;
        let url = types.get(collection).context("a known collection")?;
        let want = BTreeMap::from([(url.clone(), version.to_owned())]);
        load_cmd(
            &mut load,
            json!({"cmd": "wait", "versions": want, "timeout_ms": 60_000}),
        )
        .await?;
        f.ack_ms
            .extend(acks(&mut hub, &want, sizes.streams, at, true).await?);
        cpu += hub.cpu() - cpu0;
        load_cpu += load.cpu() - load0;
        let e = expected(&mut hub).await?;
        let round = dump(&addr, types, &e, dir.join(format!("round-{}.json", k + 1))).await?;
        ensure!(
            moved(rounds.last().context("a round")?, &round) == want,
            "one change moved other types too"
        );
        rounds.push(round);
    }
    f.cpu_per_change_s = cpu / sizes.changes.max(1) as f64;
    f.load_cpu_per_change_s = load_cpu / sizes.changes.max(1) as f64;

    // Every resource changes: one publish per collection.
    load.send(&json!({"cmd": "reset_bytes"})).await?;
    load.expect("reset", LONG).await?;
    let cpu0 = hub.cpu();
    corpus.change_all()?;
    let mut first: Option<u64> = None;
    let mut want = BTreeMap::new();
    while want.len() < types.len() {
        let p = hub.expect("published", Duration::from_secs(60)).await?;
        let at = p["at_ns"].as_u64().context("at_ns")?;
        first = Some(first.map_or(at, |f| f.min(at)));
        let url = types
            .get(p["collection"].as_str().unwrap_or_default())
            .context("a known collection")?;
        want.insert(
            url.clone(),
            p["version"].as_str().unwrap_or_default().to_owned(),
        );
    }
    let report = load_cmd(
        &mut load,
        json!({"cmd": "wait", "versions": want, "timeout_ms": 120_000}),
    )
    .await?;
    f.full_cpu_s = hub.cpu() - cpu0;
    (f.full_mib_s, f.full_s) = throughput(&report, first.unwrap_or_default());
    let e = expected(&mut hub).await?;
    let round = dump(&addr, types, &e, dir.join("round-all.json")).await?;
    check(&report, &round, results)?;
    rounds.push(round);
    load.finish().await;
    hub.finish().await;
    Ok((f, rounds))
}

/// The go-control-plane peer's run over meshhub's rounds.
async fn peer(
    sizes: Sizes,
    bin: &Path,
    types: &BTreeMap<String, String>,
    rounds: &[Round],
    results: &mut Results,
) -> Result<Figures> {
    let mut server = Child::spawn_program("gcp-ads", bin, &[])?;
    let listening = server.expect("listening", Duration::from_secs(60)).await?;
    let addr = listening["grpc"].as_str().context("grpc")?.to_owned();
    let pid = server.pid()?;
    let publish = async |server: &mut Child, round: &Round| -> Result<u64> {
        server
            .send(&json!({"cmd": "load", "file": round.file}))
            .await?;
        let p = server.expect("published", LONG).await?;
        p["at_ns"].as_u64().context("at_ns")
    };
    publish(&mut server, &rounds[0]).await?;
    let mut f = Figures::default();
    let mut load = spawn_load(&addr, sizes.conns, types)?;
    (f.sync_s, f.per_stream_bytes) = open(pid, &mut load, sizes, &rounds[0], results).await?;

    let (last, changes) = rounds.split_last().context("no rounds")?;
    let (mut cpu, mut load_cpu) = (0.0, 0.0);
    for pair in changes.windows(2) {
        let want = moved(&pair[0], &pair[1]);
        // From before the load: `SetSnapshot` answers the open watches
        // before the peer reports the publish.
        let (cpu0, load0) = (server.cpu(), load.cpu());
        let at = publish(&mut server, &pair[1]).await?;
        let report = load_cmd(
            &mut load,
            json!({"cmd": "wait", "versions": want, "timeout_ms": 60_000}),
        )
        .await?;
        f.ack_ms
            .extend(acks(&mut server, &want, sizes.streams, at, false).await?);
        cpu += server.cpu() - cpu0;
        load_cpu += load.cpu() - load0;
        check(&report, &pair[1], results)?;
    }
    f.cpu_per_change_s = cpu / (changes.len() - 1).max(1) as f64;
    f.load_cpu_per_change_s = load_cpu / (changes.len() - 1).max(1) as f64;

    load.send(&json!({"cmd": "reset_bytes"})).await?;
    load.expect("reset", LONG).await?;
    let want = moved(changes.last().context("a round")?, last);
    let cpu0 = server.cpu();
    let at = publish(&mut server, last).await?;
    let report = load_cmd(
        &mut load,
        json!({"cmd": "wait", "versions": want, "timeout_ms": 120_000}),
    )
    .await?;
    f.full_cpu_s = server.cpu() - cpu0;
    (f.full_mib_s, f.full_s) = throughput(&report, at);
    check(&report, last, results)?;
    load.finish().await;
    server.finish().await;
    Ok(f)
}
