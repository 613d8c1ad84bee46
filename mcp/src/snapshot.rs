//! Immutable, versioned snapshots of encoded resources.
//!
//! A [`CollectionSnapshot`] holds one collection's resources, each encoded
//! once as an `istio.mcp.v1alpha1.Resource`, in name order, with the
//! collection's version. A [`Snapshot`] is what one group (one cluster) sees:
//! a collection snapshot per collection. Both are shared behind [`Arc`] by
//! every stream that serves them; nothing is re-encoded per stream.

use std::cmp::Ordering;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use bytes::Bytes;
use meshhub_proto::wire::SharedResources;
use sha2::{Digest, Sha256};

/// One encoded resource and the two facts the protocol needs about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedResource {
    /// `metadata.name` (`namespace/name`).
    pub name: Arc<str>,
    /// `metadata.version`.
    pub version: Arc<str>,
    /// The encoded `istio.mcp.v1alpha1.Resource`.
    pub encoded: Bytes,
}

/// The name and version of one resource of a collection snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceKey {
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `metadata.version`.
    pub version: Arc<str>,
}

/// What changed between what a sink holds and a newer snapshot.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Resources added or changed (encoded), in name order.
    pub changed: SharedResources,
    /// Names removed, in name order.
    pub removed: Vec<String>,
}

