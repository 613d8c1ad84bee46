//! The naming rules, each meaning of "DNS label" on its own.

use super::*;

#[test]
fn dns1123_label_is_lower_case_only() {
    for ok in [
        "a",
        "default",
        "istio-system",
        "a1",
        "0abc",
        &"x".repeat(63),
    ] {
        assert!(is_dns1123_label(ok), "{ok:?}");
    }
    for bad in [
        "",
        "Default",
        "-a",
        "a-",
        "a_b",
        "a.b",
        "*",
        &"x".repeat(64),
    ] {
        assert!(!is_dns1123_label(bad), "{bad:?}");
    }
}

#[test]
fn dns1123_subdomain_joins_labels() {
    assert!(is_dns1123_subdomain("meshhub-leader"));
    assert!(is_dns1123_subdomain("a.b.c"));
    assert!(!is_dns1123_subdomain("a..b"));
    assert!(!is_dns1123_subdomain("a.B"));
    assert!(!is_dns1123_subdomain(""));
    let long = vec!["abcdefghij"; 24].join(".");
    assert_eq!(long.len(), 263);
    assert!(!is_dns1123_subdomain(&long));
    // Kubernetes limits the whole name, not its parts.
    assert!(is_dns1123_subdomain(&format!("{}.a", "x".repeat(64))));
}

#[test]
fn hostname_label_takes_either_case() {
    assert!(is_hostname_label("Reviews"));
    assert!(is_hostname_label("v1"));
    assert!(!is_hostname_label("v_1"));
    assert!(!is_hostname_label("-v1"));
    assert!(!is_hostname_label(""));
    assert!(is_wildcard_hostname_label("*"));
    assert!(is_wildcard_hostname_label("*foo"));
    assert!(is_wildcard_hostname_label("*-foo"));
    assert!(!is_wildcard_hostname_label("f*o"));
    assert!(!is_wildcard_hostname_label(&format!("*{}", "x".repeat(63))));
}

#[test]
fn domains() {
    assert!(validate_fqdn("reviews.default.svc.cluster.local").is_ok());
    assert!(validate_fqdn("istio.io.").is_ok());
    assert_eq!(
        validate_fqdn("*.istio.io"),
        Err("domain name \"*.istio.io\" is invalid (label \"*\" is invalid)".into())
    );
    assert_eq!(
        validate_fqdn("example.123"),
        Err(
            "domain name \"example.123\" is invalid (top level domain \"123\" cannot be all-numeric)"
                .into()
        )
    );
    assert_eq!(validate_fqdn(""), Err("must not be empty".into()));
    assert!(validate_fqdn(&"a.".repeat(128)).is_err());
    assert!(validate_partial_wildcard("*.foo.com").is_ok());
    assert!(validate_partial_wildcard("*").is_ok());
    assert!(validate_partial_wildcard("*foo.com").is_err());
}

#[test]
fn label_keys_and_values() {
    assert!(validate_label_key("app").is_ok());
    assert!(validate_label_key("app.kubernetes.io/name").is_ok());
    assert!(validate_label_key("Example.com/x").is_ok());
    assert!(validate_label_key("/x").is_err());
    assert!(validate_label_key("a/").is_err());
    assert!(validate_label_key(&"x".repeat(64)).is_err());
    assert!(is_qualified_name("v1.2_beta-3"));
    assert!(!is_qualified_name("-v1"));
    assert!(!is_qualified_name(""));
}
