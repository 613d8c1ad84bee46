//! Namespace-wide Sidecars and Telemetries: more than one in a namespace
//! (IST0111, IST0160). After Istio's `analyzers/sidecar` and
//! `analyzers/telemetry`.
//!
//! Istio also reports a selector that matches no pod, and two selectors
//! matching the same pod; both need the cluster's pods, which the hub does
//! not see, so they are not checked here.

use std::collections::BTreeMap;

use crate::facts::Facts;
use crate::message::{
    Code, MULTIPLE_SIDECARS_WITHOUT_WORKLOAD_SELECTORS,
    MULTIPLE_TELEMETRIES_WITHOUT_WORKLOAD_SELECTORS,
};
use crate::report::{Report, name_list};
use crate::set::Set;

/// IST0111 and IST0160.
pub fn namespace_wide(set: &Set<'_>, out: &mut Report) {
    several(
        &set.namespace_sidecars,
        MULTIPLE_SIDECARS_WITHOUT_WORKLOAD_SELECTORS,
        "Sidecars",
        out,
    );
    several(
        &set.namespace_telemetries,
        MULTIPLE_TELEMETRIES_WITHOUT_WORKLOAD_SELECTORS,
        "Telemetries",
        out,
    );
}

fn several(objects: &[&Facts], code: Code, what: &str, out: &mut Report) {
    let mut by_namespace: BTreeMap<&str, Vec<&Facts>> = BTreeMap::new();
    for f in objects {
        by_namespace.entry(&f.namespace).or_default().push(f);
    }
    for (ns, list) in by_namespace {
        if list.len() < 2 {
            continue;
        }
        let mut names: Vec<String> = list
            .iter()
            .map(|f| format!("{}/{}", f.namespace, f.name))
            .collect();
        names.sort();
        let names = name_list(&names, Some(names.len()), " ");
        for f in &list {
            out.push(
                f,
                code,
                "",
                format!(
                    "The {what} [{}] in namespace {ns:?} have no workload selector, which can lead to undefined behavior.",
                    names
                ),
            );
        }
    }
}
