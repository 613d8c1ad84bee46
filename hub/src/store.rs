//! The store: every entry every source delivered, evaluated once when it
//! arrives, and resolved into the set of objects to serve.
//!
//! Objects are keyed by collection and MCP name (`namespace/name`), that is
//! by kind, namespace and name. Each entry keeps its [`Origin`].
//!
//! * **Evaluation** (once per object change): kind lookup, transcoding to an
//!   encoded `istio.mcp.v1alpha1.Resource` (the bytes every group and stream
//!   then shares), the semantic checks, and placement into groups. An entry
//!   that fails any of them is *rejected*: kept out of every snapshot and
//!   reported with every reason. An unchanged object in a changed file is not
//!   re-evaluated: its previous outcome is reused.
//! * **Resolution**: when several accepted entries define the same object,
//!   the one with the smallest origin (source name, then file path, then
//!   position) wins, and the others are reported as a conflict. Rejected
//!   entries never compete, so a broken duplicate cannot knock out a good
//!   definition.
//!
//! The store is plain data owned by the pipeline task (its single writer).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use meshhub_analyze::Facts;
use meshhub_mcp::cache::Group;
use meshhub_mcp::snapshot::EncodedResource;
use meshhub_proto::kinds::{Kind, KindTable};
use meshhub_proto::mcp::Resource;
use meshhub_proto::object::Object;
use meshhub_proto::transcode::{self, TranscodeError};
use meshhub_validate::{Finding, Verdict};
use prost::Message as _;
use rayon::iter::{IntoParallelIterator as _, ParallelIterator as _};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::groups::{GroupRules, Placement};
use crate::source::{Entry, Origin, SourceEvent};

use self::placements::Placements;
use self::resolution::Resolution;
pub use self::resolution::{Changed, Changes, Resolved, ServedObjects};

/// What happens to an object with fields its schema does not know
/// (`unknownFields`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownFields {
    /// The object is rejected (and reported).
    #[default]
    Reject,
    /// The unknown fields are dropped with a warning; the rest is served.
    Prune,
}

/// Semantic checks beyond the schema: every problem of an object, each
/// naming the object and the field. Empty = valid.
pub type SemanticCheck = Arc<dyn Fn(&Object) -> Vec<Finding> + Send + Sync>;

/// Bound on pruning rounds (one unknown field is found per round).
const MAX_PRUNED_FIELDS: usize = 256;
/// A unit with at least this many entries is transcoded on the rayon pool;
/// below it, handing the work over costs more than it saves.
const PARALLEL_MIN: usize = 8;

/// An object's identity: its collection and MCP name.
///
/// Compared by address first: a collection's name is one `Arc` shared by
/// every key of it (and an object's name by its definitions), so most
/// comparisons in the store's maps need not read the bytes.
#[derive(Clone, Debug, Serialize)]
pub struct ObjectKey {
    /// The MCP collection of its kind.
    pub collection: Arc<str>,
    /// `namespace/name` (`/name` for cluster-scoped kinds).
    pub name: Arc<str>,
}

impl PartialEq for ObjectKey {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &Arc<str>, b: &Arc<str>| Arc::ptr_eq(a, b) || a == b;
        same(&self.collection, &other.collection) && same(&self.name, &other.name)
    }
}

impl Eq for ObjectKey {}

/// By content, as the derived hash would (equal keys have equal bytes).
impl std::hash::Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.collection.hash(state);
        self.name.hash(state);
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        fn by_address_first(a: &Arc<str>, b: &Arc<str>) -> std::cmp::Ordering {
            if Arc::ptr_eq(a, b) {
                std::cmp::Ordering::Equal
            } else {
                a.cmp(b)
            }
        }
        by_address_first(&self.collection, &other.collection)
            .then_with(|| by_address_first(&self.name, &other.name))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.collection, self.name)
    }
}

/// What an accepted object is under any grouping rules: made once per
/// change of the object, and shared by every placement of it (a reload of
/// the rules places it again without copying any of this).
#[derive(Debug, PartialEq)]
pub struct Transcoded {
    /// Its identity.
    pub key: ObjectKey,
    /// Its kind (`VirtualService`).
    pub kind: Arc<str>,
    /// The encoded resource, shared by every group that receives it.
    pub resource: EncodedResource,
    /// Fields pruned from it (policy `prune`).
    pub warnings: Vec<String>,
    /// The Kubernetes `resourceVersion` of the definition, when it came
    /// from an API server (shown by `meshhubctl describe`).
    pub resource_version: Option<Box<str>>,
    /// What placement reads of its metadata.
    placement: Placement,
    /// What per-cluster analysis reads of it (kept only while analysis is
    /// on, and for the kinds it reads).
    pub facts: Option<Arc<Facts>>,
}

