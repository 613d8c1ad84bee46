//! Differential validation of the Gateway API kinds (issue 39, item 2):
//! for every object of a corpus, meshhub's verdict (its admission webhook
//! and its file source, given the CRDs as the hub's `validation.crds`)
//! against a real kube-apiserver's with the same CRDs (a server-side dry
//! run with strict field validation), once per release channel: the
//! standard CRDs and the experimental ones, read from the Gateway API
//! module in the Go module cache (the release Istio 1.31 builds against).
//!
//! istiod's validating webhook selects only Istio's API groups, so for a
//! Gateway API object the API server is the whole verdict before istiod's
//! controller reads it (its conditions are issue 39's items 3 and 4).
//!
//! The corpus: the module's examples and its invalid examples
//! (`hack/invalid-examples`, each one an object the CRDs refuse), the
//! hand-written objects of `e2e/tests/parity-gateway-api/`, and seeded
//! mutants of every object the API server accepts (leaf values replaced,
//! keys removed, values at the limits of the CRDs' own schemas:
//! `MESHHUB_GATEWAY_PARITY_MUTANTS` and `…_SCHEMA_MUTANTS`, default 3000
//! each, seed `MESHHUB_PARITY_SEED`, default 26). The test prints the
//! agreement table and every disagreement, and fails on any.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use meshhub_e2e::gateway_api::{crd_files, module_dir};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::parity::corpus::Corpus;
use meshhub_e2e::parity::mutate::mutants;
use meshhub_e2e::parity::schema_mutants::{SpecSchemas, schema_mutants};
use meshhub_e2e::parity::{ApiServer, Case, CrdIndex, Meshhub, Outcome, Row, Table};
use meshhub_e2e::turn;
use meshhub_validate::{CrdSchemas, Validator};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Requests in flight.
const CONCURRENCY: usize = 12;

fn env_number(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The API server's and meshhub's verdicts on every case.
async fn judge_all(cases: Vec<Case>, api: &ApiServer, meshhub: &Meshhub) -> Vec<Row> {
    let limit = Arc::new(Semaphore::new(CONCURRENCY));
    let mut tasks = JoinSet::new();
    for (i, case) in cases.into_iter().enumerate() {
        let (api, meshhub, limit) = (api.clone(), meshhub.clone(), limit.clone());
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await.expect("semaphore");
            let a = api.judge(&case).await;
            let row = Row {
                webhook: meshhub.webhook(&case),
                file: meshhub.file(&case),
                api: a,
                // istiod's webhook does not select the Gateway API groups.
                istiod: Outcome::Accepted,
                case,
            };
            (i, row)
        });
    }
    let mut rows: Vec<(usize, Row)> = tasks.join_all().await;
    rows.sort_by_key(|(i, _)| *i);
    rows.into_iter().map(|(_, r)| r).collect()
}

/// The objects of `channel`'s kinds that meshhub carries.
fn corpus(channel: &str, crds: CrdIndex) -> Corpus {
    let module = module_dir();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut corpus = Corpus::new(crds);
    let mut sources: Vec<(&str, PathBuf)> = vec![
        ("hand-written", root.join("tests/parity-gateway-api")),
        ("examples", module.join("examples/standard")),
        (
            "invalid-examples",
            module.join("hack/invalid-examples/standard"),
        ),
    ];
    if channel == "experimental" {
        sources.push(("examples", module.join("examples/experimental")));
        sources.push((
            "invalid-examples",
            module.join("hack/invalid-examples/experimental"),
        ));
    }
    for (family, dir) in sources {
        let added = corpus.add_dir(family, &dir);
        eprintln!("parity[{channel}]: {added} objects from {}", dir.display());
    }
    corpus
        .cases
        .retain(|c| meshhub_proto::kinds::gateway_api::find(c.group(), c.kind()).is_some());
    corpus
}

/// Judges `channel`'s corpus and mutants on cluster `cluster` of
/// `planes`; returns the rows.
async fn run_channel(planes: &ControlPlanes, cluster: &str, channel: &str) -> Vec<Row> {
    let files = crd_files(channel);
    let text: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect::<Vec<_>>()
        .join("\n---\n");
    let index = CrdIndex::read(&text);
    let corpus = corpus(channel, index.clone());
    assert!(
        corpus.cases.len() >= 60,
        "only {} Gateway API objects in the {channel} corpus",
        corpus.cases.len()
    );
    meshhub_e2e::gateway_api::install(planes, cluster, channel).await;
    for ns in &corpus.namespaces() {
        planes.namespace(cluster, ns).await;
    }
    let schemas = CrdSchemas::load(&files).expect("meshhub reads the Gateway API CRDs");
    for n in schemas.not_evaluated() {
        eprintln!(
            "parity[{channel}]: rule not evaluated: {} {} {:?}: {}",
            n.label(),
            n.schema_path,
            n.rule,
            n.reason
        );
    }
    let meshhub = Meshhub::new(Validator::new(schemas));
    let api = ApiServer::new(planes.client(cluster).await, Arc::new(index));

    let started = Instant::now();
    let mut rows = judge_all(corpus.cases.clone(), &api, &meshhub).await;
    let bases: Vec<Case> = rows
        .iter()
        .filter(|r| r.api.accepted())
        .map(|r| r.case.clone())
        .collect();
    let seed = env_number("MESHHUB_PARITY_SEED", 26);
    let count = env_number("MESHHUB_GATEWAY_PARITY_MUTANTS", 3000) as usize;
    let schema_count = env_number("MESHHUB_GATEWAY_PARITY_SCHEMA_MUTANTS", 3000) as usize;
    let mut generated = mutants(&bases, count, seed);
    generated.extend(schema_mutants(
        &bases,
        &SpecSchemas::read(&text),
        schema_count,
        seed,
    ));
    rows.extend(judge_all(generated, &api, &meshhub).await);
    eprintln!(
        "parity[{channel}]: judged {} cases ({} base objects, {} of them valid; {count} mutants and {schema_count} schema-directed mutants, seed {seed}) in {:.1}s",
        rows.len(),
        corpus.cases.len(),
        bases.len(),
        started.elapsed().as_secs_f64()
    );
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn meshhub_refuses_exactly_what_the_api_server_refuses_of_the_gateway_api() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start_bare(&["standard", "experimental"]).await;
    let mut failures = Vec::new();
    for channel in ["standard", "experimental"] {
        let rows = run_channel(&planes, channel, channel).await;
        let table = Table::new(&rows, &[]);
        let (cases, agree) = table.totals();
        eprintln!("\n[{channel}]\n{}", table.render());
        eprintln!("disagreements:\n{}", table.render_disagreements());
        eprintln!(
            "parity[{channel}]: {agree} of {cases} cases agree ({:.2} %)",
            100.0 * agree as f64 / cases as f64
        );
        let splits = table.splits().len();
        let unexplained = table.unexplained().len();
        if splits > 0 || unexplained > 0 {
            failures.push(format!(
                "{channel}: {unexplained} disagreements with the API server, {splits} cases where meshhub's webhook and file source disagree (listed above)"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("; "));
}
