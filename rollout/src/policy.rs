//! A rollout policy as the hub checked it: ordered waves of clusters, what
//! each wave waits for before the next starts, and what a failure does.
//!
//! Plain data: the hub's configuration parses and checks the `rollout:`
//! block into it; [`crate::plan`] resolves the waves against the configured
//! clusters; [`crate::Rollout`] walks them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The whole policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    /// The waves, in order. Clusters no wave names form an implicit last
    /// wave ([`IMPLICIT_WAVE`]) without bake or gates, unless a wave takes
    /// [`Members::Rest`].
    pub waves: Vec<Wave>,
    /// How long one wave may take, from its start until its gates pass
    /// (waiting for a manual promotion not counted); beyond it the rollout
    /// fails.
    pub progress_deadline_ms: u64,
    /// What a failure does to the clusters already updated.
    pub on_failure: OnFailure,
}

/// The name of the wave that takes the clusters no configured wave names.
pub const IMPLICIT_WAVE: &str = "rest";

/// One wave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Wave {
    /// Its name (unique), for status, the audit log and metrics.
    pub name: String,
    /// Which clusters it holds.
    pub members: Members,
    /// How many of its clusters are updated at once (the next starts when
    /// one ACKs); `None`: all at once.
    pub max_concurrent: Option<usize>,
    /// How long the wave runs on the new version, every cluster ACKed,
    /// before its gates are evaluated.
    pub bake_ms: u64,
    /// Whether the next wave waits for an operator's promotion once this
    /// one passed.
    pub promotion: Promotion,
    /// Metric gates (evaluated by the hub, per cluster of the wave).
    pub metrics: Vec<MetricGate>,
}

/// Which clusters a wave holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Members {
    /// These clusters, by name.
    Names(Vec<String>),
    /// The clusters whose labels (`clusters[].clusterLabels`) include all
    /// of these.
    Labels(BTreeMap<String, String>),
    /// Every cluster no earlier wave took (only the last wave).
    Rest,
}

/// Whether a passed wave starts the next by itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Promotion {
    /// The next wave starts as soon as this one passed.
    #[default]
    Automatic,
    /// The next wave waits for `meshhubctl rollout promote`.
    Manual,
}

/// What a failed rollout does with the clusters it already updated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnFailure {
    /// Serve them their previous version again (a pin each).
    #[default]
    Rollback,
    /// Leave them as they are; nothing further is updated.
    Halt,
}

/// A query whose value per cluster must compare well with a threshold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricGate {
    /// Its name, for status and the audit log.
    pub name: String,
    /// PromQL; `$cluster` is replaced with the cluster's name.
    pub query: String,
    /// `value <comparison> threshold` must hold.
    pub comparison: Comparison,
    /// The threshold.
    pub threshold: f64,
    /// Also evaluated while the wave bakes (a failure ends the bake).
    pub during_bake: bool,
    /// What an empty answer means.
    pub on_no_data: NoData,
}

/// How a metric value is compared with its threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Comparison {
    /// `<`
    #[serde(rename = "<")]
    Less,
    /// `<=`
    #[serde(rename = "<=")]
    LessOrEqual,
    /// `>`
    #[serde(rename = ">")]
    Greater,
    /// `>=`
    #[serde(rename = ">=")]
    GreaterOrEqual,
    /// `==`
    #[serde(rename = "==")]
    Equal,
}

impl Comparison {
    /// Every comparison, as written in the configuration.
    pub const ALL: [(&'static str, Comparison); 5] = [
        ("<", Self::Less),
        ("<=", Self::LessOrEqual),
        (">", Self::Greater),
        (">=", Self::GreaterOrEqual),
        ("==", Self::Equal),
    ];

    /// Whether `value` passes against `threshold` (NaN never passes).
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Self::Less => value < threshold,
            Self::LessOrEqual => value <= threshold,
            Self::Greater => value > threshold,
            Self::GreaterOrEqual => value >= threshold,
            Self::Equal => value == threshold,
        }
    }

    /// As written.
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, c)| *c == self)
            .map_or("?", |(s, _)| s)
    }
}

/// What a metric gate makes of a query that returns no sample for the
/// cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NoData {
    /// The gate fails (a missing signal is not a good one).
    #[default]
    Fail,
    /// The gate passes.
    Pass,
}

impl MetricGate {
    /// The query for `cluster`.
    pub fn query_for(&self, cluster: &str) -> String {
        self.query.replace("$cluster", cluster)
    }

    /// Whether the gate passes on `value` (`None`: no sample).
    pub fn passes(&self, value: Option<f64>) -> bool {
        match value {
            Some(v) => self.comparison.holds(v, self.threshold),
            None => self.on_no_data == NoData::Pass,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(comparison: Comparison, threshold: f64, on_no_data: NoData) -> MetricGate {
        MetricGate {
            name: "errors".into(),
            query: "sum(rate(errors{cluster=\"$cluster\"}[1m]))".into(),
            comparison,
            threshold,
            during_bake: false,
            on_no_data,
        }
    }

    #[test]
    fn comparisons_hold_as_written() {
        let cases = [
            (Comparison::Less, 1.0, 2.0, true),
            (Comparison::Less, 2.0, 2.0, false),
            (Comparison::LessOrEqual, 2.0, 2.0, true),
            (Comparison::Greater, 3.0, 2.0, true),
            (Comparison::Greater, 2.0, 2.0, false),
            (Comparison::GreaterOrEqual, 2.0, 2.0, true),
            (Comparison::Equal, 2.0, 2.0, true),
            (Comparison::Equal, 2.5, 2.0, false),
            (Comparison::GreaterOrEqual, f64::NAN, 0.0, false),
        ];
        for (c, value, threshold, expected) in cases {
            assert_eq!(
                c.holds(value, threshold),
                expected,
                "{value} {} {threshold}",
                c.as_str()
            );
        }
    }

    #[test]
    fn the_cluster_is_substituted_and_missing_data_follows_the_setting() {
        let g = gate(Comparison::Less, 0.05, NoData::Fail);
        assert_eq!(
            g.query_for("west"),
            "sum(rate(errors{cluster=\"west\"}[1m]))"
        );
        assert!(g.passes(Some(0.01)));
        assert!(!g.passes(Some(0.5)));
        assert!(!g.passes(None));
        assert!(gate(Comparison::Less, 0.05, NoData::Pass).passes(None));
    }
}
