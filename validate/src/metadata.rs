//! Checks of an object's metadata that every kind meshhub validates shares.

use meshhub_proto::object::Object;

use crate::names::is_dns1123_subdomain;
use crate::report::Report;

/// A custom resource's name (every Istio and Gateway API kind is one):
/// the API server takes only lower-case RFC 1123 subdomains.
pub(crate) fn check_resource_name(r: &mut Report, obj: &Object) {
    let name = obj.metadata.name.as_str();
    if !name.is_empty() && !is_dns1123_subdomain(name) {
        r.err(
            "metadata.name",
            format!("{name:?} is not a lower-case RFC 1123 subdomain (a-z, 0-9, '-' and '.', at most 253 characters, starting and ending alphanumeric)"),
        );
    }
}
