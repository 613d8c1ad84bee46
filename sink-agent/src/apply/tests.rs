use super::failure::{Cause, cause, summary};
use super::*;

#[test]
fn failures_are_summed_up_in_one_nack_message() {
    let failures: Vec<String> = (0..8)
        .map(|i| format!("VirtualService bookinfo/v{i}: no"))
        .collect();
    let s = summary(&failures);
    assert!(
        s.starts_with("applying to Kubernetes failed: VirtualService bookinfo/v0: no; "),
        "{s}"
    );
    assert!(s.ends_with("; and 3 more"), "{s}");
    assert!(!s.contains("v5"), "{s}");
}

fn api_error(code: u16, retry_after_seconds: u32) -> kube::Error {
    let mut status = kube::core::Status::failure("refused", "").with_code(code);
    if retry_after_seconds > 0 {
        status = status.with_details(kube::core::response::StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: vec![],
            retry_after_seconds,
        });
    }
    kube::Error::Api(status.boxed())
}

#[test]
fn the_cause_comes_from_the_status_code_never_the_text() {
    // The API server refused the object: a new version is needed.
    for code in [400, 403, 404, 422] {
        assert_eq!(cause(&api_error(code, 0)), Cause::Refused, "{code}");
    }
    // It could not take it now: it may pass by itself, maybe after the
    // wait the server asked for.
    for code in [408, 409, 429, 500, 503, 504] {
        assert_eq!(
            cause(&api_error(code, 0)),
            Cause::Unavailable { retry_after: None },
            "{code}"
        );
    }
    assert_eq!(
        cause(&api_error(429, 3)),
        Cause::Unavailable {
            retry_after: Some(Duration::from_secs(3))
        }
    );
    // No answer at all.
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    assert_eq!(
        cause(&kube::Error::Service(Box::new(io))),
        Cause::Unavailable { retry_after: None }
    );
}

#[test]
fn a_sync_is_invalid_unless_something_may_pass_by_itself() {
    assert_eq!(verdict(&[]), Ok(()));
    let refused = Failure::refused("VirtualService a/b: conflict".to_owned());
    let denied = Failure::of(&api_error(403, 0), "VirtualService a/c: denied".to_owned());
    let busy = Failure::of(&api_error(429, 2), "VirtualService a/d: busy".to_owned());
    let down = Failure::of(&api_error(503, 5), "VirtualService a/e: down".to_owned());

    let Err(ApplyError::Invalid(message)) = verdict(&[refused.clone(), denied.clone()]) else {
        panic!("every object refused: invalid")
    };
    assert!(
        message.starts_with("applying to Kubernetes failed: VirtualService a/b: conflict; ")
            && message.contains("a/c: denied"),
        "{message}"
    );
    assert_eq!(
        verdict(&[refused, busy, denied, down]),
        Err(ApplyError::Unavailable {
            message: "applying to Kubernetes failed: VirtualService a/b: conflict; \
                      VirtualService a/d: busy; VirtualService a/c: denied; \
                      VirtualService a/e: down"
                .to_owned(),
            retry_after: Some(Duration::from_secs(5)),
        }),
        "one that may pass makes it unavailable, with the longest wait asked for"
    );
}

#[test]
fn writes_refuse_unknown_fields_instead_of_pruning_them() {
    let p = super::write_params();
    assert!(
        matches!(
            p.field_validation,
            Some(kube::core::params::ValidationDirective::Strict)
        ),
        "{:?}",
        p.field_validation
    );
    assert!(p.force, "the fields are ours: writes force");
    assert_eq!(p.field_manager.as_deref(), Some(super::FIELD_MANAGER));
}
