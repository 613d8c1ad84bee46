//! The `rollout:` block: staged delivery of a change to the remote
//! clusters, wave by wave (off when absent: every cluster gets a change at
//! once).
//!
//! ```yaml
//! rollout:
//!   progressDeadline: 10m     # per wave, from its start until its gates hold
//!   onFailure: rollback       # or halt
//!   waves:
//!   - name: canary
//!     clusters: [east]        # or selector: {tier: canary} (clusters[].clusterLabels)
//!     bake: 5m
//!     promotion: manual       # default automatic
//!   - name: rest
//!     rest: true              # every cluster no earlier wave took
//!     maxConcurrent: 10
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use meshhub_mcp::settings::{SettingError, duration};
use meshhub_rollout::{Members, OnFailure, Policy, Promotion, Wave};
use serde::Deserialize;

/// Default `progressDeadline`.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// `rollout:` as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRollout {
    waves: Vec<RawWave>,
    #[serde(default, deserialize_with = "duration")]
    progress_deadline: Option<Duration>,
    #[serde(default)]
    on_failure: Option<RawOnFailure>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
enum RawOnFailure {
    Rollback,
    Halt,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
enum RawPromotion {
    Automatic,
    Manual,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawWave {
    name: String,
    #[serde(default)]
    clusters: Vec<String>,
    #[serde(default)]
    selector: BTreeMap<String, String>,
    #[serde(default)]
    rest: bool,
    #[serde(default)]
    max_concurrent: Option<usize>,
    #[serde(default, deserialize_with = "duration")]
    bake: Option<Duration>,
    #[serde(default)]
    promotion: Option<RawPromotion>,
}

impl RawRollout {
    /// Checks the block against the names of the clusters the hub dials
    /// (those with `agent:`, the only ones a rollout stages; errors name
    /// the setting within `rollout`).
    pub fn check(self, clusters: &BTreeSet<String>) -> Result<Policy, SettingError> {
        let deadline = self.progress_deadline.unwrap_or(DEFAULT_PROGRESS_DEADLINE);
        if deadline.is_zero() {
            return Err(SettingError::new("progressDeadline", "must be positive"));
        }
        if self.waves.is_empty() {
            return Err(SettingError::new(
                "waves",
                "at least one wave (leave `rollout:` out to update every cluster at once)",
            ));
        }
        let count = self.waves.len();
        let mut names = BTreeSet::new();
        let mut named = BTreeSet::new();
        let mut waves = Vec::with_capacity(count);
        for (i, w) in self.waves.into_iter().enumerate() {
            let at = |field: &str| format!("waves[{i}].{field}");
            if w.name.is_empty() || !names.insert(w.name.clone()) {
                return Err(SettingError::new(
                    at("name"),
                    format!("{:?}: every wave needs a name of its own", w.name),
                ));
            }
            let ways = usize::from(!w.clusters.is_empty())
                + usize::from(!w.selector.is_empty())
                + usize::from(w.rest);
            if ways != 1 {
                return Err(SettingError::new(
                    at("clusters"),
                    "give exactly one of `clusters`, `selector` or `rest: true`",
                ));
            }
            if w.rest && i + 1 != count {
                return Err(SettingError::new(
                    at("rest"),
                    "only the last wave may take the rest of the clusters",
                ));
            }
            for (j, c) in w.clusters.iter().enumerate() {
                if !clusters.contains(c) {
                    return Err(SettingError::new(
                        format!("waves[{i}].clusters[{j}]"),
                        format!(
                            "{c:?} is not a cluster with an `agent:` (a rollout stages what the hub dials)"
                        ),
                    ));
                }
                if !named.insert(c.clone()) {
                    return Err(SettingError::new(
                        format!("waves[{i}].clusters[{j}]"),
                        format!("{c:?} is already in an earlier wave"),
                    ));
                }
            }
            if w.max_concurrent == Some(0) {
                return Err(SettingError::new(at("maxConcurrent"), "must be at least 1"));
            }
            let bake = w.bake.unwrap_or_default();
            if bake >= deadline {
                return Err(SettingError::new(
                    at("bake"),
                    format!(
                        "{} is not shorter than progressDeadline {}: the wave could never pass",
                        humantime::format_duration(bake),
                        humantime::format_duration(deadline)
                    ),
                ));
            }
            waves.push(Wave {
                members: if w.rest {
                    Members::Rest
                } else if w.selector.is_empty() {
                    Members::Names(w.clusters)
                } else {
                    Members::Labels(w.selector)
                },
                name: w.name,
                max_concurrent: w.max_concurrent,
                bake_ms: millis(bake),
                promotion: match w.promotion {
                    Some(RawPromotion::Manual) => Promotion::Manual,
                    _ => Promotion::Automatic,
                },
                metrics: Vec::new(),
            });
        }
        Ok(Policy {
            waves,
            progress_deadline_ms: millis(deadline),
            on_failure: match self.on_failure {
                Some(RawOnFailure::Halt) => OnFailure::Halt,
                _ => OnFailure::Rollback,
            },
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
