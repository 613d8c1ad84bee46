//! Incremental set analysis: the messages of a set `S'` worked out from
//! those of an earlier set `S` ([`crate::analyze_set`]'s) and the objects
//! that differ, re-running the analyzers only on the neighbourhood of what
//! changed. The result is exactly `analyze_set(S')`, texts and order
//! included.
//!
//! Why it is exact. Each analyzer is *local* (`crate::keys`): its messages
//! about an object `f` of a set are the same in every subset holding
//! `B(f)`, `f`'s ball: the objects sharing a near key with `f` (radius 1)
//! and those within two mesh steps (radius 2). Let `D` be the objects
//! changed (removed ones and the old versions of replaced ones, in `S`;
//! added ones and new versions, in `S'`).
//!
//! 1. An object `f` of both sets whose ball in `S` has no object of `D`
//!    and whose ball in `S'` has none has the same ball in both (a path
//!    to an object in one set but not the other goes through a changed
//!    object, closer to `f`), so by locality the same messages. The
//!    *affected* objects are therefore those within the ball radius of
//!    `D`: in `S` of its old objects, in `S'` of its new ones
//!    ([`Universe::ball`], from each side).
//! 2. Messages name their object by (kind, namespace, name), which two
//!    objects may share (an Istio and a Gateway API `Gateway`): every
//!    object of an affected or changed object's name is taken as affected.
//! 3. `S'`'s messages are then `S`'s about unaffected names, kept, and
//!    the analyzers' messages about affected names in the subset of `S'`
//!    that is the union of their balls (locality again: each affected
//!    object's ball is in that subset), in the order of `analyze_set`.
//!
//! Nothing is kept between runs: each run indexes the keys of the objects
//! of both sets (a few per object, cheaper than any analyzer), so a caller
//! holding many sets keeps only each one's objects and messages.

use std::borrow::Borrow;
use std::hash::{BuildHasherDefault, Hasher};

use crate::facts::{Facts, Kind};
use crate::keys::{Fqdn, Key, Keys, keys_into};
use crate::message::Message;
use crate::report::order;

/// Firefox's hash (rustc's `FxHasher`): the maps here hold a few hundred
/// short keys per run and are dropped with it; SipHash's resistance to
/// chosen keys buys nothing for them and costs most of the run.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type HashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<Fx>>;
type HashSet<K> = std::collections::HashSet<K, BuildHasherDefault<Fx>>;

/// Which of the two sets an object is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Both,
    Before,
    After,
}

impl Side {
    fn in_(self, side: Side) -> bool {
        self == Side::Both || self == side
    }
}

/// The objects of both sets, their keys indexed (flat lists: `near[i]`
/// is `near_ids[near_at[i]..near_at[i + 1]]`, and so on).
struct Universe<'a> {
    objects: Vec<(&'a Facts, Side)>,
    /// Each object's near keys, and each near key's objects.
    near: Index,
    /// Each object's exact mesh FQDNs, and each FQDN's objects.
    mesh: Index,
    /// The VirtualServices on the mesh gateway.
    mesh_bound: Vec<usize>,
    /// Those claiming a wildcard FQDN.
    wildcards: Vec<usize>,
    is_mesh_bound: Vec<bool>,
    is_wildcard: Vec<bool>,
}

/// Objects to keys and keys to objects.
#[derive(Default)]
struct Index {
    keys_at: Vec<usize>,
    keys: Vec<usize>,
    objects_at: Vec<usize>,
    objects: Vec<usize>,
}

impl Index {
    /// Records object `keys_at.len() - 1`'s `ids` (without repeats).
    fn add(&mut self, ids: impl IntoIterator<Item = usize>) {
        if self.keys_at.is_empty() {
            self.keys_at.push(0);
        }
        let start = *self.keys_at.last().unwrap_or(&0);
        for id in ids {
            if !self.keys[start..].contains(&id) {
                self.keys.push(id);
            }
        }
        self.keys_at.push(self.keys.len());
    }

