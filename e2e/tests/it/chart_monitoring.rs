//! The hub chart's monitoring (`deploy/charts/meshhub`): its alerting rules
//! (`files/alerts.yaml`) and Grafana dashboards (`dashboards/*.json`).
//!
//! * The rules pass `promtool check rules` and the promtool unit tests
//!   beside them (`tests/*_test.yaml`: synthetic series, which alerts fire
//!   when, with their rendered annotations), and every alert is tested both
//!   firing and quiet;
//! * every dashboard is Grafana JSON with a Prometheus data source
//!   variable, stable unique ids, and queries promtool's parser accepts;
//! * real Helm renders the rules as a PrometheusRule (the file's rules,
//!   with the per-alert settings of the values applied) and the dashboards
//!   as sidecar-labelled ConfigMaps, only when asked, and refuses settings
//!   that name no alert or no threshold.
//!
//! That the metrics they name exist is checked against a running hub
//! (`monitoring_metrics.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use meshhub_e2e::helm::{objects, template};
use meshhub_e2e::prometheus::promtool_bin;
use meshhub_e2e::promql::metric_names;
use meshhub_e2e::turn;
use serde_json::{Value, json};

/// The hub chart's directory.
pub fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/charts/meshhub")
}

/// `files/alerts.yaml`, parsed.
pub fn alert_file() -> Value {
    let text = std::fs::read_to_string(chart().join("files/alerts.yaml")).unwrap();
    serde_saphyr::from_str(&text).expect("files/alerts.yaml is YAML")
}

/// Every rule of `files/alerts.yaml`.
pub fn alert_rules() -> Vec<Value> {
    alert_file()["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

/// Every dashboard: file name and JSON.
pub fn dashboards() -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = std::fs::read_dir(chart().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, json)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every panel of `dashboard`, those inside collapsed rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// Every query of `dashboard`: where (panel title) and the expression.
pub fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    panels(dashboard)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_owned();
            p["targets"].as_array().into_iter().flatten().map(move |t| {
                (
                    title.clone(),
                    t["expr"].as_str().unwrap_or_default().to_owned(),
                )
            })
        })
        .collect()
}

