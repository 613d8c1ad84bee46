//! `meshhubctl get [KIND] [NAME] --cluster C`: the objects of one
//! cluster's group as the hub serves them. meshhubctl subscribes to the
//! hub's `ResourceSource` as a consumer of that cluster (node annotation
//! `meshhub.io/cluster`, from which the hub picks the group), takes the
//! first full state of each collection and prints it as a table, YAML
//! (`kubectl get -o yaml`-like documents) or a JSON `List`.

use std::time::Duration;

use meshhub_api::kinds::find_kind;
use meshhub_api::node::DEFAULT_GROUP;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::Resource;
use meshhub_proto::object::Object;
use meshhub_proto::transcode;
use serde_json::json;

use crate::admin::{self, Admin};
use crate::fetch::{self, FetchError, State, Target};
use crate::output::{Format, render, short};

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// The kind to list: `VirtualService`, `virtualservices`, an MCP
    /// collection or a type URL [default: every kind].
    pub kind: Option<String>,
    /// One object: `NAME` (in any namespace, or in `-n`) or
    /// `NAMESPACE/NAME`.
    pub name: Option<String>,
    /// Only this namespace.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// The cluster whose group to list (sent as the node annotation
    /// `meshhub.io/cluster`; the hub picks the group from it) [default: the
    /// default group].
    #[arg(long, visible_alias = "group")]
    pub cluster: Option<String>,
    /// The hub's gRPC address (ResourceSource); a sink agent's re-serve
    /// address works too.
    #[arg(long, env = "MESHHUB_SERVER", default_value = "http://127.0.0.1:9901")]
    pub server: String,
    /// The hub's admin address (to list the clusters when one is unknown).
    #[arg(long, env = "MESHHUB_ADMIN", default_value = "http://127.0.0.1:9902")]
    pub admin: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Format,
    /// Give up after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// The collections `kind` names (every kind when `None`).
pub fn collections(kinds: &KindTable, kind: Option<&str>) -> Result<Vec<String>, String> {
    match kind {
        None => Ok(kinds.iter().map(|k| k.collection().to_owned()).collect()),
        Some(text) => match find_kind(kinds, text) {
            Ok(k) => Ok(vec![k.collection().to_owned()]),
            // A collection of an `extraKinds` entry of the hub: asked as is.
            Err(_) if text.contains('/') => Ok(vec![text.to_owned()]),
            Err(e) => Err(e.to_string()),
        },
    }
}

/// Fetches a group's state from `server`, turning a refused cluster into
/// the list of the known ones.
pub async fn group_state(
    server: &str,
    cluster: Option<&str>,
    admin_addr: &str,
    collections: &[String],
    timeout: Duration,
) -> Result<State, String> {
    let target = Target {
        server,
        flag: "--server",
        cluster,
        timeout,
    };
    match fetch::state(&target, collections).await {
        Ok(s) => Ok(s),
        Err(FetchError::Other(e)) => Err(e),
        Err(FetchError::UnknownCluster(refusal)) => {
            let admin = Admin::hub(admin_addr, timeout);
            Err(admin::unknown_cluster(cluster.unwrap_or_default(), &refusal, &admin).await)
        }
    }
}

/// One resource as a Kubernetes object, when its kind is known.
pub fn object(kinds: &KindTable, collection: &str, r: &Resource) -> Result<Option<Object>, String> {
    match kinds.by_collection(collection) {
        Some(kind) => transcode::resource_to_object(kind, r)
            .map(Some)
            .map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

pub async fn run(args: GetArgs) -> Result<(), String> {
    let kinds = KindTable::builtin();
    let collections = collections(&kinds, args.kind.as_deref())?;
    let state = group_state(
        &args.server,
        args.cluster.as_deref(),
        &args.admin,
        &collections,
        args.timeout,
    )
    .await?;
    let wanted = |name: &str| {
        let (ns, short_name) = transcode::split_name(name);
        let ns_ok = args
            .namespace
            .as_deref()
            .is_none_or(|n| ns.unwrap_or("") == n);
        let name_ok = match args.name.as_deref() {
            None => true,
            Some(n) if n.contains('/') => n == name,
            Some(n) => n == short_name,
        };
        ns_ok && name_ok
    };
    let group = args.cluster.as_deref().unwrap_or(DEFAULT_GROUP);
    let mut rows = vec![vec![
        "NAMESPACE".to_owned(),
        "NAME".to_owned(),
        "KIND".to_owned(),
        "VERSION".to_owned(),
    ]];
    let mut objects = Vec::new();
    for (collection, c) in &state {
        for (name, r) in c.resources.iter().filter(|(n, _)| wanted(n)) {
            let obj = object(&kinds, collection, r)?;
            let (ns, short_name) = transcode::split_name(name);
            let version = r
                .metadata
                .as_ref()
                .map(|m| m.version.as_str())
                .unwrap_or("");
            rows.push(vec![
                ns.filter(|n| !n.is_empty()).unwrap_or("-").to_owned(),
                short_name.to_owned(),
                obj.as_ref()
                    .map(|o| o.kind.clone())
                    .unwrap_or_else(|| collection.clone()),
                short(version),
            ]);
            match obj {
                Some(o) => objects.push(o),
                None if args.output != Format::Table => {
                    return Err(format!(
                        "{collection}: no schema known to meshhubctl; only `-o table` can list it"
                    ));
                }
                None => {}
            }
        }
    }
    if rows.len() == 1 {
        let what = args.kind.as_deref().unwrap_or("objects");
        return match &args.name {
            Some(n) => Err(format!("no {what} named {n:?} in group {group}")),
            None => {
                eprintln!("no {what} in group {group}");
                Ok(())
            }
        };
    }
    let out = match args.output {
        Format::Table => render(&rows),
        Format::Yaml => {
            let mut out = String::new();
            for o in &objects {
                out.push_str("---\n");
                out.push_str(&transcode::to_yaml(o).map_err(|e| e.to_string())?);
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
            out
        }
        Format::Json => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
            serde_json::to_string_pretty(&list).map_err(|e| e.to_string())? + "\n"
        }
    };
    print!("{out}");
    Ok(())
}
