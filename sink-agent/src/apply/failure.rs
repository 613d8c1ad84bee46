//! What a sync could not do, and what the store makes of it: each failure
//! is a line of the NACK with its cause, taken from the typed Kubernetes
//! error (never from its text), and the sync's result is one
//! [`ApplyError`].

use std::time::Duration;

use meshhub_mcp::sink::ApplyError;

/// At most this many failures are named in one result.
const NAMED_FAILURES: usize = 5;
/// What an applier handle answers once the applier task stopped.
const STOPPED: &str = "the applier stopped (shutting down)";

/// The outcome of one sync.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) written: usize,
    pub(super) pruned: usize,
    pub(super) failures: Vec<Failure>,
}

/// One thing a sync could not do: its line in the NACK, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Failure {
    pub(super) text: String,
    pub(super) cause: Cause,
}

/// Why a sync could not do something.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cause {
    /// The API server, or the agent's own rules (a namespace outside
    /// `apply.namespaces`, an object meshhub does not manage, a kind the
    /// cluster does not serve), refused the object.
    Refused,
    /// The API server could not take it now (no answer, overloaded, a
    /// server-side error), and may have said when to try again.
    Unavailable { retry_after: Option<Duration> },
}

impl Failure {
    pub(super) fn refused(text: String) -> Self {
        Self {
            text,
            cause: Cause::Refused,
        }
    }

    /// `text` about `e`, with the cause `e`'s status code tells.
    pub(super) fn of(e: &kube::Error, text: String) -> Self {
        Self {
            text,
            cause: cause(e),
        }
    }
}

/// Refused or unavailable, from the typed error: the API server's answer
/// by its HTTP status code (408, 409, 429 and 5xx may pass; any other 4xx
/// is a refusal), and no answer at all (a connection, TLS or timeout
/// error) as unavailable.
pub(super) fn cause(e: &kube::Error) -> Cause {
    match e {
        kube::Error::Api(s)
            if (400..500).contains(&s.code) && ![408, 409, 429].contains(&s.code) =>
        {
            Cause::Refused
        }
        kube::Error::Api(s) => Cause::Unavailable {
            retry_after: s
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|&n| n > 0)
                .map(|n| Duration::from_secs(n.into())),
        },
        _ => Cause::Unavailable { retry_after: None },
    }
}

/// A sync's result for the store: the failures summed up in one message,
/// [`ApplyError::Unavailable`] when any may pass by itself (with the
/// longest wait the API server asked for), else [`ApplyError::Invalid`].
pub(super) fn verdict(failures: &[Failure]) -> Result<(), ApplyError> {
    if failures.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = failures.iter().map(|f| f.text.clone()).collect();
    let message = summary(&texts);
    let unavailable: Vec<Option<Duration>> = failures
        .iter()
        .filter_map(|f| match f.cause {
            Cause::Refused => None,
            Cause::Unavailable { retry_after } => Some(retry_after),
        })
        .collect();
    if unavailable.is_empty() {
        return Err(ApplyError::Invalid(message));
    }
    Err(ApplyError::Unavailable {
        message,
        retry_after: unavailable.into_iter().flatten().max(),
    })
}

pub(super) fn stopped() -> ApplyError {
    ApplyError::Unavailable {
        message: STOPPED.to_owned(),
        retry_after: None,
    }
}

/// The failures as one NACK message: the first few, and how many more.
pub(super) fn summary(failures: &[String]) -> String {
    let mut text = failures
        .iter()
        .take(NAMED_FAILURES)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if failures.len() > NAMED_FAILURES {
        text.push_str(&format!("; and {} more", failures.len() - NAMED_FAILURES));
    }
    format!("applying to Kubernetes failed: {text}")
}