/// An object that passed every check, ready to serve: its transcoding (whose
/// fields read through) and the groups that receive it.
#[derive(Debug, PartialEq)]
pub struct Accepted {
    /// What it is.
    pub transcoded: Arc<Transcoded>,
    /// The groups that receive it, sorted (objects placed alike share one
    /// list: [`Arc::ptr_eq`] tells placements apart).
    pub groups: Arc<[Group]>,
}

impl std::ops::Deref for Accepted {
    type Target = Transcoded;

    fn deref(&self) -> &Transcoded {
        &self.transcoded
    }
}

/// The outcome of evaluating one entry.
#[derive(Clone, Debug)]
enum Outcome {
    Accepted(Arc<Accepted>),
    Rejected(Arc<Rejected>),
}

/// An entry that is kept out of every snapshot, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rejected {
    /// Where it came from (filled in when its unit is taken in).
    pub origin: Option<Origin>,
    /// Its kind, when it could be read.
    pub kind: Option<String>,
    /// `namespace/name`, when it could be read.
    pub name: Option<String>,
    /// Every reason.
    pub reasons: Vec<String>,
}

/// Several definitions of one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// The object's kind.
    pub kind: String,
    /// The object.
    pub key: ObjectKey,
    /// The definition served.
    pub winner: Origin,
    /// The definitions ignored.
    pub ignored: Vec<Origin>,
}

/// A warning about an accepted object (pruned fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// Where it came from.
    pub origin: Origin,
    /// What happened.
    pub message: String,
}

/// What is known of an object independently of the grouping rules: its
/// transcoding and checks, and the metadata placement needs. The parsed
/// object itself is not kept: once encoded, its JSON tree is dead weight.
///
/// It is kept for every object held, so it is compact: a valid object is
/// its [`Transcoded`] alone (shared with every placement of it; its kind
/// and collection are the kind table's shared strings, its name is shared
/// with the encoded resource, and of the metadata only what placement
/// reads is kept), one allocation besides the encoded bytes.
#[derive(Clone, Debug, PartialEq)]
enum Evaluated {
    Valid(Arc<Transcoded>),
    Invalid(Arc<Invalid>),
}

/// An object that failed a check, with what placement and reports need.
#[derive(Debug, PartialEq)]
struct Invalid {
    kind: Arc<str>,
    /// The MCP collection (empty when the kind is unknown).
    collection: Arc<str>,
    name: Arc<str>,
    placement: Placement,
    reasons: Vec<String>,
}

impl Evaluated {
    fn kind(&self) -> &Arc<str> {
        match self {
            Self::Valid(t) => &t.kind,
            Self::Invalid(i) => &i.kind,
        }
    }

    fn collection(&self) -> &str {
        match self {
            Self::Valid(t) => &t.key.collection,
            Self::Invalid(i) => &i.collection,
        }
    }

    fn name(&self) -> &Arc<str> {
        match self {
            Self::Valid(t) => &t.key.name,
            Self::Invalid(i) => &i.name,
        }
    }

    fn placement(&self) -> &Placement {
        match self {
            Self::Valid(t) => &t.placement,
            Self::Invalid(i) => &i.placement,
        }
    }
}

#[derive(Clone, Debug)]
struct Stored {
    origin: Origin,
    /// `None` when the entry could not be read at all.
    evaluated: Option<Evaluated>,
    outcome: Outcome,
}

impl Stored {
    /// Same origin and same evaluation (bytes, placement input, reasons).
    fn same_as(&self, other: &Stored) -> bool {
        self.origin == other.origin
            && match (&self.evaluated, &other.evaluated) {
                (Some(a), Some(b)) => a == b,
                (None, None) => outcome_reasons(&self.outcome) == outcome_reasons(&other.outcome),
                _ => false,
            }
    }
}

fn outcome_reasons(o: &Outcome) -> Option<&[String]> {
    match o {
        Outcome::Rejected(r) => Some(&r.reasons),
        Outcome::Accepted(_) => None,
    }
}

