//! `meshhubctl validate` and `meshhubctl analyze` over files, no hub: exit
//! codes, per-object messages naming file and document, directories,
//! standard input, placement by a hub configuration's clusters.

use std::path::Path;
use std::process::Stdio;

use meshhub_testkit::within;
use serde_json::Value;
use tokio::io::AsyncWriteExt as _;

use crate::support::meshhubctl;

/// `meshhubctl args`: exit code, stdout, stderr.
async fn ctl(args: &[&str]) -> (i32, String, String) {
    let out = meshhubctl(args).await;
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `meshhubctl args` with `input` on standard input.
async fn ctl_stdin(args: &[&str], input: &str) -> (i32, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_meshhubctl"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = within("meshhubctl to finish", child.wait_with_output())
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

const GATEWAY: &str = "apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: bookinfo-gateway
  namespace: bookinfo
  annotations: {meshhub.io/clusters: east}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: [bookinfo.example.com]
";

const BOUND_VS: &str = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: bookinfo, namespace: bookinfo}
spec:
  hosts: [bookinfo.example.com]
  gateways: [bookinfo-gateway]
  http:
  - route:
    - destination: {host: productpage, port: {number: 9080}}
";

const HUB: &str = "sources:
  - name: files
    file: {path: .}
clusters:
  - name: east
    namespaces: [bookinfo]
  - name: west
    namespaces: [bookinfo]
    agent: {address: 'http://west-agent:9911'}
analysis:
  holdBack: [IST0101]
";

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
}

