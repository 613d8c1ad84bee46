//! Gateway rules: servers, their ports and hosts, and downstream TLS
//! (which Sidecar ingress listeners share).

use serde_json::Value;

use crate::enums::SERVER_TLS_MODE;
use crate::hosts::check_namespaced_host;
use crate::json::{enum_field, field, int_field, list, str_field, strings};
use crate::names::is_hostname_label;
use crate::net::{Protocol, UNIX_PREFIX, validate_ip, validate_port, validate_unix_address};
use crate::report::{Report, at, idx};

/// Checks a Gateway spec; `name` is the object's name, which must be a DNS
/// label because routes refer to it as `namespace/name`.
pub(crate) fn check(r: &mut Report, spec: &Value, name: &str) {
    if !is_hostname_label(name) {
        r.err("metadata.name", format!("invalid gateway name {name:?}"));
    }
    let servers = list(spec, "servers");
    if servers.is_empty() {
        r.err("spec.servers", "a gateway must have at least one server");
    }
    let mut port_names: Vec<&str> = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let p = idx("spec.servers", i);
        if !server.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        check_server(r, &p, server);
        if let Some(port) = field(server, "port") {
            let pname = str_field(port, "name");
            if port_names.contains(&pname) {
                r.err(
                    at(&at(&p, "port"), "name"),
                    format!("port names of servers must be unique: duplicate {pname:?}"),
                );
            }
            port_names.push(pname);
        }
    }
}

fn check_server(r: &mut Report, path: &str, server: &Value) {
    let hosts = strings(server, "hosts");
    if hosts.is_empty() {
        r.err(at(path, "hosts"), "a server must have at least one host");
    }
    for (i, h) in hosts.iter().enumerate() {
        check_namespaced_host(r, &idx(&at(path, "hosts"), i), h, true);
    }
    let bind = str_field(server, "bind");
    let port = field(server, "port");
    let mut port_ok = true;
    match port {
        None => {
            r.err(at(path, "port"), "is required");
            port_ok = false;
        }
        Some(port) => {
            let pp = at(path, "port");
            let proto = str_field(port, "protocol");
            if Protocol::parse(proto).is_none() {
                r.err(
                    at(&pp, "protocol"),
                    format!("invalid protocol {proto:?}; use HTTP, HTTPS, HTTP2, GRPC, GRPC-WEB, TLS, TCP, MONGO, REDIS or MYSQL"),
                );
                port_ok = false;
            }
            let number = int_field(port, "number").unwrap_or(0);
            if (number != 0 || !bind.starts_with(UNIX_PREFIX))
                && let Err(e) = validate_port(number)
            {
                r.err(at(&pp, "number"), e);
                port_ok = false;
            }
            if int_field(port, "targetPort").is_some_and(|n| n > 0) {
                r.err(
                    at(&pp, "targetPort"),
                    "targetPort has no effect on gateways",
                );
                port_ok = false;
            }
            if str_field(port, "name").is_empty() {
                r.err(at(&pp, "name"), "must be set");
                port_ok = false;
            }
        }
    }
    if let Some(path_part) = bind.strip_prefix(UNIX_PREFIX) {
        r.check(at(path, "bind"), validate_unix_address(path_part));
        if port
            .and_then(|p| int_field(p, "number"))
            .is_some_and(|n| n != 0)
        {
            r.err(
                at(&at(path, "port"), "number"),
                "must be 0 for a unix domain socket bind",
            );
        }
    } else if !bind.is_empty() {
        r.check(at(path, "bind"), validate_ip(bind));
    }
    let tls = field(server, "tls");
    if let Some(t) = tls {
        check_server_tls(r, &at(path, "tls"), t);
    }
    if !port_ok {
        return;
    }
    let Some(proto) = port.and_then(|p| Protocol::parse(str_field(p, "protocol"))) else {
        return;
    };
    match tls {
        None if proto.is_tls() => r.err(
            at(path, "tls"),
            "a server on an HTTPS or TLS port must have TLS settings",
        ),
        Some(t) if !proto.is_tls() => {
            if proto.is_http() {
                // Plain HTTP servers may only carry httpsRedirect.
                let mode = enum_field(t, "mode", &SERVER_TLS_MODE);
                let passthrough = mode == "PASSTHROUGH" || mode == "AUTO_PASSTHROUGH";
                let certs = ["caCertificates", "privateKey", "serverCertificate"]
                    .iter()
                    .any(|f| !str_field(t, f).is_empty());
                if !passthrough || certs {
                    r.err(
                        at(path, "tls"),
                        "a server on a plain text HTTP port cannot have TLS settings other than httpsRedirect",
                    );
                }
            } else {
                r.err(
                    at(path, "tls"),
                    "a server on a non-HTTPS/TLS port cannot have TLS settings",
                );
            }
        }
        _ => {}
    }
}

/// Downstream TLS settings (Gateway servers, Sidecar ingress).
pub(crate) fn check_server_tls(r: &mut Report, path: &str, tls: &Value) {
    let mode = enum_field(tls, "mode", &SERVER_TLS_MODE);
    let s = |f| !str_field(tls, f).is_empty();
    let credential_sources = usize::from(s("credentialName"))
        + usize::from(!list(tls, "credentialNames").is_empty())
        + usize::from(!list(tls, "tlsCertificates").is_empty());
    if credential_sources > 1 {
        r.err(
            path,
            "only one of credentialName, credentialNames or tlsCertificates can be set",
        );
    }
    if mode == "ISTIO_MUTUAL" {
        for f in [
            "serverCertificate",
            "privateKey",
            "caCertificates",
            "credentialName",
        ] {
            if s(f) {
                r.err(at(path, f), "ISTIO_MUTUAL TLS cannot set it");
            }
        }
        return;
    }
    let mutual = mode == "MUTUAL" || mode == "OPTIONAL_MUTUAL";
    if (mode == "SIMPLE" || mutual) && credential_sources > 0 {
        // The credentials come from a secret (or the listed files).
        return;
    }
    if mode == "SIMPLE" || mutual {
        let label = if mutual { "MUTUAL" } else { "SIMPLE" };
        if !s("serverCertificate") {
            r.err(
                at(path, "serverCertificate"),
                format!("is required for {label} TLS"),
            );
        }
        if !s("privateKey") {
            r.err(
                at(path, "privateKey"),
                format!("is required for {label} TLS"),
            );
        }
        if mutual && !s("caCertificates") {
            r.err(at(path, "caCertificates"), "is required for MUTUAL TLS");
        }
    }
    if s("caCrl") && mode == "SIMPLE" {
        r.err(at(path, "caCrl"), "CRL is not supported with SIMPLE TLS");
    }
}