impl Delta {
    /// The delta from `held` (sorted by name) to `to`: one merge of two
    /// sorted lists, no hashing.
    pub fn between(held: &[ResourceKey], to: &CollectionSnapshot) -> Self {
        let mut changed = Vec::new();
        let mut removed = Vec::new();
        let (mut i, mut j) = (0, 0);
        let new = to.keys();
        while i < held.len() || j < new.len() {
            let order = match (held.get(i), new.get(j)) {
                // Snapshots built from one another share their names'
                // strings: most entries compare by address.
                (Some(h), Some(n)) if Arc::ptr_eq(&h.name, &n.name) => Ordering::Equal,
                (Some(h), Some(n)) => h.name.cmp(&n.name),
                (Some(_), None) => Ordering::Less,
                (None, _) => Ordering::Greater,
            };
            match order {
                Ordering::Less => {
                    removed.push(held[i].name.to_string());
                    i += 1;
                }
                Ordering::Greater => {
                    changed.push(to.resources[j].clone());
                    j += 1;
                }
                Ordering::Equal => {
                    // `Arc<str>`'s equality compares addresses first.
                    if held[i].version != new[j].version {
                        changed.push(to.resources[j].clone());
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Self {
            changed: Arc::new(changed.into()),
            removed,
        }
    }
}

/// The last delta computed into a snapshot, and from which snapshot.
type DeltaMemo = Option<(Weak<CollectionSnapshot>, Arc<Delta>)>;

/// One collection's resources at one version.
#[derive(Debug)]
pub struct CollectionSnapshot {
    version: String,
    /// Encoded resources, sorted by name: the full state, shared as is.
    resources: SharedResources,
    /// Name and version of `resources[i]`, same order.
    keys: Vec<ResourceKey>,
    /// Streams moving from the same older snapshot to this one share one
    /// computed delta (after a change, that is nearly every stream).
    memo: Mutex<DeltaMemo>,
}

impl PartialEq for CollectionSnapshot {
    fn eq(&self, other: &Self) -> bool {
        self.version == other.version
            && self.keys == other.keys
            && self.resources == other.resources
    }
}

impl Eq for CollectionSnapshot {}

/// The version of an empty collection (also what an unknown collection gets).
pub static EMPTY: LazyLock<Arc<CollectionSnapshot>> =
    LazyLock::new(|| Arc::new(CollectionSnapshot::new(Vec::new())));

impl CollectionSnapshot {
    /// Builds a collection snapshot. Resources are sorted by name; a later
    /// duplicate name replaces an earlier one. The version is a digest of the
    /// names and versions, so it changes exactly when the content does (as
    /// long as resource versions change with content) and is stable across
    /// restarts.
    pub fn new(mut resources: Vec<EncodedResource>) -> Self {
        resources.sort_by(|a, b| a.name.cmp(&b.name));
        // Keep the last of equal names (stable sort keeps input order).
        let mut deduped: Vec<EncodedResource> = Vec::with_capacity(resources.len());
        for r in resources {
            match deduped.last_mut() {
                Some(last) if last.name == r.name => *last = r,
                _ => deduped.push(r),
            }
        }
        Self::from_sorted(deduped)
    }

    /// [`CollectionSnapshot::new`] of resources already sorted by name
    /// without duplicates (a publisher merging sorted lists): the same
    /// version, without sorting them again.
    pub fn from_sorted(resources: Vec<EncodedResource>) -> Self {
        debug_assert!(
            resources.windows(2).all(|w| w[0].name < w[1].name),
            "resources not sorted by name, or a name twice"
        );
        let mut hasher = Sha256::new();
        for r in &resources {
            hasher.update((r.name.len() as u64).to_le_bytes());
            hasher.update(r.name.as_bytes());
            hasher.update((r.version.len() as u64).to_le_bytes());
            hasher.update(r.version.as_bytes());
        }
        let version = hex::encode(&hasher.finalize()[..8]);
        Self::with_version(version, resources)
    }

    /// Builds a collection snapshot with an explicit version. `resources`
    /// must be sorted by name without duplicates (as [`CollectionSnapshot::new`]
    /// makes them); the caller answers for the version changing with content.
    pub fn with_version(version: String, resources: Vec<EncodedResource>) -> Self {
        let mut keys = Vec::with_capacity(resources.len());
        let mut encoded = Vec::with_capacity(resources.len());
        for r in resources {
            keys.push(ResourceKey {
                name: r.name,
                version: r.version,
            });
            encoded.push(r.encoded);
        }
        Self {
            version,
            resources: Arc::new(encoded.into()),
            keys,
            memo: Mutex::new(None),
        }
    }

    /// The delta from `base` (what a sink holds) to this snapshot, computed
    /// once per base and shared by every stream that asks for it.
    pub fn delta_from(&self, base: &Arc<CollectionSnapshot>) -> Arc<Delta> {
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((from, delta)) = memo.as_ref()
            && from.upgrade().is_some_and(|f| Arc::ptr_eq(&f, base))
        {
            return delta.clone();
        }
        let delta = Arc::new(Delta::between(base.keys(), self));
        *memo = Some((Arc::downgrade(base), delta.clone()));
        delta
    }

    /// The resources whose names `keep` accepts, as a snapshot of their
    /// own (same shared bytes; its version is the digest of what it holds).
    pub fn subset(&self, keep: impl Fn(&str) -> bool) -> CollectionSnapshot {
        let kept = self
            .keys
            .iter()
            .zip(self.resources.iter())
            .filter(|(k, _)| keep(&k.name))
            .map(|(k, r)| EncodedResource {
                name: k.name.clone(),
                version: k.version.clone(),
                encoded: r.clone(),
            })
            .collect();
        CollectionSnapshot::new(kept)
    }

    /// The collection version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Every encoded resource (full state), cheap to clone.
    pub fn resources(&self) -> &SharedResources {
        &self.resources
    }

    /// Name and version of each resource, in the order of [`Self::resources`].
    pub fn keys(&self) -> &[ResourceKey] {
        &self.keys
    }

    /// Number of resources.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the collection is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Total encoded size of the resources, in bytes.
    pub fn encoded_bytes(&self) -> usize {
        self.resources.iter().map(Bytes::len).sum()
    }

    /// Whether `resources`, sorted by name without duplicates, are exactly
    /// the names and versions held: then [`CollectionSnapshot::new`] would
    /// make this same version, and a publisher can keep this snapshot
    /// without sorting and hashing them (names and versions are usually
    /// the same shared strings, compared by address first). `false` for
    /// input in another order, which then goes through `new`.
    pub fn holds_exactly(&self, resources: &[EncodedResource]) -> bool {
        fn same(a: &Arc<str>, b: &Arc<str>) -> bool {
            Arc::ptr_eq(a, b) || a == b
        }
        self.keys.len() == resources.len()
            && self
                .keys
                .iter()
                .zip(resources)
                .all(|(k, r)| same(&k.name, &r.name) && same(&k.version, &r.version))
    }
}

/// A collection computed from a group's snapshot rather than held in it:
/// what a stream serves for a subscription whose content is derived (over
/// ADS, istiod 1.30+'s TrafficExtensions with the WasmPlugins translated).
/// Reading must be cheap when nothing it reads changed (keep what was
/// computed), and give the same version for the same content.
pub trait View: Send + Sync {
    /// The collection as `snapshot` gives it.
    fn read(&self, snapshot: &Snapshot) -> Arc<CollectionSnapshot>;
}

/// What a stream serves for one subscription.
#[derive(Clone)]
pub enum Served {
    /// A collection of the group's snapshot, by name.
    Collection(String),
    /// A collection computed from the group's snapshot.
    View(Arc<dyn View>),
}

impl Served {
    /// The served collection as `snapshot` gives it.
    pub fn read(&self, snapshot: &Snapshot) -> Arc<CollectionSnapshot> {
        match self {
            Self::Collection(name) => snapshot.collection(name),
            Self::View(view) => view.read(snapshot),
        }
    }
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Collection(name) => write!(f, "Collection({name:?})"),
            Self::View(_) => f.write_str("View"),
        }
    }
}

/// What one group sees: every collection it is served, each at a version.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Sorted by collection name, each once (a dozen or two: a sorted
    /// vector is smaller and faster to look up and drop than a map, and
    /// the names are shared strings: a build inserts the same names into
    /// every group's snapshot).
    collections: Vec<(Arc<str>, Arc<CollectionSnapshot>)>,
}

impl Snapshot {
    /// An empty snapshot (every collection answers empty).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets one collection.
    pub fn with_collection(
        mut self,
        collection: impl Into<Arc<str>>,
        c: Arc<CollectionSnapshot>,
    ) -> Self {
        self.insert(collection, c);
        self
    }

