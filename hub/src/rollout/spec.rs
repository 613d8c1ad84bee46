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
//!     metrics:                # gates evaluated per cluster at the end of the bake
//!     - name: error-rate
//!       query: sum(rate(requests_total{cluster="$cluster",code=~"5.."}[1m]))
//!       comparison: "<"
//!       threshold: 0.05
//!       duringBake: true      # also every prometheus.interval while it bakes
//!   - name: rest
//!     rest: true              # every cluster no earlier wave took
//!     maxConcurrent: 10
//!   prometheus:
//!     url: http://prometheus.monitoring:9090
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use meshhub_mcp::settings::{SettingError, duration};
use meshhub_rollout::{
    Comparison, Members, MetricGate, NoData, OnFailure, Policy, Promotion, Wave,
};
use serde::Deserialize;

/// Default `progressDeadline`.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// Default `prometheus.timeout`.
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Default `prometheus.interval`.
pub const DEFAULT_GATE_INTERVAL: Duration = Duration::from_secs(10);

/// The checked block.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutSpec {
    /// The waves and what a failure does.
    pub policy: Policy,
    /// Where metric gates are evaluated (`None`: no wave has one).
    pub prometheus: Option<PrometheusSpec>,
}

/// `rollout.prometheus`: the Prometheus server metric gates query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrometheusSpec {
    /// Its base URL (`http://prometheus:9090`); `/api/v1/query` is
    /// appended.
    pub url: String,
    /// How long one query may take.
    pub timeout: Duration,
    /// How often gates with `duringBake` are evaluated while a wave bakes,
    /// and a gate evaluation that could not be made is tried again.
    pub interval: Duration,
    /// PEM roots that verify an `https://` server (default: the system's).
    pub ca: Option<std::path::PathBuf>,
}

/// `rollout:` as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRollout {
    waves: Vec<RawWave>,
    #[serde(default, deserialize_with = "duration")]
    progress_deadline: Option<Duration>,
    #[serde(default)]
    on_failure: Option<RawOnFailure>,
    #[serde(default)]
    prometheus: Option<RawPrometheus>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPrometheus {
    url: String,
    #[serde(default, deserialize_with = "duration")]
    timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    interval: Option<Duration>,
    #[serde(default)]
    ca: Option<std::path::PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawMetricGate {
    name: String,
    query: String,
    comparison: String,
    threshold: f64,
    #[serde(default)]
    during_bake: bool,
    #[serde(default)]
    on_no_data: Option<RawNoData>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
enum RawNoData {
    Fail,
    Pass,
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
    #[serde(default)]
    metrics: Vec<RawMetricGate>,
}

impl RawRollout {
    /// Checks the block against the names of the clusters the hub dials
    /// (those with `agent:`, the only ones a rollout stages; errors name
    /// the setting within `rollout`); `base` is the configuration file's
    /// directory.
    pub fn check(
        self,
        clusters: &BTreeSet<String>,
        base: &std::path::Path,
    ) -> Result<RolloutSpec, SettingError> {
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
            if w.name == meshhub_rollout::IMPLICIT_WAVE && !w.rest {
                return Err(SettingError::new(
                    at("name"),
                    format!(
                        "{:?} names the implicit last wave of the clusters no wave takes; give this wave another name (or `rest: true`)",
                        w.name
                    ),
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
            let metrics = check_gates(w.metrics, i)?;
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
                metrics,
            });
        }
        let gated = waves.iter().any(|w| !w.metrics.is_empty());
        let prometheus = match (self.prometheus, gated) {
            (Some(p), _) => Some(check_prometheus(p, base)?),
            (None, true) => {
                return Err(SettingError::new(
                    "prometheus",
                    "a wave has metric gates: give the Prometheus server's `url`",
                ));
            }
            (None, false) => None,
        };
        Ok(RolloutSpec {
            policy: Policy {
                waves,
                progress_deadline_ms: millis(deadline),
                on_failure: match self.on_failure {
                    Some(RawOnFailure::Halt) => OnFailure::Halt,
                    _ => OnFailure::Rollback,
                },
            },
            prometheus,
        })
    }
}

fn check_prometheus(
    p: RawPrometheus,
    base: &std::path::Path,
) -> Result<PrometheusSpec, SettingError> {
    let url = p.url.trim_end_matches('/').to_owned();
    let parsed: Result<http::Uri, _> = url.parse();
    let scheme_ok = parsed
        .as_ref()
        .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if !scheme_ok {
        return Err(SettingError::new(
            "prometheus.url",
            format!("{url:?} is not an http:// or https:// URL"),
        ));
    }
    let timeout = p.timeout.unwrap_or(DEFAULT_QUERY_TIMEOUT);
    let interval = p.interval.unwrap_or(DEFAULT_GATE_INTERVAL);
    for (field, d) in [
        ("prometheus.timeout", timeout),
        ("prometheus.interval", interval),
    ] {
        if d.is_zero() {
            return Err(SettingError::new(field, "must be positive"));
        }
    }
    Ok(PrometheusSpec {
        url,
        timeout,
        interval,
        ca: p.ca.map(|c| base.join(c)),
    })
}

fn check_gates(raw: Vec<RawMetricGate>, wave: usize) -> Result<Vec<MetricGate>, SettingError> {
    let mut names = BTreeSet::new();
    let mut gates = Vec::with_capacity(raw.len());
    for (j, g) in raw.into_iter().enumerate() {
        let at = |field: &str| format!("waves[{wave}].metrics[{j}].{field}");
        if g.name.is_empty() || !names.insert(g.name.clone()) {
            return Err(SettingError::new(
                at("name"),
                format!("{:?}: every gate of a wave needs a name of its own", g.name),
            ));
        }
        if g.query.trim().is_empty() {
            return Err(SettingError::new(at("query"), "must not be empty"));
        }
        let Some((_, comparison)) = Comparison::ALL.iter().find(|(s, _)| *s == g.comparison) else {
            return Err(SettingError::new(
                at("comparison"),
                format!("{:?}: one of <, <=, >, >=, ==", g.comparison),
            ));
        };
        if !g.threshold.is_finite() {
            return Err(SettingError::new(
                at("threshold"),
                "must be a finite number",
            ));
        }
        gates.push(MetricGate {
            name: g.name,
            query: g.query,
            comparison: *comparison,
            threshold: g.threshold,
            during_bake: g.during_bake,
            on_no_data: match g.on_no_data {
                Some(RawNoData::Pass) => NoData::Pass,
                _ => NoData::Fail,
            },
        });
    }
    Ok(gates)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
