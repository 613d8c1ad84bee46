//! `meshhubctl describe KIND NAMESPACE/NAME`: one object as the hub knows
//! it, from the admin port's `/debug/object` — the sources that define it
//! (which definition is served), its validation result, the clusters that
//! receive it and, per cluster, what each peer (the agent, consumers) has
//! ACKed or NACKed of the collection version that holds it.

use std::time::Duration;

use meshhub_api::object::{ObjectQuery, ObjectView, Origin, PeerRole, ValidationResult};

use crate::admin::Admin;
use crate::output::{Format, render, short, structured};

#[derive(clap::Args, Debug)]
pub struct DescribeArgs {
    /// The kind: `VirtualService`, `virtualservices`, an MCP collection or
    /// a type URL.
    pub kind: String,
    /// `NAMESPACE/NAME`, or `NAME` with `-n` (default namespace `default`).
    pub name: String,
    /// The namespace, when NAME has none.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// The hub's admin address.
    #[arg(long, env = "MESHHUB_ADMIN", default_value = "http://127.0.0.1:9902")]
    pub admin: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Format,
    /// Give up after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// The route asking for `q`, percent-encoded.
fn path(q: &ObjectQuery) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("kind", &q.kind)
        .append_pair("name", &q.name);
    if let Some(ns) = &q.namespace {
        query.append_pair("namespace", ns);
    }
    format!("/debug/object?{}", query.finish())
}

pub async fn run(args: DescribeArgs) -> Result<(), String> {
    let path = path(&ObjectQuery {
        kind: args.kind,
        namespace: args.namespace,
        name: args.name,
    });
    let view: ObjectView = Admin::hub(&args.admin, args.timeout)
        .get_json(&path)
        .await?;
    let out = match structured(&view, args.output) {
        Some(text) => text?,
        None => sections(&view),
    };
    print!("{out}");
    Ok(())
}

fn dash(v: &Option<String>) -> String {
    v.as_deref().map(short).unwrap_or_else(|| "-".to_owned())
}

