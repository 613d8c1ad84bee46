//! Over ADS, the TrafficExtension type is served with every WasmPlugin of
//! the snapshot added as the TrafficExtension istiod 1.30+ makes of it
//! ([`meshhub_proto::translate`] says why: such an istiod reads only
//! TrafficExtensions and translates WasmPlugins only from its own
//! cluster's API). An istiod older than 1.30 never asks for the type, so
//! it sees only WasmPlugins; a newer one asks for both and applies the
//! TrafficExtensions, so a WasmPlugin takes effect on every release.
//!
//! The translation is done once per pair of collections (the snapshot's
//! TrafficExtensions and WasmPlugins), shared by every group and stream
//! that serves the same pair: groups with the same content share their
//! collection snapshots, so a fleet translates each plugin once per
//! change, not once per cluster.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use meshhub_proto::error_chain;
use meshhub_proto::translate::WasmPluginTranslation;

use crate::snapshot::{CollectionSnapshot, EncodedResource, Snapshot, View};

/// The TrafficExtension collection with the WasmPlugins translated in.
pub struct PluginsAsExtensions {
    translation: WasmPluginTranslation,
    memo: Mutex<Memo>,
}

/// Translations kept per (TrafficExtensions, WasmPlugins) pair, by
/// address; an entry whose inputs are gone is swept once the map has
/// doubled since the last sweep.
#[derive(Default)]
struct Memo {
    entries: HashMap<(usize, usize), Entry>,
    live_after_sweep: usize,
}

struct Entry {
    extensions: Weak<CollectionSnapshot>,
    plugins: Weak<CollectionSnapshot>,
    served: Arc<CollectionSnapshot>,
}

impl Entry {
    fn holds(
        &self,
        extensions: &Arc<CollectionSnapshot>,
        plugins: &Arc<CollectionSnapshot>,
    ) -> bool {
        self.extensions
            .upgrade()
            .is_some_and(|e| Arc::ptr_eq(&e, extensions))
            && self
                .plugins
                .upgrade()
                .is_some_and(|p| Arc::ptr_eq(&p, plugins))
    }

    fn live(&self) -> bool {
        self.extensions.strong_count() > 0 && self.plugins.strong_count() > 0
    }
}

impl PluginsAsExtensions {
    /// The view of `translation`'s TrafficExtension collection.
    pub fn new(translation: WasmPluginTranslation) -> Self {
        Self {
            translation,
            memo: Mutex::new(Memo::default()),
        }
    }

    /// The served collection: `extensions` plus each of `plugins`
    /// translated. A plugin that can't be translated is left out with a
    /// warning and counted (`meshhub_ads_translation_failures_total`); the
    /// others are served. A TrafficExtension of the same name as a
    /// translation (none can have one in Kubernetes) is kept over it.
    fn translate(
        &self,
        extensions: &CollectionSnapshot,
        plugins: &CollectionSnapshot,
    ) -> CollectionSnapshot {
        let mut out = Vec::with_capacity(extensions.len() + plugins.len());
        for (key, encoded) in plugins.keys().iter().zip(plugins.resources().iter()) {
            match self.translation.translate(encoded, &key.version) {
                Ok(t) => out.push(EncodedResource {
                    name: t.name.into(),
                    version: t.version.into(),
                    encoded: t.encoded,
                }),
                Err(e) => {
                    metrics::counter!("meshhub_ads_translation_failures_total", "kind" => "WasmPlugin")
                        .increment(1);
                    tracing::warn!(plugin = %key.name, version = %key.version, error = %error_chain(&e), "a WasmPlugin could not be translated into the TrafficExtension istiod 1.30+ reads; it is not served as one");
                }
            }
        }
        // Later names win in `CollectionSnapshot::new`: the real ones last.
        out.extend(
            extensions
                .keys()
                .iter()
                .zip(extensions.resources().iter())
                .map(|(k, r)| EncodedResource {
                    name: k.name.clone(),
                    version: k.version.clone(),
                    encoded: r.clone(),
                }),
        );
        CollectionSnapshot::new(out)
    }
}

impl View for PluginsAsExtensions {
    fn read(&self, snapshot: &Snapshot) -> Arc<CollectionSnapshot> {
        let extensions = snapshot.collection(self.translation.extension().collection());
        let plugins = snapshot.collection(self.translation.plugin().collection());
        if plugins.is_empty() {
            return extensions;
        }
        let key = (
            Arc::as_ptr(&extensions) as usize,
            Arc::as_ptr(&plugins) as usize,
        );
        {
            let memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = memo
                .entries
                .get(&key)
                .filter(|e| e.holds(&extensions, &plugins))
            {
                return e.served.clone();
            }
        }
        // Translated outside the lock; two streams meeting a new pair at
        // once may both translate it, and either result is the same.
        let served = Arc::new(self.translate(&extensions, &plugins));
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        memo.entries.insert(
            key,
            Entry {
                extensions: Arc::downgrade(&extensions),
                plugins: Arc::downgrade(&plugins),
                served: served.clone(),
            },
        );
        if memo.entries.len() > 2 * memo.live_after_sweep.max(32) {
            memo.entries.retain(|_, e| e.live());
            memo.live_after_sweep = memo.entries.len();
        }
        served
    }
}

#[cfg(test)]
mod tests;
