//! Every group's snapshot, assembled in proportion to what changed.
//!
//! Objects placed alike share one placement list (the store interns them);
//! the objects of one list are a *class*. A group receives every class
//! whose list names it: its *signature*. Groups of one signature receive
//! the same objects, so they share one snapshot, built once (with the
//! default "every object to every cluster", every cluster has the same
//! signature). A build compares each class's objects with the last build's,
//! collection by collection; a signature none of whose classes changed
//! keeps its snapshot as it was, and one whose classes changed rebuilds
//! only the collections that changed.
//!
//! The cost of a build is one pass over the objects (each is pushed into
//! its class once, not into each of its groups), a lookup per group and
//! a pointer comparison per collection of each group's snapshot, and the
//! collections that changed in the signatures they reach — not the sum
//! of every group's size, which is what it was (issue 40). Signatures
//! differing only in a cluster's own objects each build their copy of a
//! changed shared collection.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use meshhub_analyze::Facts;
use meshhub_mcp::cache::Group;
use meshhub_mcp::snapshot::{CollectionSnapshot, EMPTY, EncodedResource, Snapshot};

use crate::store::Accepted;

/// What the assembly reads of one object.
pub(super) struct Placed<'a> {
    /// Its groups (the store's interned list).
    pub(super) groups: &'a Arc<[Group]>,
    /// Its collection.
    pub(super) collection: &'a Arc<str>,
    /// It, encoded.
    pub(super) resource: &'a EncodedResource,
    /// What analysis reads of it.
    pub(super) facts: Option<&'a Arc<Facts>>,
}

impl<'a> From<&'a Arc<Accepted>> for Placed<'a> {
    fn from(a: &'a Arc<Accepted>) -> Self {
        Self {
            groups: &a.groups,
            collection: &a.key.collection,
            resource: &a.resource,
            facts: a.facts.as_ref(),
        }
    }
}

/// One placement list, told apart by address (the store hands out one
/// list per distinct placement). Holding it keeps the address from being
/// reused by another list.
#[derive(Clone, Debug)]
struct Class(Arc<[Group]>);

impl Class {
    fn address(&self) -> usize {
        Arc::as_ptr(&self.0).cast::<()>() as usize
    }
}

impl PartialEq for Class {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Class {}

impl Hash for Class {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.address().hash(state);
    }
}

/// A class's objects per collection, each list sorted by name.
type Content = BTreeMap<Arc<str>, Vec<EncodedResource>>;

/// What a class changed since the last build.
enum Change {
    /// Nothing.
    None,
    /// These collections.
    In(BTreeSet<Arc<str>>),
    /// It is new: everything.
    New,
}

impl Change {
    fn touches(&self, collection: &str) -> bool {
        match self {
            Self::None => false,
            Self::In(c) => c.contains(collection),
            Self::New => true,
        }
    }
}

/// The last build, kept by the pipeline to compare the next with.
#[derive(Default)]
pub(super) struct Assembly {
    classes: HashMap<Class, Content>,
    shared: HashMap<Box<[Class]>, Arc<Snapshot>>,
}

/// One build: each group's snapshot, and what analysis reads of it.
pub(super) struct Assembled<'a> {
    /// Per group, its signature (an index into `signatures`).
    of_group: HashMap<Group, usize>,
    /// Per signature, its snapshot and its classes (indices into
    /// `facts`).
    signatures: Vec<(Arc<Snapshot>, Vec<usize>)>,
    /// Per class, its objects' facts (empty unless analysing).
    facts: Vec<Vec<&'a Arc<Facts>>>,
}

impl<'a> Assembled<'a> {
    /// `group`'s signature and snapshot (every group of the build has
    /// one).
    pub(super) fn of(&self, group: &Group) -> Option<(usize, &Arc<Snapshot>)> {
        let s = *self.of_group.get(group)?;
        Some((s, &self.signatures[s].0))
    }

