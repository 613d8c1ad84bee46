//! The incremental pipeline against a build from nothing: after any
//! sequence of file changes, rule reloads and reports of what each cluster
//! can take (Gateway API CRDs), every group's build, the analysis of it
//! and the withheld rows equal those of a fresh pipeline given the same
//! files, rules and reports.

use std::collections::BTreeMap;

use meshhub_api::upward::{ClusterReportView, GatewayApiCrdView, GatewayApiCrdsView};
use proptest::prelude::*;

use super::*;
use crate::analysis::AnalysisSpec;
use crate::upward::{ClusterReport, Reports};

const CLUSTERS: [&str; 3] = ["east", "west", "south"];
const NAMESPACES: [&str; 2] = ["bookinfo", "shop"];

/// One step of the sequence.
#[derive(Clone, Debug)]
enum Op {
    /// Writes file `n` with object variant `v`.
    Write(u8, u8),
    /// Removes file `n`.
    Remove(u8),
    /// Replaces the rules: per cluster, absent or one selector variant.
    Rules([Option<u8>; 3]),
    /// Replaces the reports: per cluster, no report, every CRD, the CRDs
    /// without HTTPRoute's, or every CRD and the Services `svc0`–`svc2`
    /// of both namespaces (analysis judges route backends by them).
    Reports([u8; 3]),
    /// Publishes (the debouncer's deadline).
    Publish,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..8, 0u8..14).prop_map(|(n, v)| Op::Write(n, v)),
        2 => (0u8..8).prop_map(Op::Remove),
        1 => proptest::array::uniform3(proptest::option::of(0u8..4)).prop_map(Op::Rules),
        2 => proptest::array::uniform3(0u8..4).prop_map(Op::Reports),
        3 => Just(Op::Publish),
    ]
}

/// The text of file `n`, variant `v`: VirtualServices in either namespace
/// with or without a region label, bound to a Gateway that may be missing
/// (analysis reports it), Gateways, HTTPRoutes (withheld where the CRD
/// lacks), an object naming its clusters, and a broken document.
fn text(n: u8, v: u8) -> String {
    let ns = NAMESPACES[usize::from(v % 2)];
    let name = format!("obj-{n}");
    match v % 7 {
        0 | 1 => format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\n{}spec:\n  hosts: [h{}.example.com]\n  gateways: [gw-{}]\n  http:\n  - route:\n    - destination: {{host: svc{v}}}\n",
            if v % 4 < 2 {
                "  labels: {region: west}\n"
            } else {
                ""
            },
            v % 3,
            v % 2,
        ),
        2 => format!(
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw-{}\n  namespace: {ns}\nspec:\n  selector: {{istio: ingressgateway}}\n  servers:\n  - port: {{number: 80, name: http, protocol: HTTP}}\n    hosts: [h{}.example.com]\n",
            n % 2,
            v % 3,
        ),
        3 | 4 => format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  parentRefs: [{{name: web}}]\n  rules:\n  - backendRefs: [{{name: svc{v}, port: 80}}]\n"
        ),
        5 => format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations: {{meshhub.io/clusters: \"{}\"}}\nspec:\n  host: svc{v}\n",
            CLUSTERS[usize::from(v % 3)],
        ),
        _ => format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}\n"
        ),
    }
}

fn rules(of: &[Option<u8>; 3]) -> GroupRules {
    let specs: Vec<ClusterSpec> = CLUSTERS
        .iter()
        .zip(of)
        .filter_map(|(c, s)| {
            let selector = match (*s)? {
                0 => Selector::default(),
                1 => Selector {
                    namespaces: ["bookinfo".to_owned()].into(),
                    ..Selector::default()
                },
                2 => Selector {
                    labels: [("region".to_owned(), "west".to_owned())].into(),
                    ..Selector::default()
                },
                _ => Selector {
                    namespaces: ["shop".to_owned()].into(),
                    labels: [("region".to_owned(), "west".to_owned())].into(),
                },
            };
            Some(ClusterSpec {
                name: (*c).into(),
                selector,
            })
        })
        .collect();
    GroupRules::new(&specs)
}

fn report(kind: u8) -> Option<Arc<ClusterReport>> {
    let kinds: &[&str] = match kind {
        0 => return None,
        1 | 3 => &["Gateway", "HTTPRoute", "GRPCRoute", "ReferenceGrant"],
        _ => &["Gateway", "GRPCRoute", "ReferenceGrant"],
    };
    let services = (kind == 3).then(|| {
        Arc::new(meshhub_analyze::Services::new(
            NAMESPACES
                .iter()
                .flat_map(|ns| (0..3).map(move |i| ((*ns).to_owned(), format!("svc{i}")))),
            true,
        ))
    });
    Some(Arc::new(ClusterReport {
        view: ClusterReportView {
            gateway_api: Some(GatewayApiCrdsView {
                crds: kinds
                    .iter()
                    .map(|k| GatewayApiCrdView {
                        name: format!("{}s.gateway.networking.k8s.io", k.to_lowercase()),
                        group: "gateway.networking.k8s.io".into(),
                        kind: (*k).into(),
                        served_versions: vec!["v1".into()],
                        ..Default::default()
                    })
                    .collect(),
                error: String::new(),
            }),
            ..Default::default()
        },
        services,
        ..Default::default()
    }))
}

