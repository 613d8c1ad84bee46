//! P3: full-state fan-out against raw loopback TCP.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use serde_json::json;

use crate::generate::Corpus;
use crate::proc::Child;

use super::harness::*;
use crate::params::Params;
use crate::report::Results;

pub(super) async fn p3(params: &Params, results: &mut Results) -> Result<()> {
    let (n, conns, r) = params.p3;
    let dir = tempfile::tempdir()?;
    let mut corpus = Corpus::generate(dir.path(), r, 10)?;
    let mut server = Server::start(&corpus).await?;
    server.ready(r).await?;
    let mut load = spawn_envelope_load(&server.grpc, conns, &corpus)?;
    let report = load_cmd(
        &mut load,
        json!({"cmd": "open", "streams": n, "timeout_ms": 240_000}),
    )
    .await?;
    let expected = server.expected().await?;
    check_oracle_raw(&report, &expected, results)?;
    load.send(&json!({"cmd": "reset_bytes"})).await?;
    load.expect("reset", Duration::from_secs(10)).await?;

    corpus.change_all()?;
    let mut versions = serde_json::Map::new();
    let mut publish = u64::MAX;
    while versions.len() < corpus.collections.len() {
        let p = server
            .child
            .expect("published", Duration::from_secs(60))
            .await?;
        let c = p["collection"].as_str().unwrap_or_default().to_owned();
        publish = publish.min(p["at_ns"].as_u64().unwrap_or(u64::MAX));
        versions.insert(c, p["version"].clone());
    }
    let (hub0, load0) = (server.child.cpu(), load.cpu());
    let report = load_cmd(
        &mut load,
        json!({"cmd": "wait", "versions": versions, "timeout_ms": 240_000}),
    )
    .await?;
    let (hub_cpu, load_cpu) = (server.child.cpu() - hub0, load.cpu() - load0);
    let expected = server.expected().await?;
    check_oracle_raw(&report, &expected, results)?;
    let last = corpus
        .collections
        .iter()
        .filter_map(|c| report["collections"][c]["last_recv_ns"].as_u64())
        .max()
        .context("no receipt")?;
    let bytes = report["bytes"].as_u64().unwrap_or_default();
    let expected_bytes: u64 = expected
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, e)| e["bytes"].as_u64().unwrap_or_default())
        .sum::<u64>()
        * n as u64;
    ensure!(
        bytes >= expected_bytes,
        "consumers received {bytes} bytes, less than the {expected_bytes} bytes published to them"
    );
    let grpc_s = (last - publish) as f64 / 1e9;
    let grpc_rate = bytes as f64 / grpc_s;
    load.finish().await;
    server.child.finish().await;

    // The machine's limit, same connections, same bytes.
    let mut reader = Child::spawn(
        "raw reader",
        &["raw-reader".into(), "--conns".into(), conns.to_string()],
    )?;
    let l = reader.expect("listening", Duration::from_secs(10)).await?;
    let addr = l["addr"].as_str().context("raw addr")?.to_owned();
    let mut writer = Child::spawn(
        "raw writer",
        &[
            "raw-writer".into(),
            "--addr".into(),
            addr,
            "--conns".into(),
            conns.to_string(),
            "--bytes-per-conn".into(),
            (bytes / conns as u64).max(1).to_string(),
        ],
    )?;
    let done = reader.expect("done", LONG).await?;
    writer.expect("done", LONG).await?;
    writer.finish().await;
    reader.finish().await;
    let raw_s = (done["last_ns"].as_u64().unwrap_or_default() as f64
        - done["first_ns"].as_u64().unwrap_or_default() as f64)
        / 1e9;
    let raw_rate = done["bytes"].as_u64().unwrap_or_default() as f64 / raw_s;
    let ratio = grpc_rate / raw_rate;
    let f = &mut results.figures;
    f.insert("p3.bytes".into(), bytes as f64);
    f.insert("p3.grpc_mib_s".into(), mib(grpc_rate));
    f.insert("p3.raw_mib_s".into(), mib(raw_rate));
    f.insert("p3.ratio".into(), ratio);
    f.insert("p3.hub_cpu_s".into(), hub_cpu);
    f.insert("p3.load_cpu_s".into(), load_cpu);
    let per_cpu = bytes as f64 / hub_cpu;
    f.insert("p3.hub_mib_per_cpu_s".into(), mib(per_cpu));
    results.row(
        format!(
            "P3 full-state fan-out vs raw loopback TCP, envelope-only consumers (N={n}, R={r}, {conns} conns)"
        ),
        format!(
            "{:.0} % ({:.0} MiB/s of {:.0} MiB/s; {:.0} MiB in {:.2} s)",
            ratio * 100.0,
            mib(grpc_rate),
            mib(raw_rate),
            mib(bytes as f64),
            grpc_s
        ),
        "≥ 50 %",
        Some(ratio >= 0.5),
    );
    results.row(
        "P3 CPU from publish seen to all received: hub, load generator; hub bytes per CPU-second".into(),
        format!(
            "hub {hub_cpu:.2} s, load {load_cpu:.2} s (wall {grpc_s:.2} s, 2 cores); hub {:.0} MiB per CPU-s",
            mib(per_cpu)
        ),
        "(profile)",
        None,
    );
    Ok(())
}