/// The store (owned by the pipeline).
pub struct Store {
    kinds: KindTable,
    rules: GroupRules,
    unknown_fields: UnknownFields,
    semantic: SemanticCheck,
    /// Keep what analysis reads of each object ([`Store::keep_facts`]).
    facts: bool,
    units: BTreeMap<(Arc<str>, Arc<str>), Vec<Stored>>,
    /// Objects placed alike share one list.
    placements: Placements,
    /// Which definition of each object is served.
    resolution: Resolution,
    /// Units held per source (the status shows them on every change).
    unit_counts: HashMap<Arc<str>, usize>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("units", &self.units.len())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// An empty store.
    pub fn new(
        kinds: KindTable,
        rules: GroupRules,
        unknown_fields: UnknownFields,
        semantic: SemanticCheck,
    ) -> Self {
        Self {
            kinds,
            rules,
            unknown_fields,
            semantic,
            facts: false,
            units: BTreeMap::new(),
            placements: Placements::default(),
            resolution: Resolution::default(),
            unit_counts: HashMap::new(),
        }
    }

    /// Keeps what per-cluster analysis reads of each accepted object
    /// ([`Transcoded::facts`]); set before the first object arrives.
    pub fn keep_facts(&mut self, keep: bool) {
        self.facts = keep;
    }

    /// The kind table objects are read with.
    pub fn kinds(&self) -> &KindTable {
        &self.kinds
    }

    /// Applies a unit event; returns whether anything changed. Other events
    /// are ignored.
    pub fn apply(&mut self, event: SourceEvent) -> bool {
        let SourceEvent::Unit {
            source,
            unit,
            entries,
        } = event
        else {
            return false;
        };
        let key = (source, unit);
        let old = self.units.remove(&key);
        if old.is_some() {
            self.count_unit(&key.0, false);
        }
        let old = old.unwrap_or_default();
        if entries.is_empty() {
            self.resolution.replaced(&key, &old, &[]);
            return !old.is_empty();
        }
        // An object unchanged in a changed file keeps its previous Arcs, so
        // everything downstream sees the same value.
        let previous: HashMap<(&str, &str), &Stored> = old
            .iter()
            .filter_map(|s| {
                s.evaluated
                    .as_ref()
                    .map(|e| ((e.collection(), &**e.name()), s))
            })
            .collect();
        // Transcoding is the costly part of a change; a file's objects are
        // independent, so they are transcoded on the rayon pool (in order).
        let evaluated: Vec<Stored> = if entries.len() >= PARALLEL_MIN {
            entries.into_par_iter().map(|e| self.evaluate(e)).collect()
        } else {
            entries.into_iter().map(|e| self.evaluate(e)).collect()
        };
        let new: Vec<Stored> = evaluated
            .into_iter()
            .map(|stored| {
                match (
                    &stored.evaluated,
                    stored
                        .evaluated
                        .as_ref()
                        .and_then(|e| previous.get(&(e.collection(), &**e.name()))),
                ) {
                    (Some(now), Some(prev)) if prev.evaluated.as_ref() == Some(now) => Stored {
                        origin: stored.origin,
                        evaluated: prev.evaluated.clone(),
                        outcome: prev.outcome.clone(),
                    },
                    _ => stored,
                }
            })
            .collect();
        let changed = old.len() != new.len() || old.iter().zip(&new).any(|(a, b)| !a.same_as(b));
        self.resolution.replaced(&key, &old, &new);
        self.count_unit(&key.0, true);
        self.units.insert(key, new);
        drop(old);
        self.placements.sweep();
        changed
    }

    /// Replaces the grouping rules (a configuration reload) and places every
    /// held object again. Objects are re-checked as a whole, because
    /// placement can also reject (an annotation naming a cluster that no
    /// longer exists) or accept (one that now does). Only placement runs
    /// again: the encoded bytes, and so the versions, don't move.
    pub fn set_rules(&mut self, rules: GroupRules) {
        self.rules = rules;
        self.placements.clear();
        self.resolution.reset();
        let units = std::mem::take(&mut self.units);
        self.units = units
            .into_iter()
            .map(|(key, stored)| {
                let stored = stored
                    .into_iter()
                    .map(|s| match s.evaluated {
                        Some(e) => Stored {
                            outcome: self.place(&e),
                            origin: s.origin,
                            evaluated: Some(e),
                        },
                        None => s,
                    })
                    .collect();
                (key, stored)
            })
            .collect();
        for (key, stored) in &self.units {
            self.resolution.replaced(key, &[], stored);
        }
    }

