//! Which clusters of a change go in which wave: the policy's waves resolved
//! against the configured clusters, keeping only those the change touches.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::policy::{IMPLICIT_WAVE, Members, Policy, Promotion};

/// A configured cluster as planning sees it.
#[derive(Clone, Copy, Debug)]
pub struct ClusterInfo<'a> {
    /// Its name (and group).
    pub name: &'a str,
    /// Its own labels (`clusters[].clusterLabels`), for wave selectors.
    pub labels: &'a BTreeMap<String, String>,
}

/// One wave of one rollout: the changed clusters it updates, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedWave {
    /// The policy's wave name.
    pub name: String,
    /// Its clusters, in the order they are updated.
    pub clusters: Vec<String>,
    /// At most this many updating at once (`None`: all).
    pub max_concurrent: Option<usize>,
    /// Bake time once every cluster ACKed.
    pub bake_ms: u64,
    /// Whether the next wave waits for an operator.
    pub promotion: Promotion,
}

/// The waves of a change touching `changed` (cluster names), in order:
/// each cluster in the first wave that takes it (names before label
/// selectors only by wave order), waves left empty dropped, clusters no
/// wave takes in a last wave named [`IMPLICIT_WAVE`].
pub fn plan(
    policy: &Policy,
    clusters: &[ClusterInfo<'_>],
    changed: &BTreeSet<String>,
) -> Vec<PlannedWave> {
    let mut left: Vec<&ClusterInfo<'_>> = clusters
        .iter()
        .filter(|c| changed.contains(c.name))
        .collect();
    // A changed group no cluster entry names (a consumer's own group):
    // nothing to hold, it is updated with the last wave.
    let mut unknown: Vec<String> = changed
        .iter()
        .filter(|name| !clusters.iter().any(|c| c.name == name.as_str()))
        .cloned()
        .collect();
    let mut waves = Vec::with_capacity(policy.waves.len() + 1);
    for wave in &policy.waves {
        let (taken, rest): (Vec<_>, Vec<_>) = left.into_iter().partition(|c| match &wave.members {
            Members::Names(names) => names.iter().any(|n| n == c.name),
            Members::Labels(want) => want.iter().all(|(k, v)| c.labels.get(k) == Some(v)),
            Members::Rest => true,
        });
        left = rest;
        let mut names: Vec<String> = match &wave.members {
            // In the order the wave names them.
            Members::Names(order) => order
                .iter()
                .filter(|n| taken.iter().any(|c| c.name == n.as_str()))
                .cloned()
                .collect(),
            _ => taken.iter().map(|c| c.name.to_owned()).collect(),
        };
        if wave.members == Members::Rest {
            names.append(&mut unknown);
        }
        if !names.is_empty() {
            waves.push(PlannedWave {
                name: wave.name.clone(),
                clusters: names,
                max_concurrent: wave.max_concurrent,
                bake_ms: wave.bake_ms,
                promotion: wave.promotion,
            });
        }
    }
    let mut rest: Vec<String> = left.iter().map(|c| c.name.to_owned()).collect();
    rest.append(&mut unknown);
    if !rest.is_empty() {
        // Gates and status find a wave by its name: the implicit one never
        // takes the name of a configured wave.
        let mut name = IMPLICIT_WAVE.to_owned();
        while policy.waves.iter().any(|w| w.name == name) {
            name.push('_');
        }
        waves.push(PlannedWave {
            name,
            clusters: rest,
            max_concurrent: None,
            bake_ms: 0,
            promotion: Promotion::Automatic,
        });
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{OnFailure, Wave};

    fn wave(name: &str, members: Members) -> Wave {
        Wave {
            name: name.into(),
            members,
            max_concurrent: None,
            bake_ms: 1000,
            promotion: Promotion::Automatic,
            metrics: vec![],
        }
    }

    fn policy(waves: Vec<Wave>) -> Policy {
        Policy {
            waves,
            progress_deadline_ms: 60_000,
            on_failure: OnFailure::Rollback,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn names(waves: &[PlannedWave]) -> Vec<(String, Vec<String>)> {
        waves
            .iter()
            .map(|w| (w.name.clone(), w.clusters.clone()))
            .collect()
    }

    fn unlabelled<'a>(
        names: &[&'a str],
        none: &'a BTreeMap<String, String>,
    ) -> Vec<ClusterInfo<'a>> {
        names
            .iter()
            .map(|name| ClusterInfo { name, labels: none })
            .collect()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn names_then_labels_then_the_rest_each_cluster_once() {
        let canary = labels(&[("tier", "canary")]);
        let eu = labels(&[("region", "eu")]);
        let none = labels(&[]);
        let clusters = [
            ClusterInfo {
                name: "a",
                labels: &eu,
            },
            ClusterInfo {
                name: "b",
                labels: &canary,
            },
            ClusterInfo {
                name: "c",
                labels: &eu,
            },
            ClusterInfo {
                name: "d",
                labels: &none,
            },
        ];
        let p = policy(vec![
            wave("first", Members::Names(vec!["c".into(), "zz".into()])),
            wave("canaries", Members::Labels(canary.clone())),
            wave("eu", Members::Labels(eu.clone())),
            wave("all", Members::Rest),
        ]);
        let planned = plan(&p, &clusters, &set(&["a", "b", "c", "d"]));
        assert_eq!(
            names(&planned),
            vec![
                ("first".into(), vec!["c".into()]),
                ("canaries".into(), vec!["b".into()]),
                ("eu".into(), vec!["a".into()]),
                ("all".into(), vec!["d".into()]),
            ]
        );
    }

    #[test]
    fn unchanged_clusters_and_empty_waves_are_left_out() {
        let none = labels(&[]);
        let clusters = unlabelled(&["a", "b"], &none);
        let p = policy(vec![
            wave("one", Members::Names(vec!["a".into()])),
            wave("two", Members::Names(vec!["b".into()])),
        ]);
        let planned = plan(&p, &clusters, &set(&["b"]));
        assert_eq!(names(&planned), vec![("two".into(), vec!["b".into()])]);
    }

    #[test]
    fn clusters_no_wave_takes_form_an_implicit_last_wave() {
        let none = labels(&[]);
        let clusters = unlabelled(&["a", "b"], &none);
        let p = policy(vec![wave("one", Members::Names(vec!["a".into()]))]);
        // "consumers" is a changed group with no cluster entry.
        let planned = plan(&p, &clusters, &set(&["a", "b", "consumers"]));
        assert_eq!(
            names(&planned),
            vec![
                ("one".into(), vec!["a".into()]),
                (IMPLICIT_WAVE.into(), vec!["b".into(), "consumers".into()]),
            ]
        );
        assert_eq!(planned[1].bake_ms, 0);
    }
}
