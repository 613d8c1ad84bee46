//! Custom resources checked as a kube-apiserver checks them: against the
//! OpenAPI schema and the CEL rules (`x-kubernetes-validations`) of their
//! CustomResourceDefinition, read from the CRDs the operator installs (the
//! Gateway API's, or any other).
//!
//! meshhub ships no copy of anyone's CRDs: [`CrdSchemas`] is built from
//! CRD YAML given to it (the hub's `validation.crds`, `meshhubctl validate
//! --crds`), and an object of a kind and version it holds is checked the
//! way the API server does on a create with strict field validation:
//! defaults filled in and disallowed `null`s dropped, unknown fields
//! refused, the schema's types, required fields, limits, patterns, enums,
//! formats and list types checked, then (when no value has the wrong type)
//! every CEL rule evaluated. The object's `status` is left out, as the API
//! server resets it on a create when the CRD has a status subresource, and
//! its `metadata` is checked by the kind's own rules.

mod formats;
mod openapi;
mod program;
mod rules;
mod schema;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use meshhub_proto::object::Object;
use serde_json::{Map, Value};

pub use schema::SchemaError;

use crate::problem::Problem;
use program::RuleEnv;
use schema::Schema;

/// One served version of one CRD.
#[derive(Debug)]
struct CrdVersion {
    schema: Schema,
    /// `subresources.status` is set: a create's `status` is dropped.
    status_subresource: bool,
}

/// A CEL rule that is not evaluated, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotEvaluated {
    /// The CRD's group.
    pub group: String,
    /// The CRD's version.
    pub version: String,
    /// The CRD's kind.
    pub kind: String,
    /// Where the rule sits in the schema.
    pub schema_path: String,
    /// The expression.
    pub rule: String,
    /// Why it is not evaluated.
    pub reason: Unevaluated,
}

impl NotEvaluated {
    /// `group/version Kind`.
    pub fn label(&self) -> String {
        format!("{}/{} {}", self.group, self.version, self.kind)
    }
}

pub use program::Unevaluated;

/// Why CRDs could not be loaded. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// A file or directory can't be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A CRD's schema is unusable (a pattern that does not compile, a
    /// limit that is not a number).
    #[error("{origin}: CustomResourceDefinition {name} version {version}: {source}")]
    Schema {
        /// The file.
        origin: String,
        /// The CRD's name.
        name: String,
        /// The version.
        version: String,
        /// What is wrong.
        #[source]
        source: Box<SchemaError>,
    },
    /// A YAML document of a file does not parse.
    #[error("{origin}: {message}")]
    Document {
        /// The file.
        origin: String,
        /// Its number, from 1.
        document: usize,
        /// The parser's complaint (naming the document and its line).
        message: String,
    },
    /// A path held no CRD at all (most likely the wrong file).
    #[error("{origin}: no CustomResourceDefinition in it")]
    Empty {
        /// The file or directory.
        origin: String,
    },
}

/// The schemas and rules of a set of CRDs, by group, kind and version.
#[derive(Default)]
pub struct CrdSchemas {
    versions: HashMap<(String, String, String), Arc<CrdVersion>>,
    not_evaluated: Vec<NotEvaluated>,
    env: Option<RuleEnv>,
    /// A hash of every text read, in order.
    digest: u64,
}

impl std::fmt::Debug for CrdSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdSchemas")
            .field("versions", &self.versions.len())
            .field("not_evaluated", &self.not_evaluated.len())
            .finish()
    }
}

impl CrdSchemas {
    /// Reads every CRD in the YAML files at `paths` (a directory stands
    /// for its `.yaml`/`.yml`/`.json` files, recursively, in name order).
    /// A later CRD of the same group and kind replaces an earlier one.
    pub fn load(paths: &[PathBuf]) -> Result<Self, CrdError> {
        let mut crds = Self::default();
        for path in paths {
            let mut files = Vec::new();
            collect_files(path, &mut files)?;
            let mut added = 0;
            for file in &files {
                let text = std::fs::read_to_string(file).map_err(|source| CrdError::Read {
                    path: file.clone(),
                    source,
                })?;
                added += crds.add_yaml(&text, &file.display().to_string())?;
            }
            if added == 0 {
                return Err(CrdError::Empty {
                    origin: path.display().to_string(),
                });
            }
        }
        Ok(crds)
    }

