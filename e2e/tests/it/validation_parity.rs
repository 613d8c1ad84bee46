//! Differential validation: for every object of a corpus, meshhub's verdict
//! (its admission webhook and its file source, which must agree with each
//! other) against Istio's, where Istio's is "a real kube-apiserver with the
//! CRDs of the Istio release istiod is built from accepts a server-side dry
//! run with strict field validation, and that real istiod's validating
//! webhook accepts it".
//!
//! It runs for two Istio lines, one test each, sharing [`parity`]: Istio
//! 1.28.3 (its module's CRDs, istiod 1.28.3) and the newest Istio the
//! module proxy serves (master of 2026-08-27: its module's
//! `crd-all.gen.yaml`, its istiod; `e2e/peers/istio.sh istiod-newest`).
//! meshhub has one verdict, for the API it speaks (istio.io/api v1.32.0),
//! judged against both lines.
//!
//! The corpus: the shared fixtures, the line's own Istio validation and
//! analyzer test data (read from its Go module at test time), hand-written
//! objects per rule family (`e2e/tests/parity/<family>.yaml`; `newest.yaml`
//! uses what Istio added after 1.28), and seeded mutants of every object
//! the line accepts: leaf values replaced and keys removed
//! (`MESHHUB_PARITY_MUTANTS`, default 6000) and values at the limits of the
//! line's CRD schemas (`MESHHUB_PARITY_SCHEMA_MUTANTS`, default 4000), from
//! one seed (`MESHHUB_PARITY_SEED`, default 26).
//!
//! What a line is asked: only objects of kinds its CRDs serve, and only
//! objects using nothing newer than its CRDs know by meshhub's since-table
//! (`analyze/src/since.tsv`, [`LineKnows`]: per kind, the newest minor
//! whose additions the line's CRDs all hold). On the 1.28.3 line an object
//! with `http2KeepAlive` (1.31), a `warmup.aggression` of 0.5 (a value row:
//! accepted from 1.31) or the condition key `source.trustDomain` (1.30) is
//! therefore not compared; on the newest line (whose CRDs stop at 1.31: no
//! `backendUtilization`, Gateway `alpnProtocols`, RequestAuthentication
//! `presence`, …) an object with a 1.32 field is not either. Those objects
//! are still sent to the line, and the test fails if the line accepts one
//! (the since-table would be wrong about it): "not compared" means "the
//! line refuses it", which is what meshhub's MH0002 check warns about, not
//! a validation rule. This is how the table's value rows, which no CRD
//! states, are checked.
//!
//! Per line the test prints the agreement table (per family and kind) and
//! every disagreement, and fails on a disagreement not listed in
//! [`ACCEPTED`] or the line's own list (each documented in
//! docs/validation.md) or on any case where meshhub's webhook and file
//! source disagree.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use meshhub_analyze::IstioVersion;
use meshhub_e2e::istio::{
    ConfigSource, Istiod, istio_module_dir, istio_newest_module_dir, istiod_bin, istiod_newest_bin,
};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::parity::corpus::Corpus;
use meshhub_e2e::parity::line::show_needs;
use meshhub_e2e::parity::mutate::mutants;
use meshhub_e2e::parity::schema_mutants::{SpecSchemas, schema_mutants};
use meshhub_e2e::parity::{
    ApiServer, Case, CrdIndex, Direction, Disagreement, IstiodWebhook, LineKnows, Meshhub, Row,
    Table,
};
use meshhub_e2e::turn;
use meshhub_testkit::DEADLINE;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Requests in flight per judge.
const CONCURRENCY: usize = 12;

/// Differences kept on purpose on every line (docs/validation.md,
/// "Accepted differences").
const ACCEPTED: &[Disagreement] = &[Disagreement {
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
}];

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

/// An Istio line: a release's CRDs and its istiod.
struct Line {
    /// `1.28.3`, `newest`.
    name: &'static str,
    /// Its `pilot-discovery`.
    istiod: &'static Path,
    /// Its Go module (CRDs and test data).
    module: PathBuf,
    /// Differences kept on purpose on this line only (besides [`ACCEPTED`]).
    accepted: &'static [Disagreement],
}