#[tokio::test]
async fn validate_names_each_bad_object_by_file_and_document_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "good/gateway.yaml", GATEWAY);
    write(
        dir.path(),
        "good/sub/vs.json",
        &serde_json::to_string(&serde_saphyr::from_str::<Value>(BOUND_VS).unwrap()).unwrap(),
    );
    let good = dir.path().join("good");
    let (code, out, err) = ctl(&["validate", "-f", good.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 object(s): 2 valid, 0 invalid"), "{out}");
    assert!(out.contains("vs.json"), "{out}");

    let bad = format!(
        "{GATEWAY}---\n{}---\n{}",
        BOUND_VS.replace("hosts: [bookinfo.example.com]\n  gateways", "gateways"),
        BOUND_VS
            .replace("name: bookinfo,", "name: weighted,")
            .replace("port: {number: 9080}", "port: {number: 9080}, bogus: 1")
    );
    write(dir.path(), "bad.yaml", &bad);
    let bad_path = dir.path().join("bad.yaml");
    let (code, out, _) = ctl(&[
        "validate",
        "-f",
        good.to_str().unwrap(),
        "-f",
        bad_path.to_str().unwrap(),
        "-o",
        "json",
    ])
    .await;
    assert_eq!(code, 1, "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (report["valid"].as_u64(), report["invalid"].as_u64()),
        (Some(3), Some(2)),
        "{out}"
    );
    let invalid: Vec<(String, String, String)> = report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| !o["errors"].as_array().unwrap().is_empty())
        .map(|o| {
            (
                o["file"]
                    .as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_owned(),
                o["document"].as_str().unwrap().to_owned(),
                o["errors"][0].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(invalid.len(), 2, "{invalid:?}");
    assert_eq!(
        (invalid[0].0.as_str(), invalid[0].1.as_str()),
        ("bad.yaml", "2")
    );
    assert!(invalid[0].2.contains("hosts"), "{invalid:?}");
    assert_eq!(invalid[1].1, "3");
    assert!(invalid[1].2.contains("bogus"), "{invalid:?}");

    // Standard input; a file that is no YAML; a path that does not exist.
    let (code, out) = ctl_stdin(&["validate", "-f", "-"], GATEWAY).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("-     1    Gateway bookinfo/bookinfo-gateway  valid"),
        "{out}"
    );
    let (code, out) = ctl_stdin(&["validate", "-f", "-"], "kind: [oops\n").await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not YAML/JSON"), "{out}");
    let missing = dir.path().join("missing");
    let (code, _, err) = ctl(&["validate", "-f", missing.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing"), "{err}");
}

/// Issue 36: objects valid in Istio 1.32 (istio.io/api v1.32.0) that
/// meshhub refused while it spoke Istio 1.28's API, the three
/// (a DestinationRule with `http2KeepAlive`, a VirtualService redirect
/// with `prefixRewrite`, a TrafficExtension) first.
#[tokio::test]
async fn validate_accepts_what_istio_1_32_accepts() {
    let data =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../validate/tests/data/istio-1.32-valid.yaml");
    let (code, out, err) = ctl(&["validate", "-f", data.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}{err}");
    for object in [
        "DestinationRule bookinfo/reviews",
        "VirtualService bookinfo/redirect",
        "TrafficExtension bookinfo/ext",
    ] {
        let line = out
            .lines()
            .find(|l| l.contains(object))
            .unwrap_or_else(|| panic!("{object} not listed:\n{out}"));
        assert!(line.contains(" valid "), "{line}");
    }
    assert!(out.contains(" 0 invalid"), "{out}");
}

#[tokio::test]
async fn analyze_places_files_into_the_configured_clusters() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "meshhub.yaml", HUB);
    write(dir.path(), "gateway.yaml", GATEWAY);
    write(dir.path(), "vs.yaml", BOUND_VS);
    let d = dir.path().to_str().unwrap();
    let config = dir.path().join("meshhub.yaml");
    let config = config.to_str().unwrap();

    // West lacks the gateway east receives: an error for west only.
    let (code, out, err) = ctl(&["analyze", "-f", d, "--config", config]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("west     Error    IST0101  VirtualService bookinfo/bookinfo  spec.gateways[0]  Referenced gateway not found: \"bookinfo-gateway\""),
        "{out}"
    );
    assert!(!out.contains("east     Error"), "{out}");
    assert!(
        out.contains("east: 2 object(s), 0 error(s), 0 warning(s), 0 info\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "west: 1 object(s), 1 error(s), 1 warning(s), 0 info; would be held back (IST0101)"
        ),
        "{out}"
    );

    // One cluster, as JSON; the cluster that has the gateway is clean.
    let (code, out, _) = ctl(&[
        "analyze",
        "-f",
        d,
        "--config",
        config,
        "--cluster",
        "east",
        "-o",
        "json",
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["clusters"].as_array().unwrap().len(), 1);
    assert_eq!(report["clusters"][0]["cluster"], "east");
    assert_eq!(report["clusters"][0]["messages"], serde_json::json!([]));

    // Without a configuration there is only the default group, and an
    // object naming a cluster is refused (as the hub refuses it).
    let (code, out, _) = ctl(&["analyze", "-f", d, "-o", "yaml"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("cluster: default"), "{out}");
    assert!(
        out.contains("unknown cluster(s) east (known: default)"),
        "{out}"
    );
    // An unknown cluster is trouble.
    let (code, _, err) = ctl(&["analyze", "-f", d, "--config", config, "--cluster", "north"]).await;
    assert_eq!(code, 2);
    assert!(
        err.contains("no cluster \"north\" (clusters: default, east, west)"),
        "{err}"
    );
    // Standard input joins the files.
    let (code, out) = ctl_stdin(
        &[
            "analyze",
            "-f",
            d,
            "-f",
            "-",
            "--config",
            config,
            "--cluster",
            "east",
        ],
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: bookinfo}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews, subset: v9}\n",
    )
    .await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("IST0101  VirtualService bookinfo/reviews  spec.http[0].route[0].destination  Referenced host+subset in destinationrule not found: \"reviews+v9\""),
        "{out}"
    );
}

/// Issue 36: `--istio-version` checks files against an Istio release
/// (MH0002 for what it does not know, as the hub does per cluster).
#[tokio::test]
async fn analyze_checks_files_against_an_istio_release() {
    let data =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../validate/tests/data/istio-1.32-valid.yaml");
    let data = data.to_str().unwrap();
    let (code, out, err) = ctl(&["analyze", "-f", data, "--istio-version", "1.28.3"]).await;
    assert_ne!(code, 2, "{out}{err}");
    for (object, path) in [
        (
            "DestinationRule bookinfo/reviews",
            "spec.trafficPolicy.connectionPool.http.http2KeepAlive",
        ),
        (
            "VirtualService bookinfo/redirect",
            "spec.http[0].redirect.prefixRewrite",
        ),
        ("TrafficExtension bookinfo/ext", ""),
    ] {
        assert!(
            out.lines().any(|l| l.contains("MH0002")
                && l.contains(object)
                && l.contains(path)
                && l.contains("checked against Istio 1.28.3")),
            "{object} {path}:\n{out}"
        );
    }
    let (_, out, _) = ctl(&["analyze", "-f", data, "--istio-version", "1.32.0"]).await;
    assert!(!out.contains("MH0002"), "{out}");
    let (_, out, _) = ctl(&["analyze", "-f", data]).await;
    assert!(!out.contains("MH0002"), "no release, no check: {out}");
    let (code, _, err) = ctl(&["analyze", "-f", data, "--istio-version", "latest"]).await;
    assert_eq!(code, 2);
    assert!(
        err.contains("--istio-version: \"latest\" is no Istio version"),
        "{err}"
    );
}

/// A small HTTPRoute CRD written for this test (not the Gateway API's).
const ROUTE_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: httproutes.gateway.networking.k8s.io}
spec:
  group: gateway.networking.k8s.io
  names: {kind: HTTPRoute, plural: httproutes}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              hostnames:
                type: array
                maxItems: 2
                items: {type: string}
                x-kubernetes-validations:
                - {rule: 'self.all(h, !isIP(h))', message: no IP addresses}
";

#[tokio::test]
async fn validate_checks_custom_resources_against_the_crds_given() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "crds/route.yaml", ROUTE_CRD);
    write(
        dir.path(),
        "route.yaml",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: default}\nspec:\n  hostnames: [10.0.0.1]\n",
    );
    let route = dir.path().join("route.yaml");
    let crds = dir.path().join("crds");
    let (code, out, err) = ctl(&["validate", "-f", route.to_str().unwrap()]).await;
    assert_eq!(
        code, 0,
        "without the CRDs only the object's shape is checked: {out}{err}"
    );
    let (code, out, err) = ctl(&[
        "validate",
        "--crds",
        crds.to_str().unwrap(),
        "-f",
        route.to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("spec.hostnames: no IP addresses"), "{out}");
    let missing = dir.path().join("nope");
    let (code, _, err) = ctl(&[
        "validate",
        "--crds",
        missing.to_str().unwrap(),
        "-f",
        route.to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--crds") && err.contains("nope"), "{err}");
}
