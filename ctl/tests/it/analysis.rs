//! A hub holding a version back: `meshhubctl status`, `history`,
//! `describe` and `analyze` (online) show it, with their exit codes.

use meshhub_e2e::inproc::hub_of_text;
use meshhub_e2e::yaml::files_hub;
use meshhub_testkit::eventually_some;
use meshhub_testkit::fixtures::write_atomic;

use crate::support::meshhubctl;

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

fn virtual_service(bound: bool) -> String {
    let gateways = if bound {
        "  gateways: [bookinfo-gateway]\n"
    } else {
        ""
    };
    format!(
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: bookinfo, namespace: bookinfo}}
spec:
  hosts: [bookinfo.example.com]
{gateways}  http:
  - route:
    - destination: {{host: productpage, port: {{number: 9080}}}}
"
    )
}

/// `meshhubctl args`: exit code and stdout.
async fn ctl(args: &[&str]) -> (i32, String) {
    let out = meshhubctl(args).await;
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_back_version_shows_in_status_history_describe_and_analyze() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("gateway.yaml"), GATEWAY).unwrap();
    std::fs::write(objects.join("vs.yaml"), virtual_service(false)).unwrap();
    let clusters =
        "  - name: east\n    namespaces: [bookinfo]\n  - name: west\n    namespaces: [bookinfo]\n";
    let hub = hub_of_text(
        &dir.path().join("meshhub.yaml"),
        &files_hub(
            "objects",
            clusters,
            "history:\n  dir: history\nanalysis:\n  holdBack: [IST0101]\n",
        ),
    )
    .await;
    let admin = format!("http://{}", hub.admin_addr());
    let admin = admin.as_str();

    let (code, out) = ctl(&["analyze", "--admin", admin]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("west: version "), "{out}");

    write_atomic(&objects.join("vs.yaml"), &virtual_service(true));
    let status = eventually_some("status shows west held back", async || {
        let (code, out) = ctl(&["status", "--admin", admin]).await;
        (code == 0 && out.contains("HELD BACK: cluster west")).then_some(out)
    })
    .await;
    assert!(status.contains("serving its last good version"), "{status}");
    assert!(status.contains("analysis found IST0101"), "{status}");

    let (code, out) = ctl(&["analyze", "--admin", admin]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "west     Error    IST0101  VirtualService bookinfo/bookinfo  spec.gateways[0]"
        ),
        "{out}"
    );
    assert!(out.contains("held back (IST0101), serving "), "{out}");
    let (code, out) = ctl(&["analyze", "--admin", admin, "--cluster", "east"]).await;
    assert_eq!(code, 0, "{out}");

    let history = eventually_some("history shows the held-back version", async || {
        let (code, out) = ctl(&["history", "--admin", admin, "--cluster", "west"]).await;
        (code == 0 && out.contains("(held back)")).then_some(out)
    })
    .await;
    assert!(history.contains("was HELD BACK by analysis"), "{history}");
    assert!(
        history.contains("Error [IST0101] VirtualService bookinfo/bookinfo"),
        "{history}"
    );

    let (code, out) = ctl(&[
        "describe",
        "--admin",
        admin,
        "VirtualService",
        "bookinfo/bookinfo",
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("\n  west: Error [IST0101] spec.gateways[0]: Referenced gateway not found"),
        "{out}"
    );
    // East receives the gateway: nothing about it there.
    assert!(!out.contains("  east: "), "{out}");
    assert!(hub.shutdown().await);
}
