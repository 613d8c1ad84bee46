//! `meshhubctl describe KIND NAMESPACE/NAME`: one object as the hub knows
//! it, from the admin port's `/debug/object` — the sources that define it
//! (which definition is served), its validation result, the clusters that
//! receive it and, per cluster, what each peer (the agent, consumers) has
//! ACKed or NACKed of the collection version that holds it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::admin;
use super::output::{Format, render, short, structured};

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

/// `/debug/object` (the fields shown; `-o json|yaml` prints it whole).
#[derive(Debug, Deserialize, Serialize)]
struct View {
    kind: String,
    api_version: String,
    collection: String,
    name: String,
    validation: Validation,
    definitions: Vec<Definition>,
    version: String,
    clusters: Vec<Cluster>,
}

#[derive(Debug, Deserialize, Serialize)]
struct Validation {
    result: String,
    messages: Vec<String>,
    warnings: Vec<String>,
}

#[derive(Debug, Deserialize, Serialize)]
struct Definition {
    origin: Option<Origin>,
    resource_version: Option<String>,
    state: String,
    reasons: Vec<String>,
}

#[derive(Debug, Deserialize, Serialize)]
struct Origin {
    source: String,
    unit: String,
    document: usize,
    line: Option<usize>,
}

#[derive(Debug, Deserialize, Serialize)]
struct Cluster {
    cluster: String,
    collection_version: String,
    in_snapshot: bool,
    peers: Vec<Peer>,
}

#[derive(Debug, Deserialize, Serialize)]
struct Peer {
    peer: String,
    role: String,
    protocol: String,
    node_id: String,
    connected: bool,
    delivery: String,
    state: String,
    sent: Option<String>,
    acked: Option<String>,
    nacked: Option<String>,
    message: Option<String>,
}

/// An error answer of the admin port.
#[derive(Debug, Deserialize)]
struct ErrorView {
    error: String,
}

/// `a=b&c=d`, percent-encoded.
fn query(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

pub async fn run(args: DescribeArgs) -> Result<(), String> {
    let mut pairs = vec![("kind", args.kind.as_str()), ("name", args.name.as_str())];
    if let Some(ns) = &args.namespace {
        pairs.push(("namespace", ns));
    }
    let path = format!("/debug/object?{}", query(&pairs));
    let (status, text) = admin::get(&args.admin, &path, args.timeout).await?;
    if !status.is_success() {
        return Err(match serde_json::from_str::<ErrorView>(&text) {
            Ok(e) => e.error,
            Err(_) => format!(
                "{}{path} answered {status}: {}",
                admin::base(&args.admin),
                text.trim()
            ),
        });
    }
    let view: View = serde_json::from_str(&text)
        .map_err(|e| format!("{}{path}: unexpected answer: {e}", admin::base(&args.admin)))?;
    let out = match structured(&view, args.output) {
        Some(text) => text?,
        None => sections(&view),
    };
    print!("{out}");
    Ok(())
}

fn origin(o: Option<&Origin>) -> String {
    let Some(o) = o else {
        return "-".to_owned();
    };
    let mut s = format!("{}:{}", o.source, o.unit);
    if o.document > 0 {
        s.push_str(&format!("#{}", o.document));
    }
    if let Some(line) = o.line {
        s.push_str(&format!(" (line {line})"));
    }
    s
}

fn dash(v: &Option<String>) -> String {
    v.as_deref().map(short).unwrap_or_else(|| "-".to_owned())
}

/// `kubectl describe`-like sections.
fn sections(v: &View) -> String {
    let mut out = format!(
        "Kind:        {} ({})\nCollection:  {}\nName:        {}\n",
        v.kind, v.api_version, v.collection, v.name
    );
    if !v.version.is_empty() {
        out.push_str(&format!("Version:     {}\n", v.version));
    }
    let result = match v.validation.result.as_str() {
        "accepted" => "Accepted (served)",
        "rejected" => "Rejected (served to no cluster)",
        other => other,
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
            origin(d.origin.as_ref()),
            d.resource_version.clone().unwrap_or_else(|| "-".to_owned()),
            if d.reasons.is_empty() {
                "-".to_owned()
            } else {
                d.reasons.join("; ")
            },
        ]);
    }
    out.push_str(&render(&rows));
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
            let peer = if p.role == "agent" || p.node_id.is_empty() {
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
                p.delivery.clone(),
                dash(&p.acked),
                p.message
                    .as_deref()
                    .map(|m| m.replace('\n', " "))
                    .unwrap_or_else(|| "-".to_owned()),
            ]);
        }
    }
    out.push_str(&render(&rows));
    out
}