    /// Inverts the objects' keys (`n` distinct).
    fn finish(&mut self, n: usize) {
        let mut count = vec![0usize; n + 1];
        for k in &self.keys {
            count[*k + 1] += 1;
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        self.objects_at = count.clone();
        self.objects = vec![0; self.keys.len()];
        for o in 0..self.keys_at.len().saturating_sub(1) {
            for k in &self.keys[self.keys_at[o]..self.keys_at[o + 1]] {
                self.objects[count[*k]] = o;
                count[*k] += 1;
            }
        }
    }

    /// How many distinct keys.
    fn key_count(&self) -> usize {
        self.objects_at.len().saturating_sub(1)
    }

    fn keys_of(&self, o: usize) -> &[usize] {
        &self.keys[self.keys_at[o]..self.keys_at[o + 1]]
    }

    fn objects_of(&self, k: usize) -> &[usize] {
        &self.objects[self.objects_at[k]..self.objects_at[k + 1]]
    }
}

impl<'a> Universe<'a> {
    fn new(objects: Vec<(&'a Facts, Side)>) -> Self {
        let n = objects.len();
        let mut u = Universe {
            near: Index::default(),
            mesh: Index::default(),
            mesh_bound: Vec::new(),
            wildcards: Vec::new(),
            is_mesh_bound: Vec::with_capacity(n),
            is_wildcard: Vec::with_capacity(n),
            objects,
        };
        let mut near_ids: HashMap<Key<'a>, usize> = HashMap::default();
        let mut mesh_ids: HashMap<Fqdn<'a>, usize> = HashMap::default();
        let mut k = Keys::default();
        for (i, (f, _)) in u.objects.iter().enumerate() {
            keys_into(f, &mut k);
            u.near.add(k.near.drain(..).map(|key| {
                let next = near_ids.len();
                *near_ids.entry(key).or_insert(next)
            }));
            u.mesh.add(k.mesh.drain(..).map(|fqdn| {
                let next = mesh_ids.len();
                *mesh_ids.entry(fqdn).or_insert(next)
            }));
            if k.mesh_bound {
                u.mesh_bound.push(i);
            }
            if k.mesh_wildcard {
                u.wildcards.push(i);
            }
            u.is_mesh_bound.push(k.mesh_bound);
            u.is_wildcard.push(k.mesh_wildcard);
        }
        u.near.finish(near_ids.len());
        u.mesh.finish(mesh_ids.len());
        u
    }

    /// The objects of `side` within the ball radius of `seeds` (objects of
    /// `side`): sharing a near key with one, or within two mesh steps.
    /// Each key's objects (and the wildcard and mesh-bound lists) are
    /// walked once per call, however many seeds or frontier objects reach
    /// it: linear in the objects and keys involved, also when thousands of
    /// objects share one key (a shared ingress Gateway).
    fn ball(&self, seeds: &[usize], side: Side, into: &mut [bool]) {
        let on = |i: &usize| self.objects[*i].1.in_(side);
        let mut near_walked = vec![false; self.near.key_count()];
        for &s in seeds {
            into[s] = true;
            for &k in self.near.keys_of(s) {
                if std::mem::replace(&mut near_walked[k], true) {
                    continue;
                }
                for m in self.near.objects_of(k).iter().filter(|i| on(i)) {
                    into[*m] = true;
                }
            }
        }
        // Two mesh steps, breadth first: an object reached through a key
        // or list already walked was reached at the earlier step.
        let mut seen = vec![false; self.objects.len()];
        for &s in seeds {
            seen[s] = true;
        }
        let mut mesh_walked = vec![false; self.mesh.key_count()];
        let (mut wildcards_walked, mut all_walked) = (false, false);
        let mut frontier: Vec<usize> = seeds.to_vec();
        for _ in 0..2 {
            let mut next = Vec::new();
            let mut visit = |y: usize, next: &mut Vec<usize>| {
                if on(&y) && !std::mem::replace(&mut seen[y], true) {
                    next.push(y);
                }
            };
            for &x in &frontier {
                if !self.is_mesh_bound[x] {
                    continue;
                }
                for &k in self.mesh.keys_of(x) {
                    if std::mem::replace(&mut mesh_walked[k], true) {
                        continue;
                    }
                    for &y in self.mesh.objects_of(k) {
                        visit(y, &mut next);
                    }
                }
                if !std::mem::replace(&mut wildcards_walked, true) {
                    for &y in &self.wildcards {
                        visit(y, &mut next);
                    }
                }
                if self.is_wildcard[x] && !std::mem::replace(&mut all_walked, true) {
                    for &y in &self.mesh_bound {
                        visit(y, &mut next);
                    }
                }
            }
            frontier = next;
        }
        for (i, s) in seen.into_iter().enumerate() {
            if s {
                into[i] = true;
            }
        }
    }
}

/// An object's identity in the set (its kind, not its kind's name: two
/// objects of one identity are one object's versions).
type Id<'a> = (Kind, &'a str, &'a str);

/// A message's object: (kind name, namespace, name).
type Named<'a> = (&'a str, &'a str, &'a str);

fn id(f: &Facts) -> Id<'_> {
    (f.kind, &f.namespace, &f.name)
}

fn named(f: &Facts) -> Named<'_> {
    (f.kind.as_str(), &f.namespace, &f.name)
}

/// What one incremental run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rerun {
    /// Objects added, removed or replaced.
    pub changed: usize,
    /// Objects whose messages were worked out again.
    pub affected: usize,
    /// Objects the analyzers ran on (the affected ones' neighbourhood).
    pub analysed: usize,
    /// Whether the whole set was analysed instead (the neighbourhood was
    /// most of it, or a set held an object twice).
    pub whole: bool,
}

/// The set analysis of `after` ([`crate::analyze_set`]'s messages, in its
/// order), from `before` and its set analysis `before_messages` (held any
/// way: `wrap` makes a new message into one) re-running the analyzers only
/// where `after` differs. Objects are compared by pointer, then by value.
///
/// `before_messages` must be `analyze_set(before)`.
pub fn reanalyze_set<M: Borrow<Message> + Clone>(
    before: &[&Facts],
    before_messages: &[M],
    after: &[&Facts],
    wrap: impl FnMut(Message) -> M,
) -> (Vec<M>, Rerun) {
    reanalyze(before, before_messages, after, wrap, true)
}

