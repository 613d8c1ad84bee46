//! What analysis knows of each cluster beyond its group's objects, from
//! its agent's report: its Istio releases (MH0002, IST0176), its Gateway
//! API CRDs (IST0176) and its Services (IST0101 on route backends). A
//! change of any of them analyses the cluster's group again, although its
//! content did not change.

use std::sync::Arc;

use meshhub_analyze::{CrdBundle, IstioVersion, Services, Target};

/// One cluster's facts (absent ones unknown).
#[derive(Clone, Debug, Default)]
pub struct ClusterFacts {
    /// The release the version check reads: its oldest istiod's, or older
    /// where its Istio CRDs know less (`None`: unknown, checked as the
    /// oldest release).
    pub release: Option<IstioVersion>,
    /// Its newest istiod's release: the CRD minimums are that release's.
    pub newest: Option<IstioVersion>,
    /// Its Gateway API CRDs' bundle versions.
    pub gateway_api_crds: Option<Arc<[CrdBundle]>>,
    /// Its Services (shared with the report they came from: compared by
    /// pointer, a new list is a new `Arc`).
    pub services: Option<Arc<Services>>,
}

impl PartialEq for ClusterFacts {
    fn eq(&self, other: &Self) -> bool {
        self.release == other.release
            && self.newest == other.newest
            && self.gateway_api_crds == other.gateway_api_crds
            && match (&self.services, &other.services) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl ClusterFacts {
    /// A cluster known by its release alone.
    pub fn of_release(release: IstioVersion) -> Self {
        Self {
            release: Some(release),
            newest: Some(release),
            ..Self::default()
        }
    }

    /// What meshhub-analyze reads of it, for the cluster `name`.
    pub fn for_analysis<'a>(&'a self, name: &'a str) -> meshhub_analyze::Cluster<'a> {
        meshhub_analyze::Cluster {
            target: match self.release {
                Some(version) => Target::Known {
                    cluster: Some(name),
                    version,
                },
                None => Target::Unknown { cluster: name },
            },
            newest: self.newest,
            gateway_api_crds: self.gateway_api_crds.as_deref(),
            services: self.services.as_deref(),
        }
    }
}
