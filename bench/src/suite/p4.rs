//! P4: ingest of R objects from files to the first full snapshot, and the
//! YAML floor.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use serde_json::json;

use crate::generate::Corpus;

use super::harness::*;
use crate::params::Params;
use crate::report::Results;

pub(super) async fn p4(params: &Params, results: &mut Results) -> Result<()> {
    let r = params.p4;
    let dir = tempfile::tempdir()?;
    let corpus = Corpus::generate(dir.path(), r, 100)?;
    let yaml = corpus.yaml_bytes();
    let mut server = Server::start(&corpus).await?;
    let mut load = spawn_load(&server.grpc, 1, &corpus, false)?;
    load.send(&json!({"cmd": "open", "streams": 1, "timeout_ms": 240_000}))
        .await?;
    server.ready(r).await?;
    let report = load.expect("report", LONG).await?;
    ensure!(
        report["complete"] == true,
        "no full snapshot: {}",
        summarize(&report)
    );
    let expected = server.expected().await?;
    check_oracle(&report, &expected, results)?;
    let first = corpus
        .collections
        .iter()
        .filter_map(|c| report["collections"][c]["last_recv_ns"].as_u64())
        .max()
        .context("no receipt")?;
    let secs = (first - server.start_ns) as f64 / 1e9;
    let ready_s =
        (server.ready["ready_ns"].as_u64().unwrap_or_default() - server.start_ns) as f64 / 1e9;
    let rss_served = server.rss()?;
    let hub_cpu = server.child.cpu();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = server.rss()?;
    let encoded = server.ready["encoded_bytes"].as_u64().unwrap_or(1) as f64;
    let ratio = rss as f64 / encoded;
    load.finish().await;
    server.child.finish().await;
    let f = &mut results.figures;
    f.insert("p4.first_snapshot_s".into(), secs);
    f.insert("p4.ready_s".into(), ready_s);
    f.insert("p4.rss_bytes".into(), rss as f64);
    f.insert("p4.encoded_bytes".into(), encoded);
    f.insert("p4.rss_ratio".into(), ratio);
    f.insert("p4.hub_cpu_s".into(), hub_cpu);
    results.row(
        format!("P4 ingest R={r} from files → first full snapshot at a consumer"),
        format!(
            "{secs:.2} s (hub ready after {ready_s:.2} s, {hub_cpu:.1} s CPU; {:.0} MiB YAML)",
            mib(yaml as f64)
        ),
        "≤ 2 s",
        Some(secs <= 2.0),
    );
    results.row(
        "P4 hub RSS / total encoded size".into(),
        format!(
            "{ratio:.1}× ({:.0} MiB / {:.1} MiB; {:.0} MiB right after serving)",
            mib(rss as f64),
            mib(encoded),
            mib(rss_served as f64)
        ),
        "≤ 4×",
        Some(ratio <= 4.0),
    );
    // The floor under the first row: reading the YAML alone (text → JSON
    // trees, what the file source does before anything else), on one
    // thread, in this process once the hub has stopped.
    let (parse_s, docs) = yaml_floor(&corpus)?;
    results
        .figures
        .insert("p4.yaml_parse_1thread_s".into(), parse_s);
    results.row(
        "P4 floor: YAML reading alone (1 thread)".into(),
        format!(
            "{parse_s:.2} s for {docs} documents ({:.1} MiB/s; {:.1} µs per document)",
            mib(yaml as f64) / parse_s,
            parse_s * 1e6 / docs as f64
        ),
        "(floor)",
        None,
    );
    Ok(())
}

/// Reads every file of `corpus` as the file source does, on one thread:
/// the seconds it took and the documents read.
fn yaml_floor(corpus: &Corpus) -> Result<(f64, usize)> {
    let texts: Vec<String> = (0..corpus.resources.div_ceil(corpus.per_file))
        .map(|f| std::fs::read_to_string(corpus.file(f)))
        .collect::<std::io::Result<_>>()?;
    let start = std::time::Instant::now();
    let mut docs = 0;
    for text in &texts {
        for parsed in meshhub_proto::transcode::parse_yaml(text) {
            parsed.map_err(|e| anyhow::anyhow!("{e}"))?;
            docs += 1;
        }
    }
    Ok((start.elapsed().as_secs_f64(), docs))
}
