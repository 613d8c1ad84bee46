//! Rules for the `security.istio.io` kinds: AuthorizationPolicy,
//! PeerAuthentication and RequestAuthentication.

use std::sync::LazyLock;

use serde_json::Value;

use crate::enums::AUTHORIZATION_ACTION;
use crate::http::validate_header_name;
use crate::json::{enum_field, field, has, list, map, str_field, strings};
use crate::limits::over_in_bytes_only;
use crate::net::validate_ip_subnet;
use crate::report::{Report, at, idx, key};
use crate::selectors::{check_policy_target, check_selector_labels};
use crate::values::check_duration;

/// Fields of an AuthorizationPolicy `Source`.
const SOURCE_FIELDS: &[&str] = &[
    "principals",
    "notPrincipals",
    "requestPrincipals",
    "notRequestPrincipals",
    "namespaces",
    "notNamespaces",
    "ipBlocks",
    "notIpBlocks",
    "remoteIpBlocks",
    "notRemoteIpBlocks",
    "serviceAccounts",
    "notServiceAccounts",
    "trustDomains",
    "notTrustDomains",
];

/// Fields of an AuthorizationPolicy `Operation`.
const OPERATION_FIELDS: &[&str] = &[
    "hosts",
    "notHosts",
    "ports",
    "notPorts",
    "methods",
    "notMethods",
    "paths",
    "notPaths",
];

/// Source fields the CUSTOM action cannot use yet.
const CUSTOM_UNSUPPORTED_SOURCE: &[&str] = &[
    "principals",
    "notPrincipals",
    "requestPrincipals",
    "notRequestPrincipals",
    "namespaces",
    "notNamespaces",
    "trustDomains",
    "notTrustDomains",
];

/// Path templates (`{*}`, `{**}`) Envoy cannot match: named variables,
/// empty braces, and bare `*`/`**` segments.
static UNSUPPORTED_PATH_TEMPLATE: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"/\{\w+=\*\*?\}|\{\w*\}|/\*\*?|\*\*?/").ok());

/// Checks an AuthorizationPolicy spec.
pub(crate) fn authorization_policy(r: &mut Report, spec: &Value) {
    check_policy_target(r, spec);
    let action = enum_field(spec, "action", &AUTHORIZATION_ACTION);
    let rules = list(spec, "rules");
    let provider = field(spec, "provider");

    if action == "CUSTOM" {
        if rules.is_empty() {
            r.err(
                "spec.rules",
                "CUSTOM action without rules never triggers; add an empty rule {} to trigger it for every request",
            );
        } else if provider.is_none_or(|p| str_field(p, "name").is_empty()) {
            r.err(
                "spec.provider.name",
                "must not be empty for the CUSTOM action",
            );
        }
        for (i, rule) in rules.iter().enumerate() {
            let rp = idx("spec.rules", i);
            for (j, from) in list(rule, "from").iter().enumerate() {
                let Some(src) = field(from, "source") else {
                    continue;
                };
                for f in CUSTOM_UNSUPPORTED_SOURCE {
                    if !list(src, f).is_empty() {
                        r.err(
                            at(&at(&idx(&at(&rp, "from"), j), "source"), f),
                            "not supported with the CUSTOM action",
                        );
                    }
                }
            }
            for (j, when) in list(rule, "when").iter().enumerate() {
                let k = str_field(when, "key");
                if k == "source.namespace"
                    || k == "source.principal"
                    || k == "source.trustDomain"
                    || k.starts_with("request.auth.")
                {
                    r.err(
                        at(&idx(&at(&rp, "when"), j), "key"),
                        format!("{k} is not supported with the CUSTOM action"),
                    );
                }
            }
        }
    } else if provider.is_some() {
        r.err(
            "spec.provider",
            format!("only allowed with the CUSTOM action, found {action}"),
        );
    }
    if action == "DENY" && rules.is_empty() {
        r.err(
            "spec.rules",
            "DENY action without rules never triggers; add an empty rule {} to trigger it for every request",
        );
    }

    for (i, rule) in rules.iter().enumerate() {
        let rp = idx("spec.rules", i);
        if !rule.is_object() {
            r.err(rp, "must not be null");
            continue;
        }
        for (j, from) in list(rule, "from").iter().enumerate() {
            let fp = idx(&at(&rp, "from"), j);
            match field(from, "source") {
                None => r.err(at(&fp, "source"), "must not be null"),
                Some(src) => check_source(r, &at(&fp, "source"), src),
            }
        }
        for (j, to) in list(rule, "to").iter().enumerate() {
            let tp = idx(&at(&rp, "to"), j);
            match field(to, "operation") {
                None => r.err(at(&tp, "operation"), "must not be null"),
                Some(op) => check_operation(r, &at(&tp, "operation"), op),
            }
        }
        for (j, cond) in list(rule, "when").iter().enumerate() {
            check_condition(r, &idx(&at(&rp, "when"), j), cond);
        }
    }
}

