//! ServiceEntry rules: hosts, addresses, ports, and endpoints by
//! resolution.

use serde_json::Value;

use crate::enums::RESOLUTION;
use crate::hosts::check_export_to;
use crate::json::{enum_field, field, has, int_field, list, str_field, strings};
use crate::names::{validate_fqdn, validate_wildcard_domain};
use crate::net::{
    Protocol, check_port_field, is_ip, validate_ip_subnet, validate_port, validate_port_name,
    validate_protocol,
};
use crate::report::{Report, at, idx};
use crate::selectors::{check_labels, check_selector_labels};

use super::workload::{check_endpoint_ports, check_workload_entry};

/// Checks a ServiceEntry spec.
pub(crate) fn check(r: &mut Report, spec: &Value, namespace: &str) {
    if let Some(sel) = field(spec, "workloadSelector") {
        check_selector_labels(r, "spec.workloadSelector", sel, "labels");
        if has(spec, "endpoints") {
            r.err(
                "spec",
                "only one of workloadSelector and endpoints can be set",
            );
        }
    }
    let hosts = strings(spec, "hosts");
    // `hosts: []` is the CRD's minItems, said in its words (limits.tsv).
    let empty_list = field(spec, "hosts")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty);
    if hosts.is_empty() && !empty_list {
        r.err("spec.hosts", "must not be empty");
    }
    for (i, h) in hosts.iter().enumerate() {
        let p = idx("spec.hosts", i);
        if *h == "*" {
            r.err(p, "the full wildcard host * is not allowed");
        } else {
            r.check(p, validate_wildcard_domain(h));
        }
    }
    let resolution = enum_field(spec, "resolution", &RESOLUTION);
    let addresses = strings(spec, "addresses");
    let mut cidr = false;
    for (i, a) in addresses.iter().enumerate() {
        cidr |= a.contains('/');
        r.check(idx("spec.addresses", i), validate_ip_subnet(a));
    }
    if cidr && resolution != "NONE" && resolution != "STATIC" {
        r.err(
            "spec.addresses",
            "CIDR addresses are allowed only for NONE/STATIC resolution",
        );
    }

    let ports = list(spec, "ports");
    let mut names: Vec<&str> = Vec::new();
    let mut numbers: Vec<i64> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let p = idx("spec.ports", i);
        if !port.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        let name = str_field(port, "name");
        let number = int_field(port, "number").unwrap_or(0);
        if names.contains(&name) {
            r.err(
                at(&p, "name"),
                format!("port name {name:?} is already defined"),
            );
        }
        if numbers.contains(&number) {
            r.err(
                at(&p, "number"),
                format!("port {number} is already defined"),
            );
        }
        names.push(name);
        numbers.push(number);
        // Set (even to 0), it must be a port (the CRD's rule).
        if field(port, "targetPort").is_some() {
            check_port_field(r, &p, port, "targetPort");
        }
        r.check(at(&p, "name"), validate_port_name(name));
        r.check(
            at(&p, "protocol"),
            validate_protocol(str_field(port, "protocol")),
        );
        r.check(at(&p, "number"), validate_port(number));
    }

    let endpoints = list(spec, "endpoints");
    match resolution {
        "NONE" => {
            if !endpoints.is_empty() {
                r.err(
                    "spec.endpoints",
                    "no endpoints may be given for resolution NONE",
                );
            }
        }
        "STATIC" => {
            for (i, ep) in endpoints.iter().enumerate() {
                let p = idx("spec.endpoints", i);
                if ep.is_object() {
                    check_workload_entry(r, &p, ep, Some(&names), false);
                } else {
                    r.err(p, "must not be null");
                }
            }
        }
        "DNS" | "DNS_ROUND_ROBIN" => {
            if endpoints.is_empty() {
                for (i, h) in hosts.iter().enumerate() {
                    if validate_fqdn(h).is_err() {
                        r.err(
                            idx("spec.hosts", i),
                            format!("hosts must be FQDNs when no endpoints are given for resolution {resolution}"),
                        );
                    }
                }
            }
            if resolution == "DNS_ROUND_ROBIN" && endpoints.len() > 1 {
                r.err(
                    "spec.endpoints",
                    "resolution DNS_ROUND_ROBIN allows at most one endpoint",
                );
            }
            for (i, ep) in endpoints.iter().enumerate() {
                let p = idx("spec.endpoints", i);
                if !ep.is_object() {
                    r.err(p, "must not be null");
                    continue;
                }
                let addr = str_field(ep, "address");
                if !is_ip(addr) && validate_fqdn(addr).is_err() {
                    r.err(
                        at(&p, "address"),
                        format!("endpoint address {addr:?} is not a valid FQDN or IP address"),
                    );
                }
                check_labels(r, &p, ep, "labels");
                check_endpoint_ports(r, &p, ep, Some(&names));
            }
        }
        // Only ztunnel and waypoints support it: wildcard hosts, plain
        // HTTP ports, nothing that names addresses.
        "DYNAMIC_DNS" => {
            for (i, h) in hosts.iter().enumerate() {
                if !h.starts_with('*') {
                    r.err(
                        idx("spec.hosts", i),
                        "host must be wildcarded for resolution DYNAMIC_DNS",
                    );
                }
            }
            if !addresses.is_empty() {
                r.err(
                    "spec.addresses",
                    "addresses cannot be set for resolution DYNAMIC_DNS",
                );
            }
            if !endpoints.is_empty() {
                r.err(
                    "spec.endpoints",
                    "endpoints cannot be set for resolution DYNAMIC_DNS",
                );
            }
            for (i, port) in ports.iter().enumerate() {
                if !str_field(port, "protocol").eq_ignore_ascii_case("HTTP") {
                    r.err(
                        at(&idx("spec.ports", i), "protocol"),
                        "only HTTP is supported for resolution DYNAMIC_DNS",
                    );
                }
            }
            if !matches!(spec.get("location"), None | Some(Value::Null))
                && spec.get("location").and_then(Value::as_str) != Some("MESH_EXTERNAL")
            {
                r.err(
                    "spec.location",
                    "must be MESH_EXTERNAL for resolution DYNAMIC_DNS",
                );
            }
        }
        other => r.err(
            "spec.resolution",
            format!("unsupported resolution {other:?}"),
        ),
    }

    // Plain TCP cannot tell several hosts apart; HTTP (Host header) and TLS
    // (SNI) can. Resolution NONE ignores hosts.
    if resolution != "NONE" && hosts.len() > 1 {
        let opaque = ports.iter().any(|p| {
            Protocol::parse(str_field(p, "protocol")).is_none_or(|p| !p.is_http() && !p.is_tls())
        });
        if opaque {
            r.err(
                "spec.ports",
                "multiple hosts need HTTP or TLS ports unless resolution is NONE",
            );
        }
    }
    check_export_to(r, spec, namespace, true);
}
