//! Sidecar rules: ingress and egress listeners, and the outbound traffic
//! policy.

use serde_json::Value;

use crate::enums::{CAPTURE_MODE, OUTBOUND_MODE, SERVER_TLS_MODE};
use crate::hosts::check_namespaced_host;
use crate::json::{bool_field, enum_field, field, has, int_field, list, str_field, strings};
use crate::names::validate_fqdn;
use crate::net::{
    UNIX_PREFIX, validate_ip, validate_port, validate_port_name, validate_protocol,
    validate_unix_address,
};
use crate::report::{Report, at, idx};
use crate::selectors::check_selector_labels;

use super::connection_pool::check_connection_pool;
use super::destination::check_destination;
use super::gateway::check_server_tls;

/// Checks a Sidecar spec.
pub(crate) fn check(r: &mut Report, spec: &Value) {
    if let Some(sel) = field(spec, "workloadSelector") {
        check_selector_labels(r, "spec.workloadSelector", sel, "labels");
    }
    let ingress = list(spec, "ingress");
    let egress = list(spec, "egress");
    // Istio 1.5 demanded an egress listener; later releases accept any of
    // these, which still rejects the data set's empty Sidecar.
    if ingress.is_empty()
        && egress.is_empty()
        && !has(spec, "outboundTrafficPolicy")
        && !has(spec, "inboundConnectionPool")
    {
        r.err(
            "spec",
            "a sidecar must set at least one of egress, ingress, outboundTrafficPolicy or inboundConnectionPool",
        );
        return;
    }

    let mut ports: Vec<i64> = Vec::new();
    for (i, ing) in ingress.iter().enumerate() {
        let p = idx("spec.ingress", i);
        if !ing.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        let Some(port) = field(ing, "port") else {
            r.err(at(&p, "port"), "is required for ingress listeners");
            continue;
        };
        let pp = at(&p, "port");
        if int_field(port, "targetPort").is_some_and(|n| n > 0) {
            r.err(
                at(&pp, "targetPort"),
                "targetPort has no effect on sidecars",
            );
        }
        check_sidecar_port(r, &pp, port);
        let bind = str_field(ing, "bind");
        if !bind.is_empty() {
            r.check(at(&p, "bind"), validate_ip(bind));
        }
        let number = int_field(port, "number").unwrap_or(0);
        if ports.contains(&number) {
            r.err(
                at(&pp, "number"),
                "ports of IP bound listeners must be unique",
            );
        }
        ports.push(number);
        let ep = str_field(ing, "defaultEndpoint");
        if !ep.is_empty() {
            r.check(at(&p, "defaultEndpoint"), validate_default_endpoint(ep));
        }
        if let Some(tls) = field(ing, "tls") {
            let tp = at(&p, "tls");
            if !list(tls, "subjectAltNames").is_empty() {
                r.err(
                    at(&tp, "subjectAltNames"),
                    "not supported on sidecar ingress",
                );
            }
            if bool_field(tls, "httpsRedirect") {
                r.err(at(&tp, "httpsRedirect"), "not supported on sidecar ingress");
            }
            if !str_field(tls, "credentialName").is_empty() {
                r.err(
                    at(&tp, "credentialName"),
                    "not supported on sidecar ingress",
                );
            }
            let mode = enum_field(tls, "mode", &SERVER_TLS_MODE);
            if mode == "ISTIO_MUTUAL" || mode == "AUTO_PASSTHROUGH" {
                r.err(
                    at(&tp, "mode"),
                    format!("{mode} is not allowed on sidecar ingress"),
                );
            }
            let protocol = field(ing, "port").map_or("", |p| str_field(p, "protocol"));
            if !protocol.eq_ignore_ascii_case("HTTPS") && !protocol.eq_ignore_ascii_case("TLS") {
                r.err(
                    &tp,
                    "a sidecar ingress port with TLS settings must use protocol HTTPS or TLS",
                );
            }
            check_server_tls(r, &tp, tls);
        }
        if let Some(cp) = field(ing, "connectionPool") {
            check_connection_pool(r, &at(&p, "connectionPool"), cp);
        }
    }
    if let Some(cp) = field(spec, "inboundConnectionPool") {
        check_connection_pool(r, "spec.inboundConnectionPool", cp);
    }

    let mut ports: Vec<i64> = Vec::new();
    let mut sockets: Vec<&str> = Vec::new();
    let mut catch_all = false;
    for (i, eg) in egress.iter().enumerate() {
        let p = idx("spec.egress", i);
        if !eg.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        match field(eg, "port") {
            None => {
                // One catch-all listener without a port, and it comes last.
                if catch_all {
                    r.err(&p, "only one egress listener may omit the port");
                    continue;
                } else if i == egress.len() - 1 {
                    catch_all = true;
                } else {
                    r.err(
                        &p,
                        "the egress listener without a port must be the last one",
                    );
                }
            }
            Some(port) => {
                let pp = at(&p, "port");
                if int_field(port, "targetPort").is_some_and(|n| n > 0) {
                    r.err(
                        at(&pp, "targetPort"),
                        "targetPort has no effect on sidecars",
                    );
                }
                let bind = str_field(eg, "bind");
                let number = int_field(port, "number").unwrap_or(0);
                let name = str_field(port, "name");
                if !name.is_empty() {
                    r.check(at(&pp, "name"), validate_port_name(name));
                }
                r.check(
                    at(&pp, "protocol"),
                    validate_protocol(str_field(port, "protocol")),
                );
                if number == 0 {
                    match bind.strip_prefix(UNIX_PREFIX) {
                        None => r.err(
                            at(&p, "bind"),
                            "a listener with port 0 needs a unix domain socket bind address",
                        ),
                        Some(sock) => r.check(at(&p, "bind"), validate_unix_address(sock)),
                    }
                    let capture = enum_field(eg, "captureMode", &CAPTURE_MODE);
                    if capture != "DEFAULT" && capture != "NONE" {
                        r.err(
                            at(&p, "captureMode"),
                            "must be DEFAULT or NONE for unix domain socket listeners",
                        );
                    }
                    if sockets.contains(&bind) {
                        r.err(
                            at(&p, "bind"),
                            "unix domain sockets of listeners must be unique",
                        );
                    }
                    sockets.push(bind);
                } else {
                    r.check(at(&pp, "number"), validate_port(number));
                    if !bind.is_empty() {
                        r.check(at(&p, "bind"), validate_ip(bind));
                    }
                    if ports.contains(&number) {
                        r.err(
                            at(&pp, "number"),
                            "ports of IP bound listeners must be unique",
                        );
                    }
                    ports.push(number);
                }
            }
        }
        let hosts = strings(eg, "hosts");
        if hosts.is_empty() {
            r.err(
                at(&p, "hosts"),
                "an egress listener needs at least one host",
            );
        }
        for (j, h) in hosts.iter().enumerate() {
            check_namespaced_host(r, &idx(&at(&p, "hosts"), j), h, false);
        }
    }

    if let Some(tp) = field(spec, "outboundTrafficPolicy") {
        let p = "spec.outboundTrafficPolicy";
        if let Some(proxy) = field(tp, "egressProxy") {
            let pp = at(p, "egressProxy");
            if enum_field(tp, "mode", &OUTBOUND_MODE) != "ALLOW_ANY" {
                r.err(&pp, "egressProxy may only be set with mode ALLOW_ANY");
            } else {
                r.check(at(&pp, "host"), validate_fqdn(str_field(proxy, "host")));
                if has(proxy, "port") {
                    check_destination(r, &pp, proxy);
                } else {
                    r.err(at(&pp, "port"), "is required");
                }
            }
        }
    }
}

