//! The `sources:` list: each source's block (checked by its kind's own
//! `spec` module), unique names, and the kind table the sources make
//! together (Istio's kinds and the `extraKinds` of the Kubernetes sources).

use std::collections::BTreeSet;
use std::path::Path;

use meshhub_mcp::settings::SettingError;
use meshhub_proto::kinds::KindTable;
use serde::Deserialize;

use super::file::spec::{FileSourceSpec, RawFileSource};
use super::kube::spec::{KubeSourceSpec, RawKubeSource};
use super::mcp::spec::{McpSourceSpec, RawMcpSource};

/// One source of objects.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceSpec {
    /// A watched directory tree of YAML and JSON files.
    File(FileSourceSpec),
    /// A Kubernetes API server, watched.
    Kubernetes(KubeSourceSpec),
    /// An upstream MCP `ResourceSource`, subscribed to as a sink.
    Mcp(McpSourceSpec),
}

impl SourceSpec {
    /// The source's name (unique in a configuration).
    pub fn name(&self) -> &str {
        match self {
            Self::File(f) => &f.name,
            Self::Kubernetes(k) => &k.name,
            Self::Mcp(m) => &m.name,
        }
    }
}

/// One entry of `sources:` as written: a name and exactly one kind.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawSource {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    file: Option<RawFileSource>,
    #[serde(default)]
    kubernetes: Option<RawKubeSource>,
    #[serde(default)]
    mcp: Option<RawMcpSource>,
}

/// The checked sources and the kind table they serve.
#[derive(Clone, Debug)]
pub struct Sources {
    /// The sources, in configuration order.
    pub sources: Vec<SourceSpec>,
    /// Istio's kinds plus the `extraKinds` of every Kubernetes source.
    pub kinds: KindTable,
}

/// Checks the `sources:` list (errors name the setting from the top of the
/// file: `sources[2].file.path`). `base` is the configuration file's
/// directory; `config_file` is never read as objects.
pub fn check(
    raw: Vec<RawSource>,
    base: &Path,
    config_file: &Path,
) -> Result<Sources, SettingError> {
    let mut sources = Vec::new();
    let mut names = BTreeSet::new();
    let mut kinds = KindTable::builtin();
    let mut listed_collections = Vec::new();
    for (i, s) in raw.into_iter().enumerate() {
        let at = |block: &str| format!("sources[{i}].{block}");
        let spec = match (s.file, s.kubernetes, s.mcp) {
            (Some(file), None, None) => SourceSpec::File(
                file.check(s.name, base, config_file)
                    .map_err(|e| e.within(&at("file")))?,
            ),
            (None, Some(k), None) => {
                let spec = k
                    .check(s.name, base)
                    .map_err(|e| e.within(&at("kubernetes")))?;
                kinds = with_extra_kinds(kinds, &spec).map_err(|e| e.within(&at("kubernetes")))?;
                SourceSpec::Kubernetes(spec)
            }
            (None, None, Some(m)) => {
                // Checked against the kind table once every source's
                // extra kinds are in it.
                if m.lists_collections() {
                    listed_collections.push(i);
                }
                SourceSpec::Mcp(m.check(s.name, base).map_err(|e| e.within(&at("mcp")))?)
            }
            _ => {
                return Err(SettingError::new(
                    format!("sources[{i}]"),
                    "a source needs exactly one of `file: {path: <dir>}`, `kubernetes: {...}` or `mcp: {address: <url>}`",
                ));
            }
        };
        let name = spec.name().to_owned();
        if name.is_empty() {
            return Err(SettingError::new(at("name"), "must not be empty"));
        }
        if !names.insert(name.clone()) {
            return Err(SettingError::new(
                at("name"),
                format!("duplicate source name {name:?}"),
            ));
        }
        sources.push(spec);
    }
    if sources.is_empty() {
        return Err(SettingError::new(
            "sources",
            "at least one source is needed",
        ));
    }
    for (i, s) in sources.iter_mut().enumerate() {
        let SourceSpec::Mcp(m) = s else { continue };
        if !listed_collections.contains(&i) {
            m.collections = kinds.iter().map(|k| k.collection().to_owned()).collect();
            continue;
        }
        for (j, c) in m.collections.iter().enumerate() {
            if kinds.by_collection(c).is_none() {
                return Err(SettingError::new(
                    format!("sources[{i}].mcp.collections[{j}]"),
                    format!(
                        "{c:?} is not a collection of the hub's kinds (Istio's, and the extraKinds of the Kubernetes sources)"
                    ),
                ));
            }
        }
    }
    Ok(Sources { sources, kinds })
}

/// `kinds` with the extra kinds of a Kubernetes source (errors name
/// `extraKinds[j]`). The same extra kind in two sources is one kind.
fn with_extra_kinds(
    mut kinds: KindTable,
    spec: &KubeSourceSpec,
) -> Result<KindTable, SettingError> {
    for (j, extra) in spec.extra_kinds.iter().enumerate() {
        let field = || format!("extraKinds[{j}]");
        let kind = extra
            .to_kind()
            .map_err(|e| SettingError::new(field(), e.to_string()))?;
        // Already carried: the same kind of another source, or a kind
        // meshhub carries itself (a Gateway API kind listed before it was
        // built in, at any version).
        if kinds.by_collection(kind.collection()).is_some()
            || kinds
                .by_group_kind(kind.group(), kind.kind())
                .is_some_and(meshhub_proto::kinds::Kind::is_builtin)
        {
            continue;
        }
        kinds = kinds
            .with_kind(kind)
            .map_err(|e| SettingError::new(field(), e.to_string()))?;
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests;
