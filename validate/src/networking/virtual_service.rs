//! VirtualService rules: hosts, gateways, and the TLS and TCP routes (HTTP
//! routes are in [`super::http_route`]).

use serde_json::Value;

use crate::hosts::{check_export_to, check_gateway_names, host_subset_of, hosts_overlap};
use crate::json::{int_field, list, map, strings};
use crate::names::validate_wildcard_domain;
use crate::net::{check_port_field, is_ip, validate_ip_subnet};
use crate::report::{Report, at, idx, key};
use crate::selectors::check_labels;

use super::destination::check_route_destinations;
use super::http_route::check_http_route;

/// The gateway name that stands for all sidecars of the mesh.
const MESH_GATEWAY: &str = "mesh";

/// Checks a VirtualService spec.
pub(crate) fn check(r: &mut Report, spec: &Value, namespace: &str) {
    let hosts = strings(spec, "hosts");
    let gateways = strings(spec, "gateways");

    // A VirtualService without hosts is a delegate (Istio 1.6 and later):
    // root routes pull it in, so it may not bind gateways or route TLS/TCP.
    if hosts.is_empty() {
        if !gateways.is_empty() {
            r.err(
                "spec.gateways",
                "a delegate virtual service (no hosts) must have no gateways",
            );
        }
        if !list(spec, "tls").is_empty() {
            r.err(
                "spec.tls",
                "a delegate virtual service (no hosts) must have no tls routes",
            );
        }
        if !list(spec, "tcp").is_empty() {
            r.err(
                "spec.tcp",
                "a delegate virtual service (no hosts) must have no tcp routes",
            );
        }
    }

    let applies_to_gateway = !gateways.is_empty() && !gateways.contains(&MESH_GATEWAY);
    let applies_to_mesh = !applies_to_gateway;
    check_gateway_names(r, "spec.gateways", &gateways);

    if !applies_to_gateway {
        for (i, http) in list(spec, "http").iter().enumerate() {
            for (j, m) in list(http, "match").iter().enumerate() {
                for name in ["headers", "withoutHeaders"] {
                    for k in map(m, name).into_iter().flat_map(|m| m.keys()) {
                        if k.starts_with("@request.auth.claims") {
                            r.err(
                                key(&at(&idx(&idx("spec.http", i), j), name), k),
                                "JWT claim based routing is only supported for gateways",
                            );
                        }
                    }
                }
            }
        }
    }

    let mut all_valid = true;
    for (i, h) in hosts.iter().enumerate() {
        let p = idx("spec.hosts", i);
        match validate_wildcard_domain(h) {
            Err(e) if !is_ip(h) => {
                r.err(p, e);
                all_valid = false;
            }
            Ok(()) if applies_to_mesh && *h == "*" => {
                r.err(
                    p,
                    "wildcard host * is not allowed for virtual services bound to the mesh gateway",
                );
                all_valid = false;
            }
            _ => {}
        }
    }
    if all_valid {
        for (i, a) in hosts.iter().enumerate() {
            for b in hosts.iter().skip(i + 1) {
                if hosts_overlap(a, b) {
                    r.err("spec.hosts", format!("duplicate hosts {a} and {b}"));
                }
            }
        }
    }

    let (http, tcp, tls) = (list(spec, "http"), list(spec, "tcp"), list(spec, "tls"));
    if http.is_empty() && tcp.is_empty() && tls.is_empty() {
        r.err(
            "spec",
            "at least one of http, tcp or tls routes must be provided",
        );
    }
    for (i, route) in http.iter().enumerate() {
        let p = idx("spec.http", i);
        if route.is_object() {
            check_http_route(r, &p, route);
        } else {
            r.err(p, "must not be null");
        }
    }
    for (i, route) in tls.iter().enumerate() {
        check_tls_route(r, &idx("spec.tls", i), route, &hosts, applies_to_gateway);
    }
    for (i, route) in tcp.iter().enumerate() {
        check_tcp_route(r, &idx("spec.tcp", i), route);
    }
    check_export_to(r, spec, namespace, false);
}

/// Match attributes shared by TLS and TCP routes.
fn check_l4_match(r: &mut Report, path: &str, m: &Value) {
    for (i, s) in strings(m, "destinationSubnets").iter().enumerate() {
        r.check(
            idx(&at(path, "destinationSubnets"), i),
            validate_ip_subnet(s),
        );
    }
    if int_field(m, "port").is_some_and(|p| p != 0) {
        check_port_field(r, path, m, "port");
    }
    check_labels(r, path, m, "sourceLabels");
    check_gateway_names(r, &at(path, "gateways"), &strings(m, "gateways"));
}

fn check_tls_route(
    r: &mut Report,
    path: &str,
    route: &Value,
    hosts: &[&str],
    applies_to_gateway: bool,
) {
    let matches = list(route, "match");
    if matches.is_empty() {
        r.err(at(path, "match"), "a TLS route needs at least one match");
    }
    for (i, m) in matches.iter().enumerate() {
        let p = idx(&at(path, "match"), i);
        if !m.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        let sni = strings(m, "sniHosts");
        if sni.is_empty() {
            r.err(
                at(&p, "sniHosts"),
                "a TLS match needs at least one SNI host",
            );
        }
        for (j, h) in sni.iter().enumerate() {
            check_sni_host(
                r,
                &idx(&at(&p, "sniHosts"), j),
                h,
                hosts,
                applies_to_gateway,
            );
        }
        check_l4_match(r, &p, m);
    }
    let routes = list(route, "route");
    if routes.is_empty() {
        r.err(
            at(path, "route"),
            "a TLS route needs at least one destination",
        );
    }
    check_route_destinations(r, &at(path, "route"), routes);
}

fn check_sni_host(r: &mut Report, path: &str, sni: &str, hosts: &[&str], gateway: bool) {
    // Gateways may route on Istio's auto-generated `outbound_.<port>_...`
    // SNI names.
    if gateway && sni.starts_with("outbound_.") {
        return;
    }
    if validate_wildcard_domain(sni).is_err() {
        // An IP goes against the SNI spec but Istio only warns about it.
        if !is_ip(sni) {
            r.check(path, validate_wildcard_domain(sni));
        }
        return;
    }
    if !hosts.iter().any(|h| host_subset_of(sni, h)) {
        r.err(
            path,
            format!(
                "SNI host {sni:?} is not a compatible subset of any of the virtual service hosts [{}]",
                hosts.join(", ")
            ),
        );
    }
}

fn check_tcp_route(r: &mut Report, path: &str, route: &Value) {
    for (i, m) in list(route, "match").iter().enumerate() {
        let p = idx(&at(path, "match"), i);
        if m.is_object() {
            check_l4_match(r, &p, m);
        } else {
            r.err(p, "must not be null");
        }
    }
    let routes = list(route, "route");
    if routes.is_empty() {
        r.err(
            at(path, "route"),
            "a TCP route needs at least one destination",
        );
    }
    check_route_destinations(r, &at(path, "route"), routes);
}