#[tokio::test(flavor = "multi_thread")]
async fn meshhub_refuses_exactly_what_istio_1_28_refuses() {
    let _turn = turn(module_path!());
    parity(Line {
        name: "1.28.3",
        istiod: istiod_bin(),
        module: istio_module_dir(),
        accepted: ISTIO_1_28_ACCEPTED,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn meshhub_refuses_exactly_what_the_newest_istio_refuses() {
    let _turn = turn(module_path!());
    parity(Line {
        name: "newest",
        istiod: istiod_newest_bin(),
        module: istio_newest_module_dir(),
        accepted: NEWEST_ACCEPTED,
    })
    .await;
}

/// Differences kept on purpose on the newest line only (besides
/// [`ACCEPTED`]): none. A rule Istio relaxed after 1.28.3 on a field
/// 1.28.3 already had (`warmup.aggression` below 1) is the newest's in
/// meshhub, and a value row of the since-table keeps such objects off the
/// 1.28.3 line (which must refuse them) and raises MH0002 for older
/// clusters.
const NEWEST_ACCEPTED: &[Disagreement] = &[];

/// Differences kept on purpose on the 1.28.3 line only: rules that became
/// stricter after 1.28.3, where meshhub's one verdict follows the newer.
const ISTIO_1_28_ACCEPTED: &[Disagreement] = &[Disagreement {
    name: "go-url-strict-colons",
    direction: Direction::FalseReject,
    covers: |r| meshhub_refuses_only_for(r, "an http(s) host with more than one ':'"),
    reason: "a Wasm module URL whose http(s) host holds more than one ':' (\"::1\"): Go 1.26's net/url \
         refuses it (go.dev/issue/75223) and so does the newest istiod, built with Go 1.26 semantics; \
         istiod 1.28.3 (Go 1.24 semantics) accepts it. meshhub follows the stricter parser",
}];

/// Whether meshhub's webhook refuses `r` for exactly one problem, the one
/// whose `path: message` contains `what` (its message is `Kind ns/name:
/// path: message`, further problems joined by `; `).
fn meshhub_refuses_only_for(r: &Row, what: &str) -> bool {
    let m = r.webhook.message();
    m.contains(what) && !m.contains("; ")
}

/// The corpus of `line` before mutants: objects of the kinds its CRDs
/// serve.
fn base_corpus(line: &Line, crds: CrdIndex) -> Corpus {
    let mut corpus = Corpus::new(crds);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = root.join("../../shared/fixtures/istio");
    let mut families: Vec<_> = std::fs::read_dir(root.join("tests/parity"))
        .expect("e2e/tests/parity")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    families.sort();
    for f in &families {
        let family = f.file_stem().unwrap().to_string_lossy().into_owned();
        let added = corpus.add_file(&family, f, &format!("{family}.yaml"));
        eprintln!(
            "parity[{}]: {added} objects from {}",
            line.name,
            f.display()
        );
    }
    for (family, dir) in [
        ("fixtures", shared.join("bookinfo")),
        ("fixtures", shared.join("validation")),
        (
            "istio-crd-testdata",
            line.module.join("pkg/config/validation/testdata/crds"),
        ),
        (
            "istio-analyzer-testdata",
            line.module.join("pkg/config/analysis/analyzers/testdata"),
        ),
    ] {
        let added = corpus.add_dir(family, &dir);
        eprintln!(
            "parity[{}]: {added} objects from {}",
            line.name,
            dir.display()
        );
    }
    corpus
}

/// Judges the corpus of `line` with its API server and istiod, prints its
/// agreement table and fails on what is unexplained.
async fn parity(line: Line) {
    let name = line.name;
    let crd_file = line
        .module
        .join("manifests/charts/base/files/crd-all.gen.yaml");
    let crd_text = std::fs::read_to_string(&crd_file)
        .unwrap_or_else(|e| panic!("{}: {e}", crd_file.display()));
    let crds = CrdIndex::read(&crd_text);
    assert!(
        crds.len() >= 14,
        "{} holds {} kinds",
        crd_file.display(),
        crds.len()
    );
    // Its release, from the module's VERSION (`1.28`): the CRDs tell per
    // kind what the line's API server knows; what its istiod's validation
    // accepts (a value row) goes by its release.
    let version_file = line.module.join("VERSION");
    let release = std::fs::read_to_string(&version_file)
        .ok()
        .and_then(|v| IstioVersion::parse(&v).ok())
        .unwrap_or_else(|| panic!("{}: no Istio version", version_file.display()));
    let knows = LineKnows::read(&crd_text).at_most(release.minor);
    eprintln!(
        "parity[{name}]: Istio {release}; its CRDs know, per kind (since-table minors, at most its release's): {}",
        knows
            .kinds()
            .map(|(k, m)| format!("{k} 1.{m}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let corpus = base_corpus(&line, crds.clone());

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
        line.istiod,
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
                "istiod {name}'s /validate does not answer: {e}\n{}",
                meshhub_e2e::istio::tail(&istiod.proc.stderr(), 30)
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // Objects using what the line does not know: sent to it, never
    // compared; the line must refuse each (else the since-table is wrong).
    let (cases, beyond) = knows.partition(corpus.cases);
    let beyond_rows = judge_all(beyond, &api, &webhook, &meshhub, 1).await;
    let known_to_line: Vec<String> = beyond_rows
        .iter()
        .filter(|r| r.istio_accepts())
        .map(|r| {
            format!(
                "{} {}/{} ({}) uses {}",
                r.case.kind(),
                r.case.namespace(),
                r.case.name(),
                r.case.label,
                show_needs(&knows.beyond(&r.case))
            )
        })
        .collect();
    eprintln!(
        "parity[{name}]: {} objects use what this line does not know (not compared); it refused {} of them, meshhub accepted {}",
        beyond_rows.len(),
        beyond_rows.len() - known_to_line.len(),
        beyond_rows.iter().filter(|r| r.webhook.accepted()).count()
    );
    assert!(
        known_to_line.is_empty(),
        "Istio {name} accepts objects the since-table says it does not know:\n{}",
        known_to_line.join("\n")
    );

    let started = Instant::now();
    let first_uid = beyond_rows.len() + 1;
    let base_count = cases.len();
    let mut rows = judge_all(cases, &api, &webhook, &meshhub, first_uid).await;
    let bases: Vec<Case> = rows
        .iter()
        .filter(|r| r.istio_accepts())
        .map(|r| r.case.clone())
        .collect();
    let count = env_number("MESHHUB_PARITY_MUTANTS", 6000) as usize;
    let seed = env_number("MESHHUB_PARITY_SEED", 26);
    let mut generated = mutants(&bases, count, seed);
    let schema_count = env_number("MESHHUB_PARITY_SCHEMA_MUTANTS", 4000) as usize;
    let schemas = SpecSchemas::read(&crd_text);
    generated.extend(schema_mutants(&bases, &schemas, schema_count, seed));
    let (generated, generated_beyond) = knows.partition(generated);
    rows.extend(judge_all(generated, &api, &webhook, &meshhub, first_uid + base_count).await);
    eprintln!(
        "parity[{name}]: judged {} cases ({base_count} base objects, {} of them valid in Istio {name}; {count} mutants and {schema_count} schema-directed mutants, seed {seed}, {} of them beyond the line) in {:.1}s",
        rows.len(),
        bases.len(),
        generated_beyond.len(),
        started.elapsed().as_secs_f64()
    );

    let accepted: Vec<Disagreement> = ACCEPTED.iter().chain(line.accepted).copied().collect();
    let table = Table::new(&rows, &accepted);
    let (total, agree) = table.totals();
    eprintln!("\nparity[{name}]:\n{}", table.render());
    eprintln!(
        "parity[{name}] disagreements:\n{}",
        table.render_disagreements()
    );
    eprintln!(
        "parity[{name}]: {agree} of {total} cases agree ({:.2} %)",
        100.0 * agree as f64 / total as f64
    );
    for a in &accepted {
        let n = rows
            .iter()
            .filter(|r| table.accepted_for(r).is_some_and(|x| x.name == a.name))
            .count();
        eprintln!(
            "parity[{name}]: accepted difference {:?} ({n} cases): {}",
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
        "{} disagreements with Istio {name} ({false_rejects} false rejects, {} false accepts), listed above",
        unexplained.len(),
        unexplained.len() - false_rejects
    );
}