/// Empty strings in a match list would match nothing or everything.
fn check_no_empty_values(r: &mut Report, path: &str, v: &Value, name: &str) {
    for (i, s) in list(v, name).iter().enumerate() {
        if s.as_str() == Some("") {
            r.err(idx(&at(path, name), i), "empty value not allowed");
        }
    }
}

fn check_ips(r: &mut Report, path: &str, v: &Value, name: &str) {
    for (i, ip) in strings(v, name).iter().enumerate() {
        if !ip.is_empty() {
            r.check(idx(&at(path, name), i), validate_ip_subnet(ip));
        }
    }
}

fn check_source(r: &mut Report, path: &str, src: &Value) {
    if !SOURCE_FIELDS.iter().any(|f| !list(src, f).is_empty()) {
        r.err(path, "must not be empty");
    }
    let set = |fs: &[&str]| fs.iter().any(|f| !list(src, f).is_empty());
    if set(&["principals", "notPrincipals", "namespaces", "notNamespaces"])
        && set(&["serviceAccounts", "notServiceAccounts"])
    {
        r.err(
            path,
            "cannot set serviceAccounts with namespaces or principals",
        );
    }
    for f in ["serviceAccounts", "notServiceAccounts"] {
        r.check(at(path, f), check_service_accounts(&strings(src, f)));
    }
    for f in ["trustDomains", "notTrustDomains"] {
        r.check(at(path, f), check_trust_domains(&strings(src, f)));
    }
    for f in [
        "ipBlocks",
        "notIpBlocks",
        "remoteIpBlocks",
        "notRemoteIpBlocks",
    ] {
        check_ips(r, path, src, f);
    }
    for f in SOURCE_FIELDS {
        check_no_empty_values(r, path, src, f);
    }
}

/// Istio's `CheckWildcardValues` (1.30+): at most one `*`, and only at
/// the start or end (`*` alone included). Empty values are reported by
/// [`check_no_empty_values`].
fn check_wildcards(values: &[&str]) -> Result<(), String> {
    for v in values {
        let count = v.matches('*').count();
        if count > 1 {
            return Err(format!("at most one wildcard is allowed, found {v:?}"));
        }
        if count == 1 && !v.starts_with('*') && !v.ends_with('*') {
            return Err(format!(
                "wildcard is only allowed at the start or end, found {v:?}"
            ));
        }
    }
    Ok(())
}

/// Istio's `CheckTrustDomainValues` (1.30+): wildcard values without `/`.
fn check_trust_domains(values: &[&str]) -> Result<(), String> {
    check_wildcards(values)?;
    match values.iter().find(|v| v.contains('/')) {
        Some(v) => Err(format!("trust domain must not contain '/', found {v:?}")),
        None => Ok(()),
    }
}

/// Istio's `CheckServiceAccount`: each value `serviceAccount` or
/// `namespace/serviceAccount`, no wildcard, at most 320 bytes. Its other
/// bounds (at most 16 values, 320 characters) are the CRD's too, and said
/// in the CRD's words (limits.tsv).
fn check_service_accounts(values: &[&str]) -> Result<(), String> {
    for v in values {
        if v.contains('*') {
            return Err(format!("wildcard not allowed, found {v:?}"));
        }
        if v.matches('/').count() > 1 {
            return Err(format!(
                "expected format 'serviceAccount' or 'namespace/serviceAccount', found {v:?}"
            ));
        }
        if over_in_bytes_only(v, 320) {
            return Err(format!("value cannot exceed 320 bytes, found {v:?}"));
        }
        if let Some((ns, sa)) = v.split_once('/')
            && (ns.is_empty() || sa.is_empty())
        {
            return Err(format!(
                "expected format 'serviceAccount' or 'namespace/serviceAccount', found {v:?}"
            ));
        }
    }
    Ok(())
}

