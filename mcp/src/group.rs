//! Which snapshot group a consumer sees.

use std::collections::HashMap;
use std::net::SocketAddr;

use meshhub_proto::mcp::SinkNode;
use tonic_types::{ErrorDetails, StatusExt as _};

use crate::cache::Group;

/// What is known about a consumer when its stream starts.
#[derive(Clone, Debug, Default)]
pub struct Consumer {
    /// The node it announced (`SinkNode`, or the xDS node id and string
    /// metadata as annotations).
    pub node: SinkNode,
    /// Its address, if known.
    pub addr: Option<SocketAddr>,
    /// Identities from its verified client certificate (SAN URIs such as
    /// `spiffe://cluster.local/ns/istio-system/sa/istiod`, and DNS names).
    pub identities: Vec<String>,
}

/// The `google.rpc.ErrorInfo` domain of the reasons meshhub gives when it
/// refuses a stream, so a client tells one refusal from another by its
/// reason, never by the message text.
pub const ERROR_DOMAIN: &str = "meshhub.io";

/// Why a consumer could not be placed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GroupError {
    /// The reason, sent to the consumer.
    pub message: String,
    /// Whether its verified identity does not allow what it asked for
    /// (`PERMISSION_DENIED`); otherwise its request names no usable group
    /// (`FAILED_PRECONDITION`).
    pub denied: bool,
    /// A machine-readable reason, sent as the status's `ErrorInfo`
    /// (domain [`ERROR_DOMAIN`]) where clients act on this refusal.
    pub reason: Option<&'static str>,
}

impl GroupError {
    /// The request names no usable group.
    pub fn new(message: String) -> Self {
        Self {
            message,
            denied: false,
            reason: None,
        }
    }

    /// The consumer's identity does not allow the group.
    pub fn denied(message: String) -> Self {
        Self {
            message,
            denied: true,
            reason: None,
        }
    }

    /// The same refusal, carrying `reason` for clients to act on.
    pub fn with_reason(self, reason: &'static str) -> Self {
        Self {
            reason: Some(reason),
            ..self
        }
    }

    /// The gRPC status the stream is refused with.
    pub fn status(&self) -> tonic::Status {
        let code = if self.denied {
            tonic::Code::PermissionDenied
        } else {
            tonic::Code::FailedPrecondition
        };
        match self.reason {
            Some(reason) => tonic::Status::with_error_details(
                code,
                self.message.clone(),
                ErrorDetails::with_error_info(reason, ERROR_DOMAIN, HashMap::new()),
            ),
            None => tonic::Status::new(code, self.message.clone()),
        }
    }
}

/// The reason meshhub gave for refusing a stream with `status` (see
/// [`GroupError::with_reason`]), if it gave one.
pub fn refusal_reason(status: &tonic::Status) -> Option<String> {
    status
        .get_details_error_info()
        .filter(|info| info.domain == ERROR_DOMAIN)
        .map(|info| info.reason)
}

/// Maps a consumer to its snapshot group.
pub trait GroupIndex: Send + Sync + 'static {
    /// The group of this consumer, or why it has none (its stream is then
    /// refused with that reason).
    fn group(&self, consumer: &Consumer) -> Result<Group, GroupError>;
}

/// Every consumer sees the same group.
#[derive(Clone, Debug)]
pub struct SingleGroup(pub Group);

impl GroupIndex for SingleGroup {
    fn group(&self, _: &Consumer) -> Result<Group, GroupError> {
        Ok(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_carries_its_reason_in_the_status_and_only_then() {
        let refused =
            GroupError::new("node \"x\": no such cluster".into()).with_reason("UNKNOWN_CLUSTER");
        let status = refused.status();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(status.message(), "node \"x\": no such cluster");
        assert_eq!(refusal_reason(&status).as_deref(), Some("UNKNOWN_CLUSTER"));

        // Same text, no reason: not taken for that refusal.
        let plain = GroupError::new("node \"x\": no such cluster".into()).status();
        assert_eq!(refusal_reason(&plain), None);
        // Another domain's ErrorInfo is not ours.
        let foreign = tonic::Status::with_error_details(
            tonic::Code::FailedPrecondition,
            "x",
            ErrorDetails::with_error_info("UNKNOWN_CLUSTER", "example.com", HashMap::new()),
        );
        assert_eq!(refusal_reason(&foreign), None);
        let denied = GroupError::denied("no".into()).status();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    }
}
