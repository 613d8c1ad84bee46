//! `meshhubctl status`: what each cluster's Gateway API controllers said of
//! the objects applied there (each judged at the generation its cluster
//! holds), from its agent's report.

use meshhub_api::status::RemoteView;
use meshhub_api::upward::Acceptance;
use serde::Serialize;

use crate::output::render as table;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What one cluster's Gateway API controllers said of the objects applied
/// there, each at the generation its cluster holds.
#[derive(Debug, Serialize)]
pub(super) struct GatewayApiSummary {
    cluster: String,
    accepted: usize,
    refused: usize,
    pending: usize,
    /// Objects its agent left out of its report (past its cap).
    #[serde(skip_serializing_if = "is_zero")]
    not_reported: u32,
    /// The first refusals: `Kind ns/name: where: reason: message`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    refusals: Vec<String>,
}

/// At most this many refusals are listed per cluster.
const REFUSALS_LISTED: usize = 10;

pub(super) fn gateway_api_summary(remote: &RemoteView) -> Option<GatewayApiSummary> {
    let status = remote.report.as_ref()?.gateway_api_status.as_ref()?;
    let mut out = GatewayApiSummary {
        cluster: remote.cluster.clone(),
        accepted: 0,
        refused: 0,
        pending: 0,
        not_reported: status.omitted,
        refusals: Vec::new(),
    };
    for o in &status.objects {
        match o.acceptance() {
            Acceptance::Accepted => out.accepted += 1,
            Acceptance::Pending | Acceptance::Untold => out.pending += 1,
            no @ Acceptance::Refused { .. } => {
                out.refused += 1;
                if out.refusals.len() < REFUSALS_LISTED {
                    let kind = o.collection.rsplit('/').next().unwrap_or_default();
                    out.refusals.push(format!(
                        "{kind} {}: {}",
                        o.name,
                        no.to_string().trim_start_matches("no: ")
                    ));
                }
            }
        }
    }
    Some(out)
}

/// The table and the refusals named, after the clusters.
pub(super) fn render(summaries: &[GatewayApiSummary], out: &mut String) {
    if summaries
        .iter()
        .any(|g| g.accepted + g.refused + g.pending > 0)
    {
        let mut rows = vec![vec![
            "GATEWAY API".to_owned(),
            "ACCEPTED".to_owned(),
            "REFUSED".to_owned(),
            "PENDING".to_owned(),
        ]];
        for g in summaries {
            rows.push(vec![
                g.cluster.clone(),
                g.accepted.to_string(),
                g.refused.to_string(),
                g.pending.to_string(),
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));
        for g in summaries {
            if g.not_reported > 0 {
                out.push_str(&format!(
                "\n{} object(s) of cluster {} are not in its agent's report (past its cap): not judged\n",
                g.not_reported, g.cluster
            ));
            }
            for r in &g.refusals {
                out.push_str(&format!("\nNOT ACCEPTED in cluster {}: {r}\n", g.cluster));
            }
            if g.refused > g.refusals.len() {
                out.push_str(&format!(
                "\n... and {} more not accepted in cluster {} (meshhubctl describe <kind> <ns/name>)\n",
                g.refused - g.refusals.len(),
                g.cluster
            ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_each_clusters_gateway_api_controller_said_is_counted_and_refusals_named() {
        use meshhub_api::upward::{
            ACCEPTED, ClusterReportView, ConditionStatus, ConditionView, GatewayApiStatusView,
            ObjectStatusView,
        };
        let object = |name: &str, status: ConditionStatus| ObjectStatusView {
            collection: "k8s/gateway.networking.k8s.io/v1/gateways".into(),
            name: name.into(),
            generation: 1,
            conditions: vec![ConditionView {
                kind: ACCEPTED.into(),
                status,
                reason: "InvalidParameters".into(),
                message: "no class".into(),
                observed_generation: 1,
            }],
            ..Default::default()
        };
        let east = RemoteView {
            cluster: "east".into(),
            report: Some(ClusterReportView {
                gateway_api_status: Some(GatewayApiStatusView {
                    objects: vec![
                        object("shop/a", ConditionStatus::True),
                        object("shop/b", ConditionStatus::False),
                        object("shop/c", ConditionStatus::Unknown),
                    ],
                    omitted: 0,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let bare = RemoteView {
            cluster: "bare".into(),
            ..Default::default()
        };

        let summaries: Vec<_> = [&east, &bare]
            .into_iter()
            .filter_map(gateway_api_summary)
            .collect();
        assert_eq!(summaries.len(), 1, "bare's agent reports nothing");
        let mut text = String::new();
        render(&summaries, &mut text);
        let row = text
            .lines()
            .find(|l| l.starts_with("east"))
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            ["east", "1", "1", "1"],
            "{text}"
        );
        assert!(
            text.contains(
                "NOT ACCEPTED in cluster east: gateways shop/b: InvalidParameters: no class"
            ),
            "{text}"
        );
    }
}
