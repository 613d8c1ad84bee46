//! Builders of the objects tests keep writing: Istio objects as YAML (what
//! a file source or a Kubernetes API reads) and MCP resources (what goes on
//! the wire).

use meshhub_proto::mcp::{Metadata, Resource};
use prost::Message as _;

/// The virtual services collection.
pub const VS: &str = "istio/networking/v1alpha3/virtualservices";
/// The destination rules collection.
pub const DR: &str = "istio/networking/v1alpha3/destinationrules";
/// The gateways collection.
pub const GW: &str = "istio/networking/v1alpha3/gateways";

/// A VirtualService `namespace/name` routing everything to `host`, as
/// YAML; `extra_meta` is more `metadata` lines indented by two spaces
/// (labels, annotations), or "".
pub fn virtual_service(name: &str, namespace: &str, host: &str, extra_meta: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {namespace}\n{extra_meta}spec:\n  hosts: [{host}]\n  http:\n  - route:\n    - destination:\n        host: {host}\n"
    )
}

/// [`virtual_service`] in namespace `bookinfo` with no extra metadata.
pub fn vs(name: &str, host: &str) -> String {
    virtual_service(name, "bookinfo", host, "")
}

/// An MCP resource `name` at `version` whose body is `body` (`None`: no
/// body, as a deletion marker or a malformed peer would send).
pub fn mcp_resource(name: &str, version: &str, body: Option<prost_types::Any>) -> Resource {
    Resource {
        metadata: Some(Metadata {
            name: name.into(),
            version: version.into(),
            ..Default::default()
        }),
        body,
    }
}

/// A body of type `type_url` (`type.googleapis.com/...`) holding `value`.
pub fn any(type_url: &str, value: impl Into<Vec<u8>>) -> prost_types::Any {
    prost_types::Any {
        type_url: type_url.to_owned(),
        value: value.into(),
    }
}

/// [`mcp_resource`] encoded, as a source serves it.
pub fn encoded_resource(name: &str, version: &str, body: Option<prost_types::Any>) -> Vec<u8> {
    mcp_resource(name, version, body).encode_to_vec()
}
