//! P5 over classic MCP: meshhub and Istio 1.5's Galley serving the same
//! files to the same MCP load generator (`load.rs`, full state), one after
//! the other.
//!
//! Galley only knows 1.5-era apiVersions, so it reads a copy of the corpus
//! with `networking.istio.io/v1` rewritten to `v1alpha3`; every change is
//! written to both directories. Galley needs a reachable Kubernetes API even
//! for files: a real kube-apiserver of the e2e harness. Its new-stream and
//! per-stream request rate limits (`SOURCE_SERVER_STREAM_FREQ`/`_BURST_SIZE`,
//! `MCP_SOURCE_REQ_FREQ`/`_BURST_SIZE`: 100 new streams, then one per
//! second) and its 1,024 streams per connection are lifted, as meshhub's
//! limits are, so both measure serving.
//!
//! Galley has no ledger to ask, so the fan-out figure here is the
//! consumers' clock: from the file write to the last stream holding the new
//! state, including each server's debounce — for meshhub too. Galley's
//! bytes differ from meshhub's (its own versions, names, encoding), so its
//! oracle is weaker: every stream holds the same state of every collection,
//! with as many resources as meshhub publishes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::{PortAttempts, Proc};
use meshhub_testkit::ports::free_port;
use serde_json::{Value, json};

use super::{Sizes, percentile};
use crate::generate::Corpus;
use crate::proc::{Child, cpu_secs, now_ns, rss_bytes};
use crate::report::Results;

const LONG: Duration = Duration::from_secs(300);

/// Galley 1.5: `MESHHUB_ISTIO15_BIN_DIR`, else the peer cache.
fn galley_binary() -> Result<PathBuf> {
    let dir = std::env::var_os("MESHHUB_ISTIO15_BIN_DIR").map_or_else(
        || {
            let cache = std::env::var_os("MESHHUB_CACHE").map_or_else(
                || {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache/meshhub")
                },
                PathBuf::from,
            );
            cache.join("istio-1.5.0/bin")
        },
        PathBuf::from,
    );
    let bin = dir.join("galley");
    ensure!(
        bin.is_file(),
        "no galley in {} (build it with e2e/peers/istio.sh istio15)",
        dir.display()
    );
    Ok(bin)
}

/// What one server measured.
#[derive(Default)]
struct Figures {
    sync_s: f64,
    per_stream_bytes: f64,
    recv_ms: Vec<f64>,
    cpu_per_change_s: f64,
    full_s: f64,
    full_mib_s: f64,
}

/// A server under test: its MCP address and process id.
struct Target {
    addr: String,
    pid: u32,
}

