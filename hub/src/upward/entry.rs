//! The ServiceEntry one Service's exports make (KEP-1645): the conflict
//! rules (the oldest export, in the hub's order, wins; a port or type that
//! differs from it is a conflict) and the entry's shape. Pure functions of
//! the contributions: the judge runs them on one contribution alone, the
//! generating source ([`super::mcs`]) on every accepted one.

use std::collections::BTreeMap;

use meshhub_proto::object::{Object, ObjectMeta};
use meshhub_proto::upward::ServiceExport;
use serde_json::{Map, Value, json};

use super::contribution::{Contribution, FirstSeen};
use crate::groups::CLUSTERS_ANNOTATION;

/// The annotation naming what an object was generated from.
pub const GENERATED_FROM: &str = "meshhub.io/generated-from";
/// The cluster set's domain (KEP-1645).
pub const DOMAIN: &str = "svc.clusterset.local";

/// One aggregated Service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Aggregate {
    /// The generated object, when some cluster consumes it.
    pub object: Option<Object>,
    /// Conflicts, by exporting cluster.
    pub conflicts: BTreeMap<String, String>,
}

/// Istio's protocol for a Kubernetes port (appProtocol, then the name's
/// prefix, as Istio's protocol selection reads them).
fn istio_protocol(p: &meshhub_proto::upward::ServicePort) -> &'static str {
    let known = |s: &str| -> Option<&'static str> {
        let s = s.to_ascii_lowercase();
        let head = s.split(['-', '_']).next().unwrap_or("");
        Some(match head {
            "http" | "kubernetes.io/h2c" => "HTTP",
            "http2" => "HTTP2",
            "https" => "HTTPS",
            "grpc" | "grpc-web" => "GRPC",
            "tls" => "TLS",
            "mongo" => "MONGO",
            "tcp" => "TCP",
            _ => return None,
        })
    };
    if p.protocol != "TCP" && !p.protocol.is_empty() {
        return "TCP"; // UDP and SCTP are not proxied; the entry names TCP.
    }
    known(&p.app_protocol)
        .or_else(|| known(&p.name))
        .unwrap_or("TCP")
}

/// A consumer name no cluster can have (not a DNS-1123 label): the
/// entry a contribution would make alone, for its judgement.
const NO_CLUSTER: &str = "-";

/// The entry one cluster's export would generate on its own (what
/// [`super::judge`] validates before merging it).
pub fn contribution_entry(cluster: &str, export: &ServiceExport) -> Option<Object> {
    let c = Contribution {
        export: export.clone(),
        first_seen: FirstSeen::default(),
    };
    aggregate(
        &export.namespace,
        &export.name,
        &[(cluster, &c)],
        &[NO_CLUSTER.to_owned()],
    )
    .object
}

/// Aggregates the accepted exports of one Service (`exports`: cluster →
/// its contribution) for the clusters with an agent.
pub fn aggregate(
    namespace: &str,
    name: &str,
    exports: &[(&str, &Contribution)],
    clusters: &[String],
) -> Aggregate {
    let mut out = Aggregate::default();
    let mut valid: Vec<(&str, &Contribution)> = exports
        .iter()
        .filter(|(_, c)| c.export.problem.is_empty())
        .copied()
        .collect();
    // First seen by the hub first, then by cluster.
    valid.sort_by_key(|(cluster, c)| (c.first_seen.seq, cluster.to_string()));
    let valid: Vec<(&str, &ServiceExport)> = valid.iter().map(|(k, c)| (*k, &c.export)).collect();
    let Some((_, oldest)) = valid.first() else {
        return out;
    };
    let kind = oldest.r#type.clone();
    let port_name = |number: u32, n: &str| {
        if n.is_empty() {
            format!("port-{number}")
        } else {
            n.to_owned()
        }
    };
    let mut ports: BTreeMap<u32, (String, &'static str)> = BTreeMap::new();
    // Port names in use (a ServiceEntry's port names are unique): a newer
    // contribution reusing one for another number is a conflict, left
    // out, never a combined entry that fails validation for everyone.
    let mut names: BTreeMap<String, u32> = BTreeMap::new();
    for (cluster, e) in &valid {
        let mut problems = Vec::new();
        if e.r#type != kind {
            problems.push(format!("type {} conflicts with {kind}", e.r#type));
        }
        for p in &e.ports {
            let protocol = istio_protocol(p);
            match ports.get(&p.port) {
                None => {
                    let effective = port_name(p.port, &p.name);
                    match names.get(&effective) {
                        Some(other) => problems.push(format!(
                            "port {} is named {effective}, the name of port {other} in an older export",
                            p.port
                        )),
                        None => {
                            names.insert(effective, p.port);
                            ports.insert(p.port, (p.name.clone(), protocol));
                        }
                    }
                }
                Some((n, proto)) if *n != p.name || *proto != protocol => problems.push(format!(
                    "port {} is {}/{} here but {n}/{proto} in an older export",
                    p.port, p.name, protocol
                )),
                Some(_) => {}
            }
        }
        if !problems.is_empty() {
            out.conflicts.insert(
                (*cluster).to_owned(),
                format!("Conflict: {}", problems.join("; ")),
            );
        }
    }
    let exporters: Vec<&str> = valid.iter().map(|(c, _)| *c).collect();
    let consumers: Vec<&str> = clusters
        .iter()
        .map(String::as_str)
        .filter(|c| !(exporters.len() == 1 && exporters[0] == *c))
        .collect();
    if consumers.is_empty() || ports.is_empty() {
        return out;
    }
    let mut hostnames = false;
    let mut endpoints = Vec::new();
    for (cluster, e) in &valid {
        for g in &e.gateways {
            hostnames |= g.address.parse::<std::net::IpAddr>().is_err();
            let mut endpoint = json!({
                "address": g.address,
                "labels": {"topology.istio.io/cluster": cluster},
            });
            if g.port != 0 {
                let map: Map<String, Value> = ports
                    .iter()
                    .map(|(n, (pn, _))| (port_name(*n, pn), json!(g.port)))
                    .collect();
                endpoint["ports"] = Value::Object(map);
            }
            endpoints.push(endpoint);
        }
    }
    let spec = json!({
        "hosts": [format!("{name}.{namespace}.{DOMAIN}")],
        "location": "MESH_INTERNAL",
        "resolution": if hostnames { "DNS" } else { "STATIC" },
        "ports": ports.iter().map(|(n, (pn, proto))| json!({
            "number": n, "name": port_name(*n, pn), "protocol": proto,
        })).collect::<Vec<_>>(),
        "endpoints": endpoints,
    });
    let generated_from = valid
        .iter()
        .map(|(c, _)| format!("ServiceExport {c}/{namespace}/{name}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut content = Map::new();
    content.insert("spec".to_owned(), spec);
    out.object = Some(Object {
        api_version: "networking.istio.io/v1".to_owned(),
        kind: "ServiceEntry".to_owned(),
        metadata: ObjectMeta {
            name: format!("{name}-clusterset"),
            namespace: Some(namespace.to_owned()),
            labels: [(
                "app.kubernetes.io/managed-by".to_owned(),
                "meshhub".to_owned(),
            )]
            .into(),
            annotations: [
                (GENERATED_FROM.to_owned(), generated_from),
                (CLUSTERS_ANNOTATION.to_owned(), consumers.join(",")),
            ]
            .into(),
            ..Default::default()
        },
        content,
    });
    out
}

#[cfg(test)]
mod tests;
