//! Which snapshot group a consumer sees.

use std::net::SocketAddr;

use meshhub_proto::mcp::SinkNode;

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
}

impl GroupError {
    /// The request names no usable group.
    pub fn new(message: String) -> Self {
        Self {
            message,
            denied: false,
        }
    }

    /// The consumer's identity does not allow the group.
    pub fn denied(message: String) -> Self {
        Self {
            message,
            denied: true,
        }
    }

    /// The gRPC status the stream is refused with.
    pub fn status(&self) -> tonic::Status {
        if self.denied {
            tonic::Status::permission_denied(self.message.clone())
        } else {
            tonic::Status::failed_precondition(self.message.clone())
        }
    }
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
