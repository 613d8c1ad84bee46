//! Configuration generated from the Bookinfo fixtures, scaled to R
//! resources across the Pilot collections.
//!
//! Every fixture object is a template; resource `i` is template `i % T`
//! renamed `<name>-<i>` into namespace `bench-<i % 50>`, with the
//! annotation `bench.meshhub.io/generation` so that one resource (or all) can
//! be changed by bumping its generation. Objects are written `per_file` to a
//! YAML file, and a `meshhub.yaml` configuration serves the directory.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::object::Object;
use meshhub_proto::transcode::{parse_yaml, to_yaml};

/// Annotation bumped to change a resource.
pub const GENERATION: &str = "bench.meshhub.io/generation";

/// The Bookinfo fixtures directory (`../shared/fixtures/istio/bookinfo`
/// beside the workspace), or `MESHHUB_BENCH_FIXTURES`.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("MESHHUB_BENCH_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/istio/bookinfo"),
        PathBuf::from,
    )
}

/// The fixture objects, in file order: the templates of every generated
/// object.
pub fn templates() -> Result<Vec<Object>> {
    let fixtures = fixtures_dir();
    let mut templates = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&fixtures)
        .with_context(|| format!("reading fixtures {}", fixtures.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    for p in paths {
        let text = std::fs::read_to_string(&p)?;
        for obj in parse_yaml(&text) {
            templates.push(obj.with_context(|| format!("fixture {}", p.display()))?);
        }
    }
    if templates.is_empty() {
        bail!("no fixtures in {}", fixtures.display());
    }
    Ok(templates)
}

/// The `limits:` block of every generated hub configuration: the load
/// generator multiplexes many consumers over few connections and opens
/// them all at once: it measures serving, not the flow-control limits,
/// which it lifts.
pub const LIFTED_LIMITS: &str = concat!(
    "limits:\n",
    "  newStreamsPerSecond: 1000000\n",
    "  newStreamsBurst: 1000000\n",
    "  connectionStreamsPerSecond: 1000000\n",
    "  connectionStreamsBurst: 1000000\n",
    "  maxStreams: 1000000\n",
);

/// A generated configuration on disk.
pub struct Corpus {
    /// The directory holding `meshhub.yaml` and the object files.
    pub dir: PathBuf,
    /// The templates, in order.
    templates: Vec<Object>,
    /// Resources in total.
    pub resources: usize,
    /// Objects per file.
    pub per_file: usize,
    /// Generation of each resource.
    generations: Vec<u64>,
    /// The MCP collections the resources fall into, sorted.
    pub collections: Vec<String>,
}

impl Corpus {
    /// Writes `resources` objects into `dir`.
    pub fn generate(dir: &Path, resources: usize, per_file: usize) -> Result<Self> {
        let templates = templates()?;
        let kinds = KindTable::builtin();
        let mut collections = BTreeSet::new();
        for t in templates.iter().take(resources) {
            let kind = kinds
                .by_api_version(&t.api_version, &t.kind)
                .with_context(|| format!("fixture kind {} unknown", t.kind))?;
            collections.insert(kind.collection().to_owned());
        }
        std::fs::create_dir_all(dir.join("objects"))?;
        std::fs::write(
            dir.join("meshhub.yaml"),
            format!(
                "sources:\n  - name: bench\n    file:\n      path: objects\n{LIFTED_LIMITS}{}",
                // P3 rewrites every file at once; on a loaded machine the
                // rescan can outlast the default 1 s maximum wait and the
                // burst would be published in two parts. One change (P1) and
                // the initial snapshot (P4) are unaffected.
                "debounce:\n  maxWait: 10s\n",
            ),
        )?;
        let corpus = Self {
            dir: dir.to_owned(),
            templates,
            resources,
            per_file,
            generations: vec![0; resources],
            collections: collections.into_iter().collect(),
        };
        for f in 0..resources.div_ceil(per_file) {
            corpus.write_file(f)?;
        }
        Ok(corpus)
    }

    /// The configuration file.
    pub fn config(&self) -> PathBuf {
        self.dir.join("meshhub.yaml")
    }

    fn object(&self, i: usize) -> Object {
        let mut o = self.templates[i % self.templates.len()].clone();
        o.metadata.name = format!("{}-{i}", o.metadata.name);
        o.metadata.namespace = Some(format!("bench-{}", i % 50));
        o.metadata
            .annotations
            .insert(GENERATION.to_owned(), self.generations[i].to_string());
        o
    }

    /// The path of file `f`.
    pub fn file(&self, f: usize) -> PathBuf {
        self.dir
            .join("objects")
            .join(format!("objects-{f:05}.yaml"))
    }

    /// (Re)writes file `f` atomically (write aside, rename), so the hub
    /// never reads half a file.
    fn write_file(&self, f: usize) -> Result<()> {
        let mut text = String::new();
        let end = ((f + 1) * self.per_file).min(self.resources);
        for i in f * self.per_file..end {
            text.push_str("---\n");
            text.push_str(&to_yaml(&self.object(i))?);
        }
        let path = self.file(f);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path)?;
        Ok(())
    }

    /// Changes resource `i` (bumps its generation) and rewrites its file.
    pub fn change_one(&mut self, i: usize) -> Result<()> {
        self.generations[i] += 1;
        self.write_file(i / self.per_file)
    }

    /// Changes every resource. Every file is written aside first and then
    /// renamed into place, so the hub sees one burst of changes (inside
    /// one debounce window) rather than a slow trickle.
    pub fn change_all(&mut self) -> Result<()> {
        for g in &mut self.generations {
            *g += 1;
        }
        let files = self.resources.div_ceil(self.per_file);
        let mut staged = Vec::with_capacity(files);
        for f in 0..files {
            let mut text = String::new();
            let end = ((f + 1) * self.per_file).min(self.resources);
            for i in f * self.per_file..end {
                text.push_str("---\n");
                text.push_str(&to_yaml(&self.object(i))?);
            }
            let tmp = self.file(f).with_extension("tmp");
            std::fs::write(&tmp, text)?;
            staged.push(tmp);
        }
        for (f, tmp) in staged.into_iter().enumerate() {
            std::fs::rename(tmp, self.file(f))?;
        }
        Ok(())
    }

    /// The collection of resource `i`.
    pub fn collection_of(&self, i: usize) -> String {
        let t = &self.templates[i % self.templates.len()];
        KindTable::builtin()
            .by_api_version(&t.api_version, &t.kind)
            .map(|k| k.collection().to_owned())
            .unwrap_or_default()
    }

    /// Bytes of YAML on disk.
    pub fn yaml_bytes(&self) -> u64 {
        (0..self.resources.div_ceil(self.per_file))
            .filter_map(|f| std::fs::metadata(self.file(f)).ok())
            .map(|m| m.len())
            .sum()
    }
}
