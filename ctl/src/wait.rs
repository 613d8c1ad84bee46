//! `meshhubctl wait`: blocks until what the hub serves now — every
//! collection of the named clusters' groups, or one object with
//! `--object` — is ACKed by those clusters' agents, a cluster NACKs it, or
//! the timeout passes. For pipelines: exit 0 when ACKed, 1 on a NACK or
//! the timeout, 2 on trouble (an unknown cluster, no hub). What
//! `kubectl rollout status` does for a Deployment, and `istioctl x wait`
//! did for istiod.
//!
//! A newer change published while waiting supersedes the awaited one:
//! ACKing the newer version counts.

mod assess;

use std::time::{Duration, Instant};

use meshhub_api::object::{ObjectQuery, ObjectView};

use serde::Serialize;

use crate::admin::Admin;
use crate::output::{Format, render, structured};
use assess::{Awaited, Clusters, Report, Standing};

#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// A cluster to wait for (repeat, or comma-separated); default: every
    /// remote cluster of the hub.
    #[arg(long = "cluster", short = 'c', value_delimiter = ',')]
    pub clusters: Vec<String>,
    /// Wait for one object instead of whole groups: `KIND NAMESPACE/NAME`
    /// (the kind as `describe` takes it).
    #[arg(long, num_args = 2, value_names = ["KIND", "NAMESPACE/NAME"])]
    pub object: Option<Vec<String>>,
    /// With `--object`: wait until the hub serves the object as read at
    /// this Kubernetes `resourceVersion` (what `kubectl apply -o
    /// jsonpath='{.metadata.resourceVersion}'` printed), then for its
    /// delivery; without it, a change the hub has not read yet may be
    /// mistaken for the one before.
    #[arg(long, requires = "object")]
    pub resource_version: Option<String>,
    /// Give up after this long (exit 1).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// How often to ask the hub.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// The hub's admin address.
    #[arg(long, env = "MESHHUB_ADMIN", default_value = "http://127.0.0.1:9902")]
    pub admin: String,
    /// Output format of the final report.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Format,
}

/// How `wait` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Every cluster ACKed (exit 0).
    Acked,
    /// A cluster NACKed (exit 1).
    Nacked,
    /// The timeout passed first (exit 1).
    TimedOut,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Final<'a> {
    outcome: Outcome,
    elapsed_ms: u128,
    clusters: &'a Report,
}

/// Waits as `args` say; the outcome once printed, or the trouble.
pub async fn run(args: WaitArgs) -> Result<Outcome, String> {
    let which = if args.clusters.is_empty() {
        Clusters::All
    } else {
        Clusters::Named(args.clusters.clone())
    };
    // Each request is bounded by what is left of the timeout (at least a
    // second, so a slow answer near the end still counts).
    let start = Instant::now();
    let deadline = start + args.timeout;
    let admin = Admin::hub(&args.admin, args.timeout.max(Duration::from_secs(1)));
    let object_path = args.object.as_ref().map(|o| object_path(&o[0], &o[1]));
    let mut awaited = Awaited::default();
    let mut first = true;
    let mut last_error = None;
    let (outcome, report) = loop {
        let polled = match &object_path {
            Some(path) => match admin.get(path).await {
                // An object created a moment ago: not read by the hub yet.
                Ok(a)
                    if a.status == http::StatusCode::NOT_FOUND
                        && args.resource_version.is_some() =>
                {
                    Ok(waiting_for(&which, "the hub has not read the object yet"))
                }
                Ok(answer) => answer
                    .ok(&admin.url(path))
                    .and_then(|text| {
                        serde_json::from_str::<ObjectView>(&text)
                            .map_err(|e| format!("{path}: unexpected answer: {e}"))
                    })
                    .and_then(|view| {
                        assess::assess_object(&view, &which, args.resource_version.as_deref())
                            .map_err(|e| e.to_string())
                    }),
                Err(e) => Err(e.to_string()),
            },
            None => match admin.status().await {
                Ok(status) => {
                    // Only the first answer fixes which clusters exist: a
                    // named cluster missing from it is a mistake, not
                    // something to wait for.
                    let observed = awaited.observe(&status, &which);
                    match observed {
                        Err(e) if first => return Err(e.to_string()),
                        _ => {
                            let mut report = awaited.assess(&status);
                            current_rollout(&admin).await.map(|rollout| {
                                if let Some(rollout) = rollout {
                                    assess::under_rollout(&mut report, &rollout);
                                }
                                report
                            })
                        }
                    }
                }
                Err(e) => Err(e),
            },
        };
        let report = match polled {
            Ok(report) => report,
            // The first answer must come: a wrong address or an unknown
            // object is trouble, not something to wait out.
            Err(e) if first => return Err(e),
            Err(e) => {
                last_error = Some(e);
                Report::new()
            }
        };
        if first && report.is_empty() {
            return Err(match &object_path {
                Some(_) => {
                    "nothing to wait for: no cluster whose agent the hub dials receives the object"
                        .into()
                }
                None => "nothing to wait for: the hub dials no remote cluster".into(),
            });
        }
        first = false;
        if !report.is_empty() {
            last_error = None;
            if report
                .values()
                .any(|s| matches!(s, Standing::Nacked { .. }))
            {
                break (Outcome::Nacked, report);
            }
            if report.values().all(|s| *s == Standing::Acked) {
                break (Outcome::Acked, report);
            }
        }
        if Instant::now() + args.interval > deadline {
            break (Outcome::TimedOut, report);
        }
        tokio::time::sleep(args.interval).await;
    };
    let elapsed = start.elapsed();
    let text = match structured(
        &Final {
            outcome,
            elapsed_ms: elapsed.as_millis(),
            clusters: &report,
        },
        args.output,
    ) {
        Some(t) => t?,
        None => table(outcome, elapsed, &report, last_error.as_deref()),
    };
    print!("{text}");
    Ok(outcome)
}