/// Runs the classic-MCP half of P5.
pub async fn run(sizes: Sizes, results: &mut Results) -> Result<()> {
    let label = format!(
        "N={}, R={}, {} conns, classic MCP full state",
        sizes.streams, sizes.resources, sizes.conns
    );
    let bin = match galley_binary() {
        Ok(b) => b,
        Err(e) => {
            results.row("P5 Galley 1.5".into(), format!("not run: {e:#}"), "", None);
            return Ok(());
        }
    };
    let dir = tempfile::tempdir()?;

    // meshhub first.
    let mut corpus = Corpus::generate(&dir.path().join("meshhub"), sizes.resources, 10)?;
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
    hub.send(&json!({"cmd": "expected"})).await?;
    let expected = hub.expect("expected", LONG).await?["collections"].clone();
    let target = Target {
        addr,
        pid: hub.pid()?,
    };
    let hub_figs = measure(&target, sizes, &mut corpus, None, &expected, results).await?;
    hub.finish().await;

    // Galley over a copy of the same corpus, with 1.5-era apiVersions.
    let mut corpus = Corpus::generate(&dir.path().join("galley"), sizes.resources, 10)?;
    let files = dir.path().join("galley-files");
    std::fs::create_dir_all(&files)?;
    mirror_all(&corpus, &files)?;
    let planes = ControlPlanes::start_bare(&["galley"]).await;
    let kubeconfig = planes.cluster("galley").kubeconfig.clone();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs)?;
    let galley = start_galley(&bin, &files, &kubeconfig, dir.path(), &logs).await?;
    let target = Target {
        addr: galley.1.clone(),
        pid: galley.0.pid(),
    };
    let galley_figs = match measure(
        &target,
        sizes,
        &mut corpus,
        Some(&files),
        &expected,
        results,
    )
    .await
    {
        Ok(f) => f,
        Err(e) => bail!(
            "{e:#}\ngalley's log:\n{}",
            meshhub_e2e::istio::tail(&galley.0.stderr(), 20)
        ),
    };
    drop(galley);
    drop(planes);

    let sorted = |f: &Figures| {
        let mut v = f.recv_ms.clone();
        v.sort_by(f64::total_cmp);
        v
    };
    let (h, g) = (sorted(&hub_figs), sorted(&galley_figs));
    let fmt = |f: &Figures, s: &[f64]| {
        format!(
            "{:.0}/{:.0} ms; {:.1} KiB; {:.3} s; {:.1} s ({:.0} MiB/s); {:.1} s",
            percentile(s, 50.0),
            percentile(s, 99.0),
            f.per_stream_bytes / 1024.0,
            f.cpu_per_change_s,
            f.full_s,
            f.full_mib_s,
            f.sync_s
        )
    };
    let what = "write → all received p50/p99 (incl. debounce); RSS/stream; CPU/change; all changed → all received; initial sync";
    results.row(
        format!("P5 meshhub ({label}): {what}"),
        fmt(&hub_figs, &h),
        "(baseline)",
        None,
    );
    results.row(
        format!("P5 Galley 1.5 (same files, consumers, machine): {what}"),
        fmt(&galley_figs, &g),
        "",
        None,
    );
    let fan = percentile(&g, 99.0) / percentile(&h, 99.0);
    let mem = hub_figs.per_stream_bytes / galley_figs.per_stream_bytes;
    let f = &mut results.figures;
    f.insert("p5.galley.recv_p99_ms".into(), percentile(&g, 99.0));
    f.insert(
        "p5.galley.rss_per_stream_bytes".into(),
        galley_figs.per_stream_bytes,
    );
    f.insert("p5.galley.initial_sync_s".into(), galley_figs.sync_s);
    f.insert("p5.meshhub_mcp.recv_p99_ms".into(), percentile(&h, 99.0));
    f.insert(
        "p5.meshhub_mcp.rss_per_stream_bytes".into(),
        hub_figs.per_stream_bytes,
    );
    f.insert("p5.meshhub_mcp.initial_sync_s".into(), hub_figs.sync_s);
    results.row(
        "P5 meshhub vs Galley 1.5: write → all received p99 speed-up; memory per stream".into(),
        format!(
            "{fan:.1}× faster; {mem:.2}× the memory (initial sync {:.1}×, CPU/change {:.1}×)",
            galley_figs.sync_s / hub_figs.sync_s,
            galley_figs.cpu_per_change_s / hub_figs.cpu_per_change_s
        ),
        "≥ 5× faster; ≤ 0.2×",
        Some(fan >= 5.0 && mem <= 0.2),
    );
    Ok(())
}

