//! Istio's own analyzer test data through meshhub's analysis, for the codes
//! both have: the same objects are reported with the same codes.
//!
//! The data is read at test time from Istio's Go module (the version the
//! project builds istiod from; `e2e/peers/istio.sh` downloads it), never
//! copied: `MESHHUB_ISTIO_SRC` names the module directory, otherwise
//! `e2e/peers/istio.sh module` downloads it into the Go module cache (when
//! missing) and prints it. Only a machine without Go skips the test, saying
//! so.

use std::collections::BTreeSet;
use std::path::PathBuf;

use meshhub_analyze::{Facts, analyze};
use meshhub_proto::object::Object;
use serde_json::Value;

/// Istio 1.28's module directory; `None` only where Go is missing.
fn istio_module() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("MESHHUB_ISTIO_SRC").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let go = std::process::Command::new("go").arg("version").output();
    if !go.is_ok_and(|o| o.status.success()) {
        return None;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../e2e/peers/istio.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg("module")
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("can't run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} module failed ({}): it downloads Istio's module from the Go module proxy",
        script.display(),
        out.status
    );
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(dir.is_dir(), "Istio's module is not at {}", dir.display());
    Some(dir)
}

/// One case of Istio's `analyzers_test.go` testGrid: the file, the codes
/// its analyzer raises, and the objects Istio expects them for (`Kind
/// ns/name`; Istio leaves the namespace out where the file does, meshhub
/// serves such objects in `default`).
struct Case {
    file: &'static str,
    codes: &'static [&'static str],
    expected: &'static [(&'static str, &'static str)],
}

const CASES: &[Case] = &[
    Case {
        file: "conflicting-gateways.yaml",
        codes: &["IST0145"],
        expected: &[
            ("IST0145", "Gateway default/alpha"),
            ("IST0145", "Gateway default/beta"),
        ],
    },
    Case {
        file: "gateway-different-port.yaml",
        codes: &["IST0145"],
        expected: &[],
    },
    Case {
        file: "conflicting-gateways-multiple-ports.yaml",
        codes: &["IST0145"],
        expected: &[
            ("IST0145", "Gateway default/alpha"),
            ("IST0145", "Gateway default/beta"),
        ],
    },
    Case {
        file: "gateway-duplicate-certificate.yaml",
        codes: &["IST0138"],
        expected: &[
            ("IST0138", "Gateway istio-system/gateway-01-test-01"),
            ("IST0138", "Gateway istio-system/gateway-02-test-01"),
            ("IST0138", "Gateway istio-system/gateway-01-test-02"),
            ("IST0138", "Gateway default/gateway-01-test-03"),
        ],
    },
    Case {
        file: "sidecar-default-selector.yaml",
        codes: &["IST0111"],
        expected: &[
            ("IST0111", "Sidecar ns2/has-conflict-2"),
            ("IST0111", "Sidecar ns2/has-conflict-1"),
        ],
    },
    Case {
        file: "telemetry-default-selector.yaml",
        codes: &["IST0160"],
        expected: &[
            ("IST0160", "Telemetry ns2/has-conflict-2"),
            ("IST0160", "Telemetry ns2/has-conflict-1"),
        ],
    },
    Case {
        file: "virtualservice_conflictingmeshgatewayhosts.yaml",
        codes: &["IST0109"],
        expected: &[
            ("IST0109", "VirtualService team3/ratings"),
            ("IST0109", "VirtualService team4/ratings"),
            ("IST0109", "VirtualService foo/ratings"),
            ("IST0109", "VirtualService bar/ratings"),
            ("IST0109", "VirtualService foo/productpage"),
            ("IST0109", "VirtualService foo/bogus-productpage"),
            ("IST0109", "VirtualService team2/ratings"),
        ],
    },
    Case {
        file: "virtualservice_conflictingmeshgatewayhosts_with_exportto.yaml",
        codes: &["IST0109"],
        expected: &[
            ("IST0109", "VirtualService foo/productpage"),
            ("IST0109", "VirtualService bar/productpage"),
            ("IST0109", "VirtualService foo/productpage-c"),
            ("IST0109", "VirtualService bar/productpage-c"),
            ("IST0109", "VirtualService foo/productpage-d"),
            ("IST0109", "VirtualService bar/productpage-d"),
        ],
    },
    Case {
        file: "virtualservice_destinationrules.yaml",
        codes: &["IST0101"],
        expected: &[
            ("IST0101", "VirtualService default/reviews-bogussubset"),
            (
                "IST0101",
                "VirtualService default/reviews-mirror-bogussubset",
            ),
        ],
    },
    Case {
        file: "virtualservice_gateways.yaml",
        codes: &["IST0101", "IST0132"],
        expected: &[
            ("IST0101", "VirtualService default/httpbin-bogus"),
            ("IST0132", "VirtualService default/cross-test"),
            ("IST0132", "VirtualService default/httpbin-bogus"),
            ("IST0132", "VirtualService default/httpbin"),
        ],
    },
];

fn facts(text: &str) -> Vec<Facts> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("Istio's test data parses");
    docs.into_iter()
        .filter(|d| d.is_object())
        .filter_map(|d| serde_json::from_value::<Object>(d).ok())
        .filter_map(|o| Facts::of(&o))
        .collect()
}

#[test]
fn istio_analyzer_testdata_gives_the_same_codes_for_the_same_objects() {
    let Some(module) = istio_module() else {
        eprintln!(
            "skipped: no Go toolchain to download Istio's module with (install Go, or set MESHHUB_ISTIO_SRC)"
        );
        return;
    };
    let dir = module.join("pkg/config/analysis/analyzers/testdata");
    let mut failures = Vec::new();
    for case in CASES {
        let path = dir.join(case.file);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let got: BTreeSet<(String, String)> = analyze(&facts(&text))
            .into_iter()
            .filter(|m| case.codes.contains(&m.code.code))
            .map(|m| (m.code.code.to_owned(), m.object()))
            .collect();
        let want: BTreeSet<(String, String)> = case
            .expected
            .iter()
            .map(|(c, o)| ((*c).to_owned(), (*o).to_owned()))
            .collect();
        if got != want {
            failures.push(format!(
                "{}:\n  only meshhub: {:?}\n  only Istio:   {:?}",
                case.file,
                got.difference(&want).collect::<Vec<_>>(),
                want.difference(&got).collect::<Vec<_>>()
            ));
        }
    }
    eprintln!(
        "{} of {} Istio analyzer cases agree",
        CASES.len() - failures.len(),
        CASES.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
