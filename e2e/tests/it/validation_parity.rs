//! Differential validation: for every object of a corpus, meshhub's verdict
//! (its admission webhook and its file source, which must agree with each
//! other) against Istio's, where Istio's is "a real kube-apiserver with the
//! CRDs of the Istio release istiod is built from accepts a server-side dry
//! run with strict field validation, and a real istiod 1.28's validating
//! webhook accepts it".
//!
//! The corpus: the shared fixtures, Istio's own validation and analyzer
//! test data (read from its Go module at test time), hand-written objects
//! per rule family (`e2e/tests/parity/<family>.yaml`), and seeded mutants
//! of every object Istio accepts: leaf values replaced and keys removed
//! (`MESHHUB_PARITY_MUTANTS`, default 6000) and values at the limits of the
//! CRDs' own schemas (`MESHHUB_PARITY_SCHEMA_MUTANTS`, default 4000), from
//! one seed (`MESHHUB_PARITY_SEED`, default 26). The test prints the agreement table
//! (per family and kind) and every disagreement, and fails on a
//! disagreement not listed in [`ACCEPTED`] (each documented in
//! docs/validation.md) or on any case where meshhub's webhook and file
//! source disagree.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use meshhub_e2e::istio::{ConfigSource, Istiod, istio_module_dir, istiod_bin};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::parity::corpus::Corpus;
use meshhub_e2e::parity::mutate::mutants;
use meshhub_e2e::parity::schema_mutants::{SpecSchemas, schema_mutants};
use meshhub_e2e::parity::{
    ApiServer, Case, CrdIndex, Direction, Disagreement, IstiodWebhook, Meshhub, Row, Table,
};
use meshhub_e2e::turn;
use meshhub_testkit::DEADLINE;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Requests in flight per judge.
const CONCURRENCY: usize = 12;

/// Differences kept on purpose (docs/validation.md, "Accepted differences").
const ACCEPTED: &[Disagreement] = &[
    Disagreement {
        name: "crd-size-limits",
        direction: Direction::FalseAccept,
        covers: |r| {
            let m = r.api.message();
            r.istiod.accepted()
                && !m.is_empty()
                && (m.contains("Too many: ") || m.contains("Too long: may not be more than"))
        },
        reason: "the CRDs' size limits (maxItems, maxProperties, maxLength) are the API server's storage guards, \
             which istiod does not apply to what it reads over MCP; meshhub checks them only where a rule \
             needs them (label values, service accounts) and leaves the rest to the API server",
    },
    Disagreement {
        name: "istio-package-types",
        direction: Direction::FalseAccept,
        covers: |r| {
            r.api.accepted()
                && ["istio.", "stats.", "envoy.tcp.metadataexchange."]
                    .iter()
                    .any(|p| {
                        r.istiod
                            .message()
                            .contains(&format!("type.googleapis.com/{p}"))
                    })
        },
        reason: "an EnvoyFilter patch's Any of a type in one of Istio's own packages (istio.*, stats.*, \
             envoy.tcp.metadataexchange.*) is passed undecoded: meshhub holds Envoy's descriptors, \
             not those of istio.io/api, so an unknown type name there, or a wrong value for such a \
             type, passes meshhub and istiod drops the object",
    },
];

