//! Resolution: which definition of each object is served, kept up to date
//! as units change, in proportion to what changed (issue 40).
//!
//! Every accepted definition is indexed by its object's key; a unit's
//! change marks the keys it defines (before and after) dirty, and a
//! resolution settles only those: the winner (the smallest origin), the
//! conflict, the warnings. It hands the pipeline the objects whose served
//! definition changed, so that nothing downstream looks at the others.
//! The served objects are a persistent map: the status keeps each
//! resolution's copy for the price of a pointer, and a change copies only
//! the few nodes on its path.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use rayon::slice::ParallelSliceMut as _;

use super::{Accepted, Conflict, ObjectKey, Outcome, Rejected, Stored, Warning};
use crate::source::Origin;

/// A unit: (source, unit name).
pub(super) type UnitKey = (Arc<str>, Arc<str>);

/// The served objects: the winning definition of each and where it came
/// from, by key.
#[derive(Clone, Debug, Default)]
pub struct ServedObjects {
    entries: imbl::OrdMap<ObjectKey, (Arc<Accepted>, Origin)>,
}

impl ServedObjects {
    /// How many objects are served.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is served.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The served definition of `key`.
    pub fn get(&self, key: &ObjectKey) -> Option<&Arc<Accepted>> {
        self.entries.get(key).map(|(a, _)| a)
    }

    /// Where the served definition of `key` came from.
    pub fn origin(&self, key: &ObjectKey) -> Option<&Origin> {
        self.entries.get(key).map(|(_, o)| o)
    }

    /// The served objects' keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &ObjectKey> {
        self.entries.keys()
    }

    /// The served objects, sorted by key.
    pub fn values(&self) -> impl Iterator<Item = &Arc<Accepted>> {
        self.entries.values().map(|(a, _)| a)
    }
}

/// An object whose served definition changed: what was served, what is.
#[derive(Clone, Debug)]
pub struct Changed {
    /// Served before (`None`: it is new).
    pub before: Option<Arc<Accepted>>,
    /// Served now (`None`: it is gone).
    pub after: Option<Arc<Accepted>>,
}

/// What changed since the last resolution.
#[derive(Clone, Debug)]
pub enum Changes {
    /// Everything may have (the first resolution, new grouping rules):
    /// place every served object again.
    All,
    /// These objects.
    Some(Vec<Changed>),
}

/// What to serve and what to report.
#[derive(Debug)]
pub struct Resolved {
    /// The winning definition of every object.
    pub objects: ServedObjects,
    /// What changed since the last resolution.
    pub changes: Changes,
    /// Objects defined more than once.
    pub conflicts: Vec<Conflict>,
    /// Entries kept out, in origin order.
    pub rejected: Vec<Rejected>,
    /// Warnings about accepted entries.
    pub warnings: Vec<Warning>,
}

impl Resolved {
    /// Where the served definition of `key` came from.
    pub fn origin(&self, key: &ObjectKey) -> Option<&Origin> {
        self.objects.origin(key)
    }
}

/// An object's accepted definitions, sorted by origin (the winner first).
type Definitions = Vec<(Origin, Arc<Accepted>)>;

/// The resolution's state, kept by the store between resolutions.
#[derive(Debug)]
pub(super) struct Resolution {
    /// Every accepted definition of each object, sorted by origin (the
    /// winner first; almost always one: a list, not a map, per object).
    defs: HashMap<ObjectKey, Definitions>,
    /// Objects whose definitions changed since the last resolution.
    dirty: HashSet<ObjectKey>,
    /// Everything changed (nothing resolved yet, or rules replaced).
    all: bool,
    served: ServedObjects,
    conflicts: BTreeMap<ObjectKey, Conflict>,
    warnings: BTreeMap<ObjectKey, Vec<Warning>>,
    /// Each unit's rejected entries, with their origins.
    rejected: BTreeMap<UnitKey, Vec<Rejected>>,
}

impl Default for Resolution {
    fn default() -> Self {
        Self {
            defs: HashMap::new(),
            dirty: HashSet::new(),
            all: true,
            served: ServedObjects::default(),
            conflicts: BTreeMap::new(),
            warnings: BTreeMap::new(),
            rejected: BTreeMap::new(),
        }
    }
}

impl Resolution {
    /// Forgets every definition: the units are placed again and given
    /// anew ([`Resolution::replaced`]); the next resolution is of
    /// everything.
    pub(super) fn reset(&mut self) {
        self.defs.clear();
        self.dirty.clear();
        self.rejected.clear();
        self.all = true;
    }