    /// Adds the CRDs of one YAML text (other documents are skipped).
    /// Returns how many CRD versions were added.
    pub fn add_yaml(&mut self, text: &str, origin: &str) -> Result<usize, CrdError> {
        let mut h = std::hash::DefaultHasher::new();
        (self.digest, text).hash(&mut h);
        self.digest = h.finish();
        let mut added = 0;
        for (i, doc) in meshhub_proto::transcode::parse_yaml(text)
            .into_iter()
            .enumerate()
        {
            // A document that does not parse may be a CRD: one of
            // `standard-install.yaml` broken would drop its kind silently.
            let obj = doc.map_err(|e| CrdError::Document {
                origin: origin.to_owned(),
                document: i + 1,
                message: e.to_string(),
            })?;
            if obj.kind != "CustomResourceDefinition" {
                continue;
            }
            added += self.add_crd(&obj, origin)?;
        }
        Ok(added)
    }

    fn add_crd(&mut self, crd: &Object, origin: &str) -> Result<usize, CrdError> {
        let Some(spec) = crd.spec() else { return Ok(0) };
        let group = spec["group"].as_str().unwrap_or_default().to_owned();
        let kind = spec["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.versions
            .retain(|(g, k, _), _| !(g == &group && k == &kind));
        self.not_evaluated.retain(|n| {
            !(n.kind.starts_with(&format!("{group}/")) && n.kind.ends_with(&format!(" {kind}")))
        });
        let env = self.env.get_or_insert_with(RuleEnv::default);
        let mut added = 0;
        for v in spec["versions"].as_array().into_iter().flatten() {
            if v["served"] != true {
                continue;
            }
            let version = v["name"].as_str().unwrap_or_default().to_owned();
            let root = &v["schema"]["openAPIV3Schema"];
            let schema =
                Schema::read(root, "openAPIV3Schema", env).map_err(|source| CrdError::Schema {
                    origin: origin.to_owned(),
                    name: crd.metadata.name.clone(),
                    version: version.clone(),
                    source: Box::new(source),
                })?;
            schema.each_rule(&mut |r| {
                if let Some(reason) = r.not_evaluated() {
                    self.not_evaluated.push(NotEvaluated {
                        group: group.clone(),
                        version: version.clone(),
                        kind: kind.clone(),
                        schema_path: r.schema_path.clone(),
                        rule: r.rule.clone(),
                        reason: reason.clone(),
                    });
                }
            });
            let status_subresource = v["subresources"]["status"].is_object();
            self.versions.insert(
                (group.clone(), kind.clone(), version),
                Arc::new(CrdVersion {
                    schema,
                    status_subresource,
                }),
            );
            added += 1;
        }
        Ok(added)
    }

    /// Whether there is a schema for objects of this group, kind and
    /// version.
    pub fn covers(&self, group: &str, kind: &str, version: &str) -> bool {
        self.versions
            .contains_key(&(group.to_owned(), kind.to_owned(), version.to_owned()))
    }

    /// The `group/version Kind` of every schema held, sorted.
    pub fn kinds(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .versions
            .keys()
            .map(|(g, k, v)| format!("{g}/{v} {k}"))
            .collect();
        out.sort();
        out
    }

    /// The rules held that are not evaluated, with the reason.
    pub fn not_evaluated(&self) -> &[NotEvaluated] {
        &self.not_evaluated
    }

    /// A digest of every CRD text read (in order): two loads of the same
    /// files in one process have the same digest when the files did not
    /// change.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Whether no CRD is held.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// The problems the API server would find creating `obj`, or `None`
    /// when no CRD here serves its group, kind and version.
    pub fn problems(&self, obj: &Object) -> Option<Vec<Problem>> {
        let key = (
            obj.group().to_owned(),
            obj.kind.clone(),
            obj.version().to_owned(),
        );
        let crd = self.versions.get(&key)?;
        let env = self.env.as_ref()?;
        let mut root = Map::new();
        root.insert("apiVersion".into(), Value::from(obj.api_version.clone()));
        root.insert("kind".into(), Value::from(obj.kind.clone()));
        for (k, v) in &obj.content {
            if k == "status" && crd.status_subresource {
                continue;
            }
            root.insert(k.clone(), v.clone());
        }
        let mut root = Value::Object(root);
        // `metadata` is the API server's own (ObjectMeta), checked by the
        // kind's rules, not by the schema; CEL sees its `name` (and
        // `generateName`), as in the API server.
        let schema = &crd.schema;
        openapi::default(&mut root, schema);
        let mut f = openapi::Findings::default();
        openapi::check_root(&root, schema, &mut f);
        let mut report = f.report;
        if !f.blocking {
            if let Value::Object(m) = &mut root {
                m.insert(
                    "metadata".into(),
                    serde_json::json!({"name": obj.metadata.name}),
                );
            }
            rules::evaluate(env, &root, schema, "", &mut report);
        }
        Some(report.into_problems())
    }
}

/// The CRD files under `path` (itself, when a file).
fn collect_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), CrdError> {
    let read_err = |source| CrdError::Read {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if !meta.is_dir() {
        out.push(path.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect_files(&p, out)?;
        } else if p
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        {
            out.push(p);
        }
    }
    Ok(())
}
