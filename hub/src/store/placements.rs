//! Placement lists interned: every object placed into the same groups
//! holds the same `Arc<[Group]>`.
//!
//! With the default "every object to every cluster", each object's list
//! names every group: 200 objects at 10,000 clusters would hold 2 million
//! group handles (32 MB) if each had its own. Interned, they hold one list,
//! and the pipeline tells placements apart by address
//! ([`crate::pipeline`]'s assembly), never hashing a list per object per
//! build.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use meshhub_mcp::cache::Group;

/// The lists in use (objects are placed on the rayon pool, hence the lock;
/// it is held for one lookup, never across anything else).
#[derive(Debug, Default)]
pub(super) struct Placements {
    lists: Mutex<HashSet<Arc<[Group]>>>,
    /// How many lists were held after the last sweep.
    kept: usize,
}

/// Lists past this many beyond those kept at the last sweep trigger the
/// next one.
const SWEEP_SLACK: usize = 64;

impl Placements {
    /// The list equal to `groups` that is already in use, or `groups`,
    /// now in use.
    pub(super) fn intern(&self, groups: Arc<[Group]>) -> Arc<[Group]> {
        let mut lists = self.lists.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = lists.get(&groups) {
            return held.clone();
        }
        lists.insert(groups.clone());
        groups
    }

    /// Forgets the lists no object holds any more, once enough have
    /// gathered since the last sweep (a sweep visits every list: it runs
    /// when their number has doubled, so its cost per placement is
    /// constant). Call where no placement is under way.
    pub(super) fn sweep(&mut self) {
        let lists = self.lists.get_mut().unwrap_or_else(PoisonError::into_inner);
        if lists.len() <= 2 * self.kept + SWEEP_SLACK {
            return;
        }
        lists.retain(|l| Arc::strong_count(l) > 1);
        self.kept = lists.len();
    }

    /// Forgets every list (the rules changed: every object is placed
    /// again).
    pub(super) fn clear(&mut self) {
        self.lists
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.kept = 0;
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lists
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> Arc<[Group]> {
        names.iter().map(|n| Group::from(*n)).collect()
    }

    #[test]
    fn equal_lists_are_one_list_and_unused_ones_are_swept() {
        let mut p = Placements::default();
        let a = p.intern(list(&["c1", "c2"]));
        let b = p.intern(list(&["c1", "c2"]));
        assert!(Arc::ptr_eq(&a, &b));
        let c = p.intern(list(&["c1"]));
        assert!(!Arc::ptr_eq(&a, &c));
        // Lists placed once and dropped: swept when they pile up.
        for i in 0..200 {
            drop(p.intern(list(&[&format!("x{i}")])));
        }
        p.sweep();
        assert_eq!(p.len(), 2, "only the lists still held stay");
        drop(c);
        let again = p.intern(list(&["c1", "c2"]));
        assert!(Arc::ptr_eq(&a, &again));
    }
}