    /// `unit`'s entries `old` replaced by `new` (either may be empty).
    pub(super) fn replaced(&mut self, unit: &UnitKey, old: &[Stored], new: &[Stored]) {
        for s in old {
            let Outcome::Accepted(a) = &s.outcome else {
                continue;
            };
            let Some(defs) = self.defs.get_mut(&a.key) else {
                continue;
            };
            if let Ok(i) = defs.binary_search_by(|(o, _)| o.cmp(&s.origin))
                && Arc::ptr_eq(&defs[i].1, a)
            {
                defs.remove(i);
                if defs.is_empty() {
                    self.defs.remove(&a.key);
                }
                self.dirty.insert(a.key.clone());
            }
        }
        for s in new {
            let Outcome::Accepted(a) = &s.outcome else {
                continue;
            };
            let defs = self.defs.entry(a.key.clone()).or_default();
            let changed = match defs.binary_search_by(|(o, _)| o.cmp(&s.origin)) {
                Ok(i) => !Arc::ptr_eq(&std::mem::replace(&mut defs[i].1, a.clone()), a),
                Err(i) => {
                    defs.insert(i, (s.origin.clone(), a.clone()));
                    defs.shrink_to_fit();
                    true
                }
            };
            if changed {
                self.dirty.insert(a.key.clone());
            }
        }
        let mut rejected: Vec<Rejected> = new
            .iter()
            .filter_map(|s| match &s.outcome {
                Outcome::Rejected(r) => {
                    let mut r = (**r).clone();
                    r.origin = Some(s.origin.clone());
                    Some(r)
                }
                Outcome::Accepted(_) => None,
            })
            .collect();
        rejected.sort_by(|a, b| a.origin.cmp(&b.origin));
        if rejected.is_empty() {
            self.rejected.remove(unit);
        } else {
            self.rejected.insert(unit.clone(), rejected);
        }
    }

    /// Settles what changed since the last resolution.
    pub(super) fn resolve(&mut self) -> Resolved {
        let changes = if std::mem::take(&mut self.all) {
            self.dirty.clear();
            self.settle_all();
            Changes::All
        } else {
            let mut dirty: Vec<ObjectKey> = self.dirty.drain().collect();
            // In key order: each insert into the served map then walks the
            // nodes the one before it did.
            dirty.sort_unstable();
            Changes::Some(dirty.iter().filter_map(|k| self.settle(k)).collect())
        };
        Resolved {
            objects: self.served.clone(),
            changes,
            conflicts: self.conflicts.values().cloned().collect(),
            rejected: self.rejected.values().flatten().cloned().collect(),
            warnings: self.warnings.values().flatten().cloned().collect(),
        }
    }

    /// Settles every object anew (nothing served before): one pass over
    /// the definitions in key order, each served object inserted once (no
    /// lookup of what was served, nothing to remove).
    fn settle_all(&mut self) {
        let mut served = imbl::OrdMap::new();
        let mut conflicts = BTreeMap::new();
        let mut warnings = BTreeMap::new();
        let mut defs: Vec<(&ObjectKey, &Definitions)> = self.defs.iter().collect();
        // In key order: each insert then walks the nodes the one before it
        // did (sorted on the rayon pool: 100,000 keys at start).
        defs.par_sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, defs) in defs {
            let Some(((origin, winner), ignored)) = defs.split_first() else {
                continue;
            };
            if !ignored.is_empty() {
                conflicts.insert(
                    key.clone(),
                    Conflict {
                        kind: winner.kind.to_string(),
                        key: key.clone(),
                        winner: origin.clone(),
                        ignored: ignored.iter().map(|(o, _)| o.clone()).collect(),
                    },
                );
            }
            if !winner.warnings.is_empty() {
                warnings.insert(key.clone(), warnings_of(origin, winner));
            }
            served.insert(key.clone(), (winner.clone(), origin.clone()));
        }
        self.served = ServedObjects { entries: served };
        self.conflicts = conflicts;
        self.warnings = warnings;
    }

    /// Settles one object: its winner, conflict and warnings; what changed
    /// in what is served of it.
    fn settle(&mut self, key: &ObjectKey) -> Option<Changed> {
        let before = self.served.get(key).cloned();
        let winner = self.defs.get(key).and_then(|defs| {
            let mut all = defs.iter();
            let (origin, winner) = all.next()?;
            let ignored: Vec<Origin> = all.map(|(o, _)| o.clone()).collect();
            Some((origin.clone(), winner.clone(), ignored))
        });
        let after = match winner {
            None => {
                self.served.entries.remove(key);
                self.conflicts.remove(key);
                self.warnings.remove(key);
                None
            }
            Some((origin, winner, ignored)) => {
                if ignored.is_empty() {
                    self.conflicts.remove(key);
                } else {
                    self.conflicts.insert(
                        key.clone(),
                        Conflict {
                            kind: winner.kind.to_string(),
                            key: key.clone(),
                            winner: origin.clone(),
                            ignored,
                        },
                    );
                }
                if winner.warnings.is_empty() {
                    self.warnings.remove(key);
                } else {
                    self.warnings
                        .insert(key.clone(), warnings_of(&origin, &winner));
                }
                self.served
                    .entries
                    .insert(key.clone(), (winner.clone(), origin));
                Some(winner)
            }
        };
        let same = match (&before, &after) {
            (Some(b), Some(a)) => Arc::ptr_eq(b, a),
            (None, None) => true,
            _ => false,
        };
        (!same).then_some(Changed { before, after })
    }
}

/// The served definition's warnings, each with where it came from.
fn warnings_of(origin: &Origin, winner: &Accepted) -> Vec<Warning> {
    winner
        .warnings
        .iter()
        .map(|w| Warning {
            origin: origin.clone(),
            message: w.clone(),
        })
        .collect()
}
