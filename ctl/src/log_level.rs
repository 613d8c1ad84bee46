//! `meshhubctl log-level [FILTER]`: reads (`GET /debug/logging`) or sets
//! (`PUT /debug/logging`) the log filter of a hub or sink agent at
//! runtime. A FILTER with `=` but no `,` and no bare level (`meshhub::pipeline=debug`)
//! sets only those modules; `--replace` (or any other FILTER) replaces the
//! whole filter. The admin token, when the port requires one, comes from
//! `--token-file` or `MESHHUB_ADMIN_TOKEN`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use meshhub_api::logging::{LogChange, LogLevels};

use crate::admin::{self, Admin};

/// The runtime's route, on hubs and agents alike.
const PATH: &str = "/debug/logging";

/// Flags of `meshhubctl log-level`.
#[derive(clap::Args, Debug)]
pub struct LogLevelArgs {
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
fn body(filter: &str, replace: bool) -> LogChange {
    let modules: Option<BTreeMap<String, String>> = (!replace)
        .then(|| {
            filter
                .split(',')
                .map(|d| {
                    let (m, l) = d.trim().split_once('=')?;
                    (!m.contains(['[', '{']) && !m.is_empty()).then(|| (m.to_owned(), l.to_owned()))
                })
                .collect()
        })
        .flatten();
    match modules {
        Some(modules) => LogChange {
            filter: None,
            modules,
        },
        None => LogChange {
            filter: Some(filter.to_owned()),
            modules: BTreeMap::new(),
        },
    }
}

pub async fn run(args: LogLevelArgs) -> Result<(), String> {
    let token = admin::token(args.token_file.as_deref(), args.token.as_deref())?;
    let port = Admin::any(&args.admin, args.timeout).with_token(token);
    let answer = match &args.filter {
        Some(f) => {
            let change = body(f, args.replace);
            port.send(http::Method::PUT, PATH, &[], Some(&change)).await
        }
        None => port.get(PATH).await,
    };
    let url = port.url(PATH);
    let text = answer.map_err(|e| e.to_string())?;
    if !text.status.is_success() {
        return Err(format!(
            "{url} answered {}: {}",
            text.status,
            text.text.trim()
        ));
    }
    let levels: LogLevels = serde_json::from_str(&text.text)
        .map_err(|e| format!("{url}: no `filter` in {}: {e}", text.text.trim()))?;
    println!("{}", levels.filter);
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The body as sent.
    fn body(filter: &str, replace: bool) -> serde_json::Value {
        serde_json::to_value(super::body(filter, replace)).unwrap()
    }

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