fn env_number(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Judges every case with the three judges, `CONCURRENCY` at a time.
async fn judge_all(
    cases: Vec<Case>,
    api: &ApiServer,
    istiod: &IstiodWebhook,
    meshhub: &Meshhub,
    first_uid: usize,
) -> Vec<Row> {
    let limit = Arc::new(Semaphore::new(CONCURRENCY));
    let mut tasks = JoinSet::new();
    for (i, case) in cases.into_iter().enumerate() {
        let (api, istiod, meshhub, limit) =
            (api.clone(), istiod.clone(), meshhub.clone(), limit.clone());
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await.expect("semaphore");
            let (a, b) = tokio::join!(api.judge(&case), istiod.judge(&case, first_uid + i));
            let row = Row {
                webhook: meshhub.webhook(&case),
                file: meshhub.file(&case),
                api: a,
                istiod: b,
                case,
            };
            (i, row)
        });
    }
    let mut rows: Vec<(usize, Row)> = tasks.join_all().await;
    rows.sort_by_key(|(i, _)| *i);
    rows.into_iter().map(|(_, r)| r).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn meshhub_refuses_exactly_what_istio_refuses() {
    let _turn = turn(module_path!());
    let bin = istiod_bin();
    let module = istio_module_dir();
    let crd_file = module.join("manifests/charts/base/files/crd-all.gen.yaml");
    let crds = CrdIndex::read(
        &std::fs::read_to_string(&crd_file)
            .unwrap_or_else(|e| panic!("{}: {e}", crd_file.display())),
    );
    assert!(
        crds.len() >= 14,
        "{} holds {} kinds",
        crd_file.display(),
        crds.len()
    );

    // The corpus before mutants.
    let mut corpus = Corpus::new(crds.clone());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = root.join("../../shared/fixtures/istio");
    let mut sources = vec![
        ("fixtures", shared.join("bookinfo")),
        ("fixtures", shared.join("validation")),
        (
            "istio-crd-testdata",
            module.join("pkg/config/validation/testdata/crds"),
        ),
        (
            "istio-analyzer-testdata",
            module.join("pkg/config/analysis/analyzers/testdata"),
        ),
    ];
    let mut families: Vec<_> = std::fs::read_dir(root.join("tests/parity"))
        .expect("e2e/tests/parity")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    families.sort();
    for f in &families {
        let family = f.file_stem().unwrap().to_string_lossy().into_owned();
        let added = corpus.add_file(&family, f, &format!("{family}.yaml"));
        eprintln!("parity: {added} objects from {}", f.display());
    }
    for (family, dir) in sources.drain(..) {
        let added = corpus.add_dir(family, &dir);
        eprintln!("parity: {added} objects from {}", dir.display());
    }

    let planes = ControlPlanes::start_bare(&["parity"]).await;
    planes.install_crds_file("parity", &crd_file, &[]).await;
    let mut namespaces = corpus.namespaces();
    namespaces.insert("istio-system".into());
    for ns in &namespaces {
        planes.namespace("parity", ns).await;
    }
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = planes.cluster("parity").kubeconfig.clone();
    let mut istiod = Istiod::spawn(
        "istiod-parity",
        bin,
        &kubeconfig,
        ConfigSource::Kubernetes,
        tmp.path(),
        tmp.path(),
    );
    tokio::task::block_in_place(|| istiod.wait_ready(meshhub_e2e::istio::ISTIOD_START));

    let crds = Arc::new(crds);
    let api = ApiServer::new(planes.client("parity").await, crds.clone());
    let webhook = IstiodWebhook::new(istiod.https, crds.clone());
    let meshhub = Meshhub::default();

    // istiod serves /validate once its certificate is issued.
    let probe = corpus.cases[0].clone();
    let start = Instant::now();
    loop {
        match webhook.try_judge(&probe, 0).await {
            Ok(_) => break,
            Err(e) => assert!(
                start.elapsed() < DEADLINE,
                "istiod's /validate does not answer: {e}\n{}",
                meshhub_e2e::istio::tail(&istiod.proc.stderr(), 30)
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    let started = Instant::now();
    let base_count = corpus.cases.len();
    let mut rows = judge_all(corpus.cases.clone(), &api, &webhook, &meshhub, 1).await;
    let bases: Vec<Case> = rows
        .iter()
        .filter(|r| r.istio_accepts())
        .map(|r| r.case.clone())
        .collect();
    let count = env_number("MESHHUB_PARITY_MUTANTS", 6000) as usize;
    let seed = env_number("MESHHUB_PARITY_SEED", 26);
    let mut generated = mutants(&bases, count, seed);
    let schema_count = env_number("MESHHUB_PARITY_SCHEMA_MUTANTS", 4000) as usize;
    let schemas = SpecSchemas::read(&std::fs::read_to_string(&crd_file).expect("CRDs"));
    generated.extend(schema_mutants(&bases, &schemas, schema_count, seed));
    rows.extend(judge_all(generated, &api, &webhook, &meshhub, base_count + 1).await);
    eprintln!(
        "parity: judged {} cases ({base_count} base objects, {} of them valid in Istio; {count} mutants and {schema_count} schema-directed mutants, seed {seed}) in {:.1}s",
        rows.len(),
        bases.len(),
        started.elapsed().as_secs_f64()
    );

    let table = Table::new(&rows, ACCEPTED);
    let (cases, agree) = table.totals();
    eprintln!("\n{}", table.render());
    eprintln!("disagreements:\n{}", table.render_disagreements());
    eprintln!(
        "parity: {agree} of {cases} cases agree ({:.2} %)",
        100.0 * agree as f64 / cases as f64
    );
    for a in ACCEPTED {
        let n = rows
            .iter()
            .filter(|r| table.accepted_for(r).is_some_and(|x| x.name == a.name))
            .count();
        eprintln!(
            "parity: accepted difference {:?} ({n} cases): {}",
            a.name, a.reason
        );
    }

    let splits = table.splits();
    assert!(
        splits.is_empty(),
        "meshhub's webhook and file source disagree on {} cases, e.g. {} (webhook: {:?}, file: {:?})",
        splits.len(),
        splits[0].case.label,
        splits[0].webhook,
        splits[0].file
    );
    let unexplained = table.unexplained();
    let false_rejects = unexplained
        .iter()
        .filter(|r| r.disagreement() == Some(Direction::FalseReject))
        .count();
    assert!(
        unexplained.is_empty(),
        "{} disagreements with Istio ({false_rejects} false rejects, {} false accepts), listed above",
        unexplained.len(),
        unexplained.len() - false_rejects
    );
}