    /// Removes everything a source delivered (it was removed).
    pub fn remove_source(&mut self, source: &str) -> bool {
        let before = self.units.len();
        self.unit_counts.remove(source);
        let resolution = &mut self.resolution;
        self.units.retain(|key, stored| {
            let keep = key.0.as_ref() != source;
            if !keep {
                resolution.replaced(key, stored, &[]);
            }
            keep
        });
        before != self.units.len()
    }

    /// Number of units (files) held.
    pub fn unit_count(&self, source: &str) -> usize {
        self.unit_counts.get(source).copied().unwrap_or(0)
    }

    /// Counts a unit of `source` in (`added`) or out.
    fn count_unit(&mut self, source: &Arc<str>, added: bool) {
        let n = self.unit_counts.entry(source.clone()).or_default();
        if added {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
        }
    }

    fn evaluate(&self, entry: Entry) -> Stored {
        match entry.parsed {
            Ok(obj) => {
                let evaluated = self.check(obj);
                Stored {
                    origin: entry.origin,
                    outcome: self.place(&evaluated),
                    evaluated: Some(evaluated),
                }
            }
            Err(reason) => Stored {
                origin: entry.origin,
                evaluated: None,
                outcome: Outcome::Rejected(Arc::new(Rejected {
                    origin: None,
                    kind: None,
                    name: None,
                    reasons: vec![reason],
                })),
            },
        }
    }

    /// Transcodes and checks one object (everything that does not depend on
    /// the grouping rules). Consumes it: only what placement needs is kept.
    fn check(&self, obj: Object) -> Evaluated {
        evaluate(
            &self.kinds,
            self.unknown_fields,
            &self.semantic,
            self.facts,
            obj,
        )
    }

    /// Places an evaluated object into groups under the current rules.
    fn place(&self, e: &Evaluated) -> Outcome {
        let reject = |reasons: Vec<String>| {
            Outcome::Rejected(Arc::new(Rejected {
                origin: None,
                kind: Some(e.kind().to_string()),
                name: Some(e.name().to_string()),
                reasons,
            }))
        };
        let namespace = transcode::split_name(e.name()).0.unwrap_or("");
        let groups = self.rules.targets(e.placement(), namespace);
        match (e, groups) {
            (Evaluated::Valid(transcoded), Ok(groups)) => Outcome::Accepted(Arc::new(Accepted {
                transcoded: transcoded.clone(),
                groups: self.placements.intern(groups),
            })),
            (evaluated, groups) => {
                let mut reasons = match evaluated {
                    Evaluated::Invalid(invalid) => invalid.reasons.clone(),
                    Evaluated::Valid(_) => Vec::new(),
                };
                if let Err(g) = groups {
                    reasons.push(format!("{} {}: {g}", e.kind(), e.name()));
                }
                reject(reasons)
            }
        }
    }

    /// What to serve, the conflicts and the rejected entries, settling
    /// only what changed since the last resolution.
    pub fn resolve(&mut self) -> Resolved {
        self.resolution.resolve()
    }
}

/// Checks one object exactly as the store checks what a source delivers
/// (kind lookup, name, transcoding with the `unknownFields` policy, the
/// semantic checks), keeping nothing: what the admission webhook answers
/// with, so that it and the sources never disagree.
pub fn verdict(
    kinds: &KindTable,
    unknown_fields: UnknownFields,
    semantic: &SemanticCheck,
    obj: Object,
) -> Verdict {
    check_object(kinds, unknown_fields, semantic, obj).verdict
}

/// What checking one object found, and what the store needs to keep it.
struct Checked<'k> {
    verdict: Verdict,
    /// The object's kind and MCP name, when both could be read.
    identity: Option<(&'k Kind, Arc<str>)>,
    /// The transcoded resource, when transcoding succeeded.
    resource: Option<Resource>,
    /// The object as checked (without the fields `prune` removed).
    object: Object,
}