    /// The facts of a signature's objects.
    pub(super) fn facts(&self, signature: usize) -> Vec<&'a Arc<Facts>> {
        self.signatures[signature]
            .1
            .iter()
            .flat_map(|&c| self.facts[c].iter().copied())
            .collect()
    }

    /// How many distinct snapshots the build holds.
    pub(super) fn distinct(&self) -> usize {
        self.signatures.len()
    }
}

impl Assembly {
    /// Assembles every group of `groups` from `objects` (sorted by key, as
    /// the store resolves them), starting each with every collection of
    /// `collections`, empty. A signature new since the last build is
    /// compared with `previous` (each group's last snapshot), so that a
    /// group whose content did not move keeps its collections.
    pub(super) fn build<'a>(
        &mut self,
        objects: impl Iterator<Item = Placed<'a>>,
        groups: &[Group],
        collections: &[Arc<str>],
        analysing: bool,
        previous: &HashMap<Group, Arc<Snapshot>>,
    ) -> Assembled<'a> {
        // 1. The classes, in one pass over the objects.
        let mut index: HashMap<usize, usize> = HashMap::new();
        let mut classes: Vec<(Class, Content)> = Vec::new();
        let mut facts: Vec<Vec<&'a Arc<Facts>>> = Vec::new();
        for obj in objects {
            let address = Arc::as_ptr(obj.groups).cast::<()>() as usize;
            let i = *index.entry(address).or_insert_with(|| {
                classes.push((Class(obj.groups.clone()), Content::new()));
                facts.push(Vec::new());
                classes.len() - 1
            });
            classes[i]
                .1
                .entry(obj.collection.clone())
                .or_default()
                .push(obj.resource.clone());
            if let (true, Some(f)) = (analysing, obj.facts) {
                facts[i].push(f);
            }
        }
        let changes: Vec<Change> = classes
            .iter()
            .map(|(class, now)| match self.classes.get(class) {
                None => Change::New,
                Some(before) => changed_collections(before, now),
            })
            .collect();

        // 2. Each group's signature: the classes naming it, in address
        // order (so that equal sets are equal lists, here and next build).
        let mut order: Vec<usize> = (0..classes.len()).collect();
        order.sort_unstable_by_key(|&i| classes[i].0.address());
        let mut members: HashMap<&Group, Vec<usize>> =
            groups.iter().map(|g| (g, Vec::new())).collect();
        for &i in &order {
            for g in classes[i].0.0.iter() {
                if let Some(m) = members.get_mut(g) {
                    m.push(i);
                }
            }
        }

        // 3. One snapshot per distinct signature.
        let mut all_collections: BTreeSet<Arc<str>> = collections.iter().cloned().collect();
        for (_, content) in &classes {
            all_collections.extend(content.keys().cloned());
        }
        let mut by_members: HashMap<Vec<usize>, usize> = HashMap::new();
        let mut signatures: Vec<(Arc<Snapshot>, Vec<usize>)> = Vec::new();
        let mut shared = HashMap::new();
        let mut of_group = HashMap::with_capacity(groups.len());
        for group in groups {
            let m = members.remove(group).unwrap_or_default();
            if let Some(&s) = by_members.get(&m) {
                of_group.insert(group.clone(), s);
                continue;
            }
            let key: Box<[Class]> = m.iter().map(|&i| classes[i].0.clone()).collect();
            let last = self.shared.get(&key);
            let snapshot = match last {
                Some(last) if m.iter().all(|&i| matches!(changes[i], Change::None)) => last.clone(),
                _ => {
                    let reference = last.or_else(|| previous.get(group));
                    // With the last build's snapshot of this very
                    // signature, only the collections its classes changed
                    // can differ; with another's (a group's), any can.
                    let touched =
                        |c: &str| last.is_none() || m.iter().any(|&i| changes[i].touches(c));
                    assemble(&classes, &m, &all_collections, reference, touched)
                }
            };
            shared.insert(key, snapshot.clone());
            by_members.insert(m.clone(), signatures.len());
            of_group.insert(group.clone(), signatures.len());
            signatures.push((snapshot, m));
        }

        self.classes = classes.into_iter().collect();
        self.shared = shared;
        Assembled {
            of_group,
            signatures,
            facts,
        }
    }
}

