//! Which Gateway API kinds each cluster can take: a Gateway API kind is
//! delivered only to a cluster whose agent reports its CRD served at a
//! version meshhub carries. Any other cluster is served the kind's
//! collection empty (so its agent has nothing to refuse and nothing to
//! NACK) and `/status` says, per cluster and collection, what was withheld
//! and why.
//!
//! The decision reads the clusters' upward reports. A cluster whose agent
//! has not said (no report yet, an agent without `--apply`, an agent older
//! than the report's field) is served every Gateway API kind, as any kind:
//! its agent's applier refuses what its API does not serve, and the hub
//! shows that NACK. A report whose CRDs could not be read changes nothing:
//! the cluster keeps what its agent last said (the last safe state).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use meshhub_api::status::WithheldView;
use meshhub_api::upward::GatewayApiCrdsView;
use meshhub_mcp::cache::Group;
use meshhub_proto::kinds::{Family, Kind, KindTable};

use crate::upward::{ClusterReport, Reports};

/// A cluster's Gateway API CRDs: group and kind → served versions.
type Served = BTreeMap<(String, String), Vec<String>>;

/// Per group, the collections it is not delivered and why.
pub type Withheld = HashMap<Group, BTreeMap<Arc<str>, String>>;

/// What each cluster's agent last said of its Gateway API CRDs.
#[derive(Debug, Default)]
pub struct Carried {
    /// The clusters whose agent read its CRDs.
    known: BTreeMap<Group, Served>,
    /// The report each cluster's entry was last read from: a report that
    /// did not change is not read again.
    read: HashMap<Group, Arc<ClusterReport>>,
    /// What follows from `known`, kept up to date by [`Carried::update`]
    /// for the clusters that changed (every build reads it; shared, so
    /// that reading costs a reference count).
    withheld: Arc<Withheld>,
}

impl Carried {
    /// Reads the reports (the Gateway API kinds are those of `kinds`);
    /// returns the clusters whose CRDs changed.
    pub fn update(&mut self, reports: &Reports, kinds: &KindTable) -> Vec<Group> {
        let mut changed = Vec::new();
        for (cluster, report) in reports.iter() {
            let group = Group::from(cluster.as_str());
            if self
                .read
                .get(&group)
                .is_some_and(|r| Arc::ptr_eq(r, report))
            {
                continue;
            }
            self.read.insert(group.clone(), report.clone());
            let Some(served) = served(report.view.gateway_api.as_ref()) else {
                continue;
            };
            if self.known.get(&group) != Some(&served) {
                self.known.insert(group.clone(), served);
                changed.push(group);
            }
        }
        // A cluster gone from the reports (no longer configured) is
        // forgotten.
        let gone: Vec<Group> = self
            .known
            .keys()
            .filter(|g| !reports.contains_key(g.as_ref()))
            .cloned()
            .collect();
        for g in gone {
            self.known.remove(&g);
            self.read.remove(&g);
            changed.push(g);
        }
        if !changed.is_empty() {
            let gateway: Vec<&Kind> = kinds
                .iter()
                .filter(|k| k.family() == Family::GatewayApi)
                .collect();
            let withheld = Arc::make_mut(&mut self.withheld);
            for group in &changed {
                match self.known.get(group) {
                    Some(served) => {
                        let lacking = gateway
                            .iter()
                            .filter_map(|k| {
                                lacks(group, served, k)
                                    .map(|why| (k.collection_shared().clone(), why))
                            })
                            .collect();
                        withheld.insert(group.clone(), lacking);
                    }
                    None => {
                        withheld.remove(group);
                    }
                }
            }
        }
        changed
    }

    /// Per cluster whose agent reported its CRDs, the Gateway API
    /// collections it lacks, with why.
    pub fn withheld(&self) -> Arc<Withheld> {
        self.withheld.clone()
    }
}

/// The CRDs of a report; `None` when it says nothing (no read, or a read
/// that failed).
fn served(crds: Option<&GatewayApiCrdsView>) -> Option<Served> {
    let crds = crds.filter(|c| c.error.is_empty())?;
    Some(
        crds.crds
            .iter()
            .map(|c| ((c.group.clone(), c.kind.clone()), c.served_versions.clone()))
            .collect(),
    )
}

/// Why `group` can't take `kind`, or `None` when it can.
fn lacks(group: &Group, served: &Served, kind: &Kind) -> Option<String> {
    let crd = format!("{}.{}", kind.plural(), kind.group());
    match served.get(&(kind.group().to_owned(), kind.kind().to_owned())) {
        Some(versions) if versions.iter().any(|v| kind.serves(v)) => None,
        Some(versions) => Some(format!(
            "cluster {group} serves the CRD {crd} at {} only; meshhub carries {} as {}: not delivered there",
            if versions.is_empty() {
                "no version".to_owned()
            } else {
                versions.join(", ")
            },
            kind.kind(),
            kind.versions().join(", "),
        )),
        None => Some(format!(
            "cluster {group} lacks the CRD {crd} (its agent reports its Gateway API CRDs): not delivered there; install the Gateway API CRDs in that cluster to receive {}s",
            kind.kind()
        )),
    }
}

