//! Scenario `clusters`' configuration: a hub dialing one sink per cluster,
//! and objects spread over the clusters' groups.
//!
//! Every cluster has `per_cluster` objects of its own (annotated
//! `meshhub.io/clusters: <cluster>`, so they go to its group only) and every
//! cluster receives the `shared` objects (no annotation, no selector: every
//! group). Objects are Bookinfo fixtures renamed, as in [`crate::generate`],
//! with the same generation annotation to change them. The shared objects
//! live in `shared/`, the clusters' own in `own/` (one file per cluster), so
//! that a baseline hub can serve the shared ones without the clusters.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::object::Object;
use meshhub_proto::transcode::to_yaml;

use crate::generate::{GENERATION, LIFTED_LIMITS, templates};

/// Shared objects per file.
const PER_FILE: usize = 10;

/// A generated fleet on disk.
pub struct Fleet {
    /// The directory holding the configurations and the object files.
    pub dir: PathBuf,
    templates: Vec<Object>,
    /// The clusters, in order.
    pub clusters: Vec<String>,
    /// Objects every cluster receives.
    pub shared: usize,
    /// Objects of each cluster's own.
    pub per_cluster: usize,
    shared_generations: Vec<u64>,
    own_generations: Vec<u64>,
    /// The MCP collections the objects fall into, sorted.
    pub collections: Vec<String>,
    /// Configuration both hubs get besides their sources and clusters.
    extra: String,
}

impl Fleet {
    /// Writes the objects of `clusters` into `dir`.
    pub fn generate(
        dir: &Path,
        clusters: Vec<String>,
        shared: usize,
        per_cluster: usize,
    ) -> Result<Self> {
        let templates = templates()?;
        std::fs::create_dir_all(dir.join("shared"))?;
        std::fs::create_dir_all(dir.join("own"))?;
        let mut fleet = Self {
            dir: dir.to_owned(),
            own_generations: vec![0; clusters.len() * per_cluster],
            clusters,
            shared,
            per_cluster,
            shared_generations: vec![0; shared],
            collections: Vec::new(),
            templates,
            extra: LIFTED_LIMITS.to_owned(),
        };
        let kinds = KindTable::builtin();
        let mut collections = std::collections::BTreeSet::new();
        let used = shared.max(fleet.clusters.len() * per_cluster);
        for t in fleet.templates.iter().take(used) {
            let kind = kinds
                .by_api_version(&t.api_version, &t.kind)
                .with_context(|| format!("fixture kind {} unknown", t.kind))?;
            collections.insert(kind.collection().to_owned());
        }
        fleet.collections = collections.into_iter().collect();
        for f in 0..shared.div_ceil(PER_FILE) {
            fleet.write_shared(f)?;
        }
        for k in 0..fleet.clusters.len() {
            fleet.write_own(k)?;
        }
        fleet.write_baseline()?;
        Ok(fleet)
    }

    /// Objects the hub serves in all.
    pub fn objects(&self) -> usize {
        self.shared + self.clusters.len() * self.per_cluster
    }

    /// The hub's configuration: both sources, and cluster `k` dialing
    /// `addresses[k]` (`http://host:port`).
    pub fn write_config(&self, addresses: &[String]) -> Result<PathBuf> {
        let mut text = String::from(
            "sources:\n  - name: shared\n    file:\n      path: shared\n  - name: own\n    file:\n      path: own\nclusters:\n",
        );
        for (name, address) in self.clusters.iter().zip(addresses) {
            text.push_str(&format!(
                "  - name: {name}\n    agent:\n      address: {address}\n"
            ));
        }
        text.push_str(&self.extra);
        // The initial snapshot of thousands of files may outlast the
        // default 1 s maximum wait on a loaded machine.
        text.push_str("debounce:\n  maxWait: 10s\n");
        let path = self.dir.join("meshhub.yaml");
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// A hub with the shared objects and no cluster: what the clusters'
    /// memory is measured against.
    pub fn baseline_config(&self) -> PathBuf {
        self.dir.join("baseline.yaml")
    }

    /// Per-cluster analysis on (the hub's default) or off, in both hubs'
    /// configurations.
    pub fn set_analysis(&mut self, on: bool) -> Result<()> {
        self.extra = LIFTED_LIMITS.to_owned();
        if !on {
            self.extra.push_str("analysis:\n  enabled: false\n");
        }
        self.write_baseline()
    }

    fn write_baseline(&self) -> Result<()> {
        let text = format!(
            "sources:\n  - name: shared\n    file:\n      path: shared\n{}",
            self.extra
        );
        std::fs::write(self.baseline_config(), text)?;
        Ok(())
    }

    fn object(&self, template: usize, name: String, namespace: String, generation: u64) -> Object {
        let mut o = self.templates[template % self.templates.len()].clone();
        o.metadata.name = name;
        o.metadata.namespace = Some(namespace);
        o.metadata
            .annotations
            .insert(GENERATION.to_owned(), generation.to_string());
        o
    }

    fn shared_object(&self, i: usize) -> Object {
        let t = &self.templates[i % self.templates.len()];
        self.object(
            i,
            format!("{}-s{i}", t.metadata.name),
            format!("shared-{}", i % 10),
            self.shared_generations[i],
        )
    }

    fn own_object(&self, k: usize, j: usize) -> Object {
        let template = k * self.per_cluster + j;
        let t = &self.templates[template % self.templates.len()];
        let cluster = &self.clusters[k];
        let mut o = self.object(
            template,
            format!("{}-{cluster}-{j}", t.metadata.name),
            format!("bench-{}", k % 50),
            self.own_generations[k * self.per_cluster + j],
        );
        o.metadata
            .annotations
            .insert("meshhub.io/clusters".to_owned(), cluster.clone());
        o
    }

    fn write_shared(&self, f: usize) -> Result<()> {
        let mut text = String::new();
        for i in f * PER_FILE..((f + 1) * PER_FILE).min(self.shared) {
            text.push_str("---\n");
            text.push_str(&to_yaml(&self.shared_object(i))?);
        }
        write_atomic(
            &self.dir.join("shared").join(format!("shared-{f:05}.yaml")),
            &text,
        )
    }

    fn write_own(&self, k: usize) -> Result<()> {
        let mut text = String::new();
        for j in 0..self.per_cluster {
            text.push_str("---\n");
            text.push_str(&to_yaml(&self.own_object(k, j))?);
        }
        write_atomic(
            &self
                .dir
                .join("own")
                .join(format!("{}.yaml", self.clusters[k])),
            &text,
        )
    }

    /// Changes shared object `i`: every cluster's group changes.
    pub fn change_shared(&mut self, i: usize) -> Result<()> {
        self.shared_generations[i] += 1;
        self.write_shared(i / PER_FILE)
    }

    /// Changes object `j` of cluster `k`: only its group changes.
    pub fn change_own(&mut self, k: usize, j: usize) -> Result<()> {
        self.own_generations[k * self.per_cluster + j] += 1;
        self.write_own(k)
    }

    /// The collection of shared object `i`.
    pub fn shared_collection(&self, i: usize) -> String {
        self.collection_of(i)
    }

    /// The collection of object `j` of cluster `k`.
    pub fn own_collection(&self, k: usize, j: usize) -> String {
        self.collection_of(k * self.per_cluster + j)
    }

    fn collection_of(&self, template: usize) -> String {
        let t = &self.templates[template % self.templates.len()];
        KindTable::builtin()
            .by_api_version(&t.api_version, &t.kind)
            .map(|k| k.collection().to_owned())
            .unwrap_or_default()
    }
}

/// Writes aside and renames, so the hub never reads half a file.
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
