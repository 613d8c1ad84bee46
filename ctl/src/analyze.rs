//! `meshhubctl analyze`: the hub's per-cluster analysis (meshhub-analyze:
//! Istio's analyzer codes), either offline over files — placed into the
//! clusters of a hub configuration file (`--config`: its `clusters:`, and
//! its `analysis.holdBack` to say which builds the hub would hold back) —
//! or online, as a running hub reports it on `/status`.
//! Exit 0 when no message is an error, 1 when one is, 2 on trouble.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use meshhub_analyze::Facts;
use meshhub_api::analysis::{AnalysisMessage, Level};
use meshhub_api::placement::{ClusterSelector, Placement, Rules};
use serde::{Deserialize, Serialize};

use crate::admin::Admin;
use crate::output::{Format, render, short, structured};
use crate::validate;

/// Flags of `meshhubctl analyze`.
#[derive(clap::Args, Debug)]
pub struct AnalyzeArgs {
    /// Files or directories to analyse offline (YAML or JSON; `-` reads
    /// standard input). Without them, a running hub is asked.
    #[arg(long = "filename", short = 'f', num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Only this cluster (`default` for the default group).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Offline: the hub's configuration file, for its `clusters:` (which
    /// objects each cluster receives) and `analysis.holdBack`. Without it
    /// every object goes to the default group.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Offline: check every cluster against this Istio release (`1.28.3`):
    /// what it does not know is reported as MH0002 (an older istiod drops
    /// it silently). Online, the hub checks each cluster against the
    /// release its agent reports.
    #[arg(long, value_name = "VERSION")]
    pub istio_version: Option<String>,
    /// Online: the hub's admin address.
    #[arg(long, env = "MESHHUB_ADMIN", default_value = "http://127.0.0.1:9902")]
    pub admin: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Format,
    /// Online: give up after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// One cluster's analysis, as printed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterReport {
    cluster: String,
    /// Online: the version analysed.
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    /// Offline: the objects the cluster receives.
    #[serde(skip_serializing_if = "Option::is_none")]
    objects: Option<usize>,
    messages: Vec<AnalysisMessage>,
    /// The codes among the messages that hold the version back (online:
    /// the hub holds it back; offline: the configuration would).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    held_back: Vec<String>,
    /// Online, while held back: the version the cluster is served instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    serving: Option<String>,
}

/// What `-o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    clusters: Vec<ClusterReport>,
    /// Offline: documents that fail validation (not analysed; see
    /// `meshhubctl validate`), as `file#document: first reason`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    invalid: Vec<String>,
}

/// What `analyze` reads of a hub configuration file (everything else is
/// ignored: the hub checks it).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HubFile {
    #[serde(default)]
    clusters: Option<Vec<ClusterSelector>>,
    #[serde(default)]
    analysis: Option<HubAnalysis>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HubAnalysis {
    #[serde(default)]
    hold_back: Vec<String>,
}

/// Runs the command: whether no message is an error.
pub async fn run(args: AnalyzeArgs) -> Result<bool, String> {
    let report = if args.files.is_empty() {
        if args.config.is_some() {
            return Err(
                "--config reads clusters for files (-f); a running hub knows its own".into(),
            );
        }
        if args.istio_version.is_some() {
            return Err(
                "--istio-version checks files (-f); a running hub checks each cluster against the release its agent reports".into(),
            );
        }
        online(&args).await?
    } else {
        offline(&args)?
    };
    let text = match structured(&report, args.output) {
        Some(text) => text?,
        None => table(&report),
    };
    print!("{text}");
    Ok(!report
        .clusters
        .iter()
        .flat_map(|c| &c.messages)
        .any(|m| m.level == Level::Error))
}

