//! WorkloadEntry and WorkloadGroup rules, and the workload address checks a
//! ServiceEntry's endpoints share.

use serde_json::Value;

use crate::http::validate_probe_header_name;
use crate::json::{as_int, field, has, int_field, list, map, str_field};
use crate::names::validate_fqdn;
use crate::net::{UNIX_PREFIX, is_ip, validate_port, validate_port_name, validate_unix_address};
use crate::report::{Report, at, idx, key};
use crate::selectors::check_labels;

/// Checks a WorkloadEntry spec.
pub(crate) fn check_entry(r: &mut Report, spec: &Value) {
    check_workload_entry(r, "spec", spec, None, true);
}

/// Checks a WorkloadGroup spec.
pub(crate) fn check_group(r: &mut Report, spec: &Value) {
    if !has(spec, "template") {
        r.err("spec.template", "is required");
    }
    if let Some(meta) = field(spec, "metadata") {
        check_labels(r, "spec.metadata", meta, "labels");
    }
    // The CRD: every port of the template is in 1..65535.
    if let Some(t) = field(spec, "template") {
        let pp = at(&at("spec", "template"), "ports");
        for (name, n) in map(t, "ports").into_iter().flatten() {
            r.check(key(&pp, name), validate_port(as_int(n).unwrap_or(0)));
        }
    }
    let Some(probe) = field(spec, "probe") else {
        return;
    };
    let p = "spec.probe";
    for f in [
        "periodSeconds",
        "initialDelaySeconds",
        "timeoutSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        if int_field(probe, f).is_some_and(|n| n < 0) {
            r.err(at(p, f), "must not be negative");
        }
    }
    if let Some(h) = field(probe, "httpGet") {
        let hp = at(p, "httpGet");
        r.check(
            at(&hp, "port"),
            validate_port(int_field(h, "port").unwrap_or(0)),
        );
        let scheme = str_field(h, "scheme");
        if !scheme.is_empty() && scheme != "HTTP" && scheme != "HTTPS" {
            r.err(at(&hp, "scheme"), "must be HTTP or HTTPS");
        }
        for (i, hdr) in list(h, "httpHeaders").iter().enumerate() {
            r.check(
                at(&idx(&at(&hp, "httpHeaders"), i), "name"),
                validate_probe_header_name(str_field(hdr, "name")),
            );
        }
    } else if let Some(t) = field(probe, "tcpSocket") {
        r.check(
            at(&at(p, "tcpSocket"), "port"),
            validate_port(int_field(t, "port").unwrap_or(0)),
        );
    } else if let Some(e) = field(probe, "exec") {
        if list(e, "command").is_empty() {
            r.err(at(&at(p, "exec"), "command"), "is required");
        }
    } else {
        r.err(p, "a probe needs one of httpGet, tcpSocket or exec");
    }
}

pub(crate) fn check_endpoint_ports(
    r: &mut Report,
    path: &str,
    ep: &Value,
    service_ports: Option<&[&str]>,
) {
    let pp = at(path, "ports");
    for (name, n) in map(ep, "ports").into_iter().flatten() {
        let p = key(&pp, name);
        if service_ports.is_some_and(|sp| !sp.contains(&name.as_str())) {
            r.err(&p, "port is not defined by the service entry");
        }
        r.check(&p, validate_port_name(name));
        r.check(&p, validate_port(as_int(n).unwrap_or(0)));
    }
}

/// A workload address: WorkloadEntry, or a ServiceEntry endpoint (where
/// `service_ports` lists the entry's port names and host names are only
/// allowed for DNS resolution).
pub(crate) fn check_workload_entry(
    r: &mut Report,
    path: &str,
    we: &Value,
    service_ports: Option<&[&str]>,
    allow_fqdn: bool,
) {
    let addr = str_field(we, "address");
    if addr.is_empty() && str_field(we, "network").is_empty() {
        r.err(at(path, "address"), "is required unless a network is set");
        return;
    }
    let unix = addr.starts_with(UNIX_PREFIX);
    if let Some(sock) = addr.strip_prefix(UNIX_PREFIX) {
        r.check(at(path, "address"), validate_unix_address(sock));
        if map(we, "ports").is_some_and(|m| !m.is_empty()) {
            r.err(at(path, "ports"), "a unix endpoint must not have ports");
        }
    } else if !addr.is_empty() && !is_ip(addr) {
        if !allow_fqdn {
            r.err(
                at(path, "address"),
                format!("endpoint address {addr:?} is not a valid IP address"),
            );
        } else if validate_fqdn(addr).is_err() {
            r.err(
                at(path, "address"),
                format!("endpoint address {addr:?} is not a valid FQDN or IP address"),
            );
        }
    }
    check_endpoint_ports(r, path, we, service_ports);
    check_labels(r, path, we, "labels");
    if unix && service_ports.is_some_and(|sp| sp.len() != 1) {
        r.err(path, "a unix endpoint needs exactly one service port");
    }
}
