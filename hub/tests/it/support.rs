//! What the modules share beyond `meshhub_e2e::inproc`: reading what a
//! running hub or agent serves.

use std::collections::BTreeMap;

use meshhub_mcp::cache::SnapshotCache;
use meshhub_testkit::objects::VS;

/// The virtual services `cache` serves to `group`: name → version.
pub fn virtual_services(cache: &SnapshotCache, group: &str) -> BTreeMap<String, String> {
    cache
        .snapshot(group)
        .map(|s| {
            s.collection(VS)
                .keys()
                .iter()
                .map(|k| (k.name.to_string(), k.version.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// The names of the virtual services `cache` serves to `group`, sorted.
pub fn names(cache: &SnapshotCache, group: &str) -> Vec<String> {
    virtual_services(cache, group).into_keys().collect()
}
