//! The light sinks of a fleet, in as many processes as their open files
//! need: each sink holds a listener and a connection, and a process may
//! hold 20,000 files here (a hard limit the harness can't raise), so a
//! fleet of 10,000 clusters runs three sinks processes. Commands go to
//! every process; their answers are merged into one, as if one process
//! served them all.

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};

use crate::proc::Child;

use super::super::harness::LONG;

/// Sinks per process: two files each, well under the open-file limit.
const PER_PROCESS: usize = 4_000;

/// Every sinks process of the fleet, in cluster order.
pub(crate) struct SinkSet {
    children: Vec<Child>,
}

impl SinkSet {
    /// Starts sinks for clusters `0..n` (`args`: the flags every process
    /// takes); returns them and each sink's address, in cluster order.
    pub(crate) async fn spawn(n: usize, args: &[String]) -> Result<(Self, Vec<String>)> {
        let mut children = Vec::new();
        let mut addresses = Vec::with_capacity(n);
        let mut first = 0;
        while first < n || children.is_empty() {
            let count = PER_PROCESS.min(n - first);
            let mut a = vec![
                "sinks".to_owned(),
                "--count".into(),
                count.to_string(),
                "--first".into(),
                first.to_string(),
            ];
            a.extend(args.iter().cloned());
            let mut child = Child::spawn("sinks", &a)?;
            let listening = child.expect("listening", LONG).await?;
            addresses.extend(
                listening["addrs"]
                    .as_array()
                    .context("sink addresses")?
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|a| format!("http://{a}")),
            );
            children.push(child);
            first += count;
        }
        ensure!(
            addresses.len() == n,
            "the sinks processes serve {} sinks",
            addresses.len()
        );
        Ok((Self { children }, addresses))
    }

    /// Sends `cmd` to every process and merges their answers; a wait that
    /// did not complete is an error.
    pub(crate) async fn cmd(&mut self, cmd: Value) -> Result<Value> {
        let event = match cmd["cmd"].as_str() {
            Some("mark") => "marked",
            Some("report") => "report",
            Some("restart") => "restarted",
            Some("reset_bytes") => "reset",
            Some("reports") => "reported",
            _ => "waited",
        };
        for c in &mut self.children {
            c.send(&cmd).await?;
        }
        let mut answers = Vec::with_capacity(self.children.len());
        for c in &mut self.children {
            answers.push(c.expect(event, LONG).await?);
        }
        let r = merge(event, answers);
        if event == "waited" && r["complete"] != true {
            bail!(
                "only {} sinks done ({} missing: {})",
                r["done"],
                cmd["cmd"],
                r["missing"]
            );
        }
        Ok(r)
    }

    /// Ends every process (closing its commands) and waits for it.
    pub(crate) async fn finish(self) {
        for c in self.children {
            c.finish().await;
        }
    }
}

/// One answer from every process' answer to the same command.
fn merge(event: &str, answers: Vec<Value>) -> Value {
    let sum = |field: &str| -> u64 { answers.iter().filter_map(|a| a[field].as_u64()).sum() };
    let min_at = || answers.iter().filter_map(|a| a["at_ns"].as_u64()).min();
    match event {
        "waited" => {
            let at: Vec<Value> = answers
                .iter()
                .filter_map(|a| a["at_ns"].as_array())
                .flatten()
                .cloned()
                .collect();
            let missing: Vec<Value> = answers
                .iter()
                .filter_map(|a| a["missing"].as_array())
                .flatten()
                .take(5)
                .cloned()
                .collect();
            json!({
                "event": "waited",
                "complete": answers.iter().all(|a| a["complete"] == true),
                "done": sum("done"),
                "missing": missing,
                "at_ns": at,
                "bytes": sum("bytes"),
            })
        }
        "report" => {
            let mut clusters = serde_json::Map::new();
            for a in &answers {
                if let Some(m) = a["clusters"].as_object() {
                    clusters.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            json!({"event": "report", "clusters": clusters, "bytes": sum("bytes")})
        }
        "restarted" | "reported" => {
            let (at, clusters) = (min_at(), sum("clusters"));
            let mut out = answers.into_iter().next().unwrap_or_default();
            if let Some(at) = at {
                out["at_ns"] = json!(at);
            }
            if event == "reported" {
                out["clusters"] = json!(clusters);
            }
            out
        }
        _ => answers.into_iter().next().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_merge_as_one_process_would_give_them() {
        let waited = merge(
            "waited",
            vec![
                json!({"complete": true, "done": 2, "missing": [], "at_ns": [5, 7], "bytes": 10}),
                json!({"complete": false, "done": 1, "missing": ["c-3"], "at_ns": [6], "bytes": 4}),
            ],
        );
        assert_eq!(waited["complete"], false);
        assert_eq!(waited["done"], 3);
        assert_eq!(waited["missing"], json!(["c-3"]));
        assert_eq!(waited["at_ns"], json!([5, 7, 6]));
        assert_eq!(waited["bytes"], 14);
        let reported = merge(
            "reported",
            vec![
                json!({"event": "reported", "at_ns": 9, "clusters": 4000}),
                json!({"event": "reported", "at_ns": 8, "clusters": 10}),
            ],
        );
        assert_eq!(reported["at_ns"], 8);
        assert_eq!(reported["clusters"], 4010);
        let report = merge(
            "report",
            vec![
                json!({"clusters": {"a": {"x": "1"}}, "bytes": 1}),
                json!({"clusters": {"b": {"x": "2"}}, "bytes": 2}),
            ],
        );
        assert_eq!(report["clusters"]["b"]["x"], "2");
        assert_eq!(report["bytes"], 3);
    }
}