/// [`reanalyze_set`]; `shortcut`: analyse the whole set when the
/// neighbourhood is most of it (tests turn it off to check the partial
/// path on small sets).
pub(crate) fn reanalyze<M: Borrow<Message> + Clone>(
    before: &[&Facts],
    before_messages: &[M],
    after: &[&Facts],
    mut wrap: impl FnMut(Message) -> M,
    shortcut: bool,
) -> (Vec<M>, Rerun) {
    let whole = |wrap: &mut dyn FnMut(Message) -> M, changed| {
        let out = crate::analyze_set(after.iter().copied())
            .into_iter()
            .map(wrap)
            .collect();
        let rerun = Rerun {
            changed,
            affected: after.len(),
            analysed: after.len(),
            whole: true,
        };
        (out, rerun)
    };
    // The delta.
    let mut old: HashMap<Id<'_>, (&Facts, bool)> =
        HashMap::with_capacity_and_hasher(before.len(), Default::default());
    for f in before {
        if old.insert(id(f), (f, false)).is_some() {
            return whole(&mut wrap, before.len() + after.len());
        }
    }
    let mut objects: Vec<(&Facts, Side)> = Vec::with_capacity(after.len() + 8);
    let mut changed_new = Vec::new();
    let mut seen: HashSet<Id<'_>> =
        HashSet::with_capacity_and_hasher(after.len(), Default::default());
    for f in after {
        if !seen.insert(id(f)) {
            return whole(&mut wrap, before.len() + after.len());
        }
        match old.get_mut(&id(f)) {
            Some((was, matched)) => {
                *matched = true;
                if std::ptr::eq(*was, *f) || **was == **f {
                    objects.push((f, Side::Both));
                } else {
                    changed_new.push(objects.len());
                    objects.push((f, Side::After));
                    let was = *was;
                    objects.push((was, Side::Before));
                }
            }
            None => {
                changed_new.push(objects.len());
                objects.push((f, Side::After));
            }
        }
    }
    let mut changed_old: Vec<usize> = objects
        .iter()
        .enumerate()
        .filter(|(_, (_, s))| *s == Side::Before)
        .map(|(i, _)| i)
        .collect();
    for f in before {
        if !old[&id(f)].1 {
            changed_old.push(objects.len());
            objects.push((f, Side::Before));
        }
    }
    let changed = changed_new.len() + changed_old.len();
    if changed == 0 {
        return (before_messages.to_vec(), Rerun::default());
    }

    // The affected objects, by name; then their neighbourhood in `after`.
    let u = Universe::new(objects);
    let mut near = vec![false; u.objects.len()];
    u.ball(&changed_old, Side::Before, &mut near);
    u.ball(&changed_new, Side::After, &mut near);
    let affected: HashSet<Named<'_>> = near
        .iter()
        .enumerate()
        .filter(|(_, a)| **a)
        .map(|(i, _)| named(u.objects[i].0))
        .collect();
    let seeds: Vec<usize> = (0..u.objects.len())
        .filter(|i| u.objects[*i].1.in_(Side::After) && affected.contains(&named(u.objects[*i].0)))
        .collect();
    let mut context = vec![false; u.objects.len()];
    u.ball(&seeds, Side::After, &mut context);
    let analysed: Vec<&Facts> = (0..u.objects.len())
        .filter(|i| context[*i])
        .map(|i| u.objects[i].0)
        .collect();
    // Past half the set, one whole analysis costs less than the two
    // partial passes.
    if shortcut && 2 * analysed.len() > after.len() {
        return whole(&mut wrap, changed);
    }

    let about =
        |m: &Message| affected.contains(&(m.kind.as_str(), m.namespace.as_str(), m.name.as_str()));
    let mut out: Vec<M> = before_messages
        .iter()
        .filter(|m| !about((*m).borrow()))
        .cloned()
        .collect();
    out.extend(
        crate::analyze_set(analysed.iter().copied())
            .into_iter()
            .filter(|m| about(m))
            .map(&mut wrap),
    );
    out.sort_by(|a, b| order(a.borrow(), b.borrow()));
    let rerun = Rerun {
        changed,
        affected: seeds.len(),
        analysed: analysed.len(),
        whole: false,
    };
    (out, rerun)
}

/// The indices of `set[at]`'s ball in `set` (its near keys' objects and
/// those within two mesh steps): the tests check locality against it.
#[cfg(test)]
pub(crate) fn ball_of(set: &[&Facts], at: usize) -> Vec<usize> {
    let u = Universe::new(set.iter().map(|f| (*f, Side::Both)).collect());
    let mut into = vec![false; set.len()];
    u.ball(&[at], Side::After, &mut into);
    (0..set.len()).filter(|i| into[*i]).collect()
}
