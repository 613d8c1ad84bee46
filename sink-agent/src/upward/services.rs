//! The names of the cluster's Services, reported upward: the hub checks
//! the Gateway API routes' backend Services against them (IST0101,
//! docs/analysis.md). An agent that applies lists them with the
//! applier's client, metadata only, in pages, every [`INTERVAL`]; the
//! report carries at most [`MAX`] names (the first in namespace and name
//! order) and counts the rest.
//!
//! A periodic list rather than a watch: Services change rarely next to
//! the report's other parts, a list costs one paged read per interval,
//! and a report rebuilt on every Service event would resend every name
//! (the report is one resource). A new route to a Service created in the
//! same minute may be flagged until the next list.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use meshhub_proto::upward::{ClusterServices, NamespaceServices};
use prost::Message as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How often the Services are listed.
pub const INTERVAL: Duration = Duration::from_secs(30);
/// At most this many names are reported.
pub const MAX: usize = 20_000;
/// Services per page of a list.
const PAGE: u32 = 500;

/// What the last list found: the report's part, or why it failed.
pub type Listed = Result<ClusterServices, String>;

/// Lists the cluster's Services every `every` until `shutdown`,
/// publishing what changed.
pub async fn run(
    client: kube::Client,
    every: Duration,
    tx: watch::Sender<Option<Listed>>,
    shutdown: CancellationToken,
) {
    let api: Api<Service> = Api::all(client);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(read) = super::next_round(&mut tick, &shutdown, list(&api)).await else {
            return;
        };
        let listed: Listed = read
            .map(|names| summary(names, MAX))
            .map_err(|e| meshhub_runtime::error_chain(&e));
        tx.send_if_modified(|old| {
            let changed = old.as_ref() != Some(&listed);
            if changed {
                if let Err(e) = &listed {
                    warn!(error = %e, "can't list the cluster's Services");
                }
                *old = Some(listed);
            }
            changed
        });
    }
}

/// Every Service's `(namespace, name)`, page by page.
async fn list(api: &Api<Service>) -> Result<Vec<(String, String)>, kube::Error> {
    let mut params = ListParams::default().limit(PAGE);
    let mut out = Vec::new();
    loop {
        let page = api.list_metadata(&params).await?;
        out.extend(page.items.into_iter().filter_map(|s| {
            let m = s.metadata;
            Some((m.namespace?, m.name?))
        }));
        match page.metadata.continue_ {
            Some(next) if !next.is_empty() => params = params.continue_token(&next),
            _ => return Ok(out),
        }
    }
}

/// The report's part for `names`: the first `max` in (namespace, name)
/// order, grouped by namespace, the rest counted.
pub fn summary(mut names: Vec<(String, String)>, max: usize) -> ClusterServices {
    names.sort_unstable();
    names.dedup();
    let omitted = names.len().saturating_sub(max);
    names.truncate(max);
    let mut namespaces: Vec<NamespaceServices> = Vec::new();
    for (ns, name) in names {
        match namespaces.last_mut() {
            Some(last) if last.namespace == ns => last.names.push(name),
            _ => namespaces.push(NamespaceServices {
                namespace: ns,
                names: vec![name],
            }),
        }
    }
    let mut out = ClusterServices {
        namespaces,
        omitted: u32::try_from(omitted).unwrap_or(u32::MAX),
        ..ClusterServices::default()
    };
    out.version = super::digest(&out.encode_to_vec());
    out
}

/// The report's part for what the last list found.
pub fn report(listed: &Listed) -> ClusterServices {
    match listed {
        Ok(s) => s.clone(),
        Err(e) => ClusterServices {
            error: e.clone(),
            ..ClusterServices::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<(String, String)> {
        // Names as teams write them: a few dozen namespaces, service names
        // of 8 to 20 characters.
        (0..n)
            .map(|i| {
                (
                    format!("team-{:02}", i % 40),
                    format!("service-{i:05}-api{}", "x".repeat(i % 8)),
                )
            })
            .collect()
    }

    #[test]
    fn services_are_grouped_sorted_and_cut_at_the_cap() {
        let s = summary(
            vec![
                ("b".into(), "y".into()),
                ("a".into(), "z".into()),
                ("b".into(), "x".into()),
                ("a".into(), "z".into()),
                ("c".into(), "w".into()),
            ],
            3,
        );
        let flat: Vec<(String, Vec<String>)> = s
            .namespaces
            .iter()
            .map(|n| (n.namespace.clone(), n.names.clone()))
            .collect();
        assert_eq!(
            flat,
            [
                ("a".to_owned(), vec!["z".to_owned()]),
                ("b".to_owned(), vec!["x".to_owned(), "y".to_owned()]),
            ]
        );
        assert_eq!(s.omitted, 1, "c/w left out, the duplicate not counted");
        assert!(!s.version.is_empty());
        let again = summary(vec![("a".into(), "z".into())], 3);
        assert_ne!(again.version, s.version);
    }

    #[test]
    fn a_failed_list_reports_why_and_no_names() {
        let r = report(&Err("forbidden".into()));
        assert_eq!(r.error, "forbidden");
        assert!(r.namespaces.is_empty() && r.version.is_empty());
    }

    /// What the report costs: the encoded bytes per 1,000 Services
    /// (docs/upward.md quotes it).
    #[test]
    fn the_services_part_costs_about_20_bytes_a_service() {
        let per_thousand = summary(names(10_000), MAX).encoded_len() / 10;
        println!("services report: {per_thousand} bytes per 1,000 Services");
        assert!(
            (15_000..25_000).contains(&per_thousand),
            "{per_thousand} bytes per 1,000 Services"
        );
        let capped = summary(names(MAX + 5), MAX);
        assert_eq!(capped.omitted, 5);
        assert!(
            capped.encoded_len() < 512 * 1024,
            "{}",
            capped.encoded_len()
        );
    }
}
