//! A kind that a newer istiod reads as another kind: a WasmPlugin as the
//! TrafficExtension istiod 1.30+ reads in its place.
//!
//! From Istio 1.30, istiod's push context and its ECDS read only
//! TrafficExtension. It turns WasmPlugins into TrafficExtensions itself,
//! but only for those read from its own cluster's API
//! (`pilot/pkg/config/kube/extensions`); a WasmPlugin received from an
//! `xds://` config source is held and never applied (its events are even
//! suppressed). So whoever serves such an istiod over ADS serves each
//! WasmPlugin a second time, translated as istiod translates it:
//!
//! * named `<name>~istio-translated-wasmplugin` in the plugin's namespace
//!   (`~` is not a valid Kubernetes name character: no real
//!   TrafficExtension can have that name);
//! * `selector`, `phase` (same numbers: AUTHN 1, AUTHZ 2, STATS 3),
//!   `priority` and `match` (mode, ports) as they are; `targetRefs`, or
//!   the deprecated singular `targetRef` when `targetRefs` is empty;
//! * `url`, `sha256`, `imagePullPolicy`, `imagePullSecret`, `pluginConfig`,
//!   `pluginName`, `failStrategy`, `vmConfig` and `type` under `wasm`
//!   (`verificationKey` is not carried, as istiod does not);
//! * the plugin's version and creation time; no labels or annotations.

use bytes::Bytes;
use prost::Message as _;
use serde_json::{Map, Value};

use crate::kinds::{Kind, KindTable};
use crate::object::{Object, ObjectMeta};
use crate::transcode::{TranscodeError, decode_resource, object_to_resource};

/// What istiod appends to the name of a TrafficExtension it made from a
/// WasmPlugin.
pub const TRANSLATED_WASM_PLUGIN_SUFFIX: &str = "~istio-translated-wasmplugin";

/// The `wasm` fields of a TrafficExtension taken from a WasmPlugin's spec.
const WASM_FIELDS: [&str; 9] = [
    "url",
    "sha256",
    "imagePullPolicy",
    "imagePullSecret",
    "pluginConfig",
    "pluginName",
    "failStrategy",
    "vmConfig",
    "type",
];

/// The TrafficExtension istiod 1.30+ makes of `plugin`, a WasmPlugin
/// object (its `spec` as canonical protobuf JSON).
pub fn traffic_extension_of(plugin: &Object) -> Object {
    let empty = Map::new();
    let spec = plugin
        .content
        .get("spec")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut out = Map::new();
    if let Some(selector) = spec.get("selector") {
        out.insert("selector".into(), selector.clone());
    }
    let refs = spec
        .get("targetRefs")
        .filter(|r| r.as_array().is_some_and(|a| !a.is_empty()));
    match (refs, spec.get("targetRef")) {
        (Some(refs), _) => {
            out.insert("targetRefs".into(), refs.clone());
        }
        (None, Some(one)) => {
            out.insert("targetRefs".into(), Value::Array(vec![one.clone()]));
        }
        (None, None) => {}
    }
    // PluginPhase and ExecutionPhase share their numbers; only the name
    // of 0 differs (and 0 is the default, left out).
    match spec.get("phase") {
        Some(Value::String(p)) if p == "UNSPECIFIED_PHASE" => {}
        Some(Value::Number(n)) if n.as_i64() == Some(0) => {}
        Some(p) => {
            out.insert("phase".into(), p.clone());
        }
        None => {}
    }
    for field in ["priority", "match"] {
        if let Some(v) = spec.get(field) {
            out.insert(field.into(), v.clone());
        }
    }
    let wasm: Map<String, Value> = WASM_FIELDS
        .iter()
        .filter_map(|f| spec.get(*f).map(|v| ((*f).to_owned(), v.clone())))
        .collect();
    out.insert("wasm".into(), Value::Object(wasm));
    Object {
        api_version: "extensions.istio.io/v1alpha1".into(),
        kind: "TrafficExtension".into(),
        metadata: ObjectMeta {
            name: format!("{}{TRANSLATED_WASM_PLUGIN_SUFFIX}", plugin.metadata.name),
            namespace: plugin.metadata.namespace.clone(),
            resource_version: plugin.metadata.resource_version.clone(),
            creation_timestamp: plugin.metadata.creation_timestamp.clone(),
            ..ObjectMeta::default()
        },
        content: Map::from_iter([("spec".to_owned(), Value::Object(out))]),
    }
}

/// One translated resource: its MCP name and version, and its encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Translated {
    /// `namespace/<name>~istio-translated-wasmplugin`.
    pub name: String,
    /// The plugin's MCP version.
    pub version: String,
    /// The encoded `istio.mcp.v1alpha1.Resource` (body TrafficExtension).
    pub encoded: Bytes,
}

/// The two kinds a translation reads and writes.
#[derive(Clone, Debug)]
pub struct WasmPluginTranslation {
    plugin: Kind,
    extension: Kind,
}

impl WasmPluginTranslation {
    /// The translation between `kinds`' WasmPlugin and TrafficExtension;
    /// `None` when the table lacks either.
    pub fn new(kinds: &KindTable) -> Option<Self> {
        let group = "extensions.istio.io";
        Some(Self {
            plugin: kinds.by_group_kind(group, "WasmPlugin")?.clone(),
            extension: kinds.by_group_kind(group, "TrafficExtension")?.clone(),
        })
    }

    /// The WasmPlugin kind (its collection is what is translated).
    pub fn plugin(&self) -> &Kind {
        &self.plugin
    }

    /// The TrafficExtension kind (its collection is what is served with
    /// the translations added).
    pub fn extension(&self) -> &Kind {
        &self.extension
    }

    /// An encoded WasmPlugin resource (`version`: its MCP version) as the
    /// encoded TrafficExtension resource istiod 1.30+ reads in its place.
    pub fn translate(&self, encoded: &[u8], version: &str) -> Result<Translated, TranscodeError> {
        let mut plugin = decode_resource(&self.plugin, encoded)?;
        plugin.metadata.resource_version = Some(version.to_owned());
        let resource = object_to_resource(&self.extension, &traffic_extension_of(&plugin))?;
        let meta = resource.metadata.clone().unwrap_or_default();
        Ok(Translated {
            name: meta.name,
            version: meta.version,
            encoded: resource.encode_to_vec().into(),
        })
    }
}

#[cfg(test)]
mod tests;
