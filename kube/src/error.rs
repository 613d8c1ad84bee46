//! Kubernetes errors as one line: what the API server said (its message,
//! code and reason) rather than the client's layers around it.

use kube::runtime::watcher;

/// A client error as one line: the API server's message with its code and
/// reason, or the error and its causes.
pub fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => meshhub_proto::error_chain(other),
    }
}

/// A watcher error as one line, saying which step failed.
pub fn watch_error_text(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(k) => format!("list failed: {}", error_text(k)),
        watcher::Error::WatchStartFailed(k) => {
            format!("watch failed to start: {}", error_text(k))
        }
        watcher::Error::WatchFailed(k) => format!("watch failed: {}", error_text(k)),
        watcher::Error::WatchError(s) => format!("watch error: {} ({})", s.message, s.code),
        watcher::Error::NoResourceVersion => e.to_string(),
    }
}

/// Whether a watch fails because it may not list or watch (`403`): waiting
/// will not help.
pub fn is_forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_read_as_one_line_with_the_servers_message() {
        let e = kube::Error::Api(Box::new(kube::core::Status {
            code: 403,
            message: "virtualservices.networking.istio.io is forbidden".to_owned(),
            reason: "Forbidden".to_owned(),
            ..Default::default()
        }));
        assert_eq!(
            error_text(&e),
            "virtualservices.networking.istio.io is forbidden (403 Forbidden)"
        );
        let w = watcher::Error::InitialListFailed(e);
        assert!(is_forbidden(&w));
        assert!(
            watch_error_text(&w).starts_with("list failed: "),
            "{}",
            watch_error_text(&w)
        );
    }

    #[test]
    fn other_errors_read_with_their_causes_and_are_not_forbidden() {
        let e = kube::Error::Service(Box::new(std::io::Error::other("connection refused")));
        let text = error_text(&e);
        assert!(text.contains("connection refused"), "{text}");
        assert!(!is_forbidden(&watcher::Error::WatchFailed(e)));
    }
}