/// The `/status` rows: each withheld collection that has objects.
pub fn views(
    withheld: &Withheld,
    objects: &BTreeMap<(Group, Arc<str>), usize>,
) -> Vec<WithheldView> {
    objects
        .iter()
        .filter_map(|((group, collection), &n)| {
            let reason = withheld.get(group)?.get(collection)?;
            Some(WithheldView {
                cluster: group.to_string(),
                collection: collection.to_string(),
                objects: n,
                reason: reason.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use meshhub_api::upward::{ClusterReportView, GatewayApiCrdView};

    use super::*;

    const ROUTES: &str = "k8s/gateway.networking.k8s.io/v1/httproutes";
    const GATEWAYS: &str = "k8s/gateway.networking.k8s.io/v1/gateways";

    /// A cluster's CRDs: each kind with its served versions.
    type Crds<'a> = &'a [(&'a str, &'a [&'a str])];

    fn report(crds: Option<(Crds<'_>, &str)>) -> Arc<ClusterReport> {
        Arc::new(ClusterReport {
            view: ClusterReportView {
                gateway_api: crds.map(|(crds, error)| GatewayApiCrdsView {
                    crds: crds
                        .iter()
                        .map(|(kind, versions)| GatewayApiCrdView {
                            name: format!("{}s.gateway.networking.k8s.io", kind.to_lowercase()),
                            group: "gateway.networking.k8s.io".into(),
                            kind: (*kind).into(),
                            served_versions: versions.iter().map(|v| (*v).to_owned()).collect(),
                            ..Default::default()
                        })
                        .collect(),
                    error: error.into(),
                }),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn reports(list: &[(&str, Arc<ClusterReport>)]) -> Reports {
        Arc::new(
            list.iter()
                .map(|(c, r)| ((*c).to_owned(), r.clone()))
                .collect(),
        )
    }

    #[test]
    fn only_clusters_that_reported_lacking_a_crd_are_withheld_its_kind() {
        let kinds = KindTable::builtin();
        let mut c = Carried::default();
        let full = report(Some((
            &[("HTTPRoute", &["v1", "v1beta1"]), ("Gateway", &["v1"])],
            "",
        )));
        let old = report(Some((&[("HTTPRoute", &["v1alpha2"])], "")));
        let none = report(Some((&[], "")));
        let silent = report(None);
        let r = reports(&[
            ("east", full.clone()),
            ("old", old),
            ("bare", none.clone()),
            ("quiet", silent),
        ]);
        let mut changed = c.update(&r, &kinds);
        changed.sort();
        assert_eq!(
            changed,
            [Group::from("bare"), Group::from("east"), Group::from("old")]
        );
        let w = c.withheld();
        assert!(!w[&Group::from("east")].contains_key(ROUTES));
        assert!(!w[&Group::from("east")].contains_key(GATEWAYS));
        assert!(
            w[&Group::from("east")].contains_key("k8s/gateway.networking.k8s.io/v1/grpcroutes"),
            "east lacks GRPCRoute"
        );
        let bare = &w[&Group::from("bare")][ROUTES];
        assert!(
            bare.contains("cluster bare lacks the CRD httproutes.gateway.networking.k8s.io"),
            "{bare}"
        );
        let old = &w[&Group::from("old")][ROUTES];
        assert!(old.contains("at v1alpha2 only"), "{old}");
        assert!(
            !w.contains_key(&Group::from("quiet")),
            "not said: served as today"
        );
        assert!(
            w.values()
                .all(|m| m.keys().all(|k| k.starts_with("k8s/gateway"))),
            "Istio's kinds are never withheld"
        );

        // The same reports again: nothing to read. A failed read keeps
        // what the agent last said; the CRDs installed: delivered.
        assert!(c.update(&r, &kinds).is_empty());
        let r = reports(&[
            ("east", full.clone()),
            ("bare", report(Some((&[], "forbidden")))),
        ]);
        assert_eq!(c.update(&r, &kinds), [Group::from("old")], "old is gone");
        assert!(c.withheld()[&Group::from("bare")].contains_key(ROUTES));
        let r = reports(&[
            ("east", full),
            ("bare", report(Some((&[("HTTPRoute", &["v1"])], "")))),
        ]);
        assert_eq!(c.update(&r, &kinds), [Group::from("bare")]);
        assert!(!c.withheld()[&Group::from("bare")].contains_key(ROUTES));
    }

    #[test]
    fn status_rows_are_the_withheld_collections_with_objects() {
        let mut w = Withheld::new();
        w.insert(
            Group::from("bare"),
            BTreeMap::from([(Arc::from(ROUTES), "why".to_owned())]),
        );
        let objects = BTreeMap::from([
            ((Group::from("bare"), Arc::from(ROUTES)), 2),
            ((Group::from("east"), Arc::from(ROUTES)), 5),
        ]);
        let rows = views(&w, &objects);
        assert_eq!(
            rows,
            [WithheldView {
                cluster: "bare".into(),
                collection: ROUTES.into(),
                objects: 2,
                reason: "why".into(),
            }]
        );
    }
}
