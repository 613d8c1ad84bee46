//! What changed between two stored versions of a group, object by object,
//! with a unified diff of the YAML of each changed object.

use std::collections::BTreeMap;

use meshhub_api::history::{ChangeKind, DiffView, ObjectChange};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode;
use similar::TextDiff;

use super::{History, StoredVersion};
use crate::audit::is_secret;

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
