//! MH0002 (meshhub's own): an object, a field or an enum value needs a
//! newer Istio than the cluster runs. The older istiod would drop the field
//! silently (it decodes MCP with its own types and ACKs), and an older CRD
//! schema would prune it: the message says so before that happens. So
//! does a value the older release's validation refuses (a value row of the
//! since table: `warmup.aggression` 0.5 before 1.31), which its API server
//! or istiod would refuse and drop.
//!
//! A cluster whose version is unknown is taken as running the oldest
//! release the table starts from (1.22): everything newer is flagged, and
//! the text says the version is unknown. Failing open would let exactly
//! the silent cut through that the check exists to catch, and
//! `analysis.holdBack: [MH0002]` keeps such a cluster on its last version
//! until its agent reports what it runs (docs/analysis.md).

use crate::facts::Facts;
use crate::message::ISTIO_VERSION_SKEW;
use crate::report::Report;
use crate::since::{IstioVersion, Need};

/// The Istio an analysis is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// No version check (offline analysis without a version).
    Unchecked,
    /// A known release, of a named cluster or of none (offline).
    Known {
        /// The cluster, when there is one.
        cluster: Option<&'a str>,
        /// What it runs (its oldest istiod, when several).
        version: IstioVersion,
    },
    /// A cluster whose release nobody reported.
    Unknown {
        /// The cluster.
        cluster: &'a str,
    },
}

/// MH0002 for every need of `objects` that `target` lacks.
pub fn check(objects: &[&Facts], target: &Target<'_>, out: &mut Report) {
    // The release checked against (`None`: unknown, knows nothing new).
    let (release, runs) = match target {
        Target::Unchecked => return,
        Target::Known { cluster, version } => (
            Some(*version),
            match cluster {
                Some(c) => format!("cluster {c} runs {version}"),
                None => format!("checked against Istio {version}"),
            },
        ),
        Target::Unknown { cluster } => (
            None,
            format!("the Istio version of cluster {cluster} is unknown (no report names it)"),
        ),
    };
    for f in objects {
        for n in &f.needs {
            if release.is_some_and(|r| r.knows(n.since)) {
                continue;
            }
            out.push(f, ISTIO_VERSION_SKEW, &n.path, text(f, n, &runs));
        }
    }
}

fn text(f: &Facts, n: &Need, runs: &str) -> String {
    match (&n.value, &n.within) {
        (Some(v), Some(within)) => format!(
            "value {v} needs Istio 1.{} (older releases refuse values in {within}); {runs}",
            n.since
        ),
        (Some(v), None) => format!("value {v:?} needs Istio 1.{}; {runs}", n.since),
        (None, _) if n.path.is_empty() => {
            format!("{} needs Istio 1.{}; {runs}", f.kind.as_str(), n.since)
        }
        (None, _) => format!("needs Istio 1.{}; {runs}", n.since),
    }
}