    /// Sets one collection.
    pub fn insert(&mut self, collection: impl Into<Arc<str>>, c: Arc<CollectionSnapshot>) {
        let name = collection.into();
        match self.position(&name) {
            Ok(i) => self.collections[i].1 = c,
            Err(i) => self.collections.insert(i, (name, c)),
        }
    }

    fn position(&self, collection: &str) -> Result<usize, usize> {
        self.collections
            .binary_search_by(|(name, _)| (**name).cmp(collection))
    }

    /// The collection, or the shared empty one if this snapshot lacks it: a
    /// collection nobody publishes is served as empty, with a version.
    pub fn collection(&self, collection: &str) -> Arc<CollectionSnapshot> {
        // No hint: a position past the end is never tried.
        let mut none = usize::MAX;
        self.collection_hinted(collection, &mut none)
    }

    /// [`Snapshot::collection`] for a reader that looks the same name up
    /// in snapshot after snapshot (a stream's subscriptions): `hint` is
    /// where the name was found last time, tried first (one comparison
    /// where a search takes several), and updated.
    pub fn collection_hinted(&self, collection: &str, hint: &mut usize) -> Arc<CollectionSnapshot> {
        if let Some((name, c)) = self.collections.get(*hint)
            && **name == *collection
        {
            return c.clone();
        }
        match self.position(collection) {
            Ok(i) => {
                *hint = i;
                self.collections[i].1.clone()
            }
            Err(_) => EMPTY.clone(),
        }
    }

    /// Whether the snapshot names this collection.
    pub fn contains(&self, collection: &str) -> bool {
        self.position(collection).is_ok()
    }

