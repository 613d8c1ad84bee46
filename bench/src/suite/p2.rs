//! P2: the hub's memory per idle synced stream, against a minimal tonic server.

use std::time::Duration;

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use crate::generate::Corpus;
use crate::proc::{Child, rss_bytes};

use super::harness::*;
use crate::params::Params;
use crate::report::Results;

/// RSS of a server process: settled after start, after `conns` streams
/// (one per connection), after `n` streams over them (P2's three points).
struct StreamMemory {
    rss0: u64,
    rss1: u64,
    rss2: u64,
    n: usize,
    conns: usize,
}

impl StreamMemory {
    /// Opens the streams against `grpc`, reading `pid`'s RSS between steps;
    /// returns the load generator's final report too.
    async fn measure(
        grpc: &str,
        pid: u32,
        corpus: &Corpus,
        n: usize,
        conns: usize,
    ) -> Result<(Self, Child, Value)> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss0 = rss_bytes(pid)?;
        let mut load = spawn_load(grpc, conns, corpus, true)?;
        load_cmd(
            &mut load,
            json!({"cmd": "open", "streams": conns, "timeout_ms": 120_000}),
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss1 = rss_bytes(pid)?;
        let report = load_cmd(
            &mut load,
            json!({"cmd": "open", "streams": n, "timeout_ms": 240_000}),
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss2 = rss_bytes(pid)?;
        let m = Self {
            rss0,
            rss1,
            rss2,
            n,
            conns,
        };
        Ok((m, load, report))
    }

    fn per_stream(&self) -> f64 {
        (self.rss2 as f64 - self.rss1 as f64) / (self.n - self.conns).max(1) as f64
    }

    fn per_conn(&self) -> f64 {
        (self.rss1 as f64 - self.rss0 as f64) / self.conns as f64 - self.per_stream()
    }

    fn overall(&self) -> f64 {
        (self.rss2 as f64 - self.rss0 as f64) / self.n as f64
    }
}

/// P2's processes return freed memory to the system at once, so that RSS
/// shows what the streams hold rather than what mimalloc kept from the
/// initial sync's burst of responses (with its default delay, two runs
/// of the same build gave 24 and 49 KiB per stream).
const P2_ALLOCATOR: &[(&str, &str)] = &[("MIMALLOC_PURGE_DELAY", "0")];

pub(super) async fn p2(params: &Params, results: &mut Results) -> Result<()> {
    let (n, conns, r) = params.p2;
    let dir = tempfile::tempdir()?;
    let corpus = Corpus::generate(dir.path(), r, 10)?;
    let mut server = Server::start_with_env(&corpus, P2_ALLOCATOR).await?;
    server.ready(r).await?;
    let (hub, load, report) =
        StreamMemory::measure(&server.grpc, server.child.pid()?, &corpus, n, conns).await?;
    let expected = server.expected().await?;
    check_oracle(&report, &expected, results)?;
    load.finish().await;
    server.child.finish().await;

    // The floor: the same streams against a minimal tonic server.
    let mut floor = Child::spawn_with_env("floor", &["floor".into()], P2_ALLOCATOR)?;
    let listening = floor.expect("listening", Duration::from_secs(60)).await?;
    let grpc = listening["grpc"]
        .as_str()
        .context("floor address")?
        .to_owned();
    let (base, load, _) = StreamMemory::measure(&grpc, floor.pid()?, &corpus, n, conns).await?;
    load.finish().await;
    floor.finish().await;

    let per_stream = hub.per_stream();
    let f = &mut results.figures;
    f.insert("p2.rss0_bytes".into(), hub.rss0 as f64);
    f.insert("p2.rss_bytes".into(), hub.rss2 as f64);
    f.insert("p2.per_stream_bytes".into(), per_stream);
    f.insert("p2.per_conn_bytes".into(), hub.per_conn());
    f.insert("p2.overall_per_stream_bytes".into(), hub.overall());
    f.insert("p2.floor_per_stream_bytes".into(), base.per_stream());
    f.insert("p2.floor_per_conn_bytes".into(), base.per_conn());
    results.row(
        format!("P2 hub RSS per idle synced stream (N={n} over {conns} conns, R={r}; MIMALLOC_PURGE_DELAY=0)"),
        format!(
            "{:.1} KiB/stream; +{:.1} KiB/connection; RSS {:.0} → {:.0} MiB (all-in {:.1} KiB/stream)",
            per_stream / 1024.0,
            hub.per_conn() / 1024.0,
            mib(hub.rss0 as f64),
            mib(hub.rss2 as f64),
            hub.overall() / 1024.0
        ),
        "≤ 32 KiB",
        Some(per_stream <= 32.0 * 1024.0),
    );
    results.row(
        "P2 floor: a minimal tonic server, same streams (h2 + tonic + task + queue)".to_string(),
        format!(
            "{:.1} KiB/stream; +{:.1} KiB/connection; hub − floor = {:.1} KiB/stream",
            base.per_stream() / 1024.0,
            base.per_conn() / 1024.0,
            (per_stream - base.per_stream()) / 1024.0
        ),
        "(reported)",
        None,
    );
    Ok(())
}
