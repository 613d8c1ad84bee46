use super::*;

const DEFAULTS: DialDefaults = DialDefaults {
    connect_timeout: Duration::from_secs(5),
    port: "the test port",
};

fn check(json: &str) -> Result<DialSpec, SettingError> {
    let raw: RawDialSpec = serde_json::from_str(json).unwrap();
    raw.check(Path::new("/etc/meshhub"), DEFAULTS)
}

fn refused(json: &str) -> String {
    check(json).unwrap_err().to_string()
}

#[test]
fn a_plain_address_gets_the_defaults() {
    let d = check(r#"{"address": " http://agent.east:9911 "}"#).unwrap();
    assert_eq!(d.address, "http://agent.east:9911");
    assert_eq!(d.tls, None);
    assert_eq!(d.connect_timeout, Duration::from_secs(5));
    assert_eq!(d.reconnect, ReconnectPolicy::default());
}

#[test]
fn every_key_is_typed() {
    let d = check(
        r#"{"address": "http://a:1", "connectTimeout": "2s",
            "reconnect": {"initial": "100ms", "max": "5s", "factor": 3}}"#,
    )
    .unwrap();
    assert_eq!(d.connect_timeout, Duration::from_secs(2));
    assert_eq!(d.reconnect.initial, Duration::from_millis(100));
    assert_eq!(d.reconnect.max, Duration::from_secs(5));
    assert_eq!(d.reconnect.factor, 3.0);
}

#[test]
fn errors_name_the_key() {
    let e = refused(r#"{"address": "https://a:1"}"#);
    assert!(e.starts_with("tls: ") && e.contains("tls.ca"), "{e}");
    let e = refused(r#"{"address": "http://a:1", "tls": {"ca": "ca.pem"}}"#);
    assert!(e.starts_with("address: ") && e.contains("https://"), "{e}");
    let e = refused(r#"{"address": "a:1"}"#);
    assert!(e.starts_with("address: "), "{e}");
    let e = refused(r#"{"address": "http://a"}"#);
    assert!(e.contains("needs a port (the test port)"), "{e}");
    let e = refused(r#"{"address": "http://a:1", "connectTimeout": "0s"}"#);
    assert!(e.starts_with("connectTimeout: must be positive"), "{e}");
    let e = refused(r#"{"address": "http://a:1", "reconnect": {"initial": "0s"}}"#);
    assert!(e.starts_with("reconnect.initial: "), "{e}");
    let e = refused(r#"{"address": "http://a:1", "reconnect": {"initial": "2s", "max": "1s"}}"#);
    assert!(
        e.starts_with("reconnect.max: 1s is shorter than reconnect.initial 2s"),
        "{e}"
    );
    let e = refused(r#"{"address": "http://a:1", "reconnect": {"factor": 0.5}}"#);
    assert!(e.starts_with("reconnect.factor: "), "{e}");
}

#[test]
fn tls_files_are_resolved_and_read_now() {
    let e = refused(r#"{"address": "https://a:1", "tls": {"ca": "ca.pem"}}"#);
    assert!(
        e.starts_with("tls: ") && e.contains("/etc/meshhub/ca.pem"),
        "{e}"
    );
    let e = refused(r#"{"address": "https://a:1", "tls": {"ca": "/x/ca.pem", "cert": "c.pem"}}"#);
    assert_eq!(e, "tls: cert and key go together");
}

#[test]
fn the_target_dials_the_address() {
    let d = check(r#"{"address": "http://east.example:9911"}"#).unwrap();
    let t = d.target().unwrap();
    assert_eq!(t.uri().to_string(), "http://east.example:9911/");
    assert!(!t.is_tls());
    let bad = DialSpec {
        address: "not a uri".into(),
        ..d
    };
    assert!(matches!(bad.target(), Err(DialError::Address { .. })));
}