fn check_operation(r: &mut Report, path: &str, op: &Value) {
    if !OPERATION_FIELDS.iter().any(|f| !list(op, f).is_empty()) {
        r.err(path, "must not be empty");
    }
    for f in ["ports", "notPorts"] {
        for (i, p) in strings(op, f).iter().enumerate() {
            if !p.is_empty() && p.parse::<u16>().is_err() {
                r.err(idx(&at(path, f), i), format!("bad port {p:?}"));
            }
        }
    }
    for f in OPERATION_FIELDS {
        check_no_empty_values(r, path, op, f);
    }
    for f in ["paths", "notPaths"] {
        for (i, p) in strings(op, f).iter().enumerate() {
            let template = p.contains("{*}") || p.contains("{**}");
            let unsupported = UNSUPPORTED_PATH_TEMPLATE
                .as_ref()
                .is_some_and(|re| re.is_match(p));
            if template && unsupported {
                r.err(idx(&at(path, f), i), "invalid or unsupported path template");
            }
        }
    }
}

fn check_condition(r: &mut Report, path: &str, cond: &Value) {
    let k = str_field(cond, "key");
    if k.is_empty() {
        r.err(at(path, "key"), "must not be empty");
        return;
    }
    let values = strings(cond, "values");
    let not_values = strings(cond, "notValues");
    if values.is_empty() && not_values.is_empty() {
        r.err(
            path,
            format!("at least one of values or notValues must be set for key {k}"),
        );
        return;
    }
    for (name, vals) in [("values", &values), ("notValues", &not_values)] {
        if vals.is_empty() {
            continue;
        }
        if let Err(e) = validate_attribute(k, vals) {
            r.err(at(path, name), format!("invalid value for key {k}: {e}"));
        }
    }
}

/// A `key[name]` attribute: the bracketed name must not be empty.
fn validate_map_key(k: &str) -> Result<(), String> {
    match k.find('[') {
        Some(open) if k.ends_with(']') && open > 0 && open + 2 < k.len() => Ok(()),
        _ => Err(format!("bad key {k:?}: should have the form a[b]")),
    }
}

/// Condition keys Istio knows, and what their values must look like.
fn validate_attribute(k: &str, values: &[&str]) -> Result<(), String> {
    if values.iter().any(|v| v.is_empty()) {
        return Err("empty value not allowed".into());
    }
    let ips = || values.iter().try_for_each(|v| validate_ip_subnet(v));
    match k {
        "source.ip" | "remote.ip" | "destination.ip" => ips(),
        "destination.port" => values.iter().try_for_each(|v| {
            v.parse::<u16>()
                .map(|_| ())
                .map_err(|_| format!("bad port {v:?}"))
        }),
        // Istio 1.30+.
        "source.trustDomain" => check_wildcards(values),
        "source.namespace"
        | "source.principal"
        | "source.serviceAccount"
        | "request.auth.principal"
        | "request.auth.audiences"
        | "request.auth.presenter"
        | "connection.sni" => Ok(()),
        "destination.namespace" => Err(format!(
            "attribute {k} is replaced by the policy's metadata.namespace"
        )),
        "destination.name" | "destination.user" => Err(format!(
            "deprecated attribute {k}: only supported in v1alpha1"
        )),
        _ if k.starts_with("request.headers")
            || k.starts_with("request.auth.claims")
            || k.starts_with("experimental.envoy.filters.") =>
        {
            validate_map_key(k)
        }
        _ if k.starts_with("destination.labels") => Err(format!(
            "attribute {k} is replaced by the workload selector"
        )),
        _ => Err(format!("unknown attribute {k}")),
    }
}

/// Checks a PeerAuthentication spec.
pub(crate) fn peer_authentication(r: &mut Report, spec: &Value) {
    let empty_selector = field(spec, "selector")
        .and_then(|s| map(s, "matchLabels"))
        .is_none_or(|m| m.is_empty());
    let ports = map(spec, "portLevelMtls");
    if let Some(ports) = ports {
        // An explicitly empty map is refused by istiod and by the CRD's
        // minProperties alike: said once, in the CRD's words (limits.tsv).
        if !ports.is_empty() && empty_selector {
            r.err(
                "spec.portLevelMtls",
                "mesh- or namespace-wide peer authentication (no selector) cannot have port level mTLS",
            );
        }
        for port in ports.keys() {
            let ok = port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
            if !ok {
                r.err(
                    key("spec.portLevelMtls", port),
                    "port must be in the range 1..65535",
                );
            }
        }
    }
    if let Some(sel) = field(spec, "selector") {
        check_selector_labels(r, "spec.selector", sel, "matchLabels");
    }
}

