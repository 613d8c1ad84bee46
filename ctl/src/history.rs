//! `meshhubctl history`, `diff`, `pin` and `unpin`: the hub's version
//! history per cluster, through its admin port (`GET /history`,
//! `GET /history/diff`, `POST /pins`, `POST /pins/unpin`).

use std::collections::BTreeMap;
use std::time::Duration;

use meshhub_api::history::{
    ChangeKind, DiffView, HistoryView, PinRecord, PinRequest, USER_HEADER, UnpinRequest,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::admin::{self, Admin};
use crate::output::render;

/// Where the hub is.
#[derive(clap::Args, Debug)]
pub struct AdminArgs {
    /// The hub's admin address.
    #[arg(long, env = "MESHHUB_ADMIN", default_value = "http://127.0.0.1:9902")]
    pub admin: String,
    /// Give up after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// File holding the admin token (the one given to the hub with
    /// --admin-token-file); needed by `pin` and `unpin` when the hub
    /// requires one.
    #[arg(long, conflicts_with = "token")]
    pub token_file: Option<std::path::PathBuf>,
    /// The admin token itself.
    #[arg(long, env = "MESHHUB_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl AdminArgs {
    /// A client of the hub's admin port, with the token when one is given.
    fn port(&self) -> Result<Admin, String> {
        let token = admin::token(self.token_file.as_deref(), self.token.as_deref())?;
        Ok(Admin::hub(&self.admin, self.timeout).with_token(token))
    }
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// `meshhubctl history`.
#[derive(clap::Args, Debug)]
pub struct HistoryArgs {
    /// The cluster (group) whose versions to list.
    #[arg(long)]
    cluster: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Format,
    #[command(flatten)]
    admin: AdminArgs,
}

/// `meshhubctl diff --cluster C FROM TO` (built by `diff.rs`, which owns
/// the command's flags).
#[derive(Debug)]
pub struct DiffArgs {
    /// The cluster (group).
    pub cluster: String,
    /// The older version (id, unique id prefix, or #N).
    pub from: Option<String>,
    /// The newer version.
    pub to: Option<String>,
    /// Output format.
    pub output: Format,
    /// Where the hub is.
    pub admin: AdminArgs,
}

/// `meshhubctl pin`.
#[derive(clap::Args, Debug)]
pub struct PinArgs {
    /// The cluster (group) to pin.
    #[arg(long)]
    cluster: String,
    /// The version to serve (id, unique id prefix, or #N).
    #[arg(long)]
    to: String,
    /// Who asks, for the audit log.
    #[arg(long = "as", env = "MESHHUB_USER")]
    user: Option<String>,
    #[command(flatten)]
    admin: AdminArgs,
}

/// `meshhubctl unpin`.
#[derive(clap::Args, Debug)]
pub struct UnpinArgs {
    /// The cluster (group) to serve its latest version again.
    #[arg(long)]
    cluster: String,
    /// Who asks, for the audit log.
    #[arg(long = "as", env = "MESHHUB_USER")]
    user: Option<String>,
    #[command(flatten)]
    admin: AdminArgs,
}

/// One request to the admin port: the answer on success, the hub's
/// message otherwise.
pub(crate) async fn call<T: DeserializeOwned>(
    admin: &AdminArgs,
    method: http::Method,
    path: &str,
    user: Option<&str>,
    body: Option<&impl Serialize>,
) -> Result<(T, String), String> {
    let port = admin.port()?;
    let headers: Vec<(&str, &str)> = user.map(|u| (USER_HEADER, u)).into_iter().collect();
    let answer = port
        .send(method, path, &headers, body)
        .await
        .map_err(|e| e.to_string())?;
    if answer.status == http::StatusCode::NOT_FOUND && answer.text.is_empty() {
        return Err(format!(
            "{}: not found (is history configured on this hub?)",
            port.url(path)
        ));
    }
    if !answer.status.is_success() {
        // The hub's message says what is wrong (no such version, ...).
        return Err(answer.text.trim().to_owned());
    }
    let doc = serde_json::from_str(&answer.text)
        .map_err(|e| format!("{}: unexpected answer: {e}", port.url(path)))?;
    Ok((doc, answer.text))
}

fn query(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Short collection names for the counts column
/// (`istio/networking/v1alpha3/virtualservices` → `virtualservices`).
fn counts_text(counts: &BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return "-".to_owned();
    }
    counts
        .iter()
        .map(|(c, n)| format!("{}={n}", c.rsplit('/').next().unwrap_or(c)))
        .collect::<Vec<_>>()
        .join(",")
}

pub async fn history(args: HistoryArgs) -> Result<(), String> {
    let (view, text): (HistoryView, _) = call(
        &args.admin,
        http::Method::GET,
        &format!("/history?cluster={}", query(&args.cluster)),
        None,
        None::<&()>,
    )
    .await?;
    if let Format::Json = args.output {
        print!("{text}");
        return Ok(());
    }
    let mut rows = vec![vec![
        "#".to_owned(),
        "VERSION".to_owned(),
        "TIME".to_owned(),
        "RESOURCES".to_owned(),
        "COUNTS".to_owned(),
        "ORIGIN".to_owned(),
    ]];
    let pinned_seq = view.pinned.as_ref().map(|p| p.record.seq);
    for v in &view.versions {
        let mut origin = v
            .origins
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        if v.more_origins > 0 {
            origin.push_str(&format!("; +{} more", v.more_origins));
        }
        if origin.is_empty() {
            origin = "-".to_owned();
        }
        let mark = if Some(v.seq) == pinned_seq {
            " (pinned)"
        } else if !v.held_back.is_empty() {
            " (held back)"
        } else {
            ""
        };
        rows.push(vec![
            v.seq.to_string(),
            format!("{}{mark}", v.id),
            v.time.clone(),
            v.resources.to_string(),
            counts_text(&v.counts),
            origin,
        ]);
    }
    print!("{}", render(&rows));
    for v in view.versions.iter().filter(|v| !v.held_back.is_empty()) {
        println!(
            "\n#{} {} was HELD BACK by analysis (the cluster kept its last good version):",
            v.seq, v.id
        );
        for reason in &v.held_back {
            println!("  {reason}");
        }
    }
    if let Some(p) = &view.pinned {
        let r = &p.record;
        println!(
            "\ncluster {} is PINNED to {} (#{}) since {} by {}; {} version(s) behind the sources",
            args.cluster, r.version, r.seq, r.since, r.by, p.behind
        );
    }
    Ok(())
}

pub async fn diff(args: DiffArgs) -> Result<(), String> {
    let (Some(from), Some(to)) = (&args.from, &args.to) else {
        return Err(format!(
            "diff --cluster {} between versions needs FROM and TO (see `meshhubctl history --cluster {}`)",
            args.cluster, args.cluster
        ));
    };
    let (view, text): (DiffView, _) = call(
        &args.admin,
        http::Method::GET,
        &format!(
            "/history/diff?cluster={}&from={}&to={}",
            query(&args.cluster),
            query(from),
            query(to)
        ),
        None,
        None::<&()>,
    )
    .await?;
    if let Format::Json = args.output {
        print!("{text}");
        return Ok(());
    }
    println!(
        "cluster {}: {} (#{}) -> {} (#{}): {} object(s) differ",
        args.cluster,
        view.from.0,
        view.from.1,
        view.to.0,
        view.to.1,
        view.changes.len()
    );
    for c in &view.changes {
        let sign = match c.change {
            ChangeKind::Added => "+",
            ChangeKind::Removed => "-",
            ChangeKind::Changed => "~",
        };
        println!("{sign} {:<8} {} {}", c.change, c.collection, c.name);
        for line in c.diff.iter().flat_map(|d| d.lines()) {
            println!("    {line}");
        }
    }
    Ok(())
}

pub(crate) fn user(given: Option<String>) -> String {
    given
        .or_else(|| std::env::var("USER").ok())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "meshhubctl".to_owned())
}

pub async fn pin(args: PinArgs) -> Result<(), String> {
    let who = user(args.user);
    let request = PinRequest {
        cluster: args.cluster,
        version: args.to,
    };
    let (p, _): (PinRecord, _) = call(
        &args.admin,
        http::Method::POST,
        "/pins",
        Some(&who),
        Some(&request),
    )
    .await?;
    println!(
        "cluster {} pinned to {} (#{}) since {} by {}",
        request.cluster, p.version, p.seq, p.since, p.by
    );
    Ok(())
}

pub async fn unpin(args: UnpinArgs) -> Result<(), String> {
    let who = user(args.user);
    let request = UnpinRequest {
        cluster: args.cluster,
    };
    let (p, _): (PinRecord, _) = call(
        &args.admin,
        http::Method::POST,
        "/pins/unpin",
        Some(&who),
        Some(&request),
    )
    .await?;
    println!(
        "cluster {} unpinned (was {} #{}); serving the latest version",
        request.cluster, p.version, p.seq
    );
    Ok(())
}
