//! The snapshot cache: one writer publishes group snapshots; streams watch
//! single collections of a group and are woken only when that collection's
//! version changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::snapshot::{CollectionSnapshot, Snapshot};

/// A snapshot group's name (one per cluster, plus the default group).
pub type Group = Arc<str>;

/// What a collection watch sees.
#[derive(Clone, Debug)]
pub enum CollectionState {
    /// The group has not been published yet: wait.
    Pending,
    /// The collection's current content.
    Ready(Arc<CollectionSnapshot>),
    /// The group was removed: streams serving it should end.
    Withdrawn,
}

impl CollectionState {
    /// The version, if ready.
    pub fn version(&self) -> Option<&str> {
        match self {
            Self::Ready(c) => Some(c.version()),
            _ => None,
        }
    }
}

#[derive(Default)]
struct GroupState {
    snapshot: Option<Arc<Snapshot>>,
    collections: HashMap<String, watch::Sender<CollectionState>>,
}

#[derive(Default)]
struct Inner {
    groups: HashMap<Group, GroupState>,
}

/// Read handle: cheap to clone, shared by every stream.
#[derive(Clone, Default)]
pub struct SnapshotCache {
    inner: Arc<Mutex<Inner>>,
}

/// The single writer of the cache (owned by the pipeline that builds snapshots).
pub struct SnapshotWriter {
    cache: SnapshotCache,
}

/// Creates a cache: its only writer, and a reader handle.
pub fn new() -> (SnapshotWriter, SnapshotCache) {
    let cache = SnapshotCache::default();
    (
        SnapshotWriter {
            cache: cache.clone(),
        },
        cache,
    )
}

impl SnapshotCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the maps half-updated
        // in a way that matters to readers; keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches one collection of one group. The receiver holds the current
    /// state at once and changes only when the collection's version does.
    pub fn watch(&self, group: &str, collection: &str) -> watch::Receiver<CollectionState> {
        let mut inner = self.lock();
        let state = inner.groups.entry(Group::from(group)).or_default();
        if let Some(tx) = state.collections.get(collection) {
            return tx.subscribe();
        }
        let initial = match &state.snapshot {
            Some(s) => CollectionState::Ready(s.collection(collection)),
            None => CollectionState::Pending,
        };
        let (tx, rx) = watch::channel(initial);
        state.collections.insert(collection.to_owned(), tx);
        rx
    }

    /// The group's current snapshot, if published.
    pub fn snapshot(&self, group: &str) -> Option<Arc<Snapshot>> {
        self.lock()
            .groups
            .get(group)
            .and_then(|g| g.snapshot.clone())
    }

    /// Published groups, sorted.
    pub fn groups(&self) -> Vec<Group> {
        let mut groups: Vec<Group> = self
            .lock()
            .groups
            .iter()
            .filter(|(_, g)| g.snapshot.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        groups.sort();
        groups
    }

    /// Number of open collection watches in a group (for status pages).
    pub fn watch_count(&self, group: &str) -> usize {
        self.lock().groups.get(group).map_or(0, |g| {
            g.collections
                .values()
                .map(watch::Sender::receiver_count)
                .sum()
        })
    }
}

impl SnapshotWriter {
    /// A reader handle on the same cache.
    pub fn reader(&self) -> SnapshotCache {
        self.cache.clone()
    }

    /// Publishes a group's snapshot. Watches of collections whose version
    /// changed are woken; the others are not. Returns the collections whose
    /// version changed among those being watched.
    pub fn set(&self, group: &str, snapshot: Arc<Snapshot>) -> Vec<String> {
        let mut inner = self.cache.lock();
        let state = inner.groups.entry(Group::from(group)).or_default();
        let mut changed = Vec::new();
        // Forget watches nobody holds any more.
        state.collections.retain(|_, tx| tx.receiver_count() > 0);
        for (name, tx) in &state.collections {
            let next = snapshot.collection(name);
            let modified = tx.send_if_modified(|cur| {
                if cur.version() == Some(next.version()) {
                    return false;
                }
                *cur = CollectionState::Ready(next.clone());
                true
            });
            if modified {
                changed.push(name.clone());
            }
        }
        state.snapshot = Some(snapshot);
        changed
    }

    /// Removes a group: its watches see [`CollectionState::Withdrawn`] and
    /// their streams end.
    pub fn remove(&self, group: &str) {
        let mut inner = self.cache.lock();
        if let Some(state) = inner.groups.remove(group) {
            for tx in state.collections.values() {
                tx.send_replace(CollectionState::Withdrawn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::EncodedResource;

    fn coll(names: &[(&str, &str)]) -> Arc<CollectionSnapshot> {
        Arc::new(CollectionSnapshot::new(
            names
                .iter()
                .map(|(n, v)| EncodedResource {
                    name: (*n).into(),
                    version: (*v).into(),
                    encoded: bytes::Bytes::from_static(b"x"),
                })
                .collect(),
        ))
    }

    #[tokio::test]
    async fn wakes_only_changed_collections() {
        let (writer, cache) = new();
        let mut vs = cache.watch("g", "vs");
        let mut dr = cache.watch("g", "dr");
        assert!(matches!(*vs.borrow(), CollectionState::Pending));

        let s1 = Snapshot::new()
            .with_collection("vs", coll(&[("a/x", "1")]))
            .with_collection("dr", coll(&[("a/y", "1")]));
        let changed = writer.set("g", Arc::new(s1.clone()));
        assert_eq!(changed.len(), 2);
        assert!(vs.has_changed().unwrap());
        assert!(dr.has_changed().unwrap());
        vs.borrow_and_update();
        dr.borrow_and_update();

        // Only vs changes.
        let s2 = s1.clone().with_collection("vs", coll(&[("a/x", "2")]));
        assert_eq!(writer.set("g", Arc::new(s2)), vec!["vs".to_owned()]);
        assert!(vs.has_changed().unwrap());
        assert!(!dr.has_changed().unwrap());

        // A late watcher sees the current state at once.
        let late = cache.watch("g", "dr");
        assert_eq!(late.borrow().version(), dr.borrow().version());
        // An unknown collection is ready and empty.
        let unknown = cache.watch("g", "nope");
        match &*unknown.borrow() {
            CollectionState::Ready(c) => assert!(c.is_empty()),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn other_groups_are_not_woken_and_remove_withdraws() {
        let (writer, cache) = new();
        let mut a = cache.watch("a", "vs");
        let b = cache.watch("b", "vs");
        writer.set(
            "a",
            Arc::new(Snapshot::new().with_collection("vs", coll(&[("n/x", "1")]))),
        );
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        a.borrow_and_update();
        writer.remove("a");
        // The sender is gone with the group; the last value says why.
        assert!(a.has_changed().is_err());
        assert!(matches!(*a.borrow(), CollectionState::Withdrawn));
        assert!(!b.has_changed().unwrap());
        assert_eq!(cache.groups(), Vec::<Group>::new());
    }
}
