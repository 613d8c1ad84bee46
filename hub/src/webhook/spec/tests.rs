use std::net::SocketAddr;

use meshhub_testkit::pki::Leaf;

use super::*;
use crate::config::Config;
use crate::config::testing::{SOURCES, args, parse};

#[test]
fn the_webhook_is_off_by_default_and_checked_when_on() {
    assert_eq!(parse(SOURCES).unwrap().webhook, None);

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("objects")).unwrap();
    Leaf::self_signed(&["meshhub.meshhub.svc"])
        .write(&dir.path().join("tls.crt"), &dir.path().join("tls.key"));
    let path = dir.path().join("meshhub.yaml");
    let parse_here = |text: &str| Config::from_yaml(&args(), &path, text);

    let c = parse_here(&format!(
        "{SOURCES}webhook:\n  tls: {{cert: tls.crt, key: tls.key}}\n"
    ))
    .unwrap();
    let w = c.webhook.expect("on");
    assert_eq!(w.addr, DEFAULT_WEBHOOK_ADDR.parse::<SocketAddr>().unwrap());
    assert_eq!(w.path, "/validate");
    assert_eq!(w.cert, dir.path().join("tls.crt"));

    let c = parse_here(&format!(
        "{SOURCES}webhook:\n  addr: 127.0.0.1:0\n  path: /admit\n  tls: {{cert: tls.crt, key: tls.key}}\n"
    ))
    .unwrap();
    let w = c.webhook.unwrap();
    assert_eq!(w.addr.to_string(), "127.0.0.1:0");
    assert_eq!(w.path, "/admit");

    let e = |block: &str| {
        parse_here(&format!("{SOURCES}webhook:\n{block}"))
            .unwrap_err()
            .to_string()
    };
    assert!(
        e("  addr: 127.0.0.1:0\n").contains("tls"),
        "tls is required"
    );
    let bad_addr = e("  addr: nowhere\n  tls: {cert: tls.crt, key: tls.key}\n");
    assert!(bad_addr.contains("webhook.addr"), "{bad_addr}");
    let bad_path = e("  path: validate\n  tls: {cert: tls.crt, key: tls.key}\n");
    assert!(bad_path.contains("webhook.path"), "{bad_path}");
    let missing = e("  tls: {cert: nope.crt, key: tls.key}\n");
    assert!(
        missing.contains("webhook.tls") && missing.contains("nope.crt"),
        "{missing}"
    );
    // A key that doesn't fit the certificate.
    std::fs::write(
        dir.path().join("other.key"),
        meshhub_testkit::pki::key_pair().0,
    )
    .unwrap();
    let mismatch = e("  tls: {cert: tls.crt, key: other.key}\n");
    assert!(mismatch.contains("webhook.tls"), "{mismatch}");
}
