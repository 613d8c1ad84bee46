//! `meshhubctl history`, `diff`, `pin` and `unpin`: the hub's version
//! history per cluster, through its admin port (`GET /history`,
//! `GET /history/diff`, `POST /pins`, `POST /pins/unpin`).

use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde_json::Value;

use super::output::render;

/// Where the hub is.
#[derive(clap::Args, Debug)]
pub struct Admin {
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

impl Admin {
    /// The admin token, when one is given.
    fn token(&self) -> Result<Option<String>, String> {
        super::admin::token(self.token_file.as_deref(), self.token.as_deref())
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
    admin: Admin,
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
    pub admin: Admin,
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
    admin: Admin,
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
    admin: Admin,
}

fn base(admin: &str) -> String {
    let base = admin.trim_end_matches('/');
    if base.contains("://") {
        base.to_owned()
    } else {
        format!("http://{base}")
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut m = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        m.push_str(": ");
        m.push_str(&c.to_string());
        cur = c.source();
    }
    m
}

/// One request to the admin port; the body on success, the hub's message
/// otherwise.
async fn call(
    admin: &Admin,
    method: http::Method,
    path: &str,
    user: Option<&str>,
    body: Option<Value>,
) -> Result<String, String> {
    let base = base(&admin.admin);
    let uri: http::Uri = format!("{base}{path}")
        .parse()
        .map_err(|e| format!("--admin {:?}: {e}", admin.admin))?;
    let mut req = http::Request::builder().method(method).uri(uri);
    if let Some(u) = user {
        req = req.header("x-meshhub-user", u);
    }
    if let Some(t) = admin.token()? {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header(http::header::CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(body.map(|b| b.to_string()).unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let client = Client::builder(TokioExecutor::new()).build_http::<String>();
    let go = async {
        let response = client
            .request(req)
            .await
            .map_err(|e| format!("cannot reach the hub's admin port at {base}: {}", chain(&e)))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the answer of {base}: {}", chain(&e)))?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if status == http::StatusCode::NOT_FOUND && text.is_empty() {
            return Err(format!(
                "{base}{path}: not found (is history configured on this hub?)"
            ));
        }
        if !status.is_success() {
            return Err(text.trim().to_owned());
        }
        Ok(text)
    };
    tokio::time::timeout(admin.timeout, go)
        .await
        .map_err(|_| format!("no answer from {base} within {:?}", admin.timeout))?
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

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    seq: u64,
    id: String,
    time: String,
    #[serde(default)]
    origins: Vec<Value>,
    #[serde(default)]
    more_origins: usize,
    resources: usize,
    #[serde(default)]
    counts: std::collections::BTreeMap<String, usize>,
}

#[derive(Debug, Deserialize)]
struct View {
    versions: Vec<Row>,
    pinned: Option<Pin>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Pin {
    version: String,
    seq: u64,
    since: String,
    by: String,
    #[serde(default)]
    behind: usize,
}

fn origin_text(o: &Value) -> String {
    let get = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut s = format!("{}:{}", get("source"), get("unit"));
    if o.get("removed").and_then(Value::as_bool) == Some(true) {
        s.push_str(" (removed)");
    }
    if let Some(n) = o.get("unreadable").and_then(Value::as_u64) {
        s.push_str(&format!(" ({n} unreadable)"));
    }
    if let Some(rv) = o.get("resourceVersion").and_then(Value::as_str) {
        s.push_str(&format!(" rv={rv}"));
    }
    if let Some(by) = o.get("changedBy").and_then(Value::as_str) {
        s.push_str(&format!(" by {by}"));
    }
    s
}

/// Short collection names for the counts column
/// (`istio/networking/v1alpha3/virtualservices` → `virtualservices`).
fn counts_text(counts: &std::collections::BTreeMap<String, usize>) -> String {
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
    let text = call(
        &args.admin,
        http::Method::GET,
        &format!("/history?cluster={}", query(&args.cluster)),
        None,
        None,
    )
    .await?;
    if let Format::Json = args.output {
        print!("{text}");
        return Ok(());
    }
    let view: View =
        serde_json::from_str(&text).map_err(|e| format!("not a history document: {e}"))?;
    let mut rows = vec![vec![
        "#".to_owned(),
        "VERSION".to_owned(),
        "TIME".to_owned(),
        "RESOURCES".to_owned(),
        "COUNTS".to_owned(),
        "ORIGIN".to_owned(),
    ]];
    let pinned_seq = view.pinned.as_ref().map(|p| p.seq);
    for v in &view.versions {
        let mut origin = v
            .origins
            .iter()
            .map(origin_text)
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
    if let Some(p) = &view.pinned {
        println!(
            "\ncluster {} is PINNED to {} (#{}) since {} by {}; {} version(s) behind the sources",
            args.cluster, p.version, p.seq, p.since, p.by, p.behind
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
    let text = call(
        &args.admin,
        http::Method::GET,
        &format!(
            "/history/diff?cluster={}&from={}&to={}",
            query(&args.cluster),
            query(from),
            query(to)
        ),
        None,
        None,
    )
    .await?;
    if let Format::Json = args.output {
        print!("{text}");
        return Ok(());
    }
    let view: Value =
        serde_json::from_str(&text).map_err(|e| format!("not a diff document: {e}"))?;
    let changes = view["changes"].as_array().cloned().unwrap_or_default();
    println!(
        "cluster {}: {} (#{}) -> {} (#{}): {} object(s) differ",
        args.cluster,
        view["from"][0].as_str().unwrap_or_default(),
        view["from"][1],
        view["to"][0].as_str().unwrap_or_default(),
        view["to"][1],
        changes.len()
    );
    for c in &changes {
        let what = c["change"].as_str().unwrap_or_default();
        let sign = match what {
            "added" => "+",
            "removed" => "-",
            _ => "~",
        };
        println!(
            "{sign} {what:<8} {} {}",
            c["collection"].as_str().unwrap_or_default(),
            c["name"].as_str().unwrap_or_default()
        );
        if let Some(d) = c["diff"].as_str() {
            for line in d.lines() {
                println!("    {line}");
            }
        }
    }
    Ok(())
}

fn user(given: Option<String>) -> String {
    given
        .or_else(|| std::env::var("USER").ok())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "meshhubctl".to_owned())
}

pub async fn pin(args: PinArgs) -> Result<(), String> {
    let who = user(args.user);
    let text = call(
        &args.admin,
        http::Method::POST,
        "/pins",
        Some(&who),
        Some(serde_json::json!({"cluster": args.cluster, "version": args.to})),
    )
    .await?;
    let p: Pin = serde_json::from_str(&text).map_err(|e| format!("not a pin: {e}"))?;
    println!(
        "cluster {} pinned to {} (#{}) since {} by {}",
        args.cluster, p.version, p.seq, p.since, p.by
    );
    Ok(())
}

pub async fn unpin(args: UnpinArgs) -> Result<(), String> {
    let who = user(args.user);
    let text = call(
        &args.admin,
        http::Method::POST,
        "/pins/unpin",
        Some(&who),
        Some(serde_json::json!({"cluster": args.cluster})),
    )
    .await?;
    let p: Pin = serde_json::from_str(&text).map_err(|e| format!("not a pin: {e}"))?;
    println!(
        "cluster {} unpinned (was {} #{}); serving the latest version",
        args.cluster, p.version, p.seq
    );
    Ok(())
}