/// Every query variable of `dashboard`: its name and query.
pub fn variable_queries(dashboard: &Value) -> Vec<(String, String)> {
    dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let q = v["query"]["query"].as_str().or(v["query"].as_str());
            (
                v["name"].as_str().unwrap_or_default().to_owned(),
                q.unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// `promtool <args>` in `dir`: whether it succeeded, and what it printed.
pub fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(promtool_bin())
        .current_dir(dir)
        .args(args)
        .output()
        .expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `expr` with Grafana's variables given values PromQL parses.
fn without_variables(expr: &str) -> String {
    let mut out = expr
        .replace("${__rate_interval}", "5m")
        .replace("$__rate_interval", "5m")
        .replace("${__range}", "1h")
        .replace("$__range", "1h");
    while let Some(i) = out.find('$') {
        let rest = &out[i + 1..];
        let len = if rest.starts_with('{') {
            rest.find('}').map_or(rest.len(), |e| e + 1)
        } else {
            rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())
        };
        out.replace_range(i..i + 1 + len, "x");
    }
    out
}

#[test]
fn the_alert_rules_pass_promtool_and_each_alert_is_tested_firing_and_quiet() {
    let _turn = turn(module_path!());
    let dir = chart();
    let rules = alert_rules();
    let (ok, out) = promtool(&dir, &["check", "rules", "files/alerts.yaml"]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{out}"
    );
    let tests = ["tests/alerts_test.yaml", "tests/alerts_days_test.yaml"];
    let mut args = vec!["test", "rules"];
    args.extend(tests);
    let (ok, out) = promtool(&dir, &args);
    assert!(ok, "promtool test rules:\n{out}");
    assert_eq!(out.matches("SUCCESS").count(), tests.len(), "{out}");

    // Each alert is expected to fire somewhere and to stay quiet somewhere.
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for file in tests {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let parsed: Value = serde_saphyr::from_str(&text).unwrap();
        for t in parsed["tests"].as_array().unwrap() {
            for a in t["alert_rule_test"].as_array().into_iter().flatten() {
                let name = a["alertname"].as_str().unwrap().to_owned();
                let expected = a["exp_alerts"].as_array().map_or(0, Vec::len);
                if expected > 0 {
                    // Each expected alert's annotations are checked too.
                    for e in a["exp_alerts"].as_array().unwrap() {
                        assert!(e["exp_annotations"]["summary"].is_string(), "{file}: {e}");
                    }
                    firing.insert(name);
                } else {
                    quiet.insert(name);
                }
            }
        }
    }
    let template = std::fs::read_to_string(dir.join("templates/prometheusrule.yaml")).unwrap();
    for rule in &rules {
        let name = rule["alert"]
            .as_str()
            .expect("alerts only, no recording rules");
        assert!(firing.contains(name), "{name} is never tested firing");
        assert!(quiet.contains(name), "{name} is never tested quiet");
        assert!(
            ["critical", "warning", "info"]
                .contains(&rule["labels"]["severity"].as_str().unwrap_or("")),
            "{name}: {rule}"
        );
        for a in ["summary", "description"] {
            assert!(
                rule["annotations"][a]
                    .as_str()
                    .is_some_and(|s| s.len() > 10),
                "{name} has no {a}"
            );
        }
        // The chart's conventions: every selector names job="meshhub"
        // (which the chart replaces), and a thresholded alert's expression
        // ends with its threshold.
        let expr = rule["expr"].as_str().unwrap();
        for metric in metric_names(expr) {
            let mut rest = expr;
            while let Some(i) = rest.find(&metric) {
                let after = &rest[i + metric.len()..];
                let whole = !rest[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                    && !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
                if whole {
                    assert!(
                        after.starts_with("{job=\"meshhub\""),
                        "{name}: {metric} is not selected with job=\"meshhub\" first: {expr}"
                    );
                }
                rest = after;
            }
        }
        if template.contains(&format!("\"{name}\"")) {
            assert!(
                expr.trim_end().ends_with(|c: char| c.is_ascii_digit()),
                "{name} has a threshold but its expression does not end with it: {expr}"
            );
        }
    }
}

#[test]
fn the_dashboards_are_grafana_json_with_a_data_source_variable_and_valid_queries() {
    let _turn = turn(module_path!());
    let boards = dashboards();
    let names: Vec<&str> = boards.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["cluster.json", "fleet.json", "hub.json", "rollout.json"]
    );
    let mut uids = BTreeSet::new();
    let mut rules = Vec::new();
    for (name, d) in &boards {
        let text = serde_json::to_string(d).unwrap();
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "{name}: no external assets or links"
        );
        let uid = d["uid"].as_str().unwrap();
        assert!(
            uid.starts_with("meshhub-") && uids.insert(uid.to_owned()),
            "{name}: uid {uid}"
        );
        assert!(d["schemaVersion"].as_u64().unwrap() >= 36, "{name}");
        assert!(
            d["title"].as_str().unwrap().starts_with("meshhub / "),
            "{name}"
        );
        let vars = d["templating"]["list"].as_array().unwrap();
        assert!(
            vars.iter().any(|v| v["name"] == "datasource"
                && v["type"] == "datasource"
                && v["query"] == "prometheus"),
            "{name}: no Prometheus data source variable"
        );
        for v in vars.iter().filter(|v| v["type"] == "query") {
            assert_eq!(v["datasource"]["uid"], "${datasource}", "{name}: {v}");
        }
        let mut ids = BTreeSet::new();
        for p in panels(d) {
            assert!(
                ids.insert(p["id"].as_u64().unwrap()),
                "{name}: duplicate id {p}"
            );
            let g = &p["gridPos"];
            assert!(
                g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24,
                "{name}: {}",
                p["title"]
            );
            if p["type"] != "row" {
                assert_eq!(
                    p["datasource"]["uid"], "${datasource}",
                    "{name}: {}",
                    p["title"]
                );
                assert!(
                    !p["targets"].as_array().unwrap().is_empty(),
                    "{name}: {}",
                    p["title"]
                );
                assert!(
                    p["description"].as_str().is_some_and(|s| !s.is_empty()),
                    "{name}: {}",
                    p["title"]
                );
            }
        }
        for (title, expr) in panel_queries(d) {
            assert!(!metric_names(&expr).is_empty(), "{name}: {title}: {expr}");
            rules.push(json!({
                "record": format!("dashboard:check_{}", rules.len()),
                "expr": without_variables(&expr),
            }));
        }
    }
    // promtool parses every query (as recording rules).
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("dashboards.rules.json");
    std::fs::write(
        &file,
        json!({"groups": [{"name": "dashboards", "rules": rules}]}).to_string(),
    )
    .unwrap();
    let (ok, out) = promtool(tmp.path(), &["check", "rules", "dashboards.rules.json"]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{out}"
    );
}

/// The rendered objects of `kind`, by name.
fn rendered(args: &[&str], kind: &str) -> BTreeMap<String, Value> {
    let text = tokio::task::block_in_place(|| template("meshhub", "meshhub", "meshhub", args))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    objects(&text)
        .into_iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == kind))
        .map(|o| {
            (
                o.metadata.name.clone().unwrap(),
                serde_json::to_value(&o).unwrap(),
            )
        })
        .collect()
}

