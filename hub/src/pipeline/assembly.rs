//! Every group's snapshot, assembled in proportion to what changed.
//!
//! Objects placed alike share one placement list (the store interns them);
//! the objects of one list are a *class*. A group receives every class
//! whose list names it: its *signature*. Groups of one signature receive
//! the same objects, so they share one snapshot, built once (with the
//! default "every object to every cluster", every cluster has the same
//! signature).
//!
//! The assembly is kept between builds and told only what changed (the
//! store's resolution hands over the objects whose served definition
//! moved): each change is put into its class, collection by collection; a
//! class that appears or empties changes the signature of the groups its
//! list names; and only the signatures holding a changed class rebuild,
//! and only the collections that changed (each merged and digested
//! whole). A one-cluster change looks at that cluster's group alone; no
//! build passes over every object or every group (issue 40). Signatures
//! differing only in a cluster's own objects each build their copy of a
//! changed shared collection.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use meshhub_analyze::Facts;
use meshhub_mcp::cache::Group;
use meshhub_mcp::snapshot::{CollectionSnapshot, EMPTY, EncodedResource, Snapshot};
use rayon::iter::{IntoParallelRefIterator as _, ParallelIterator as _};

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

/// A class's objects: per collection, by name.
#[derive(Debug, Default)]
struct Content {
    objects: BTreeMap<Arc<str>, BTreeMap<Arc<str>, Item>>,
    len: usize,
}

/// Objects of one collection by name, sorted.
type Run = Vec<(Arc<str>, Item)>;

/// One object of a class.
#[derive(Debug)]
struct Item {
    resource: EncodedResource,
    /// What analysis reads of it (kept while analysing).
    facts: Option<Arc<Facts>>,
}

impl Content {
    fn insert(&mut self, collection: &Arc<str>, item: Item) {
        let list = self.objects.entry(collection.clone()).or_default();
        if list.insert(item.resource.name.clone(), item).is_none() {
            self.len += 1;
        }
    }

    /// Adds a run of objects of one collection, sorted by name (built at
    /// once when the collection's list is empty).
    fn extend(&mut self, collection: Arc<str>, run: Run) {
        let list = self.objects.entry(collection).or_default();
        let before = list.len();
        if before == 0 {
            *list = run.into_iter().collect();
        } else {
            list.extend(run);
        }
        self.len += list.len() - before;
    }

    fn remove(&mut self, collection: &str, name: &str) {
        let Some(list) = self.objects.get_mut(collection) else {
            return;
        };
        if list.remove(name).is_some() {
            self.len -= 1;
        }
        if list.is_empty() {
            self.objects.remove(collection);
        }
    }

    fn list(&self, collection: &str) -> Option<&BTreeMap<Arc<str>, Item>> {
        self.objects.get(collection)
    }
}

/// A signature's snapshot, and how many groups have the signature.
#[derive(Debug)]
struct Signature {
    /// Told apart from the others of the build (the pipeline shares one
    /// content's facts by it).
    id: usize,
    snapshot: Arc<Snapshot>,
    groups: usize,
}

/// One object as a change names it.
pub(super) struct Delta<'a> {
    /// Served before (`None`: new).
    pub(super) before: Option<Placed<'a>>,
    /// Served now (`None`: gone).
    pub(super) after: Option<Placed<'a>>,
}

/// The assembly, kept by the pipeline from build to build.
#[derive(Default)]
pub(super) struct Assembly {
    /// Every collection a snapshot holds.
    collections: BTreeSet<Arc<str>>,
    classes: HashMap<Class, Content>,
    /// Each group's classes, in address order: its signature.
    members: HashMap<Group, Vec<Class>>,
    signatures: HashMap<Box<[Class]>, Signature>,
    next_id: usize,
}

impl Assembly {
    /// Forgets everything: `groups` (every group of the rules, each with
    /// every collection of `collections`, empty) are assembled anew from
    /// the next update, which must name every object as new.
    pub(super) fn reset(&mut self, groups: &[Group], collections: &[Arc<str>]) {
        self.collections = collections.iter().cloned().collect();
        self.classes.clear();
        self.signatures.clear();
        self.members = groups.iter().map(|g| (g.clone(), Vec::new())).collect();
    }

