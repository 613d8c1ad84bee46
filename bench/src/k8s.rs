//! Scenario k8s (issue 12, item 6): R Istio objects in a real
//! kube-apiserver (the e2e harness's control plane: etcd on tmpfs, Istio's
//! CRDs) → the hub's Kubernetes source lists them → first full snapshot at
//! an MCP consumer. Runs only with `--only k8s` (it needs the cached
//! kube-apiserver and takes minutes to create the objects).
//!
//! The objects are the bench corpus (`generate.rs`), created with many
//! concurrent `POST`s through a kube client; creation is timed separately.
//! Then a hub process starts with one `kubernetes` source and a consumer
//! subscribes every collection: the figure is hub start → that consumer
//! holding all R objects, checked by the oracle against what the hub
//! published.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use meshhub_e2e::istio::{ConfigSource, Istiod};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode::parse_yaml;
use serde_json::json;

use crate::generate::Corpus;
use crate::proc::{Child, cpu_secs, now_ns, rss_bytes};
use crate::report::Results;

/// Concurrent creates.
const CONCURRENCY: usize = 64;
const LONG: Duration = Duration::from_secs(900);

/// Runs the scenario with `resources` objects.
pub async fn run(resources: usize, results: &mut Results) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let corpus = Corpus::generate(&dir.path().join("corpus"), resources, 1000)?;
    let mut objects = Vec::with_capacity(resources);
    for e in std::fs::read_dir(corpus.dir.join("objects"))? {
        let path = e?.path();
        for o in parse_yaml(&std::fs::read_to_string(&path)?) {
            objects.push(o.with_context(|| format!("{}", path.display()))?);
        }
    }
    ensure!(
        objects.len() == resources,
        "the corpus holds {} objects",
        objects.len()
    );

    let planes = ControlPlanes::start(&["k8s"]).await;
    let client = planes.client("k8s").await;
    let mut namespaces: Vec<String> = objects
        .iter()
        .filter_map(|o| o.metadata.namespace.clone())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    for ns in &namespaces {
        planes.namespace("k8s", ns).await;
    }
    let kinds = KindTable::builtin();
    let mut apis: HashMap<(String, String), Api<DynamicObject>> = HashMap::new();
    let mut work = Vec::with_capacity(resources);
    for o in &objects {
        let kind = kinds
            .by_api_version(&o.api_version, &o.kind)
            .context("a corpus kind")?;
        let ns = o.metadata.namespace.clone().unwrap_or_default();
        let api = apis
            .entry((ns.clone(), o.kind.clone()))
            .or_insert_with(|| {
                let gvk = GroupVersionKind::gvk(kind.group(), o.version(), &o.kind);
                let ar = ApiResource::from_gvk_with_plural(&gvk, kind.plural());
                Api::namespaced_with(client.clone(), &ns, &ar)
            })
            .clone();
        let obj: DynamicObject = serde_json::from_value(serde_json::to_value(o)?)?;
        work.push((api, obj));
    }
    drop(objects);
    let started = Instant::now();
    futures::stream::iter(work)
        .map(|(api, obj)| async move { api.create(&PostParams::default(), &obj).await })
        .buffer_unordered(CONCURRENCY)
        .try_for_each(|_| async { Ok(()) })
        .await
        .context("creating the objects")?;
    let create_s = started.elapsed().as_secs_f64();
    eprintln!("meshhub-bench: k8s: {resources} objects created in {create_s:.1} s");

    let config = dir.path().join("k8s.yaml");
    std::fs::write(
        &config,
        format!(
            "sources:\n  - name: k8s\n    kubernetes:\n      kubeconfig: {}\n",
            planes.cluster("k8s").kubeconfig.display()
        ),
    )?;
    let mut hub = Child::spawn(
        "hub",
        &[
            "server".into(),
            "--config".into(),
            config.display().to_string(),
        ],
    )?;
    let listening = hub.expect("listening", Duration::from_secs(60)).await?;
    let start_ns = listening["start_ns"].as_u64().context("start_ns")?;
    let grpc = listening["grpc"].as_str().context("grpc")?.to_owned();
    let mut load = Child::spawn(
        "load",
        &[
            "load".into(),
            "--addr".into(),
            grpc,
            "--conns".into(),
            "1".into(),
            "--collections".into(),
            corpus.collections.join(","),
        ],
    )?;
    load.send(&json!({"cmd": "open", "streams": 1, "timeout_ms": LONG.as_millis() as u64}))
        .await?;
    let ready = hub.expect("ready", LONG).await?;
    let report = load.expect("report", LONG).await?;
    ensure!(report["complete"] == true, "the consumer did not sync");
    let objects = ready["objects"].as_u64().unwrap_or_default() as usize;
    ensure!(
        objects == resources && ready["rejected"] == 0,
        "the hub serves {objects} objects ({} rejected), expected {resources}",
        ready["rejected"]
    );
    hub.send(&json!({"cmd": "expected"})).await?;
    let expected = hub.expect("expected", LONG).await?["collections"].clone();
    // The one consumer holds exactly what the hub published.
    for c in &corpus.collections {
        let e = &expected[c];
        let want = format!(
            "{}|{}",
            e["version"].as_str().unwrap_or_default(),
            e["digest"].as_str().unwrap_or_default()
        );
        ensure!(
            report["collections"][c]["states"][&want] == 1,
            "oracle: {c}: the consumer holds {}, the hub published {want}",
            report["collections"][c]["states"]
        );
        results.oracle_checks += 1;
    }
    let first_s = report["collections"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(|c| c["last_recv_ns"].as_u64())
        .max()
        .unwrap_or_else(now_ns)
        .saturating_sub(start_ns) as f64
        / 1e9;
    let ready_s = (ready["ready_ns"]
        .as_u64()
        .unwrap_or_default()
        .saturating_sub(start_ns)) as f64
        / 1e9;
    let rss = rss_bytes(hub.pid()?)? as f64;
    let hub_cpu = hub.cpu();
    let encoded = ready["encoded_bytes"].as_f64().unwrap_or(f64::NAN);
    load.finish().await;

    // Item 5(c): istiod ingesting the same objects, from the API server
    // itself (what users run without meshhub) and from this hub over
    // MCP-over-xDS; one at a time, the hub idle.
    planes.namespace("k8s", "istio-system").await;
    let grpc: std::net::SocketAddr = listening["grpc"].as_str().context("grpc")?.parse()?;
    let kubeconfig = planes.cluster("k8s").kubeconfig.clone();
    let kinds = corpus_kinds(&corpus)?;
    let logs = dir.path().to_owned();
    let istiod = tokio::task::spawn_blocking(move || -> Result<[IstiodIngest; 2]> {
        let bin = meshhub_e2e::istio::istiod_bin();
        let direct = istiod_ingest(
            "istiod-k8s",
            bin,
            &kubeconfig,
            ConfigSource::Kubernetes,
            &logs,
            &kinds,
            resources,
        )?;
        let via_hub = istiod_ingest(
            "istiod-hub",
            bin,
            &kubeconfig,
            ConfigSource::Xds(grpc),
            &logs,
            &kinds,
            resources,
        )?;
        Ok([direct, via_hub])
    })
    .await??;
    hub.finish().await;
    drop(planes);

    let f = &mut results.figures;
    f.insert("k8s.create_s".into(), create_s);
    f.insert("k8s.ready_s".into(), ready_s);
    f.insert("k8s.first_snapshot_s".into(), first_s);
    f.insert("k8s.hub_rss_bytes".into(), rss);
    f.insert("k8s.encoded_bytes".into(), encoded);
    f.insert("k8s.hub_cpu_s".into(), hub_cpu);
    results.row(
        format!(
            "k8s: create {resources} objects in kube-apiserver ({CONCURRENCY} concurrent POSTs)"
        ),
        format!("{create_s:.1} s ({:.0}/s)", resources as f64 / create_s),
        "(setup)",
        None,
    );
    results.row(
        format!("k8s: hub start → first full snapshot at a consumer (R={resources} from kube-apiserver)"),
        format!(
            "{first_s:.2} s (hub ready {ready_s:.2} s, {hub_cpu:.1} CPU-s); hub RSS {:.0} MiB = {:.1}× the encoded {:.1} MiB",
            rss / 1048576.0,
            rss / encoded,
            encoded / 1048576.0
        ),
        "(reported)",
        None,
    );
    let [direct, via_hub] = istiod;
    for (key, what, i) in [
        ("k8s.istiod_direct", "its own Kubernetes watches", &direct),
        ("k8s.istiod_via_hub", "meshhub over MCP-over-xDS", &via_hub),
    ] {
        f_insert(results, key, i);
        results.oracle_checks += 1;
        results.row(
            format!("P5(c) istiod 1.28 start → ready, R={resources} from {what}"),
            format!(
                "{:.2} s ({:.1} CPU-s); istiod RSS {:.0} MiB",
                i.ready_s,
                i.cpu_s,
                i.rss / 1048576.0
            ),
            "(reported)",
            None,
        );
    }
    results.row(
        format!("P5(c) ingest of R={resources} from kube-apiserver: istiod / meshhub"),
        format!(
            "time {:.1}× ({:.2} / {first_s:.2} s); CPU {:.1}× ({:.1} / {hub_cpu:.1} s); RSS {:.1}× ({:.0} / {:.0} MiB)",
            direct.ready_s / first_s,
            direct.ready_s,
            direct.cpu_s / hub_cpu,
            direct.cpu_s,
            direct.rss / rss,
            direct.rss / 1048576.0,
            rss / 1048576.0
        ),
        "(reported)",
        None,
    );
    results.row(
        format!("P5(c) istiod ready with R={resources}: from meshhub vs from kube-apiserver"),
        format!(
            "{:.1}× sooner ({:.2} vs {:.2} s)",
            direct.ready_s / via_hub.ready_s,
            via_hub.ready_s,
            direct.ready_s
        ),
        "(reported)",
        None,
    );
    Ok(())
}