/// The alert file's groups with `job="meshhub"` replaced by `job`.
fn groups_for_job(job: &str) -> Value {
    let text = alert_file()["groups"]
        .to_string()
        .replace(r#"job=\"meshhub\""#, &format!(r#"job=\"{job}\""#));
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chart_renders_the_rules_and_dashboards_only_when_asked() {
    let _turn = turn(module_path!());
    assert!(rendered(&[], "PrometheusRule").is_empty());
    assert!(
        rendered(&[], "ConfigMap").len() == 1,
        "only the configuration"
    );

    // Defaults: the file's rules, selecting the ServiceMonitor's job.
    let on = [
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "dashboards.enabled=true",
    ];
    let rules = rendered(&on, "PrometheusRule");
    let rule = &rules["meshhub"];
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["spec"]["groups"], groups_for_job("meshhub-metrics"));
    let monitor = rendered(&["--set", "serviceMonitor.enabled=true"], "Service");
    assert!(
        monitor.contains_key("meshhub-metrics"),
        "{:?}",
        monitor.keys()
    );
    // promtool accepts what the chart renders.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("rendered.json"),
        json!({"groups": rule["spec"]["groups"]}).to_string(),
    )
    .unwrap();
    let (ok, out) = promtool(tmp.path(), &["check", "rules", "rendered.json"]);
    assert!(ok, "{out}");

    // One ConfigMap per dashboard, labelled for the sidecar, holding the
    // file as it is.
    let maps = rendered(&on, "ConfigMap");
    for (file, json) in dashboards() {
        let name = format!("meshhub-dashboard-{}", file.trim_end_matches(".json"));
        let cm = maps
            .get(&name)
            .unwrap_or_else(|| panic!("no {name}: {:?}", maps.keys()));
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1", "{cm}");
        let data = cm["data"][format!("meshhub-{file}")].as_str().unwrap();
        let parsed: Value = serde_json::from_str(data).unwrap();
        assert_eq!(parsed, json, "{name}");
    }

    // Per-alert settings, the job, labels; the dashboards elsewhere.
    let settings = json!({
        "MeshhubCertificateExpiringSoon": {"threshold": 21, "for": "2h"},
        "MeshhubCertificateExpiring": {"threshold": 1.5},
        "MeshhubClusterNotSynced": {"severity": "critical"},
        "MeshhubDown": {"enabled": false},
    })
    .to_string();
    let rules = rendered(
        &[
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.job=hub",
            "--set",
            "prometheusRule.labels.release=kps",
            "--set",
            "prometheusRule.ruleLabels.team=mesh",
            "--set-json",
            &format!("prometheusRule.alerts={settings}"),
        ],
        "PrometheusRule",
    );
    let rule = &rules["meshhub"];
    assert_eq!(rule["metadata"]["labels"]["release"], "kps");
    let by_name: BTreeMap<&str, &Value> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["alert"].as_str().unwrap(), r))
        .collect();
    let file = alert_rules();
    assert_eq!(by_name.len(), file.len() - 1, "MeshhubDown left out");
    assert!(!by_name.contains_key("MeshhubDown"));
    let soon = by_name["MeshhubCertificateExpiringSoon"];
    assert!(
        soon["expr"].as_str().unwrap().ends_with("< 86400 * 21"),
        "{soon}"
    );
    assert_eq!(soon["for"], "2h");
    let expiring = by_name["MeshhubCertificateExpiring"]["expr"]
        .as_str()
        .unwrap();
    assert!(expiring.ends_with("< 86400 * 1.5"), "{expiring}");
    assert_eq!(
        by_name["MeshhubClusterNotSynced"]["labels"]["severity"],
        "critical"
    );
    assert_eq!(
        by_name["MeshhubClusterNacking"]["labels"]["severity"],
        "warning"
    );
    for (name, r) in &by_name {
        assert_eq!(r["labels"]["team"], "mesh", "{name}");
        let expr = r["expr"].as_str().unwrap();
        assert!(
            expr.contains("job=\"hub\"") && !expr.contains("job=\"meshhub\""),
            "{name}: {expr}"
        );
    }
    let maps = rendered(
        &[
            "--set",
            "dashboards.enabled=true",
            "--set",
            "dashboards.namespace=monitoring",
            "--set",
            "dashboards.label=dashboards",
            "--set",
            "dashboards.labelValue=meshhub",
            "--set",
            "dashboards.annotations.grafana_folder=meshhub",
        ],
        "ConfigMap",
    );
    let fleet = &maps["meshhub-dashboard-fleet"];
    assert_eq!(fleet["metadata"]["namespace"], "monitoring");
    assert_eq!(fleet["metadata"]["labels"]["dashboards"], "meshhub");
    assert_eq!(
        fleet["metadata"]["annotations"]["grafana_folder"],
        "meshhub"
    );

    // Settings that name no alert, or a threshold an alert lacks, fail.
    for (settings, says) in [
        (
            json!({"MeshhubNope": {"for": "1m"}}),
            "MeshhubNope: no such alert",
        ),
        (
            json!({"MeshhubDown": {"threshold": 3}}),
            "MeshhubDown.threshold: this alert has no threshold",
        ),
        (
            json!({"MeshhubCertificateExpiring": {"threshold": "3d"}}),
            "is not a number",
        ),
    ] {
        let err = tokio::task::block_in_place(|| {
            template(
                "meshhub",
                "meshhub",
                "meshhub",
                &[
                    "--set",
                    "prometheusRule.enabled=true",
                    "--set-json",
                    &format!("prometheusRule.alerts={settings}"),
                ],
            )
        })
        .unwrap_err();
        assert!(err.contains(says), "{settings}: {err}");
    }
}