    /// Applies `changes`; returns the groups whose snapshot may have moved
    /// (each group of the rules after a [`Assembly::reset`]). A signature
    /// new to the build starts from its group's last snapshot in
    /// `previous`, so that a group whose content did not move keeps its
    /// collections.
    pub(super) fn update<'a>(
        &mut self,
        changes: impl Iterator<Item = Delta<'a>>,
        analysing: bool,
        previous: &HashMap<Group, Arc<Snapshot>>,
        reset: bool,
    ) -> Vec<Group> {
        // 1. Each change into its class; classes appearing or emptying
        // change their groups' signatures.
        let mut touched: HashMap<Class, BTreeSet<Arc<str>>> = HashMap::new();
        let mut regrouped: HashMap<Group, Box<[Class]>> = HashMap::new();
        // Changes come in key order: runs of one class and collection are
        // the rule (100,000 objects of one class at start), noted once.
        // (The last pair is held, so that neither address can be reused.)
        let mut last_touched: Option<(Class, Arc<str>)> = None;
        let mut touch = |class: &Class, collection: &Arc<str>| {
            let same = last_touched
                .as_ref()
                .is_some_and(|(c, n)| c == class && Arc::ptr_eq(n, collection));
            if !same {
                last_touched = Some((class.clone(), collection.clone()));
                touched
                    .entry(class.clone())
                    .or_default()
                    .insert(collection.clone());
            }
        };
        if reset {
            self.fill(changes, analysing, &mut touch, &mut regrouped);
        } else {
            for d in changes {
                if let Some(b) = d.before {
                    let class = Class(b.groups.clone());
                    if let Some(content) = self.classes.get_mut(&class) {
                        content.remove(b.collection, &b.resource.name);
                        let empty = content.len == 0;
                        touch(&class, b.collection);
                        if empty {
                            self.classes.remove(&class);
                            self.regroup(&class, false, &mut regrouped);
                        }
                    }
                }
                if let Some(a) = d.after {
                    let class = Class(a.groups.clone());
                    if !self.classes.contains_key(&class) {
                        self.classes.insert(class.clone(), Content::default());
                        self.regroup(&class, true, &mut regrouped);
                    }
                    if let Some(content) = self.classes.get_mut(&class) {
                        content.insert(
                            a.collection,
                            Item {
                                resource: a.resource.clone(),
                                facts: a.facts.filter(|_| analysing).cloned(),
                            },
                        );
                    }
                    touch(&class, a.collection);
                }
            }
        }

        // 2. The groups to look at: those whose signature changed, and
        // those holding a changed class.
        let mut affected: Vec<Group> = if reset {
            self.members.keys().cloned().collect()
        } else {
            let mut a: BTreeSet<Group> = regrouped.keys().cloned().collect();
            for class in touched.keys() {
                a.extend(
                    class
                        .0
                        .iter()
                        .filter(|g| self.members.contains_key(*g))
                        .cloned(),
                );
            }
            a.into_iter().collect()
        };
        affected.sort_unstable();

        // 3. One snapshot per signature they have now.
        let mut done: HashSet<Box<[Class]>> = HashSet::new();
        for group in &affected {
            let Some(now) = self.members.get(group) else {
                continue;
            };
            let was = regrouped.remove(group);
            let moved = reset || was.as_deref().is_some_and(|w| w != now.as_slice());
            if !moved && done.contains(now.as_slice()) {
                continue;
            }
            let key: Box<[Class]> = now.as_slice().into();
            if let Some(w) = was.filter(|_| moved && !reset) {
                self.leave(&w);
            }
            if done.insert(key.clone()) {
                self.assemble_signature(&key, &touched, previous.get(group));
            }
            if let Some(s) = self.signatures.get_mut(&key).filter(|_| moved) {
                s.groups += 1;
            }
        }
        affected
    }

    /// Step 1 of [`Assembly::update`] after a reset: every change is a new
    /// object, in key order. Each run of one class and collection is
    /// gathered and its list built at once from the sorted run (a bulk
    /// build, not an insert per object: 100,000 objects at start).
    fn fill<'a>(
        &mut self,
        changes: impl Iterator<Item = Delta<'a>>,
        analysing: bool,
        touch: &mut impl FnMut(&Class, &Arc<str>),
        regrouped: &mut HashMap<Group, Box<[Class]>>,
    ) {
        let mut runs: Vec<(Class, Arc<str>, Run)> = Vec::new();
        for a in changes.filter_map(|d| d.after) {
            let item = (
                a.resource.name.clone(),
                Item {
                    resource: a.resource.clone(),
                    facts: a.facts.filter(|_| analysing).cloned(),
                },
            );
            match runs.last_mut() {
                Some((class, collection, run))
                    if Arc::ptr_eq(&class.0, a.groups) && Arc::ptr_eq(collection, a.collection) =>
                {
                    run.push(item);
                }
                _ => runs.push((Class(a.groups.clone()), a.collection.clone(), vec![item])),
            }
        }
        for (class, collection, run) in runs {
            touch(&class, &collection);
            if !self.classes.contains_key(&class) {
                self.classes.insert(class.clone(), Content::default());
                self.regroup(&class, true, regrouped);
            }
            if let Some(content) = self.classes.get_mut(&class) {
                content.extend(collection, run);
            }
        }
    }

    /// `class` appeared (`born`) or emptied: the signature of each group
    /// its list names changes; the first time a group's changes, what it
    /// was is remembered in `regrouped`.
    fn regroup(&mut self, class: &Class, born: bool, regrouped: &mut HashMap<Group, Box<[Class]>>) {
        for g in class.0.iter() {
            let Some(m) = self.members.get_mut(g) else {
                continue;
            };
            regrouped
                .entry(g.clone())
                .or_insert_with(|| m.clone().into_boxed_slice());
            let at = m.binary_search_by_key(&class.address(), Class::address);
            match (born, at) {
                (true, Err(i)) => m.insert(i, class.clone()),
                (false, Ok(i)) => {
                    m.remove(i);
                }
                _ => {}
            }
        }
    }

    /// A group left signature `key`: forgotten with its last group.
    fn leave(&mut self, key: &[Class]) {
        if let Some(s) = self.signatures.get_mut(key) {
            s.groups = s.groups.saturating_sub(1);
            if s.groups == 0 {
                self.signatures.remove(key);
            }
        }
    }

    /// Makes signature `key`'s snapshot current: kept when none of its
    /// classes changed, else its changed collections rebuilt; a signature
    /// new to the build is assembled starting from `reference`.
    fn assemble_signature(
        &mut self,
        key: &[Class],
        touched: &HashMap<Class, BTreeSet<Arc<str>>>,
        reference: Option<&Arc<Snapshot>>,
    ) {
        let changed: BTreeSet<&Arc<str>> = key
            .iter()
            .filter_map(|c| touched.get(c))
            .flatten()
            .collect();
        let (last, fresh) = match self.signatures.get(key) {
            Some(_) if changed.is_empty() => return,
            Some(s) => (Some(s.snapshot.clone()), false),
            None => (reference.cloned(), true),
        };
        let snapshot = assemble(
            &self.classes,
            key,
            &self.collections,
            last.as_ref(),
            |c: &str| fresh || changed.iter().any(|t| &***t == c),
        );
        match self.signatures.get_mut(key) {
            Some(s) => s.snapshot = snapshot,
            None => {
                self.next_id += 1;
                self.signatures.insert(
                    key.into(),
                    Signature {
                        id: self.next_id,
                        snapshot,
                        groups: 0,
                    },
                );
            }
        }
    }

    /// `group`'s signature (told apart by its id) and snapshot.
    pub(super) fn of(&self, group: &Group) -> Option<(usize, &Arc<Snapshot>)> {
        let m = self.members.get(group)?;
        let s = self.signatures.get(m.as_slice())?;
        Some((s.id, &s.snapshot))
    }

    /// The facts of `group`'s objects, but for the collections `skip`
    /// names (those it is withheld).
    pub(super) fn facts(&self, group: &Group, skip: impl Fn(&str) -> bool) -> Vec<Arc<Facts>> {
        let Some(m) = self.members.get(group) else {
            return Vec::new();
        };
        m.iter()
            .filter_map(|c| self.classes.get(c))
            .flat_map(|content| content.objects.iter())
            .filter(|(coll, _)| !skip(coll))
            .flat_map(|(_, list)| list.values())
            .filter_map(|item| item.facts.clone())
            .collect()
    }

    /// How many distinct snapshots the groups hold.
    pub(super) fn distinct(&self) -> usize {
        self.signatures.len()
    }
}