/// Checks a RequestAuthentication spec.
pub(crate) fn request_authentication(r: &mut Report, spec: &Value) {
    check_policy_target(r, spec);
    for (i, rule) in list(spec, "jwtRules").iter().enumerate() {
        if rule.is_object() {
            check_jwt_rule(r, &idx("spec.jwtRules", i), rule);
        }
    }
}

fn check_jwt_rule(r: &mut Report, path: &str, rule: &Value) {
    // `issuer` is optional when `jwksUri` is set. Set, none of the strings
    // of a rule (`issuer`, `jwksUri`, audiences, claims, headers, params,
    // cookies) is empty: the CRD's minLength says so (limits.tsv), once.
    if !["issuer", "jwksUri", "jwks_uri"]
        .iter()
        .any(|f| rule.get(*f).is_some_and(Value::is_string))
    {
        r.err(path, "issuer or jwksUri must be a non-empty string");
    }
    // The CRD also takes the proto name `jwks_uri`; at most one of the
    // three key sources may be present.
    let present = ["jwksUri", "jwks_uri", "jwks"]
        .iter()
        .filter(|f| rule.get(**f).is_some_and(|v| !v.is_null()))
        .count();
    if present > 1 {
        r.err(path, "only one of jwks or jwksUri can be set");
    }
    for f in ["jwksUri", "jwks_uri"] {
        let uri = str_field(rule, f);
        if !uri.is_empty() {
            r.check(at(path, f), validate_jwks_uri(uri));
        }
    }
    let jwks = str_field(rule, "jwks");
    if !jwks.is_empty() {
        r.check(at(path, "jwks"), validate_jwks(jwks));
    }
    for (i, h) in list(rule, "fromHeaders").iter().enumerate() {
        let p = idx(&at(path, "fromHeaders"), i);
        if !h.is_object() {
            r.err(p, "must not be null");
        } else if !has(h, "name") {
            r.err(at(&p, "name"), "must not be empty");
        }
    }
    for (i, oc) in list(rule, "outputClaimToHeaders").iter().enumerate() {
        let p = idx(&at(path, "outputClaimToHeaders"), i);
        let (claim, header) = (str_field(oc, "claim"), str_field(oc, "header"));
        if !has(oc, "claim") || !has(oc, "header") {
            r.err(p, "claim and header must both be set");
        } else if !claim.is_empty() && !header.is_empty() {
            r.check(at(&p, "header"), validate_header_name(header));
        }
    }
    check_duration(r, path, rule, "timeout");
}

/// A JWKS location: an `http` or `https` URL with a host and, if given, a
/// numeric port.
fn validate_jwks_uri(uri: &str) -> Result<(), String> {
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or_else(|| format!("{uri:?} is not a valid URL"))?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(format!(
            "URI scheme {scheme:?} is not supported; use http or https"
        ));
    }
    if uri.chars().any(|c| c.is_control() || c == ' ') {
        return Err(format!("{uri:?} is not a valid URL"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (h, tail) = v6
            .split_once(']')
            .ok_or_else(|| format!("{uri:?} has an invalid IPv6 host"))?;
        (h, tail.strip_prefix(':'))
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err(format!("{uri:?} has no host"));
    }
    if let Some(p) = port
        && !p.is_empty()
        && p.parse::<u16>().is_err()
    {
        return Err(format!("{uri:?} has an invalid port {p:?}"));
    }
    Ok(())
}

/// Inline JWKS: a JSON Web Key Set, or a single JSON Web Key.
fn validate_jwks(jwks: &str) -> Result<(), String> {
    let v: Value =
        serde_json::from_str(jwks).map_err(|e| format!("jwks is not valid JSON: {e}"))?;
    let is_set = v.get("keys").is_some_and(Value::is_array);
    let is_key = v.get("kty").is_some_and(Value::is_string);
    if is_set || is_key {
        Ok(())
    } else {
        Err(
            "jwks must be a JSON Web Key Set (with \"keys\") or a JSON Web Key (with \"kty\")"
                .into(),
        )
    }
}