/// A sidecar listener port: optional DNS-label name, known protocol, valid
/// number.
fn check_sidecar_port(r: &mut Report, path: &str, port: &Value) {
    let name = str_field(port, "name");
    if !name.is_empty() {
        r.check(at(path, "name"), validate_port_name(name));
    }
    r.check(
        at(path, "protocol"),
        validate_protocol(str_field(port, "protocol")),
    );
    r.check(
        at(path, "number"),
        validate_port(int_field(port, "number").unwrap_or(0)),
    );
}

/// Where sidecar ingress forwards to: `unix://path`, or a loopback or
/// unspecified address with a port (`127.0.0.1:8080`, `[::1]:8080`,
/// `0.0.0.0:8080`, `:8080`).
fn validate_default_endpoint(ep: &str) -> Result<(), String> {
    if let Some(sock) = ep.strip_prefix(UNIX_PREFIX) {
        return validate_unix_address(sock);
    }
    let bad = || {
        "must be of the form 127.0.0.1:<port>, 0.0.0.0:<port>, [::1]:<port>, [::]:<port> or unix://<path>"
            .to_string()
    };
    let (host, port) = ep.rsplit_once(':').ok_or_else(bad)?;
    let host = match host.strip_prefix('[') {
        Some(h) => h.strip_suffix(']').ok_or_else(bad)?,
        None if host.contains(':') => return Err(bad()),
        None => host,
    };
    if !matches!(host, "" | "127.0.0.1" | "0.0.0.0" | "::1" | "::") {
        return Err(bad());
    }
    let port: i64 = port
        .parse()
        .map_err(|_| format!("port {port:?} of defaultEndpoint is not a number"))?;
    validate_port(port)
}
