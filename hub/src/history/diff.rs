//! What changed between two stored versions of a group, object by object,
//! with a unified diff of the YAML of each changed object.

use std::collections::BTreeMap;

use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode;
use serde::Serialize;
use similar::TextDiff;

use super::{History, StoredVersion};
use crate::audit::is_secret;

/// How an object differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Only in the newer version.
    Added,
    /// Only in the older version.
    Removed,
    /// In both, with different content.
    Changed,
}

/// One object that differs.
#[derive(Clone, Debug, Serialize)]
pub struct ObjectChange {
    /// Its collection.
    pub collection: String,
    /// `namespace/name`.
    pub name: String,
    /// How.
    pub change: ChangeKind,
    /// For a changed object: a unified diff of its YAML (`from` → `to`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// The differences between two versions.
#[derive(Clone, Debug, Serialize)]
pub struct DiffView {
    /// The group.
    pub cluster: String,
    /// The older side's id and sequence number.
    pub from: (String, u64),
    /// The newer side's id and sequence number.
    pub to: (String, u64),
    /// Every object that differs, by collection and name.
    pub changes: Vec<ObjectChange>,
}

fn yaml(history: &History, kinds: &KindTable, collection: &str, digest: &str) -> String {
    let Some(kind) = kinds.by_collection(collection) else {
        return format!("# no schema known for {collection}\n");
    };
    let decoded = history
        .body(digest)
        .map_err(|e| e.to_string())
        .and_then(|b| transcode::decode_resource(kind, &b).map_err(|e| e.to_string()))
        .and_then(|o| transcode::to_yaml(&o).map_err(|e| e.to_string()));
    decoded.unwrap_or_else(|e| format!("# can't decode: {e}\n"))
}

/// The differences from `from` to `to` (blocking: reads bodies).
pub fn diff(
    history: &History,
    kinds: &KindTable,
    from: &StoredVersion,
    to: &StoredVersion,
) -> DiffView {
    let index = |v: &StoredVersion| -> BTreeMap<(String, String), String> {
        v.collections
            .iter()
            .flat_map(|(c, coll)| {
                coll.resources
                    .iter()
                    .map(move |r| ((c.clone(), r.name.clone()), r.digest.clone()))
            })
            .collect()
    };
    let (old, new) = (index(from), index(to));
    let mut changes = Vec::new();
    let keys: std::collections::BTreeSet<&(String, String)> =
        old.keys().chain(new.keys()).collect();
    for key in keys {
        let (collection, name) = key;
        let change = match (old.get(key), new.get(key)) {
            (None, Some(_)) => ChangeKind::Added,
            (Some(_), None) => ChangeKind::Removed,
            (Some(a), Some(b)) if a != b => ChangeKind::Changed,
            _ => continue,
        };
        let diff = (change == ChangeKind::Changed).then(|| {
            let secret = kinds
                .by_collection(collection)
                .is_some_and(|k| is_secret(k.kind()));
            if secret {
                return "# the content of Secret objects is not shown\n".to_owned();
            }
            let a = yaml(history, kinds, collection, &old[key]);
            let b = yaml(history, kinds, collection, &new[key]);
            TextDiff::from_lines(&a, &b)
                .unified_diff()
                .context_radius(3)
                .header(
                    &format!("{} #{}", from.id, from.seq),
                    &format!("{} #{}", to.id, to.seq),
                )
                .to_string()
        });
        changes.push(ObjectChange {
            collection: collection.clone(),
            name: name.clone(),
            change,
            diff,
        });
    }
    DiffView {
        cluster: to.cluster.clone(),
        from: (from.id.clone(), from.seq),
        to: (to.id.clone(), to.seq),
        changes,
    }
}