/// Transcodes and checks one object (see `Store::check`).
fn check_object<'k>(
    kinds: &'k KindTable,
    unknown_fields: UnknownFields,
    semantic: &SemanticCheck,
    obj: Object,
) -> Checked<'k> {
    let mut verdict = Verdict::default();
    let identity = transcode::kind_of(kinds, &obj).and_then(|kind| {
        let name: Arc<str> = transcode::resource_name(kind, &obj)?.into();
        Ok((kind, name))
    });
    let (kind, name) = match identity {
        Ok(id) => id,
        Err(e) => {
            verdict.errors.push(Finding::from(&e));
            return Checked {
                verdict,
                identity: None,
                resource: None,
                object: obj,
            };
        }
    };
    let mut working = obj;
    let resource = loop {
        match transcode::object_to_resource(kind, &working) {
            Ok(r) => break Some(r),
            Err(TranscodeError::UnknownField { path, .. })
                if unknown_fields == UnknownFields::Prune
                    && verdict.warnings.len() < MAX_PRUNED_FIELDS =>
            {
                let object = format!("{} {name}", kind.kind());
                if !prune(&mut working.content, &path) {
                    verdict.errors.push(Finding::at(
                        object,
                        path,
                        "unknown field (could not be pruned)",
                    ));
                    break None;
                }
                verdict
                    .warnings
                    .push(Finding::at(object, path, "unknown field pruned"));
            }
            Err(e) => {
                verdict.errors.push(Finding::from(&e));
                break None;
            }
        }
    };
    verdict.errors.extend((semantic)(&working));
    Checked {
        verdict,
        identity: Some((kind, name)),
        resource,
        object: working,
    }
}

/// Transcodes and checks one object, keeping what the store needs.
fn evaluate(
    kinds: &KindTable,
    unknown_fields: UnknownFields,
    semantic: &SemanticCheck,
    facts: bool,
    obj: Object,
) -> Evaluated {
    let Checked {
        verdict,
        identity,
        resource,
        object,
    } = check_object(kinds, unknown_fields, semantic, obj);
    let placement = Placement::of(&object.metadata);
    let Some((kind, name)) = identity else {
        let loose = match object.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{}", object.metadata.name),
            _ => object.metadata.name.clone(),
        };
        return Evaluated::Invalid(Arc::new(Invalid {
            kind: Arc::from(object.kind.as_str()),
            collection: Arc::from(""),
            name: loose.into(),
            placement,
            reasons: verdict.error_messages(),
        }));
    };
    match resource {
        Some(r) if verdict.is_accepted() => {
            let version = r
                .metadata
                .as_ref()
                .map(|m| m.version.as_str())
                .unwrap_or_default();
            Evaluated::Valid(Arc::new(Transcoded {
                key: ObjectKey {
                    collection: kind.collection_shared().clone(),
                    name: name.clone(),
                },
                kind: kind.kind_shared().clone(),
                resource: EncodedResource {
                    name: name.clone(),
                    version: Arc::from(version),
                    encoded: r.encode_to_vec().into(),
                },
                warnings: verdict.warning_messages(),
                facts: facts.then(|| Facts::of(&object).map(Arc::new)).flatten(),
                resource_version: object.metadata.resource_version.map(Into::into),
                placement,
            }))
        }
        _ => Evaluated::Invalid(Arc::new(Invalid {
            kind: kind.kind_shared().clone(),
            collection: kind.collection_shared().clone(),
            name,
            placement,
            reasons: verdict.error_messages(),
        })),
    }
}

/// Removes the field at `path` (`spec.a[0].b`) from `content`; whether it
/// was found. Map keys may contain dots: the longest key matching the path
/// wins.
fn prune(content: &mut Map<String, Value>, path: &str) -> bool {
    let key = content
        .keys()
        .filter(|k| {
            path == k.as_str()
                || path
                    .strip_prefix(k.as_str())
                    .is_some_and(|r| r.starts_with('.') || r.starts_with('['))
        })
        .max_by_key(|k| k.len())
        .cloned();
    let Some(key) = key else { return false };
    let rest = &path[key.len()..];
    if rest.is_empty() {
        return content.remove(&key).is_some();
    }
    match content.get_mut(&key) {
        Some(v) => prune_value(v, rest),
        None => false,
    }
}

fn prune_value(v: &mut Value, rest: &str) -> bool {
    if let Some(r) = rest.strip_prefix('.') {
        return match v {
            Value::Object(m) => prune(m, r),
            _ => false,
        };
    }
    if let Some(r) = rest.strip_prefix('[') {
        let Some((idx, after)) = r.split_once(']') else {
            return false;
        };
        let (Ok(i), Value::Array(items)) = (idx.parse::<usize>(), v) else {
            return false;
        };
        return match items.get_mut(i) {
            Some(item) => prune_value(item, after),
            None => false,
        };
    }
    false
}

mod placements;
mod resolution;
#[cfg(test)]
mod tests;