/// `kubectl describe`-like sections.
fn sections(v: &ObjectView) -> String {
    let mut out = format!(
        "Kind:        {} ({})\nCollection:  {}\nName:        {}\n",
        v.kind, v.api_version, v.collection, v.name
    );
    if !v.version.is_empty() {
        out.push_str(&format!("Version:     {}\n", v.version));
    }
    let result = match v.validation.result {
        ValidationResult::Accepted => "Accepted (served)",
        ValidationResult::Rejected => "Rejected (served to no cluster)",
    };
    out.push_str(&format!("Validation:  {result}\n"));
    for m in &v.validation.messages {
        out.push_str(&format!("  error:     {m}\n"));
    }
    for w in &v.validation.warnings {
        out.push_str(&format!("  warning:   {w}\n"));
    }
    out.push_str("\nSources:\n");
    let mut rows = vec![vec![
        "  STATE".to_owned(),
        "ORIGIN".to_owned(),
        "RESOURCEVERSION".to_owned(),
        "REASON".to_owned(),
    ]];
    for d in &v.definitions {
        rows.push(vec![
            format!("  {}", d.state),
            d.origin
                .as_ref()
                .map_or_else(|| "-".to_owned(), Origin::to_string),
            d.resource_version.clone().unwrap_or_else(|| "-".to_owned()),
            if d.reasons.is_empty() {
                "-".to_owned()
            } else {
                d.reasons.join("; ")
            },
        ]);
    }
    out.push_str(&render(&rows));
    if !v.analysis.is_empty() {
        out.push_str("\nAnalysis:\n");
        for (cluster, messages) in &v.analysis {
            for m in messages {
                let path = if m.path.is_empty() {
                    String::new()
                } else {
                    format!(" {}", m.path)
                };
                out.push_str(&format!(
                    "  {cluster}: {} [{}]{path}: {}\n",
                    m.level, m.code, m.message
                ));
            }
        }
    }
    out.push_str("\nClusters:\n");
    if v.clusters.is_empty() {
        out.push_str("  none (the object is served to no cluster)\n");
        return out;
    }
    let mut rows = vec![vec![
        "  CLUSTER".to_owned(),
        "VERSION".to_owned(),
        "PEER".to_owned(),
        "ROLE".to_owned(),
        "CONNECTED".to_owned(),
        "DELIVERY".to_owned(),
        "ACKED".to_owned(),
        "MESSAGE".to_owned(),
    ]];
    for c in &v.clusters {
        let version = short(&c.collection_version);
        if c.peers.is_empty() {
            rows.push(vec![
                format!("  {}", c.cluster),
                version.clone(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "no peer".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
            ]);
        }
        for p in &c.peers {
            let peer = if p.role == PeerRole::Agent || p.node_id.is_empty() {
                p.peer.clone()
            } else {
                format!("{} ({})", p.peer, p.node_id)
            };
            rows.push(vec![
                format!("  {}", c.cluster),
                version.clone(),
                peer,
                format!("{}/{}", p.role, p.protocol),
                if p.connected { "yes" } else { "no" }.to_owned(),
                p.delivery.to_string(),
                dash(&p.acked),
                p.message
                    .as_deref()
                    .map(|m| m.replace('\n', " "))
                    .unwrap_or_else(|| "-".to_owned()),
            ]);
        }
    }
    out.push_str(&render(&rows));
    for c in &v.clusters {
        if let Some(why) = &c.withheld {
            out.push_str(&format!("  WITHHELD from {}: {why}\n", c.cluster));
        }
    }
    let reported: Vec<_> = v
        .clusters
        .iter()
        .filter_map(|c| c.reported.as_ref().map(|r| (c, r)))
        .collect();
    if !reported.is_empty() {
        out.push_str("\nReported by the clusters:\n");
        let judged = reported.iter().any(|(_, r)| r.accepted.is_some());
        let mut header = vec![
            "  CLUSTER".to_owned(),
            "DELIVERED".to_owned(),
            "APPLIED".to_owned(),
            "HELD BY ISTIOD".to_owned(),
        ];
        if judged {
            header.push("ACCEPTED".to_owned());
        }
        let mut rows = vec![header];
        for (c, r) in &reported {
            let mut row = vec![
                format!("  {}", c.cluster),
                if r.delivered { "yes" } else { "no" }.to_owned(),
                r.applied.clone(),
                r.held_by_istiod.clone(),
            ];
            if judged {
                row.push(r.accepted.as_deref().unwrap_or("-").replace('\n', " "));
            }
            rows.push(row);
        }
        out.push_str(&render(&rows));
        let statuses: Vec<_> = reported
            .iter()
            .filter_map(|(c, r)| r.controller_status.as_ref().map(|s| (c, s)))
            .collect();
        if !statuses.is_empty() {
            out.push_str("\nStatus written by the clusters' controllers:\n");
            let mut rows = vec![vec![
                "  CLUSTER".to_owned(),
                "GENERATION".to_owned(),
                "FOR".to_owned(),
                "CONTROLLER".to_owned(),
                "CONDITIONS".to_owned(),
            ]];
            for (c, s) in statuses {
                let ns = s.name.split_once('/').map_or("", |(ns, _)| ns);
                if !s.conditions.is_empty() {
                    rows.push(vec![
                        format!("  {}", c.cluster),
                        s.generation.to_string(),
                        "(itself)".to_owned(),
                        "-".to_owned(),
                        conditions(&s.conditions),
                    ]);
                }
                for p in &s.parents {
                    rows.push(vec![
                        format!("  {}", c.cluster),
                        s.generation.to_string(),
                        p.describe(ns),
                        if p.controller.is_empty() {
                            "-".to_owned()
                        } else {
                            p.controller.clone()
                        },
                        conditions(&p.conditions),
                    ]);
                }
            }
            out.push_str(&render(&rows));
        }
    }
    out
}

/// `Accepted=True (Accepted), Programmed=False@1 (Invalid: …)`: a
/// condition's generation is shown only when it speaks of another one.
fn conditions(cs: &[meshhub_api::upward::ConditionView]) -> String {
    if cs.is_empty() {
        return "-".to_owned();
    }
    cs.iter()
        .map(|c| {
            let mut out = format!("{}={:?}", c.kind, c.status);
            let mut why = c.reason.clone();
            if !c.message.is_empty() {
                why.push_str(&format!(": {}", c.message.replace('\n', " ")));
            }
            if !why.is_empty() {
                out.push_str(&format!(" ({why})"));
            }
            out
        })
        .collect::<Vec<_>>()
        .join(", ")
}
