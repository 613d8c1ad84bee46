//! Findings read the same as the errors they come from, and keep the path.

use meshhub_proto::transcode::TranscodeError;

use super::{Finding, Verdict};

#[test]
fn transcode_errors_keep_their_text_and_path() {
    let unknown = TranscodeError::UnknownField {
        kind: "VirtualService".into(),
        name: "shop/reviews".into(),
        path: "spec.hots".into(),
    };
    let f = Finding::from(&unknown);
    assert_eq!(f.path, "spec.hots");
    assert_eq!(f.object, "VirtualService shop/reviews");
    assert_eq!(f.to_string(), unknown.to_string());

    let field = TranscodeError::Field {
        kind: "DestinationRule".into(),
        name: "shop/reviews".into(),
        path: "spec.trafficPolicy.tls.mode".into(),
        reason: "unknown enum value \"X\"".into(),
    };
    let f = Finding::from(&field);
    assert_eq!(f.path, "spec.trafficPolicy.tls.mode");
    assert_eq!(f.to_string(), field.to_string());

    let other = TranscodeError::MissingName {
        kind: "Gateway".into(),
    };
    let f = Finding::from(&other);
    assert_eq!(f.path, "");
    assert_eq!(f.to_string(), "Gateway: object has no metadata.name");
}

#[test]
fn a_verdict_is_accepted_without_errors() {
    let mut v = Verdict::default();
    v.warnings.push(Finding::at(
        "Sidecar ns/s",
        "spec.x",
        "unknown field pruned",
    ));
    assert!(v.is_accepted());
    assert_eq!(
        v.warning_messages(),
        ["Sidecar ns/s: spec.x: unknown field pruned"]
    );
    v.errors
        .push(Finding::whole("Sidecar: object has no metadata.name"));
    assert!(!v.is_accepted());
    assert_eq!(v.error_messages(), ["Sidecar: object has no metadata.name"]);
}
