//! `meshhubctl diff --cluster C --agent ADDR`: what the hub would serve a
//! cluster against what that cluster's sink agent holds, per collection and
//! per object. Both sides are read the same way, as a consumer: the hub's
//! `ResourceSource` with the cluster's identity (its group), and the agent's
//! re-serve port (what its own cluster's consumers get — the agent's truth).
//! Objects are compared as the YAML they render to; a changed one is shown
//! as a unified diff (agent `-`, hub `+`, as `kubectl diff` shows live
//! against desired). Exit status as diff(1): 0 equal, 1 different, 2 on
//! trouble.

use std::collections::BTreeSet;
use std::time::Duration;

use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::Resource;
use meshhub_proto::transcode;
use serde::Serialize;
use similar::TextDiff;

use crate::admin::{Admin, group_names};
use crate::fetch::{self, FetchError, State, Target};
use crate::get::{collections, group_state, object};
use crate::history;
use crate::output::{Format, render, short, structured};

#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// With TO: compare two historical versions of the cluster's group
    /// instead (`meshhubctl history`).
    #[arg(requires = "to")]
    pub from: Option<String>,
    /// See FROM.
    pub to: Option<String>,
    /// The cluster to compare.
    #[arg(long, visible_alias = "group")]
    pub cluster: String,
    /// The cluster's sink agent: its re-serve gRPC address (the agent's
    /// `--grpc-addr`, default port 9912), e.g. `http://10.0.0.7:9912`.
    #[arg(long, env = "MESHHUB_AGENT")]
    pub agent: Option<String>,
    /// Only these kinds or collections (repeatable) [default: every kind].
    #[arg(long = "kind", short = 'k')]
    pub kinds: Vec<String>,
    /// The hub's gRPC address (ResourceSource).
    #[arg(long, env = "MESHHUB_SERVER", default_value = "http://127.0.0.1:9901")]
    pub server: String,
    /// The hub's admin address (lists clusters and their agents).
    #[arg(long, env = "MESHHUB_ADMIN", default_value = "http://127.0.0.1:9902")]
    pub admin: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Format,
    /// Give up after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// What `-o yaml|json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The cluster.
    pub cluster: String,
    /// The hub's address.
    pub hub: String,
    /// The agent's re-serve address.
    pub agent: String,
    /// Whether the agent holds exactly what the hub serves.
    pub equal: bool,
    /// Objects compared (on either side).
    pub objects: usize,
    /// Every collection with a difference.
    pub collections: Vec<CollectionDiff>,
}

/// The differences in one collection.
#[derive(Debug, Serialize)]
pub struct CollectionDiff {
    /// The collection.
    pub collection: String,
    /// Its version at the hub (for this cluster).
    pub hub_version: String,
    /// Its version at the agent.
    pub agent_version: String,
    /// Served by the hub, not held by the agent.
    pub added: Vec<String>,
    /// Held by the agent, not served by the hub.
    pub removed: Vec<String>,
    /// On both sides, different.
    pub changed: Vec<Changed>,
}

/// One changed object.
#[derive(Debug, Serialize)]
pub struct Changed {
    /// `namespace/name`.
    pub name: String,
    /// Unified diff, agent (`-`) to hub (`+`).
    pub diff: String,
}

/// Runs the command: `Ok(true)` when both sides are equal.
pub async fn run(args: DiffArgs) -> Result<bool, String> {
    if args.from.is_some() {
        // Two historical versions of the group (`meshhubctl history`).
        history::diff(history::DiffArgs {
            cluster: args.cluster,
            from: args.from,
            to: args.to,
            output: match args.output {
                Format::Json => history::Format::Json,
                Format::Table | Format::Yaml => history::Format::Table,
            },
            admin: history::AdminArgs {
                admin: args.admin,
                timeout: args.timeout,
                token_file: None,
                token: None,
            },
        })
        .await?;
        // The versions' differences are the answer, not a verdict.
        return Ok(true);
    }
    let kinds = KindTable::builtin();
    let collections = if args.kinds.is_empty() {
        collections(&kinds, None)?
    } else {
        let mut all = Vec::new();
        for k in &args.kinds {
            all.extend(collections(&kinds, Some(k))?);
        }
        all
    };
    let agent = match &args.agent {
        Some(a) => a.clone(),
        None => return Err(no_agent(&args).await),
    };
    let agent_target = Target {
        server: &agent,
        flag: "--agent",
        cluster: None,
        timeout: args.timeout,
    };
    let (hub, held) = tokio::join!(
        group_state(
            &args.server,
            Some(&args.cluster),
            &args.admin,
            &collections,
            args.timeout
        ),
        fetch::state(&agent_target, &collections),
    );
    let hub = hub?;
    let held = held.map_err(|e| match e {
        FetchError::Other(m) | FetchError::UnknownCluster(m) => m,
    })?;
    let report = compare(&kinds, &args, &agent, &hub, &held)?;
    let out = match structured(&report, args.output) {
        Some(text) => text?,
        None => table(&report),
    };
    print!("{out}");
    Ok(report.equal)
}

