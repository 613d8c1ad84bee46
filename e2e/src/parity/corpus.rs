//! The objects the differential test judges: Istio's own test data, the
//! shared fixtures, hand-written objects per rule family, and mutants.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// One object to judge.
#[derive(Clone, Debug)]
pub struct Case {
    /// Where it comes from (`fixtures`, `istio-crd-testdata`, a hand-written
    /// family such as `false-rejects`, `mutant`).
    pub family: String,
    /// What it is: the file and document, or the mutation applied.
    pub label: String,
    /// The whole object (apiVersion, kind, metadata, spec).
    pub object: Value,
}

impl Case {
    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.object["apiVersion"].as_str().unwrap_or("")
    }

    /// API group of `apiVersion`.
    pub fn group(&self) -> &str {
        self.api_version().rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// Version of `apiVersion`.
    pub fn version(&self) -> &str {
        let v = self.api_version();
        v.rsplit_once('/').map_or(v, |(_, v)| v)
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or("")
    }

    /// `metadata.namespace` (always set by [`Corpus::push`]).
    pub fn namespace(&self) -> &str {
        self.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or("")
    }
}

/// What the API server needs to know of an Istio kind: its plural and the
/// versions it serves, read from the CRD file.
#[derive(Clone, Debug)]
pub struct CrdKind {
    /// `virtualservices`.
    pub plural: String,
    /// Served versions.
    pub versions: Vec<String>,
}

/// The Istio kinds of a CRD file, by (group, kind).
#[derive(Clone, Debug, Default)]
pub struct CrdIndex {
    kinds: BTreeMap<(String, String), CrdKind>,
}

impl CrdIndex {
    /// Reads the CRDs of a `crd-all.gen.yaml`.
    pub fn read(text: &str) -> Self {
        let mut kinds = BTreeMap::new();
        for doc in meshhub_proto::transcode::parse_yaml(text) {
            let Ok(obj) = doc else { continue };
            if obj.kind != "CustomResourceDefinition" {
                continue;
            }
            let spec = &obj.content["spec"];
            let group = spec["group"].as_str().unwrap_or_default().to_owned();
            let kind = spec["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let plural = spec["names"]["plural"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let versions = spec["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["served"] == true)
                .filter_map(|v| v["name"].as_str().map(str::to_owned))
                .collect();
            kinds.insert((group, kind), CrdKind { plural, versions });
        }
        Self { kinds }
    }

    /// The CRD kind serving `case`'s group, kind and version.
    pub fn of(&self, case: &Case) -> Option<&CrdKind> {
        self.kinds
            .get(&(case.group().to_owned(), case.kind().to_owned()))
            .filter(|k| k.versions.iter().any(|v| v == case.version()))
    }

    /// How many kinds.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
}

/// The corpus being built: cases without duplicates, every one of a kind
/// the CRDs serve.
#[derive(Debug)]
pub struct Corpus {
    crds: CrdIndex,
    seen: BTreeSet<String>,
    /// The cases, in the order added.
    pub cases: Vec<Case>,
}

impl Corpus {
    /// An empty corpus of the kinds in `crds`.
    pub fn new(crds: CrdIndex) -> Self {
        Self {
            crds,
            seen: BTreeSet::new(),
            cases: Vec::new(),
        }
    }

    /// The CRDs.
    pub fn crds(&self) -> &CrdIndex {
        &self.crds
    }

    /// Adds `object` unless it is not an object of a served Istio kind or
    /// is already in. An object without a namespace gets `default` (what
    /// the API server and a file source give it). Whether it was added.
    pub fn push(&mut self, family: &str, label: String, mut object: Value) -> bool {
        let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
            return false;
        };
        if !meta.get("namespace").is_some_and(Value::is_string) {
            meta.insert("namespace".into(), Value::from("default"));
        }
        let case = Case {
            family: family.to_owned(),
            label,
            object,
        };
        if self.crds.of(&case).is_none() {
            return false;
        }
        if !self.seen.insert(case.object.to_string()) {
            return false;
        }
        self.cases.push(case);
        true
    }

    /// Adds every document of every YAML file under `dir` (recursively, in
    /// name order) as family `family`, labelled by file and document.
    /// Returns how many were added.
    pub fn add_dir(&mut self, family: &str, dir: &Path) -> usize {
        let mut files = Vec::new();
        yaml_files(dir, &mut files);
        files
            .iter()
            .map(|f| {
                let rel = f.strip_prefix(dir).unwrap_or(f).display().to_string();
                self.add_file(family, f, &rel)
            })
            .sum()
    }

    /// Adds every document of one YAML file; documents that do not parse
    /// as objects are skipped. Returns how many were added.
    pub fn add_file(&mut self, family: &str, file: &Path, label: &str) -> usize {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut added = 0;
        for (i, doc) in meshhub_proto::transcode::parse_yaml(&text)
            .into_iter()
            .enumerate()
        {
            let Ok(obj) = doc else { continue };
            let Ok(value) = serde_json::to_value(&obj) else {
                continue;
            };
            if self.push(family, format!("{label}#{}", i + 1), value) {
                added += 1;
            }
        }
        added
    }

    /// The namespaces the cases live in.
    pub fn namespaces(&self) -> BTreeSet<String> {
        self.cases
            .iter()
            .map(|c| c.namespace().to_owned())
            .collect()
    }
}

/// Every `.yaml`/`.yml` file under `dir`, sorted.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
}