/// One signature's snapshot: `reference` itself when nothing differs from
/// it, else a new one that keeps each of its collections that did not
/// change.
fn assemble(
    classes: &[(Class, Content)],
    members: &[usize],
    collections: &BTreeSet<Arc<str>>,
    reference: Option<&Arc<Snapshot>>,
    touched: impl Fn(&str) -> bool,
) -> Arc<Snapshot> {
    let mut snapshot = Snapshot::new();
    let mut same = reference.is_some();
    for coll in collections {
        let old = reference.map(|r| r.collection(coll));
        let c = match old {
            Some(old) if !touched(coll) => old,
            old => {
                let list = merged(classes, members, coll);
                match old {
                    Some(old) if old.holds_exactly(&list) => old,
                    _ => {
                        same = false;
                        Arc::new(CollectionSnapshot::new(list))
                    }
                }
            }
        };
        snapshot.insert(coll.as_ref(), c);
    }
    match reference {
        Some(r) if same && r.collections().count() == collections.len() => r.clone(),
        _ => Arc::new(snapshot),
    }
}

/// The signature's objects of one collection, sorted by name (a class
/// holds each object once and the classes are disjoint, so there are no
/// duplicates).
fn merged(
    classes: &[(Class, Content)],
    members: &[usize],
    collection: &str,
) -> Vec<EncodedResource> {
    let mut lists = members
        .iter()
        .filter_map(|&i| classes[i].1.get(collection))
        .filter(|l| !l.is_empty());
    let Some(first) = lists.next() else {
        return Vec::new();
    };
    let mut out = first.clone();
    let mut more = false;
    for l in lists {
        out.extend(l.iter().cloned());
        more = true;
    }
    if more {
        out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    }
    out
}

/// The collections whose objects differ between two builds of a class.
fn changed_collections(before: &Content, now: &Content) -> Change {
    let mut changed = BTreeSet::new();
    for (coll, list) in now {
        if before.get(coll).is_none_or(|b| !same_list(b, list)) {
            changed.insert(coll.clone());
        }
    }
    for coll in before.keys() {
        if !now.contains_key(coll) {
            changed.insert(coll.clone());
        }
    }
    if changed.is_empty() {
        Change::None
    } else {
        Change::In(changed)
    }
}

/// Same names and versions in the same order (the shared strings compare
/// by address first).
fn same_list(a: &[EncodedResource], b: &[EncodedResource]) -> bool {
    fn same(x: &Arc<str>, y: &Arc<str>) -> bool {
        Arc::ptr_eq(x, y) || x == y
    }
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| same(&x.name, &y.name) && same(&x.version, &y.version))
}

/// `snapshot` with `collections` empty (what a cluster that can't take
/// their kind is served: [`super::carried`]).
pub(super) fn without<'c>(
    snapshot: &Arc<Snapshot>,
    collections: impl IntoIterator<Item = &'c Arc<str>>,
) -> Arc<Snapshot> {
    let mut out = Snapshot::clone(snapshot);
    for c in collections {
        out.insert(c.as_ref(), EMPTY.clone());
    }
    Arc::new(out)
}

/// Whether two snapshots hold the same content: the same collections,
/// each the same one or at the same version (a digest of its names and
/// versions). A group whose content did not move keeps its snapshot even
/// when its signature's was assembled from another group's.
pub(super) fn same_snapshot(a: &Arc<Snapshot>, b: &Arc<Snapshot>) -> bool {
    Arc::ptr_eq(a, b)
        || (a.collections().count() == b.collections().count()
            && a.collections()
                .zip(b.collections())
                .all(|((n1, c1), (n2, c2))| {
                    n1 == n2 && (Arc::ptr_eq(c1, c2) || c1.version() == c2.version())
                }))
}

#[cfg(test)]
mod tests;