/// Why `--agent` is needed, with what the hub knows of the cluster's agent.
async fn no_agent(args: &DiffArgs) -> String {
    let hint = "diff reads the agent's re-serve port: pass it with --agent \
                (the agent's --grpc-addr, default port 9912)";
    match Admin::hub(&args.admin, args.timeout).status().await {
        Ok(c) if !c.groups.iter().any(|g| g.name == args.cluster) => format!(
            "unknown cluster {:?}; the hub knows: {}",
            args.cluster,
            group_names(&c)
        ),
        Ok(c) => match c.remotes.iter().find(|r| r.cluster == args.cluster) {
            Some(r) => format!(
                "the hub pushes to cluster {}'s agent at {} (its ResourceSink port); {hint}",
                r.cluster, r.address
            ),
            None => format!(
                "cluster {} has no agent configured on the hub; {hint}",
                args.cluster
            ),
        },
        Err(e) => format!("{hint} ({e})"),
    }
}

/// One side's object as text to compare.
fn text(kinds: &KindTable, collection: &str, r: &Resource) -> Result<String, String> {
    match object(kinds, collection, r)? {
        Some(o) => transcode::to_yaml(&o).map_err(|e| e.to_string()),
        // No schema: compare what can be compared.
        None => Ok(format!("{r:?}\n")),
    }
}

fn compare(
    kinds: &KindTable,
    args: &DiffArgs,
    agent: &str,
    hub: &State,
    held: &State,
) -> Result<Report, String> {
    let mut report = Report {
        cluster: args.cluster.clone(),
        hub: args.server.clone(),
        agent: agent.to_owned(),
        equal: true,
        objects: 0,
        collections: Vec::new(),
    };
    let names: BTreeSet<&String> = hub.keys().chain(held.keys()).collect();
    let empty = fetch::Collection::default();
    for collection in names {
        let h = hub.get(collection).unwrap_or(&empty);
        let a = held.get(collection).unwrap_or(&empty);
        let mut d = CollectionDiff {
            collection: collection.clone(),
            hub_version: h.version.clone(),
            agent_version: a.version.clone(),
            added: Vec::new(),
            removed: Vec::new(),
            changed: Vec::new(),
        };
        let objects: BTreeSet<&String> = h.resources.keys().chain(a.resources.keys()).collect();
        report.objects += objects.len();
        for name in objects {
            match (h.resources.get(name), a.resources.get(name)) {
                (Some(_), None) => d.added.push(name.clone()),
                (None, Some(_)) => d.removed.push(name.clone()),
                (Some(hr), Some(ar)) => {
                    let (ht, at) = (text(kinds, collection, hr)?, text(kinds, collection, ar)?);
                    if ht != at {
                        let diff = TextDiff::from_lines(&at, &ht)
                            .unified_diff()
                            .header(
                                &format!("agent {}: {name}", args.cluster),
                                &format!("hub: {name}"),
                            )
                            .to_string();
                        d.changed.push(Changed {
                            name: name.clone(),
                            diff,
                        });
                    }
                }
                (None, None) => {}
            }
        }
        if !(d.added.is_empty() && d.removed.is_empty() && d.changed.is_empty()) {
            report.equal = false;
            report.collections.push(d);
        }
    }
    Ok(report)
}

fn table(r: &Report) -> String {
    if r.equal {
        return format!(
            "cluster {}: the agent at {} holds what the hub serves ({} objects)\n",
            r.cluster, r.agent, r.objects
        );
    }
    let mut rows = vec![vec![
        "COLLECTION".to_owned(),
        "HUB".to_owned(),
        "AGENT".to_owned(),
        "ADDED".to_owned(),
        "REMOVED".to_owned(),
        "CHANGED".to_owned(),
    ]];
    for c in &r.collections {
        rows.push(vec![
            c.collection.clone(),
            short(&c.hub_version),
            short(&c.agent_version),
            c.added.len().to_string(),
            c.removed.len().to_string(),
            c.changed.len().to_string(),
        ]);
    }
    let mut out = render(&rows);
    out.push('\n');
    for c in &r.collections {
        for n in &c.added {
            out.push_str(&format!(
                "added    {} {n}: the hub serves it, the agent does not hold it\n",
                c.collection
            ));
        }
        for n in &c.removed {
            out.push_str(&format!(
                "removed  {} {n}: the agent holds it, the hub no longer serves it\n",
                c.collection
            ));
        }
        for ch in &c.changed {
            out.push_str(&format!("changed  {} {}\n", c.collection, ch.name));
            out.push_str(&ch.diff);
        }
    }
    out
}
