//! What a Kubernetes source with status write-back tells the status
//! writer (`crate::writeback`) of its objects: each Istio object and each
//! Gateway API object meshhub writes a status part on, as last seen (its
//! generation, its live status), and each one gone.

use std::sync::Arc;

use kube::api::ApiResource;
use meshhub_kube::status::IstioStatus;
use meshhub_kube::status::gateway::{FleetStatus, Shape};
use serde_json::Value;

/// Capacity of the channel from the source to its writer.
pub const FEED_QUEUE: usize = 256;

/// What a Kubernetes source tells its writer.
#[derive(Debug)]
pub enum Feed {
    /// An Istio object as the source last saw it.
    Seen(Box<Seen>),
    /// A unit gone (deleted, or its kind no longer served).
    Gone(Arc<str>),
}

/// An Istio object as the source saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The source's unit (`group/Kind/namespace/name`).
    pub unit: Arc<str>,
    /// Its kind as served.
    pub resource: ApiResource,
    /// Its MCP collection.
    pub collection: Arc<str>,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// The `resourceVersion` of the definition delivered to the pipeline
    /// (older than `resource_version` when only the status changed since).
    pub delivered: Option<String>,
    /// Its live status, as far as it reads as Istio's (an Istio object).
    pub status: Option<IstioStatus>,
    /// A Gateway API object: where meshhub's part of its status goes, and
    /// what is there.
    pub gateway: Option<GatewaySeen>,
}

/// What the writer needs of a Gateway API object.
#[derive(Clone, Debug)]
pub struct GatewaySeen {
    /// Where meshhub's part of its status goes.
    pub shape: Shape,
    /// A route's `spec.parentRefs` as written (one status entry each).
    pub parent_refs: Vec<Value>,
    /// meshhub's part of its live status.
    pub ours: Option<FleetStatus>,
}

impl Seen {
    /// The MCP name (`namespace/name`).
    pub fn mcp_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => format!("/{}", self.name),
        }
    }
}
