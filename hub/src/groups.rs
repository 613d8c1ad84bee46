//! Snapshot groups: which objects each cluster sees, and which group a
//! consumer that dials in is served.
//!
//! Object placement (evaluated once per object change):
//!
//! * An object annotated `meshhub.io/clusters: a,b` goes to exactly the
//!   named groups (cluster names, or `default` for the default group);
//!   selectors are not consulted. A name that is no configured cluster makes
//!   the object invalid (reported, served nowhere) rather than silently
//!   dropping a target.
//! * Any other object goes to every cluster whose selector matches it (all
//!   of: namespace in `namespaces` when that list is non-empty, every label
//!   of `labels` present with that value), and to the default group.
//!
//! Consumer placement ([`GroupIndex`]): the `SinkNode` annotation
//! `meshhub.io/cluster` names the group (it must be a configured cluster or
//! `default`, otherwise the stream is refused with the reason); without it, a
//! node id equal to a cluster name selects that cluster; anything else gets
//! the default group.
//!
//! With identity lists (`clusters[].identities`, `defaultIdentities`) and
//! client certificates verified on the gRPC port, the verified identity
//! decides instead ([`GroupAccess`]): a consumer that names a group its
//! identity does not allow is refused with `PERMISSION_DENIED`; one that
//! names none gets the first group its identity allows.

use std::sync::Arc;

use meshhub_api::node::unknown_cluster_refusal;
pub use meshhub_api::node::{CLUSTER_ANNOTATION, DEFAULT_GROUP};
pub use meshhub_api::placement::{CLUSTERS_ANNOTATION, Placement, Selector};
use meshhub_mcp::authz::GroupAccess;
use meshhub_mcp::cache::Group;
use meshhub_mcp::group::{Consumer, GroupError, GroupIndex};
use tokio::sync::watch;

/// One configured cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    /// The cluster's name, also its group's name.
    pub name: String,
    /// Which objects it receives (unless an object names its targets).
    pub selector: Selector,
}

/// The grouping rules: cheap to clone, shared by the pipeline and the gRPC
/// services.
#[derive(Clone, Debug)]
pub struct GroupRules {
    clusters: Arc<Vec<(Group, Selector)>>,
    default: Group,
    /// `[default]`: the targets of most objects, shared by all of them.
    default_only: Arc<[Group]>,
    access: Arc<GroupAccess>,
}

impl GroupRules {
    /// Rules for these clusters (names are unique and not `default`:
    /// configuration checks that).
    pub fn new(clusters: &[ClusterSpec]) -> Self {
        Self {
            clusters: Arc::new(
                clusters
                    .iter()
                    .map(|c| (Group::from(c.name.as_str()), c.selector.clone()))
                    .collect(),
            ),
            default: Group::from(DEFAULT_GROUP),
            default_only: Arc::new([Group::from(DEFAULT_GROUP)]),
            access: Arc::default(),
        }
    }

    /// These rules with identity lists deciding consumer placement.
    pub fn with_access(mut self, access: GroupAccess) -> Self {
        self.access = Arc::new(access);
        self
    }

    /// Every group: the default group first, then the clusters in
    /// configuration order.
    pub fn groups(&self) -> Vec<Group> {
        std::iter::once(self.default.clone())
            .chain(self.clusters.iter().map(|(g, _)| g.clone()))
            .collect()
    }

    /// The group called `name`, if there is one.
    pub fn find(&self, name: &str) -> Option<Group> {
        if name == DEFAULT_GROUP {
            return Some(self.default.clone());
        }
        self.clusters
            .iter()
            .find(|(g, _)| g.as_ref() == name)
            .map(|(g, _)| g.clone())
    }

    /// The groups that receive an object placed by `object` (whose
    /// effective namespace is `namespace`), sorted; or why the object can't
    /// be placed.
    pub fn targets(&self, object: &Placement, namespace: &str) -> Result<Arc<[Group]>, String> {
        let named = object.named(
            |name| self.find(name),
            || self.groups().iter().map(ToString::to_string).collect(),
        );
        if let Some(named) = named {
            return named.map(Into::into);
        }
        let mut out: Vec<Group> = self
            .clusters
            .iter()
            .filter(|(_, s)| s.matches(namespace, object))
            .map(|(g, _)| g.clone())
            .collect();
        if out.is_empty() {
            return Ok(self.default_only.clone());
        }
        out.push(self.default.clone());
        out.sort();
        Ok(out.into())
    }
}

impl GroupIndex for GroupRules {
    fn group(&self, consumer: &Consumer) -> Result<Group, GroupError> {
        let node = &consumer.node;
        let claimed = match node.annotations.get(CLUSTER_ANNOTATION) {
            Some(name) => {
                let name = name.trim();
                Some(
                    self.find(name)
                        .ok_or_else(|| unknown_cluster_refusal(&node.id, name))?,
                )
            }
            None => self
                .clusters
                .iter()
                .find(|(g, _)| g.as_ref() == node.id)
                .map(|(g, _)| g.clone()),
        };
        self.access
            .decide(claimed, self.default.clone(), &consumer.identities)
    }
}

