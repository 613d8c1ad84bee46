//! `meshhubctl log-level [FILTER]`: reads (`GET /debug/logging`) or sets
//! (`PUT /debug/logging`) the log filter of a hub or sink agent at
//! runtime. A FILTER with `=` but no `,` and no bare level (`meshhub::pipeline=debug`)
//! sets only those modules; `--replace` (or any other FILTER) replaces the
//! whole filter. The admin token, when the port requires one, comes from
//! `--token-file` or `MESHHUB_ADMIN_TOKEN`.

use std::path::PathBuf;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use meshhub_runtime::error_chain;

/// Flags of `meshhubctl log-level`.
#[derive(clap::Args, Debug)]
pub(super) struct LogLevelArgs {
    /// The admin address of the hub or agent.
    #[arg(long, env = "MESHHUB_ADMIN", default_value = "http://127.0.0.1:9902")]
    admin: String,
    /// File holding the admin token (the one given to the process with
    /// --admin-token-file).
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// The admin token itself.
    #[arg(long, env = "MESHHUB_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Replace the whole filter even when FILTER names modules only.
    #[arg(long)]
    replace: bool,
    /// The new filter (`MESHHUB_LOG` syntax: `info,meshhub::pipeline=debug`);
    /// without it, print the filter in force.
    filter: Option<String>,
    /// Give up after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// The PUT body for `filter`: module levels (`a=debug,b=trace`) unless
/// `replace` or the filter has a bare level (`info`) or a span/field
/// directive.
fn body(filter: &str, replace: bool) -> serde_json::Value {
    let modules: Option<serde_json::Map<String, serde_json::Value>> = (!replace)
        .then(|| {
            filter
                .split(',')
                .map(|d| {
                    let (m, l) = d.trim().split_once('=')?;
                    (!m.contains(['[', '{']) && !m.is_empty())
                        .then(|| (m.to_owned(), serde_json::Value::from(l)))
                })
                .collect()
        })
        .flatten();
    match modules {
        Some(m) => serde_json::json!({ "modules": m }),
        None => serde_json::json!({ "filter": filter }),
    }
}

fn token(args: &LogLevelArgs) -> Result<Option<String>, String> {
    super::admin::token(args.token_file.as_deref(), args.token.as_deref())
}

pub(super) async fn run(args: LogLevelArgs) -> Result<(), String> {
    let base = args.admin.trim_end_matches('/');
    let base = if base.contains("://") {
        base.to_owned()
    } else {
        format!("http://{base}")
    };
    let url = format!("{base}/debug/logging");
    let mut request = http::Request::builder().uri(&url);
    let payload = match &args.filter {
        Some(f) => {
            request = request
                .method(http::Method::PUT)
                .header(http::header::CONTENT_TYPE, "application/json");
            body(f, args.replace).to_string()
        }
        None => String::new(),
    };
    if let Some(t) = token(&args)? {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let request = request
        .body(Full::new(bytes::Bytes::from(payload)))
        .map_err(|e| format!("--admin {:?}: {e}", args.admin))?;
    let client = Client::builder(TokioExecutor::new()).build_http();
    let call = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("cannot reach the admin port at {base}: {}", error_chain(&e)))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{url}: {}", error_chain(&e)))?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if !status.is_success() {
            return Err(format!("{url} answered {status}: {}", text.trim()));
        }
        let doc: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{url}: not JSON: {e}"))?;
        let filter = doc
            .get("filter")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| format!("{url}: no `filter` in {}", text.trim()))?;
        println!("{filter}");
        Ok(())
    };
    tokio::time::timeout(args.timeout, call)
        .await
        .map_err(|_| format!("no answer from {url} within {:?}", args.timeout))?
}

#[cfg(test)]
mod tests {
    use super::body;

    #[test]
    fn module_levels_are_sent_as_modules_and_the_rest_as_a_filter() {
        assert_eq!(
            body("meshhub::pipeline=debug,meshhub_mcp=trace", false),
            serde_json::json!({"modules": {"meshhub::pipeline": "debug", "meshhub_mcp": "trace"}})
        );
        assert_eq!(
            body("info,meshhub=debug", false),
            serde_json::json!({"filter": "info,meshhub=debug"})
        );
        assert_eq!(
            body("meshhub=debug", true),
            serde_json::json!({"filter": "meshhub=debug"})
        );
    }
}