/// Starts Galley on `files` with its rate limits lifted; waits until it
/// listens. Returns the process and its MCP address.
async fn start_galley(
    bin: &Path,
    files: &Path,
    kubeconfig: &Path,
    dir: &Path,
    logs: &Path,
) -> Result<(Proc, String)> {
    let mesh = dir.join("mesh.yaml");
    let access = dir.join("access.yaml");
    std::fs::write(&mesh, "{}\n")?;
    std::fs::write(&access, "allowed: []\n")?;
    let p = |p: &Path| p.display().to_string();
    let env = [
        ("SOURCE_SERVER_STREAM_FREQ", "1us"),
        ("SOURCE_SERVER_STREAM_BURST_SIZE", "1000000"),
        ("MCP_SOURCE_REQ_FREQ", "1us"),
        ("MCP_SOURCE_REQ_BURST_SIZE", "1000000"),
    ];
    let mut attempts = PortAttempts::new("galley");
    'start: loop {
        let port = free_port();
        let args: Vec<String> = vec![
            "server".into(),
            "--configPath".into(),
            p(files),
            "--kubeconfig".into(),
            p(kubeconfig),
            "--meshConfigFile".into(),
            p(&mesh),
            "--insecure".into(),
            "--enable-validation=false".into(),
            "--enable-reconcileWebhookConfiguration=false".into(),
            "--accessListFile".into(),
            p(&access),
            "--livenessProbePath".into(),
            p(&dir.join("live")),
            "--readinessProbePath".into(),
            p(&dir.join("ready")),
            "--server-address".into(),
            format!("tcp://127.0.0.1:{port}"),
            "--server-maxConcurrentStreams".into(),
            "1000000".into(),
            "--server-maxReceivedMessageSize".into(),
            "536870912".into(),
            // Without it Galley reads its files once (and on SIGUSR1).
            "--watchConfigFiles=true".into(),
            "--disableResourceReadyCheck".into(),
            "--monitoringPort".into(),
            free_port().to_string(),
            "--ctrlz_port".into(),
            free_port().to_string(),
            "--ctrlz_address".into(),
            "127.0.0.1".into(),
        ];
        let mut proc = Proc::spawn_program("galley", bin, &args, &env, logs);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        // Its own socket: whoever else holds the port would accept too.
        while !proc.listens_on(port) {
            if let Some(status) = proc.exited() {
                attempts
                    .again(&status, &proc.output())
                    .map_err(anyhow::Error::msg)?;
                continue 'start;
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "galley does not listen on {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        return Ok((proc, format!("127.0.0.1:{port}")));
    }
}

/// Copies one corpus file to Galley's directory with 1.5-era apiVersions
/// (write aside, rename, as the corpus does).
fn mirror(src: &Path, files: &Path) -> Result<()> {
    let text = std::fs::read_to_string(src)?.replace(
        "apiVersion: networking.istio.io/v1\n",
        "apiVersion: networking.istio.io/v1alpha3\n",
    );
    let name = src.file_name().context("a file name")?;
    let tmp = files.join(name).with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, files.join(name))?;
    Ok(())
}

fn mirror_all(corpus: &Corpus, files: &Path) -> Result<()> {
    for e in std::fs::read_dir(corpus.dir.join("objects"))? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "yaml") {
            mirror(&path, files)?;
        }
    }
    Ok(())
}

fn spawn_load(addr: &str, conns: usize, corpus: &Corpus) -> Result<Child> {
    Child::spawn(
        "load",
        &[
            "load".into(),
            "--addr".into(),
            addr.to_owned(),
            "--conns".into(),
            conns.to_string(),
            "--collections".into(),
            corpus.collections.join(","),
        ],
    )
}

async fn report(load: &mut Child, cmd: Value) -> Result<Value> {
    load.send(&cmd).await?;
    load.expect("report", LONG).await
}

/// Per collection, the one state every stream holds (`None` if they do
/// not all agree).
fn states(r: &Value) -> BTreeMap<String, Option<String>> {
    let streams = r["streams"].as_u64().unwrap_or_default();
    r["collections"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(c, v)| {
            let s = v["states"].as_object().and_then(|m| {
                (m.len() == 1)
                    .then(|| m.iter().next())
                    .flatten()
                    .filter(|(_, n)| n.as_u64() == Some(streams))
                    .map(|(k, _)| k.clone())
            });
            (c.clone(), s)
        })
        .collect()
}

/// The oracle: every stream agrees on every collection, with as many
/// resources as meshhub published (and, for meshhub, its exact digest).
fn check(r: &Value, expected: &Value, exact: bool, results: &mut Results) -> Result<()> {
    let streams = r["streams"].as_u64().unwrap_or_default();
    for (c, s) in states(r) {
        let s = s.with_context(|| {
            format!(
                "oracle: streams disagree on {c}: {}",
                r["collections"][&c]["states"]
            )
        })?;
        let (version, digest) = s.split_once('|').context("a state")?;
        let count = digest.split(':').next().unwrap_or_default();
        let e = &expected[&c];
        ensure!(
            count.parse::<u64>().ok() == e["count"].as_u64(),
            "oracle: {c}: streams hold {count} resources, meshhub publishes {}",
            e["count"]
        );
        if exact {
            ensure!(
                e["version"] == version && e["digest"] == digest,
                "oracle: {c}: streams hold {s}, the hub published {}|{}",
                e["version"],
                e["digest"]
            );
        }
        results.oracle_checks += streams;
    }
    Ok(())
}