/// The hub's current staged rollout, if it has one (a hub without a
/// rollout policy, or one too old to have `/rollout`, has none). Any other
/// failure is the poll's: held clusters must not count as ACKed because
/// `/rollout` could not be read once.
async fn current_rollout(admin: &Admin) -> Result<Option<meshhub_rollout::Rollout>, String> {
    let path = "/rollout";
    let answer = admin.get(path).await.map_err(|e| e.to_string())?;
    if answer.status == http::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let url = admin.url(path);
    let text = answer.ok(&url)?;
    let view: crate::rollout::View =
        serde_json::from_str(&text).map_err(|e| format!("{url}: unexpected answer: {e}"))?;
    Ok(view.rollout)
}

/// Every named cluster (or the object as one row) waiting for `reason`.
fn waiting_for(which: &Clusters, reason: &str) -> Report {
    let names = match which {
        Clusters::Named(n) => n.clone(),
        Clusters::All => vec!["*".to_owned()],
    };
    let s = Standing::Waiting {
        reason: reason.to_owned(),
    };
    names.into_iter().map(|n| (n, s.clone())).collect()
}

fn object_path(kind: &str, name: &str) -> String {
    let query = ObjectQuery {
        kind: kind.to_owned(),
        namespace: None,
        name: name.to_owned(),
    };
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("kind", &query.kind)
        .append_pair("name", &query.name);
    format!("/debug/object?{}", q.finish())
}

fn table(outcome: Outcome, elapsed: Duration, report: &Report, error: Option<&str>) -> String {
    let acked = report.values().filter(|s| **s == Standing::Acked).count();
    let secs = elapsed.as_secs_f64();
    let mut out = match outcome {
        Outcome::Acked => format!("ACKed by {acked}/{} clusters in {secs:.1}s\n", report.len()),
        Outcome::Nacked => format!("NACKed after {secs:.1}s ({acked}/{} ACKed)\n", report.len()),
        Outcome::TimedOut => format!(
            "timed out after {secs:.1}s: {acked}/{} clusters ACKed\n",
            report.len()
        ),
    };
    if let Some(e) = error {
        out.push_str(&format!("last error asking the hub: {e}\n"));
    }
    let mut rows = vec![vec![
        "CLUSTER".to_owned(),
        "STATE".to_owned(),
        "DETAIL".to_owned(),
    ]];
    for (cluster, s) in report {
        let (state, detail) = match s {
            Standing::Acked => ("ACKED", String::new()),
            Standing::Waiting { reason } => ("WAITING", reason.clone()),
            Standing::Nacked {
                collection,
                message,
            } => ("NACKED", format!("{collection}: {message}")),
        };
        rows.push(vec![cluster.clone(), state.to_owned(), detail]);
    }
    out.push_str(&render(&rows));
    out
}