    /// Collections in name order.
    pub fn collections(&self) -> impl Iterator<Item = (&str, &Arc<CollectionSnapshot>)> {
        self.collections.iter().map(|(k, v)| (&**k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(name: &str, version: &str) -> EncodedResource {
        EncodedResource {
            name: name.into(),
            version: version.into(),
            encoded: Bytes::from(format!("{name}@{version}")),
        }
    }

    #[test]
    fn version_follows_content_not_order() {
        let a = CollectionSnapshot::new(vec![res("ns/a", "1"), res("ns/b", "1")]);
        let b = CollectionSnapshot::new(vec![res("ns/b", "1"), res("ns/a", "1")]);
        assert_eq!(a.version(), b.version());
        assert_eq!(a.keys()[0].name.as_ref(), "ns/a");
        let c = CollectionSnapshot::new(vec![res("ns/a", "2"), res("ns/b", "1")]);
        assert_ne!(a.version(), c.version());
        let d = CollectionSnapshot::new(vec![res("ns/a", "1")]);
        assert_ne!(a.version(), d.version());
        assert!(
            !EMPTY.version().is_empty(),
            "an empty collection still has a version"
        );
        assert_ne!(EMPTY.version(), d.version());
    }

    #[test]
    fn a_snapshot_holds_exactly_its_sorted_names_and_versions() {
        let list = vec![res("ns/a", "1"), res("ns/b", "1")];
        let c = CollectionSnapshot::new(list.clone());
        assert!(c.holds_exactly(&list));
        // Equal strings at other addresses count too.
        assert!(c.holds_exactly(&[res("ns/a", "1"), res("ns/b", "1")]));
        assert!(!c.holds_exactly(&[res("ns/a", "2"), res("ns/b", "1")]));
        assert!(!c.holds_exactly(&[res("ns/b", "1"), res("ns/a", "1")]));
        assert!(!c.holds_exactly(&[res("ns/a", "1")]));
        assert!(!c.holds_exactly(&[res("ns/a", "1"), res("ns/c", "1")]));
        assert!(EMPTY.holds_exactly(&[]));
    }

    #[test]
    fn sorted_input_gives_the_version_new_gives() {
        let list = vec![res("ns/a", "1"), res("ns/b", "2"), res("ns/c", "1")];
        let sorted = CollectionSnapshot::from_sorted(list.clone());
        let mut shuffled = list;
        shuffled.reverse();
        let new = CollectionSnapshot::new(shuffled);
        assert_eq!(sorted, new);
        assert_eq!(sorted.version(), new.version());
    }

    #[test]
    fn duplicate_names_keep_the_last() {
        let c = CollectionSnapshot::new(vec![res("ns/a", "1"), res("ns/a", "2")]);
        assert_eq!(c.len(), 1);
        assert_eq!(c.keys()[0].version.as_ref(), "2");
        assert_eq!(c.resources()[0], Bytes::from("ns/a@2"));
    }

    #[test]
    fn delta_merges_sorted_lists_and_is_shared() {
        let base = Arc::new(CollectionSnapshot::new(vec![
            res("a", "1"),
            res("b", "1"),
            res("c", "1"),
        ]));
        let next = CollectionSnapshot::new(vec![res("a", "1"), res("b", "2"), res("d", "1")]);
        let d = next.delta_from(&base);
        assert_eq!(d.changed[..], [Bytes::from("b@2"), Bytes::from("d@1")]);
        assert_eq!(d.removed, ["c"]);
        // A second stream from the same base gets the same computation.
        assert!(Arc::ptr_eq(&d, &next.delta_from(&base)));
        // Another base is computed anew.
        let other = Arc::new(CollectionSnapshot::new(vec![res("d", "1")]));
        let d2 = next.delta_from(&other);
        assert_eq!(d2.changed[..], [Bytes::from("a@1"), Bytes::from("b@2")]);
        assert!(d2.removed.is_empty());
        // Empty on both sides.
        assert_eq!(
            Delta::between(&[], &CollectionSnapshot::new(vec![])),
            Delta::default()
        );
    }

    #[test]
    fn missing_collection_is_empty() {
        let s = Snapshot::new();
        assert!(s.collection("x").is_empty());
        assert_eq!(s.collection("x").version(), EMPTY.version());
    }

    #[test]
    fn collections_are_kept_sorted_and_found_with_or_without_a_hint() {
        let one = |n: &str| Arc::new(CollectionSnapshot::new(vec![res(n, "1")]));
        let mut s = Snapshot::new()
            .with_collection("c", one("c"))
            .with_collection("a", one("a"));
        s.insert("b", one("b"));
        s.insert("a", one("a2"));
        let names: Vec<&str> = s.collections().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(s.collection("a").keys()[0].name.as_ref(), "a2");
        assert!(s.contains("c") && !s.contains("d"));
        let mut hint = 0;
        assert_eq!(
            s.collection_hinted("c", &mut hint).keys()[0].name.as_ref(),
            "c"
        );
        assert_eq!(hint, 2, "the hint follows the name");
        assert_eq!(
            s.collection_hinted("c", &mut hint).keys()[0].name.as_ref(),
            "c"
        );
        // A stale hint (another snapshot's layout) falls back to a search.
        let mut stale = 0;
        assert_eq!(
            s.collection_hinted("b", &mut stale).keys()[0].name.as_ref(),
            "b"
        );
        assert!(s.collection_hinted("d", &mut stale).is_empty());
    }
}