/// Polls until every stream holds a state of each of `collections` other
/// than `before`; returns the report.
async fn until_moved(
    load: &mut Child,
    before: &BTreeMap<String, Option<String>>,
    collections: &[String],
) -> Result<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let r = report(load, json!({"cmd": "wait", "times": true, "timeout_ms": 1})).await?;
        let now = states(&r);
        if collections
            .iter()
            .all(|c| now.get(c).is_some_and(|s| s.is_some() && s != &before[c]))
        {
            return Ok(r);
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the change did not reach every stream: {}",
            r["collections"]
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn measure(
    target: &Target,
    sizes: Sizes,
    corpus: &mut Corpus,
    galley_files: Option<&Path>,
    expected: &Value,
    results: &mut Results,
) -> Result<Figures> {
    let exact = galley_files.is_none();
    let mut f = Figures::default();
    let mut load = spawn_load(&target.addr, sizes.conns, corpus)?;
    let r = report(
        &mut load,
        json!({"cmd": "open", "streams": sizes.conns, "timeout_ms": 120_000}),
    )
    .await?;
    ensure!(
        r["complete"] == true,
        "streams did not sync: {}",
        r["failures"]
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss1 = rss_bytes(target.pid)?;
    let t = now_ns();
    let r = report(
        &mut load,
        json!({"cmd": "open", "streams": sizes.streams, "timeout_ms": 240_000}),
    )
    .await?;
    ensure!(
        r["complete"] == true,
        "{} streams did not sync: {}",
        sizes.streams,
        r["failures"]
    );
    f.sync_s = (now_ns() - t) as f64 / 1e9;
    check(&r, expected, exact, results)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    f.per_stream_bytes =
        (rss_bytes(target.pid)? as f64 - rss1 as f64) / (sizes.streams - sizes.conns).max(1) as f64;

    let mut before = states(&r);
    let mut cpu = 0.0;
    for k in 0..sizes.changes {
        let idx = (k * 7919 + 13) % sizes.resources;
        let collection = corpus.collection_of(idx);
        let cpu0 = cpu_secs(target.pid)?;
        let t_write = now_ns();
        corpus.change_one(idx)?;
        if let Some(files) = galley_files {
            mirror(
                &corpus
                    .dir
                    .join("objects")
                    .join(format!("objects-{:05}.yaml", idx / corpus.per_file)),
                files,
            )?;
        }
        let r = until_moved(&mut load, &before, std::slice::from_ref(&collection)).await?;
        cpu += cpu_secs(target.pid)? - cpu0;
        for t in r["collections"][&collection]["recv_ns"]
            .as_array()
            .into_iter()
            .flatten()
        {
            f.recv_ms
                .push((t.as_u64().unwrap_or_default() as f64 - t_write as f64) / 1e6);
        }
        before = states(&r);
    }
    f.cpu_per_change_s = cpu / sizes.changes.max(1) as f64;

    load.send(&json!({"cmd": "reset_bytes"})).await?;
    load.expect("reset", LONG).await?;
    let t_write = now_ns();
    corpus.change_all()?;
    if let Some(files) = galley_files {
        mirror_all(corpus, files)?;
    }
    let r = until_moved(&mut load, &before, &corpus.collections).await?;
    let last = r["collections"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(|c| c["last_recv_ns"].as_u64())
        .max()
        .unwrap_or(t_write);
    f.full_s = last.saturating_sub(t_write) as f64 / 1e9;
    f.full_mib_s =
        r["bytes"].as_u64().unwrap_or_default() as f64 / (1024.0 * 1024.0) / f.full_s.max(1e-9);
    load.finish().await;
    Ok(f)
}