/// One signature's snapshot: `reference` itself when nothing differs from
/// it, else a new one that keeps each of its collections that did not
/// change.
fn assemble(
    classes: &HashMap<Class, Content>,
    members: &[Class],
    collections: &BTreeSet<Arc<str>>,
    reference: Option<&Arc<Snapshot>>,
    touched: impl Fn(&str) -> bool + Sync,
) -> Arc<Snapshot> {
    // Each collection: the reference's when untouched or unchanged (false),
    // else built anew (true).
    let build = |coll: &Arc<str>| {
        let old = reference.map(|r| r.collection(coll));
        match old {
            Some(old) if !touched(coll) => (old, false),
            old => {
                let list = merged(classes, members, coll);
                match old {
                    Some(old) if old.holds_exactly(&list) => (old, false),
                    _ => (Arc::new(CollectionSnapshot::from_sorted(list)), true),
                }
            }
        }
    };
    let objects: usize = members
        .iter()
        .filter_map(|c| classes.get(c))
        .map(|c| c.len)
        .sum();
    // A large content's collections are merged and digested on the rayon
    // pool (100,000 objects at start); a small one's on this thread.
    let built: Vec<(Arc<CollectionSnapshot>, bool)> = if objects >= PARALLEL_OBJECTS {
        collections.par_iter().map(build).collect()
    } else {
        collections.iter().map(build).collect()
    };
    let same = reference.is_some() && built.iter().all(|(_, new)| !new);
    match reference {
        Some(r) if same && r.collections().count() == collections.len() => r.clone(),
        _ => {
            let mut snapshot = Snapshot::new();
            for (coll, (c, _)) in collections.iter().zip(built) {
                snapshot.insert(coll.clone(), c);
            }
            Arc::new(snapshot)
        }
    }
}