fn offline(args: &AnalyzeArgs) -> Result<Report, String> {
    let target = match &args.istio_version {
        Some(v) => meshhub_analyze::Target::Known {
            cluster: None,
            version: meshhub_analyze::IstioVersion::parse(v)
                .map_err(|e| format!("--istio-version: {e}"))?,
        },
        None => meshhub_analyze::Target::Unchecked,
    };
    let hub: HubFile = match &args.config {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => HubFile::default(),
    };
    let rules = Rules::new(hub.clusters.unwrap_or_default());
    let hold_back = hub.analysis.map(|a| a.hold_back).unwrap_or_default();
    let groups = selected(rules.groups(), args.cluster.as_deref())?;

    let mut invalid = Vec::new();
    let mut members: BTreeMap<String, Vec<Facts>> =
        groups.iter().map(|g| (g.clone(), Vec::new())).collect();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for c in validate::check_files(
        &args.files,
        args.config.as_deref(),
        &meshhub_validate::Validator::default(),
        true,
    )? {
        let Some(obj) = &c.object else {
            if let Some(first) = c.errors.first() {
                invalid.push(format!("{} {}: {first}", c.at(), c.label()));
            }
            continue;
        };
        let namespace = obj.metadata.namespace.as_deref().unwrap_or("default");
        let targets = match rules.targets(&Placement::of(&obj.metadata), namespace) {
            Ok(t) => t,
            Err(e) => {
                invalid.push(format!("{} {}: {e}", c.at(), c.label()));
                continue;
            }
        };
        let facts = Facts::of(obj);
        for g in targets {
            if let Some(list) = members.get_mut(&g) {
                *counts.entry(g).or_default() += 1;
                list.extend(facts.clone());
            }
        }
    }
    let clusters = members
        .into_iter()
        .map(|(cluster, facts)| {
            let messages: Vec<AnalysisMessage> = meshhub_analyze::analyze_for(&facts, &target)
                .iter()
                .map(AnalysisMessage::from)
                .collect();
            let mut held_back: Vec<String> = messages
                .iter()
                .filter(|m| hold_back.contains(&m.code))
                .map(|m| m.code.clone())
                .collect();
            held_back.sort();
            held_back.dedup();
            ClusterReport {
                objects: Some(counts.get(&cluster).copied().unwrap_or(0)),
                cluster,
                version: None,
                messages,
                held_back,
                serving: None,
            }
        })
        .collect();
    Ok(Report { clusters, invalid })
}

async fn online(args: &AnalyzeArgs) -> Result<Report, String> {
    let status = Admin::hub(&args.admin, args.timeout).status().await?;
    let groups = selected(
        status.groups.iter().map(|g| g.name.clone()).collect(),
        args.cluster.as_deref(),
    )?;
    let clusters = status
        .analysis
        .into_iter()
        .filter(|a| groups.contains(&a.cluster))
        .map(|a| ClusterReport {
            cluster: a.cluster,
            version: Some(a.version),
            objects: None,
            messages: a
                .messages
                .iter()
                .map(|m| AnalysisMessage::clone(m))
                .collect(),
            held_back: a
                .held_back
                .as_ref()
                .map(|h| h.codes.clone())
                .unwrap_or_default(),
            serving: a.held_back.and_then(|h| h.serving),
        })
        .collect();
    Ok(Report {
        clusters,
        invalid: Vec::new(),
    })
}

/// `groups`, or only `cluster` (which must be one of them).
fn selected(groups: Vec<String>, cluster: Option<&str>) -> Result<Vec<String>, String> {
    match cluster {
        None => Ok(groups),
        Some(c) if groups.iter().any(|g| g == c) => Ok(vec![c.to_owned()]),
        Some(c) => Err(format!(
            "no cluster {c:?} (clusters: {})",
            groups.join(", ")
        )),
    }
}

fn table(r: &Report) -> String {
    let mut rows = vec![vec![
        "CLUSTER".to_owned(),
        "LEVEL".to_owned(),
        "CODE".to_owned(),
        "OBJECT".to_owned(),
        "PATH".to_owned(),
        "MESSAGE".to_owned(),
    ]];
    for c in &r.clusters {
        for m in &c.messages {
            rows.push(vec![
                c.cluster.clone(),
                m.level.to_string(),
                m.code.clone(),
                m.origin.clone(),
                if m.path.is_empty() {
                    "-".to_owned()
                } else {
                    m.path.clone()
                },
                m.message.to_string(),
            ]);
        }
    }
    let mut out = if rows.len() > 1 {
        render(&rows) + "\n"
    } else {
        String::new()
    };
    for c in &r.clusters {
        let count = |level| c.messages.iter().filter(|m| m.level == level).count();
        let mut line = format!("{}:", c.cluster);
        if let Some(v) = &c.version {
            line.push_str(&format!(" version {}", short(v)));
        }
        if let Some(n) = c.objects {
            line.push_str(&format!(" {n} object(s)"));
        }
        line.push_str(&format!(
            ", {} error(s), {} warning(s), {} info",
            count(Level::Error),
            count(Level::Warning),
            count(Level::Info)
        ));
        if !c.held_back.is_empty() {
            let verb = if c.version.is_some() {
                "held back"
            } else {
                "would be held back"
            };
            line.push_str(&format!("; {verb} ({})", c.held_back.join(", ")));
            if let Some(s) = &c.serving {
                line.push_str(&format!(", serving {}", short(s)));
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    if r.clusters.is_empty() {
        out.push_str("no analysis (is analysis enabled on the hub?)\n");
    }
    if !r.invalid.is_empty() {
        out.push_str(&format!(
            "\n{} document(s) not analysed (invalid; see meshhubctl validate):\n",
            r.invalid.len()
        ));
        for i in &r.invalid {
            out.push_str(&format!("  {i}\n"));
        }
    }
    out
}