fn reports(of: &[u8; 3]) -> Reports {
    Arc::new(
        CLUSTERS
            .iter()
            .zip(of)
            .filter_map(|(c, k)| Some(((*c).to_owned(), report(*k)?)))
            .collect(),
    )
}

/// A pipeline, with analysis on (run inline: no background task) or off.
fn pipeline(rules: &GroupRules, analysing: bool) -> (Pipeline, SnapshotCache) {
    let (store, writer, cache) = store_of(rules);
    let (p, _status) = Pipeline::new(
        store,
        writer,
        rules.clone(),
        settings(),
        ["files".to_owned()],
    );
    let p = p.analyse(AnalysisSpec {
        enabled: analysing,
        ..AnalysisSpec::default()
    });
    (p, cache)
}

fn give_reports(p: &mut Pipeline, r: &Reports) {
    let (tx, rx) = watch::channel(r.clone());
    let mut rx = Some(rx);
    tx.send_replace(r.clone());
    p.on_istio(&mut rx, true);
}

/// A snapshot's non-empty collections: names and versions.
type Rendered = Vec<(String, Vec<(String, String)>)>;

/// What is compared of a pipeline: every group's build, what the cache
/// serves each group of the rules, its analysis messages, the withheld
/// rows.
type Seen = (
    BTreeMap<String, Rendered>,
    BTreeMap<String, Option<Rendered>>,
    BTreeMap<String, Vec<String>>,
    Vec<String>,
);

fn render(s: &Snapshot) -> Rendered {
    s.collections()
        .filter(|(_, c)| !c.is_empty())
        .map(|(n, c)| {
            let keys = c
                .keys()
                .iter()
                .map(|k| (k.name.to_string(), k.version.to_string()))
                .collect();
            (n.to_owned(), keys)
        })
        .collect()
}

fn seen(p: &mut Pipeline, cache: &SnapshotCache) -> Seen {
    let builds = p
        .published
        .iter()
        .map(|(g, s)| (g.to_string(), render(s)))
        .collect();
    let served = p
        .rules
        .groups()
        .iter()
        .map(|g| (g.to_string(), cache.snapshot(g).map(|s| render(&s))))
        .collect();
    let analysis = p
        .analysis
        .view()
        .iter()
        .map(|a| {
            let mut m: Vec<String> = a
                .messages
                .iter()
                .map(|m| format!("{} {} {} {}", m.code, m.origin, m.path, m.message))
                .collect();
            m.sort();
            (a.cluster.clone(), m)
        })
        .collect();
    let status = p.status.borrow().clone();
    let withheld = status
        .withheld
        .iter()
        .map(|w| format!("{} {} {} {}", w.cluster, w.collection, w.objects, w.reason))
        .collect();
    (builds, served, analysis, withheld)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_incremental_pipeline_equals_one_built_from_nothing(ops in proptest::collection::vec(op(), 1..40),
        analysing in any::<bool>(),) {
        let mut files: BTreeMap<u8, String> = BTreeMap::new();
        let mut rule_of = [Some(0), Some(1), Some(2)];
        let mut report_of = [0u8; 3];
        let (mut p, cache) = pipeline(&rules(&rule_of), analysing);
        p.on_event(synced());
        for op in ops.iter().chain(std::iter::once(&Op::Publish)) {
            match op {
                Op::Write(n, v) => {
                    let t = text(*n, *v);
                    p.on_event(file(&format!("f{n}.yaml"), &t));
                    files.insert(*n, t);
                }
                Op::Remove(n) => {
                    files.remove(n);
                    p.on_event(SourceEvent::Unit {
                        source: "files".into(),
                        unit: format!("f{n}.yaml").into(),
                        entries: Vec::new(),
                    });
                }
                Op::Rules(r) => {
                    rule_of = *r;
                    p.set_rules(rules(&rule_of));
                }
                Op::Reports(r) => {
                    report_of = *r;
                    give_reports(&mut p, &reports(&report_of));
                }
                Op::Publish => {
                    p.publish(Instant::now());
                    let (mut fresh, fresh_cache) = pipeline(&rules(&rule_of), analysing);
                    give_reports(&mut fresh, &reports(&report_of));
                    for (n, t) in &files {
                        fresh.on_event(file(&format!("f{n}.yaml"), t));
                    }
                    fresh.on_event(synced());
                    prop_assert_eq!(seen(&mut p, &cache), seen(&mut fresh, &fresh_cache), "after {:?}", op);
                }
            }
        }
    }
}
