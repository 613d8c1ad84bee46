//! The sizes of one run: the issue's, the quick ones CI uses, and overrides.

use anyhow::{Context as _, Result, bail, ensure};

/// Sizes of one run.
#[derive(Clone, Debug)]
pub struct Params {
    /// P1: streams, connections, resources, changes.
    pub p1: (usize, usize, usize, usize),
    /// P2: streams, connections, resources.
    pub p2: (usize, usize, usize),
    /// P3: streams, connections, resources.
    pub p3: (usize, usize, usize),
    /// P4: resources.
    pub p4: usize,
    /// P5: side by side with the go-control-plane peer.
    pub p5: crate::p5::Sizes,
    /// k8s: objects in the kube-apiserver (only with `--only k8s`).
    pub k8s: usize,
    /// clusters: remote clusters dialed by the hub.
    pub clusters: ClusterSizes,
}

/// Sizes of scenario `clusters`.
#[derive(Clone, Copy, Debug)]
pub struct ClusterSizes {
    /// Light sinks (clusters), each on its own listener and connection.
    pub n: usize,
    /// Real `meshhub-sink-agent` processes besides them.
    pub agents: usize,
    /// Objects every cluster receives.
    pub shared: usize,
    /// Objects of each cluster's own.
    pub per_cluster: usize,
    /// Change rounds of each kind (all clusters, one cluster).
    pub changes: usize,
    /// Whether the reconnect storms run (0 or 1).
    pub storm: usize,
    /// Whether the light sinks serve only `ResourceSink` (1), not the
    /// agent's upward source (0, the default): what a fleet of Istio 1.5
    /// sinks or older agents costs the hub.
    pub sink_only: usize,
    /// Whether the hub analyses every cluster's group (1, its default) or
    /// not (0): what per-cluster analysis costs.
    pub analysis: usize,
    /// Whether the rounds changing every cluster run (1, the default) or
    /// only those changing one (0: what a profile of the one-cluster
    /// change wants).
    pub all_changes: usize,
    /// Rounds changing one cluster (0, the default: as many as `changes`,
    /// and at least 100 from N = 10,000, where issue 40 judges the CPU of
    /// one such change and a mean over a few is below the 10 ms tick).
    pub one_changes: usize,
}

impl ClusterSizes {
    /// The rounds changing one cluster.
    pub fn one_rounds(&self) -> usize {
        match self.one_changes {
            0 if self.n >= 10_000 => self.changes.max(100),
            0 => self.changes,
            n => n,
        }
    }
}

impl Params {
    /// The sizes.
    pub fn full() -> Self {
        Self {
            p1: (1000, 10, 10_000, 5),
            p2: (10_000, 100, 1_000),
            p3: (100, 10, 10_000),
            p4: 100_000,
            p5: crate::p5::Sizes::full(),
            k8s: 100_000,
            clusters: ClusterSizes {
                n: 1000,
                agents: 4,
                shared: 200,
                per_cluster: 2,
                changes: 5,
                storm: 1,
                sink_only: 0,
                analysis: 1,
                all_changes: 1,
                one_changes: 0,
            },
        }
    }

    /// Overrides one size: `p1.streams`, `p1.conns`, `p1.resources`,
    /// `p1.changes`, `p2.streams`, `p2.conns`, `p2.resources`,
    /// `p3.streams`, `p3.conns`, `p3.resources`, `p4.resources`,
    /// `clusters.{n,agents,shared,perCluster,changes,oneChanges,storm,sinkOnly,analysis,allChanges}`
    /// (agents, storm, sinkOnly, analysis and allChanges may be 0).
    pub fn set(&mut self, setting: &str) -> Result<()> {
        let (key, value) = setting
            .split_once('=')
            .with_context(|| format!("size {setting:?} is not key=value"))?;
        let v: usize = value.parse().with_context(|| format!("size {setting:?}"))?;
        match key {
            "clusters.storm" => self.clusters.storm = v,
            "clusters.agents" => self.clusters.agents = v,
            "clusters.sinkOnly" => self.clusters.sink_only = v,
            "clusters.analysis" => self.clusters.analysis = v,
            "clusters.allChanges" => self.clusters.all_changes = v,
            _ => {}
        }
        if matches!(
            key,
            "clusters.storm"
                | "clusters.agents"
                | "clusters.sinkOnly"
                | "clusters.analysis"
                | "clusters.allChanges"
        ) {
            return Ok(());
        }
        ensure!(v > 0, "size {setting:?} must be positive");
        match key {
            "p1.streams" => self.p1.0 = v,
            "p1.conns" => self.p1.1 = v,
            "p1.resources" => self.p1.2 = v,
            "p1.changes" => self.p1.3 = v,
            "p2.streams" => self.p2.0 = v,
            "p2.conns" => self.p2.1 = v,
            "p2.resources" => self.p2.2 = v,
            "p3.streams" => self.p3.0 = v,
            "p3.conns" => self.p3.1 = v,
            "p3.resources" => self.p3.2 = v,
            "p4.resources" => self.p4 = v,
            "k8s.resources" => self.k8s = v,
            "clusters.n" => self.clusters.n = v,
            "clusters.shared" => self.clusters.shared = v,
            "clusters.perCluster" => self.clusters.per_cluster = v,
            "clusters.changes" => self.clusters.changes = v,
            "clusters.oneChanges" => self.clusters.one_changes = v,
            k if k.starts_with("p5.") => self.p5.set(k, v)?,
            _ => bail!("unknown size {key:?}"),
        }
        Ok(())
    }

    /// Small sizes that prove the harness works (CI, debug builds).
    pub fn quick() -> Self {
        Self {
            p1: (20, 2, 200, 2),
            p2: (100, 4, 100),
            p3: (8, 2, 200),
            p4: 2_000,
            p5: crate::p5::Sizes::quick(),
            k8s: 1_000,
            clusters: ClusterSizes {
                n: 20,
                agents: 1,
                shared: 40,
                per_cluster: 2,
                changes: 2,
                storm: 1,
                sink_only: 0,
                analysis: 1,
                all_changes: 1,
                one_changes: 0,
            },
        }
    }
}