/// Says at start what the identity lists can and cannot do: nothing
/// without client certificates verified on the gRPC port; nobody reads a
/// group without a list once lists are configured.
pub fn warn_about_access(access: &GroupAccess, clusters: &[ClusterSpec]) {
    if !access.configured() {
        return;
    }
    if !access.enforced {
        tracing::warn!(
            "clusters[].identities / defaultIdentities are set but cannot be enforced: the gRPC port does not verify client certificates (set grpcTls.clientCa); consumers are placed by the cluster they claim"
        );
        return;
    }
    let listed = |name: &str| access.groups.iter().any(|(g, _)| g.as_ref() == name);
    let unlisted: Vec<&str> = std::iter::once(DEFAULT_GROUP)
        .chain(clusters.iter().map(|c| c.name.as_str()))
        .filter(|n| !listed(n))
        .collect();
    if !unlisted.is_empty() {
        tracing::warn!(
            groups = %unlisted.join(", "),
            "groups without an identity list are readable by no consumer (identity lists are enforced)"
        );
    }
}

/// The current rules, following configuration reloads: what the gRPC
/// services place new consumers with. A stream keeps the group it was
/// placed in; a group that disappears is withdrawn and its streams end.
#[derive(Clone, Debug)]
pub struct LiveRules(pub watch::Receiver<GroupRules>);

impl GroupIndex for LiveRules {
    fn group(&self, consumer: &Consumer) -> Result<Group, GroupError> {
        self.0.borrow().group(consumer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshhub_proto::mcp::SinkNode;
    use std::collections::{BTreeMap, BTreeSet};

    fn rules() -> GroupRules {
        GroupRules::new(&[
            ClusterSpec {
                name: "east".into(),
                selector: Selector {
                    namespaces: ["bookinfo".to_owned()].into(),
                    labels: BTreeMap::new(),
                },
            },
            ClusterSpec {
                name: "west".into(),
                selector: Selector {
                    namespaces: BTreeSet::new(),
                    labels: [("region".to_owned(), "west".to_owned())].into(),
                },
            },
        ])
    }

    use meshhub_proto::object::Object;

    fn obj(ns: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Object {
        let mut o: Object = serde_json::from_value(serde_json::json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "x", "namespace": ns}
        }))
        .unwrap();
        o.metadata.labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        o.metadata.annotations = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        o
    }

    fn names(groups: &[Group]) -> Vec<&str> {
        groups.iter().map(|g| g.as_ref()).collect()
    }

    #[test]
    fn selectors_place_objects() {
        let r = rules();
        let o = obj("bookinfo", &[], &[]);
        assert_eq!(
            names(&r.targets(&Placement::of(&o.metadata), "bookinfo").unwrap()),
            ["default", "east"]
        );
        let o = obj("other", &[("region", "west")], &[]);
        assert_eq!(
            names(&r.targets(&Placement::of(&o.metadata), "other").unwrap()),
            ["default", "west"]
        );
        let o = obj("bookinfo", &[("region", "west")], &[]);
        assert_eq!(
            names(&r.targets(&Placement::of(&o.metadata), "bookinfo").unwrap()),
            ["default", "east", "west"]
        );
        let o = obj("other", &[("region", "east")], &[]);
        assert_eq!(
            names(&r.targets(&Placement::of(&o.metadata), "other").unwrap()),
            ["default"]
        );
    }

    #[test]
    fn objects_placed_alike_share_one_list_and_labels_are_looked_up_by_key() {
        let r = rules();
        let a = r
            .targets(&Placement::of(&obj("other", &[], &[]).metadata), "other")
            .unwrap();
        let b = r
            .targets(&Placement::of(&obj("x", &[("b", "2")], &[]).metadata), "x")
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b), "{a:?} {b:?}");
        let p = Placement::of(&obj("x", &[("b", "2"), ("a", "1"), ("c", "3")], &[]).metadata);
        assert_eq!(
            (p.label("a"), p.label("b"), p.label("c"), p.label("d")),
            (Some("1"), Some("2"), Some("3"), None)
        );
    }

    #[test]
    fn annotation_overrides_selectors_and_rejects_unknown_names() {
        let r = rules();
        let o = obj("bookinfo", &[], &[(CLUSTERS_ANNOTATION, "west")]);
        assert_eq!(
            names(&r.targets(&Placement::of(&o.metadata), "bookinfo").unwrap()),
            ["west"]
        );
        let o = obj("x", &[], &[(CLUSTERS_ANNOTATION, " west , default,east")]);
        assert_eq!(
            names(&r.targets(&Placement::of(&o.metadata), "x").unwrap()),
            ["default", "east", "west"]
        );
        let o = obj("x", &[], &[(CLUSTERS_ANNOTATION, "west,north")]);
        let err = r.targets(&Placement::of(&o.metadata), "x").unwrap_err();
        assert!(err.contains("unknown cluster(s) north"), "{err}");
        let o = obj("x", &[], &[(CLUSTERS_ANNOTATION, " , ")]);
        assert!(r.targets(&Placement::of(&o.metadata), "x").is_err());
    }

    fn consumer(id: &str, cluster: Option<&str>) -> Consumer {
        let mut node = SinkNode {
            id: id.to_owned(),
            ..Default::default()
        };
        if let Some(c) = cluster {
            node.annotations
                .insert(CLUSTER_ANNOTATION.to_owned(), c.to_owned());
        }
        Consumer {
            node,
            ..Default::default()
        }
    }

    #[test]
    fn consumers_are_placed_by_annotation_then_id() {
        let r = rules();
        assert_eq!(r.group(&consumer("east", None)).unwrap().as_ref(), "east");
        assert_eq!(
            r.group(&consumer("istiod-1", Some("west")))
                .unwrap()
                .as_ref(),
            "west"
        );
        assert_eq!(
            r.group(&consumer("istiod-1", None)).unwrap().as_ref(),
            "default"
        );
        assert_eq!(r.group(&consumer("", None)).unwrap().as_ref(), "default");
        let err = r.group(&consumer("east", Some("north"))).unwrap_err();
        assert!(err.message.contains("north"), "{err}");
    }
}