/// From how many objects a signature's collections are assembled in
/// parallel.
const PARALLEL_OBJECTS: usize = 4096;

/// Up to how many classes beyond the first [`merged`] merges in one by
/// one (each a pass over what it holds); more are sorted together.
const MERGED_LISTS: usize = 4;

/// The signature's objects of one collection, sorted by name (a class
/// holds each object once and the classes are disjoint, so there are no
/// duplicates): what [`CollectionSnapshot::from_sorted`] takes.
fn merged(
    classes: &HashMap<Class, Content>,
    members: &[Class],
    collection: &str,
) -> Vec<EncodedResource> {
    let mut lists = members
        .iter()
        .filter_map(|c| classes.get(c)?.list(collection));
    let Some(first) = lists.next() else {
        return Vec::new();
    };
    let mut out: Vec<EncodedResource> = first.values().map(|i| i.resource.clone()).collect();
    let rest: Vec<_> = lists.collect();
    if rest.len() > MERGED_LISTS {
        // Many small classes (placements by selector): one sort beats a
        // pass over everything per class.
        out.extend(
            rest.iter()
                .flat_map(|l| l.values().map(|i| i.resource.clone())),
        );
        out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        return out;
    }
    // Each class's list is sorted: merged in, one pass each (a cluster's
    // own objects into the shared ones), not sorted again.
    for l in rest {
        let mut merged = Vec::with_capacity(out.len() + l.len());
        let mut theirs = l.values().map(|i| &i.resource).peekable();
        for mine in out {
            while let Some(r) = theirs.next_if(|r| r.name < mine.name) {
                merged.push(r.clone());
            }
            merged.push(mine);
        }
        merged.extend(theirs.cloned());
        out = merged;
    }
    out
}

/// `snapshot` with `collections` empty (what a cluster that can't take
/// their kind is served: [`super::carried`]).
pub(super) fn without<'c>(
    snapshot: &Arc<Snapshot>,
    collections: impl IntoIterator<Item = &'c Arc<str>>,
) -> Arc<Snapshot> {
    let mut out = Snapshot::clone(snapshot);
    for c in collections {
        out.insert(c.clone(), EMPTY.clone());
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
