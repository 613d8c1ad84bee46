//! Which clusters receive an object: the `meshhub.io/clusters` annotation
//! and the clusters' selectors. The hub places every object with these
//! rules (its `groups` module); `meshhubctl analyze` places files with them
//! offline, from the `clusters:` of a hub configuration file.
//!
//! * An object annotated `meshhub.io/clusters: a,b` goes to exactly the
//!   named groups (cluster names, or `default`); a name that is no
//!   configured cluster makes the object invalid.
//! * Any other object goes to every cluster whose selector matches it (all
//!   of: namespace in `namespaces` when that list is non-empty, every label
//!   of `labels` present with that value), and to the default group.

use std::collections::{BTreeMap, BTreeSet};

use meshhub_proto::object::ObjectMeta;
use serde::Deserialize;

use crate::node::DEFAULT_GROUP;

/// Object annotation naming the groups that receive the object.
pub const CLUSTERS_ANNOTATION: &str = "meshhub.io/clusters";

/// Which objects a cluster receives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// Namespaces whose objects match; empty = every namespace.
    pub namespaces: BTreeSet<String>,
    /// Labels an object must carry, with these values; empty = any object.
    pub labels: BTreeMap<String, String>,
}

impl Selector {
    /// Whether an object in `namespace` placed by `object` matches.
    pub fn matches(&self, namespace: &str, object: &Placement) -> bool {
        (self.namespaces.is_empty() || self.namespaces.contains(namespace))
            && self
                .labels
                .iter()
                .all(|(k, v)| object.label(k).is_some_and(|l| l == v))
    }
}

/// What placement reads of an object's metadata: its labels and its
/// [`CLUSTERS_ANNOTATION`]. The hub keeps this for every object it holds,
/// so it is compact: two sorted boxed slices rather than the metadata's
/// maps (a map node is over 500 bytes, even for one label).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Sorted by key (the metadata's map order).
    labels: Box<[(Box<str>, Box<str>)]>,
    clusters: Option<Box<str>>,
}

impl Placement {
    /// What placement reads of `meta`.
    pub fn of(meta: &ObjectMeta) -> Self {
        Self {
            labels: meta
                .labels
                .iter()
                .map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str())))
                .collect(),
            clusters: meta
                .annotations
                .get(CLUSTERS_ANNOTATION)
                .map(|v| Box::from(v.as_str())),
        }
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.labels[i].1)
    }

    /// The groups the [`CLUSTERS_ANNOTATION`] names, found with `find`,
    /// sorted and without repeats; `None` when the object has no such
    /// annotation. `known` lists the groups there are, for the error.
    pub fn named<G: Ord>(
        &self,
        find: impl Fn(&str) -> Option<G>,
        known: impl FnOnce() -> Vec<String>,
    ) -> Option<Result<Vec<G>, String>> {
        let list = self.clusters.as_deref()?;
        let mut out = Vec::new();
        let mut unknown = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match find(name) {
                Some(g) => out.push(g),
                None => unknown.push(name),
            }
        }
        if !unknown.is_empty() {
            return Some(Err(format!(
                "metadata.annotations[{CLUSTERS_ANNOTATION}]: unknown cluster(s) {} (known: {})",
                unknown.join(", "),
                known().join(", ")
            )));
        }
        if out.is_empty() {
            return Some(Err(format!(
                "metadata.annotations[{CLUSTERS_ANNOTATION}]: names no cluster"
            )));
        }
        out.sort();
        out.dedup();
        Some(Ok(out))
    }
}

/// A `clusters:` entry of a hub configuration file as placement reads it
/// (its other keys are ignored).
#[derive(Clone, Debug, Deserialize)]
pub struct ClusterSelector {
    /// The cluster (and group) name.
    pub name: String,
    /// `namespaces`.
    #[serde(default)]
    pub namespaces: BTreeSet<String>,
    /// `labels`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// Placement by cluster name, for tools that work offline.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    clusters: Vec<(String, Selector)>,
}

impl Rules {
    /// Rules for these clusters.
    pub fn new(clusters: impl IntoIterator<Item = ClusterSelector>) -> Self {
        Self {
            clusters: clusters
                .into_iter()
                .map(|c| {
                    let selector = Selector {
                        namespaces: c.namespaces,
                        labels: c.labels,
                    };
                    (c.name, selector)
                })
                .collect(),
        }
    }

    /// Every group: `default`, then the clusters in order.
    pub fn groups(&self) -> Vec<String> {
        std::iter::once(DEFAULT_GROUP.to_owned())
            .chain(self.clusters.iter().map(|(n, _)| n.clone()))
            .collect()
    }

    /// The groups that receive an object placed by `object` in `namespace`,
    /// sorted; or why it can't be placed.
    pub fn targets(&self, object: &Placement, namespace: &str) -> Result<Vec<String>, String> {
        let find = |name: &str| {
            (name == DEFAULT_GROUP || self.clusters.iter().any(|(n, _)| n == name))
                .then(|| name.to_owned())
        };
        if let Some(named) = object.named(find, || self.groups()) {
            return named;
        }
        let mut out: Vec<String> = self
            .clusters
            .iter()
            .filter(|(_, s)| s.matches(namespace, object))
            .map(|(n, _)| n.clone())
            .chain(std::iter::once(DEFAULT_GROUP.to_owned()))
            .collect();
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)], clusters: Option<&str>) -> ObjectMeta {
        let mut m = ObjectMeta::default();
        for (k, v) in labels {
            m.labels.insert((*k).into(), (*v).into());
        }
        if let Some(c) = clusters {
            m.annotations.insert(CLUSTERS_ANNOTATION.into(), c.into());
        }
        m
    }

    #[test]
    fn offline_rules_place_as_the_hub_does() {
        let rules = Rules::new([
            ClusterSelector {
                name: "east".into(),
                namespaces: ["bookinfo".to_owned()].into(),
                labels: BTreeMap::new(),
            },
            ClusterSelector {
                name: "west".into(),
                namespaces: BTreeSet::new(),
                labels: [("region".to_owned(), "west".to_owned())].into(),
            },
        ]);
        let at = |labels: &[(&str, &str)], clusters: Option<&str>, ns: &str| {
            rules.targets(&Placement::of(&meta(labels, clusters)), ns)
        };
        assert_eq!(at(&[], None, "bookinfo").unwrap(), ["default", "east"]);
        assert_eq!(
            at(&[("region", "west")], None, "x").unwrap(),
            ["default", "west"]
        );
        assert_eq!(
            at(&[], Some(" west, east,west"), "x").unwrap(),
            ["east", "west"]
        );
        let e = at(&[], Some("west,north"), "x").unwrap_err();
        assert!(
            e.contains("unknown cluster(s) north (known: default, east, west)"),
            "{e}"
        );
        assert!(
            at(&[], Some(" , "), "x")
                .unwrap_err()
                .contains("names no cluster")
        );
    }
}
