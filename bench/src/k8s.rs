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
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode::parse_yaml;
use serde_json::json;

use crate::generate::Corpus;
use crate::proc::{Child, now_ns, rss_bytes};
use crate::suite::Results;

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
    let encoded = ready["encoded_bytes"].as_f64().unwrap_or(f64::NAN);
    load.finish().await;
    hub.finish().await;
    drop(planes);

    let f = &mut results.figures;
    f.insert("k8s.create_s".into(), create_s);
    f.insert("k8s.ready_s".into(), ready_s);
    f.insert("k8s.first_snapshot_s".into(), first_s);
    f.insert("k8s.hub_rss_bytes".into(), rss);
    f.insert("k8s.encoded_bytes".into(), encoded);
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
            "{first_s:.2} s (hub ready {ready_s:.2} s); hub RSS {:.0} MiB = {:.1}× the encoded {:.1} MiB",
            rss / 1048576.0,
            rss / encoded,
            encoded / 1048576.0
        ),
        "(reported)",
        None,
    );
    Ok(())
}