fn f_insert(results: &mut Results, key: &str, i: &IstiodIngest) {
    let f = &mut results.figures;
    f.insert(format!("{key}.ready_s"), i.ready_s);
    f.insert(format!("{key}.cpu_s"), i.cpu_s);
    f.insert(format!("{key}.rss_bytes"), i.rss);
}

/// What one istiod's ingest cost.
struct IstiodIngest {
    /// Process start → `/ready` (every config in its store and its push
    /// context built from them).
    ready_s: f64,
    /// CPU seconds to ready.
    cpu_s: f64,
    /// RSS at ready.
    rss: f64,
}

/// Starts istiod on `source`, times it to `/ready`, checks that it holds
/// the `resources` objects of `kinds` (`/debug/configz`), and stops it.
fn istiod_ingest(
    name: &str,
    bin: &Path,
    kubeconfig: &Path,
    source: ConfigSource,
    logs: &Path,
    kinds: &[(String, String)],
    resources: usize,
) -> Result<IstiodIngest> {
    let started = Instant::now();
    let mut istiod = Istiod::spawn(name, bin, kubeconfig, source, logs, logs);
    istiod.wait_ready(LONG);
    let ready_s = started.elapsed().as_secs_f64();
    let pid = istiod.proc.pid();
    let (cpu_s, rss) = (cpu_secs(pid)?, rss_bytes(pid)? as f64);
    let held = istiod
        .count_configs(kinds, Duration::from_secs(120))
        .map_err(anyhow::Error::msg)?;
    ensure!(
        held == resources,
        "{name} holds {held} objects of the corpus kinds, expected {resources}"
    );
    eprintln!("meshhub-bench: k8s: {name} ready in {ready_s:.2} s, holds {held} objects");
    Ok(IstiodIngest {
        ready_s,
        cpu_s,
        rss,
    })
}

/// The (API group, kind) of the corpus's objects.
fn corpus_kinds(corpus: &Corpus) -> Result<Vec<(String, String)>> {
    let kinds = KindTable::builtin();
    corpus
        .collections
        .iter()
        .map(|c| {
            kinds
                .by_collection(c)
                .map(|k| (k.group().to_owned(), k.kind().to_owned()))
                .with_context(|| format!("no kind for collection {c}"))
        })
        .collect()
}
