//! The snapshot cache: one writer publishes group snapshots. A stream
//! watches its group once ([`SnapshotCache::watch_group`]) and compares the
//! versions of the collections it serves on each publish: one watch per
//! stream, whatever it subscribes. Single collections can be watched too
//! ([`SnapshotCache::watch`]: woken only when that collection's version
//! changes), for readers that follow one collection.

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

/// What a group watch sees.
#[derive(Clone, Debug)]
pub enum GroupState {
    /// The group has not been published yet: wait.
    Pending,
    /// The group's current snapshot.
    Ready(Arc<Snapshot>),
    /// The group was removed: streams serving it should end.
    Withdrawn,
}

struct Entry {
    snapshot: Option<Arc<Snapshot>>,
    group: watch::Sender<GroupState>,
    collections: HashMap<String, watch::Sender<CollectionState>>,
}

impl Default for Entry {
    fn default() -> Self {
        Self {
            snapshot: None,
            group: watch::Sender::new(GroupState::Pending),
            collections: HashMap::new(),
        }
    }
}

#[derive(Default)]
struct Inner {
    groups: HashMap<Group, Entry>,
}

/// Read handle: cheap to clone, shared by every stream.
#[derive(Clone, Default)]
pub struct SnapshotCache {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for SnapshotCache {
    /// The handle only; `get()` reads a group's snapshot.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotCache")
    }
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

    /// Watches a group: the receiver holds the current state at once and
    /// changes on every publish of the group (and when it is withdrawn).
    pub fn watch_group(&self, group: &str) -> watch::Receiver<GroupState> {
        self.lock()
            .groups
            .entry(Group::from(group))
            .or_default()
            .group
            .subscribe()
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

    /// Number of open watches of a group (for status pages): one per
    /// stream serving it, plus single-collection watches.
    pub fn watch_count(&self, group: &str) -> usize {
        self.lock().groups.get(group).map_or(0, |g| {
            g.group.receiver_count()
                + g.collections
                    .values()
                    .map(watch::Sender::receiver_count)
                    .sum::<usize>()
        })
    }
}

impl SnapshotWriter {
    /// A reader handle on the same cache.
    pub fn reader(&self) -> SnapshotCache {
        self.cache.clone()
    }

    /// Publishes a group's snapshot. Group watches are woken; watches of
    /// single collections only if their version changed. Returns the
    /// collections whose version changed among those watched singly.
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
        state
            .group
            .send_replace(GroupState::Ready(snapshot.clone()));
        state.snapshot = Some(snapshot);
        changed
    }

    /// Removes a group: its watches see [`CollectionState::Withdrawn`] and
    /// their streams end.
    pub fn remove(&self, group: &str) {
        let mut inner = self.cache.lock();
        if let Some(state) = inner.groups.remove(group) {
            state.group.send_replace(GroupState::Withdrawn);
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
    async fn a_group_watch_sees_every_publish_of_its_group_and_the_withdrawal() {
        let (writer, cache) = new();
        let mut a = cache.watch_group("a");
        let b = cache.watch_group("b");
        assert!(matches!(*a.borrow(), GroupState::Pending));
        let s1 = Arc::new(Snapshot::new().with_collection("vs", coll(&[("n/x", "1")])));
        writer.set("a", s1.clone());
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        match &*a.borrow_and_update() {
            GroupState::Ready(s) => assert!(Arc::ptr_eq(s, &s1)),
            other => panic!("unexpected {other:?}"),
        }
        // A late watcher holds the current snapshot at once.
        assert!(matches!(
            *cache.watch_group("a").borrow(),
            GroupState::Ready(_)
        ));
        assert_eq!(cache.watch_count("a"), 1);
        writer.remove("a");
        // `changed` (what streams wait on) reports the withdrawal before
        // the close.
        assert!(a.changed().await.is_ok());
        assert!(matches!(*a.borrow_and_update(), GroupState::Withdrawn));
        assert!(a.changed().await.is_err());
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
