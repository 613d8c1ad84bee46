//! What every scenario shares: the hub process, the load generators, the
//! oracle and the units.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};

use crate::generate::Corpus;
use crate::proc::{Child, rss_bytes};

use crate::report::Results;

pub(super) const LONG: Duration = Duration::from_secs(300);

/// A hub process over a corpus, up and ready.
pub(super) struct Server {
    pub(super) child: Child,
    pub(super) grpc: String,
    /// Its admin port (`host:port`).
    pub(super) admin: String,
    pub(super) start_ns: u64,
    pub(super) ready: Value,
}

impl Server {
    pub(super) async fn start(corpus: &Corpus) -> Result<Self> {
        Self::start_with_env(corpus, &[]).await
    }

    pub(super) async fn start_with_env(corpus: &Corpus, env: &[(&str, &str)]) -> Result<Self> {
        Self::start_config(&corpus.config(), crate::server::DEFAULT_GROUP, env).await
    }

    /// A hub process over the configuration file `config`, timestamping
    /// the publishes of `group`.
    pub(super) async fn start_config(
        config: &std::path::Path,
        group: &str,
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let mut child = Child::spawn_with_env(
            "hub",
            &[
                "server".into(),
                "--config".into(),
                config.display().to_string(),
                "--group".into(),
                group.to_owned(),
            ],
            env,
        )?;
        let listening = child.expect("listening", Duration::from_secs(60)).await?;
        let grpc = listening["grpc"]
            .as_str()
            .context("grpc address")?
            .to_owned();
        let start_ns = listening["start_ns"].as_u64().unwrap_or_default();
        let admin = listening["admin"]
            .as_str()
            .context("admin address")?
            .to_owned();
        Ok(Self {
            child,
            grpc,
            admin,
            start_ns,
            ready: Value::Null,
        })
    }

    pub(super) async fn ready(&mut self, resources: usize) -> Result<()> {
        self.ready = self.child.expect("ready", LONG).await?;
        let objects = self.ready["objects"].as_u64().unwrap_or_default() as usize;
        ensure!(
            objects == resources && self.ready["rejected"] == 0,
            "the hub serves {objects} objects ({} rejected), expected {resources}",
            self.ready["rejected"]
        );
        Ok(())
    }

    pub(super) fn rss(&self) -> Result<u64> {
        rss_bytes(self.child.pid()?)
    }

    pub(super) async fn expected(&mut self) -> Result<Value> {
        self.child.send(&json!({"cmd": "expected"})).await?;
        let e = self.child.expect("expected", LONG).await?;
        Ok(e["collections"].clone())
    }
}

pub(super) fn spawn_load(
    grpc: &str,
    conns: usize,
    corpus: &Corpus,
    incremental: bool,
) -> Result<Child> {
    spawn_load_with(grpc, conns, corpus, incremental, false)
}

/// A load generator whose consumers decode only each response's envelope
/// (full state; see `crate::envelope`): its oracle is [`check_oracle_raw`].
pub(super) fn spawn_envelope_load(grpc: &str, conns: usize, corpus: &Corpus) -> Result<Child> {
    spawn_load_with(grpc, conns, corpus, false, true)
}

pub(super) fn spawn_load_with(
    grpc: &str,
    conns: usize,
    corpus: &Corpus,
    incremental: bool,
    envelope: bool,
) -> Result<Child> {
    let mut args = vec![
        "load".to_owned(),
        "--addr".into(),
        grpc.to_owned(),
        "--conns".into(),
        conns.to_string(),
        "--collections".into(),
        corpus.collections.join(","),
    ];
    if incremental {
        args.push("--incremental".into());
    }
    if envelope {
        args.push("--envelope".into());
    }
    Child::spawn("load", &args)
}

pub(super) async fn load_cmd(load: &mut Child, cmd: Value) -> Result<Value> {
    load.send(&cmd).await?;
    let r = load.expect("report", LONG).await?;
    ensure!(
        r["complete"] == true,
        "consumers did not all sync: {}",
        summarize(&r)
    );
    Ok(r)
}

pub(super) fn summarize(report: &Value) -> String {
    let mut s = format!("{} streams", report["streams"]);
    if let Some(cs) = report["collections"].as_object() {
        for (c, v) in cs {
            let _ = write!(s, "; {c}: {}", v["states"]);
        }
    }
    let _ = write!(s, "; failures: {}", report["failures"]);
    s
}

/// The oracle: every stream holds, of every collection, exactly the
/// version and content digest the hub published.
pub(super) fn check_oracle(report: &Value, expected: &Value, results: &mut Results) -> Result<()> {
    oracle(report, expected, "digest", results)
}

/// The oracle for envelope-only consumers: the digest of the encoded bytes.
pub(super) fn check_oracle_raw(
    report: &Value,
    expected: &Value,
    results: &mut Results,
) -> Result<()> {
    oracle(report, expected, "raw_digest", results)
}

pub(super) fn oracle(
    report: &Value,
    expected: &Value,
    digest: &str,
    results: &mut Results,
) -> Result<()> {
    let streams = report["streams"].as_u64().unwrap_or_default();
    let collections = report["collections"]
        .as_object()
        .context("no collections")?;
    for (c, v) in collections {
        let e = &expected[c];
        let want = format!(
            "{}|{}",
            e["version"].as_str().context("collection not published")?,
            e[digest].as_str().unwrap_or_default()
        );
        let states = v["states"].as_object().context("no states")?;
        if states.len() != 1 || states.get(&want).and_then(Value::as_u64) != Some(streams) {
            bail!(
                "oracle: collection {c}: expected all {streams} streams at {want}, found {states:?}"
            );
        }
        results.oracle_checks += streams;
    }
    Ok(())
}

pub(super) fn sample_ns(report: &Value, collection: &str) -> Vec<u64> {
    report["collections"][collection]["recv_ns"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(super) fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

pub(super) fn mib(b: f64) -> f64 {
    b / (1024.0 * 1024.0)
}
