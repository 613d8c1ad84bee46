//! The HTTP routes of a VirtualService: matches, header edits, CORS, fault
//! injection, mirrors, redirects, direct responses, retries, rewrites.

use serde_json::Value;

use crate::hosts::check_gateway_names;
use crate::http::{
    check_string_match_regex, validate_header_value, validate_regex, validate_token_header_name,
};
use crate::json::{field, has, int_field, list, map, num_field, str_field, string_map, strings};
use crate::names::is_hostname_label;
use crate::net::check_port_field;
use crate::report::{Report, at, idx, key};
use crate::selectors::check_labels;
use crate::values::{check_duration, check_int_percent, check_percent_message, parse_duration};

use super::destination::{check_destination, check_weights};

/// HTTP methods a CORS policy may allow.
const HTTP_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE",
];

/// Envoy's `x-envoy-retry-on` and `x-envoy-retry-grpc-on` policies.
const RETRY_ON: &[&str] = &[
    "5xx",
    "gateway-error",
    "reset",
    "reset-before-request",
    "connect-failure",
    "retriable-4xx",
    "refused-stream",
    "retriable-status-codes",
    "retriable-headers",
    "envoy-ratelimited",
    "http3-post-connect-failure",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

/// gRPC status names a fault may abort with.
const GRPC_STATUSES: &[&str] = &[
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// Largest direct response body Istio accepts.
const MAX_DIRECT_RESPONSE_BODY: usize = 1024 * 1024;

/// Whether `code` is a registered HTTP status (what `retryOn` may name).
fn is_known_http_status(code: i64) -> bool {
    matches!(
        code,
        100..=103
            | 200..=208
            | 226
            | 300..=305
            | 307
            | 308
            | 400..=418
            | 421..=426
            | 428
            | 429
            | 431
            | 451
            | 500..=508
            | 510
            | 511
    )
}

pub(crate) fn check_http_route(r: &mut Report, path: &str, http: &Value) {
    let routes = list(http, "route");
    let redirect = field(http, "redirect");
    let direct = field(http, "directResponse");
    if has(http, "delegate") {
        // A root route hands the request to the delegate VirtualService.
        if redirect.is_some() {
            r.err(
                at(path, "redirect"),
                "a route with a delegate must not specify redirect",
            );
        }
        if !routes.is_empty() {
            r.err(
                at(path, "route"),
                "a route with a delegate must not specify route",
            );
        }
        if direct.is_some() {
            r.err(
                at(path, "directResponse"),
                "a route with a delegate must not specify directResponse",
            );
        }
    } else {
        if redirect.is_some() {
            if !routes.is_empty() {
                r.err(path, "an HTTP route cannot contain both route and redirect");
            }
            if has(http, "fault") {
                r.err(path, "an HTTP route cannot contain both fault and redirect");
            }
            if has(http, "rewrite") {
                r.err(
                    path,
                    "an HTTP route cannot contain both rewrite and redirect",
                );
            }
        }
        if direct.is_some() {
            if !routes.is_empty() {
                r.err(
                    path,
                    "an HTTP route cannot contain both route and directResponse",
                );
            }
            if redirect.is_some() {
                r.err(
                    path,
                    "an HTTP route cannot contain both redirect and directResponse",
                );
            }
            if has(http, "fault") {
                r.err(
                    path,
                    "an HTTP route cannot contain both fault and directResponse",
                );
            }
            if has(http, "rewrite") {
                r.err(
                    path,
                    "an HTTP route cannot contain both rewrite and directResponse",
                );
            }
        }
        if redirect.is_none() && direct.is_none() && routes.is_empty() {
            r.err(
                at(path, "route"),
                "an HTTP route needs a route, a redirect, a directResponse or a delegate",
            );
        }
    }

    for (i, m) in list(http, "match").iter().enumerate() {
        check_http_match(r, &idx(&at(path, "match"), i), m);
    }
    if let Some(h) = field(http, "headers") {
        check_header_operations(r, &at(path, "headers"), h);
    }
    if let Some(c) = field(http, "corsPolicy") {
        check_cors(r, &at(path, "corsPolicy"), c);
    }
    if let Some(f) = field(http, "fault") {
        check_fault(r, &at(path, "fault"), f);
    }
    if let Some(p) = int_field(http, "mirrorPercent")
        && p > 100
    {
        r.err(
            at(path, "mirrorPercent"),
            format!("must be at most 100, found {p}"),
        );
    }
    if let Some(mp) = field(http, "mirrorPercentage") {
        check_mirror_percentage(r, &at(path, "mirrorPercentage"), mp);
    }
    if has(http, "mirror") && !list(http, "mirrors").is_empty() {
        r.err(path, "an HTTP route cannot contain both mirror and mirrors");
    }
    if let Some(m) = field(http, "mirror") {
        check_destination(r, &at(path, "mirror"), m);
    }
    for (i, m) in list(http, "mirrors").iter().enumerate() {
        let p = idx(&at(path, "mirrors"), i);
        match field(m, "destination") {
            None => r.err(at(&p, "destination"), "is required"),
            Some(d) => check_destination(r, &at(&p, "destination"), d),
        }
        if let Some(mp) = field(m, "percentage") {
            check_mirror_percentage(r, &at(&p, "percentage"), mp);
        }
    }
    if let Some(rd) = redirect {
        check_redirect(r, &at(path, "redirect"), rd, list(http, "match"));
    }
    if let Some(d) = direct {
        check_direct_response(r, &at(path, "directResponse"), d);
    }
    if let Some(rt) = field(http, "retries") {
        check_retries(r, &at(path, "retries"), rt);
    }
    if let Some(rw) = field(http, "rewrite") {
        check_rewrite(r, &at(path, "rewrite"), rw);
        check_authority_rewrite(r, path, rw, field(http, "headers"));
    }
    check_http_destinations(r, &at(path, "route"), routes);
    check_duration(r, path, http, "timeout");
}

fn check_http_match(r: &mut Report, path: &str, m: &Value) {
    for name in ["headers", "withoutHeaders"] {
        let p = at(path, name);
        for (k, sm) in map(m, name).into_iter().flatten() {
            let pseudo = matches!(
                k.as_str(),
                ":method" | ":scheme" | ":authority" | ":path" | ":status"
            );
            if !k.starts_with("@request.auth.claims") && !pseudo {
                r.check(key(&p, k), validate_token_header_name(k));
            }
            // In withoutHeaders, regex `*` means "header present".
            let present = name == "withoutHeaders" && str_field(sm, "regex") == "*";
            if !present {
                check_string_match_regex(r, &key(&p, k), sm);
            }
        }
    }
    for name in ["uri", "scheme", "method", "authority"] {
        if let Some(sm) = field(m, name) {
            check_string_match_regex(r, &at(path, name), sm);
        }
    }
    let qp = at(path, "queryParams");
    for (k, sm) in map(m, "queryParams").into_iter().flatten() {
        check_string_match_regex(r, &key(&qp, k), sm);
    }
    if int_field(m, "port").is_some_and(|p| p != 0) {
        check_port_field(r, path, m, "port");
    }
    check_labels(r, path, m, "sourceLabels");
    check_gateway_names(r, &at(path, "gateways"), &strings(m, "gateways"));
    let sn = str_field(m, "sourceNamespace");
    if !sn.is_empty() && !is_hostname_label(sn) {
        r.err(
            at(path, "sourceNamespace"),
            format!("invalid namespace {sn:?}"),
        );
    }
}

/// Request and response header edits: names set, not pseudo-headers, and
/// `Host` only through the authority rewrite.
fn check_header_operations(r: &mut Report, path: &str, headers: &Value) {
    for side in ["request", "response"] {
        let Some(ops) = field(headers, side) else {
            continue;
        };
        let sp = at(path, side);
        for op in ["set", "add"] {
            for (name, value) in string_map(ops, op) {
                let p = key(&at(&sp, op), name);
                let authority_ok = side == "request";
                r.check(&p, validate_header_op_name(name, authority_ok));
                r.check(&p, validate_header_value(value));
            }
        }
        for (i, name) in list(ops, "remove").iter().enumerate() {
            if let Some(name) = name.as_str() {
                r.check(
                    idx(&at(&sp, "remove"), i),
                    validate_header_op_name(name, false),
                );
            }
        }
    }
}

fn is_authority_header(name: &str) -> bool {
    name.eq_ignore_ascii_case(":authority") || name.eq_ignore_ascii_case("host")
}

/// A header name to set, add or remove. Request set/add may target the
/// authority (`:authority` or `Host`); nothing else may touch pseudo
/// headers or `Host`.
fn validate_header_op_name(name: &str, authority_ok: bool) -> Result<(), String> {
    if name.is_empty() {
        return Err("header name must not be empty".into());
    }
    if authority_ok && is_authority_header(name) {
        return Ok(());
    }
    if name.eq_ignore_ascii_case("host") {
        return Err(format!(
            "invalid header {name:?}: cannot set the Host header"
        ));
    }
    if name.starts_with(':') {
        return Err(format!(
            "invalid header {name:?}: header cannot have a \":\" prefix"
        ));
    }
    Ok(())
}

/// The authority may be rewritten in one place only.
fn check_authority_rewrite(r: &mut Report, path: &str, rewrite: &Value, headers: Option<&Value>) {
    let mut sources = usize::from(!str_field(rewrite, "authority").is_empty());
    if let Some(req) = headers.and_then(|h| field(h, "request")) {
        for op in ["set", "add"] {
            sources += string_map(req, op)
                .iter()
                .filter(|(k, _)| is_authority_header(k))
                .count();
        }
    }
    if sources > 1 {
        r.err(path, "the authority header cannot be set more than once");
    }
}

fn check_cors(r: &mut Report, path: &str, cors: &Value) {
    for (i, o) in list(cors, "allowOrigins").iter().enumerate() {
        let p = idx(&at(path, "allowOrigins"), i);
        let value = ["exact", "prefix", "regex"]
            .iter()
            .map(|k| str_field(o, k))
            .find(|s| !s.is_empty());
        if value.is_none() {
            r.err(&p, "must set a non-empty exact, prefix or regex match");
        }
        check_string_match_regex(r, &p, o);
    }
    for (i, m) in strings(cors, "allowMethods").iter().enumerate() {
        if *m != "*" && !HTTP_METHODS.contains(m) {
            r.err(
                idx(&at(path, "allowMethods"), i),
                format!("{m:?} is not a supported HTTP method"),
            );
        }
    }
    for name in ["allowHeaders", "exposeHeaders"] {
        for (i, h) in strings(cors, name).iter().enumerate() {
            if *h != "*" {
                r.check(idx(&at(path, name), i), validate_token_header_name(h));
            }
        }
    }
    check_duration(r, path, cors, "maxAge");
    if let Some(ns) = field(cors, "maxAge")
        .and_then(Value::as_str)
        .and_then(parse_duration)
        && ns % 1_000_000_000 != 0
    {
        r.err(at(path, "maxAge"), "maxAge is only accurate to seconds");
    }
}

fn check_fault(r: &mut Report, path: &str, fault: &Value) {
    let abort = field(fault, "abort");
    let delay = field(fault, "delay");
    if abort.is_none() && delay.is_none() {
        r.err(path, "fault injection needs an abort and/or a delay");
    }
    if let Some(a) = abort {
        let p = at(path, "abort");
        check_percent_message(r, &p, a, "percentage");
        check_int_percent(r, &p, a, "percent");
        if let Some(s) = int_field(a, "httpStatus") {
            if !(200..=599).contains(&s) {
                r.err(
                    at(&p, "httpStatus"),
                    format!("HTTP status {s} is not in the range 200..599"),
                );
            }
        } else if let Some(s) = field(a, "grpcStatus").and_then(Value::as_str) {
            if !GRPC_STATUSES.contains(&s) {
                r.err(
                    at(&p, "grpcStatus"),
                    format!("gRPC status {s:?} is not supported; use a name such as NOT_FOUND"),
                );
            }
        } else if has(a, "http2Error") {
            r.err(
                at(&p, "http2Error"),
                "HTTP/2 abort fault injection is not supported",
            );
        }
    }
    if let Some(d) = delay {
        let p = at(path, "delay");
        check_percent_message(r, &p, d, "percentage");
        check_int_percent(r, &p, d, "percent");
        check_duration(r, &p, d, "fixedDelay");
        if has(d, "exponentialDelay") {
            r.err(
                at(&p, "exponentialDelay"),
                "exponentialDelay is not supported",
            );
        }
    }
}

fn check_mirror_percentage(r: &mut Report, path: &str, mp: &Value) {
    if let Some(v) = num_field(mp, "value")
        && !(0.0..=100.0).contains(&v)
    {
        r.err(
            at(path, "value"),
            format!("must be in the range 0..100, found {v}"),
        );
    }
}

/// `matches` are the route's: `prefixRewrite` (Istio 1.30+) needs every
/// URI match to be a prefix match.
fn check_redirect(r: &mut Report, path: &str, rd: &Value, matches: &[Value]) {
    let prefix_rewrite = !str_field(rd, "prefixRewrite").is_empty();
    if prefix_rewrite && !str_field(rd, "uri").is_empty() {
        r.err(
            path,
            "a redirect may only specify one of uri or prefixRewrite",
        );
        return;
    }
    if prefix_rewrite
        && matches
            .iter()
            .filter_map(|m| field(m, "uri"))
            .any(|u| !has(u, "prefix"))
    {
        r.err(
            at(path, "prefixRewrite"),
            "needs every URI match of the route to be a prefix match",
        );
        return;
    }
    let any = ["uri", "prefixRewrite", "authority", "scheme"]
        .iter()
        .any(|k| !str_field(rd, k).is_empty())
        || has(rd, "port")
        || has(rd, "derivePort");
    if !any {
        r.err(
            path,
            "a redirect must specify uri, prefixRewrite, authority, scheme or port",
        );
    }
    if let Some(code) = int_field(rd, "redirectCode")
        && code != 0
        && !(300..=399).contains(&code)
    {
        r.err(
            at(path, "redirectCode"),
            format!("{code} is not a valid redirect code, must be 3xx"),
        );
    }
    let scheme = str_field(rd, "scheme");
    if !scheme.is_empty() && scheme != "http" && scheme != "https" {
        r.err(at(path, "scheme"), "must be \"http\" or \"https\"");
    }
    if int_field(rd, "port").is_some_and(|p| p != 0) {
        check_port_field(r, path, rd, "port");
    }
}

fn check_direct_response(r: &mut Report, path: &str, d: &Value) {
    let status = int_field(d, "status").unwrap_or(0);
    if !(200..=599).contains(&status) {
        r.err(
            at(path, "status"),
            format!("HTTP status {status} is not in the range 200..599"),
        );
    }
    if let Some(body) = field(d, "body") {
        let size = str_field(body, "string")
            .len()
            // `bytes` is base64 in JSON; its decoded size is about 3/4.
            .max(str_field(body, "bytes").len() / 4 * 3);
        if size > MAX_DIRECT_RESPONSE_BODY {
            r.err(
                at(path, "body"),
                "a direct response body must be less than 1MB",
            );
        }
    }
}

fn check_retries(r: &mut Report, path: &str, rt: &Value) {
    let attempts = int_field(rt, "attempts").unwrap_or(0);
    if attempts < 0 {
        r.err(at(path, "attempts"), "must not be negative");
    }
    let retry_on = str_field(rt, "retryOn");
    if attempts == 0
        && (has(rt, "perTryTimeout") || !retry_on.is_empty() || has(rt, "retryRemoteLocalities"))
    {
        r.err(
            path,
            "retry policy configured while attempts is 0 (retries disabled)",
        );
    }
    check_duration(r, path, rt, "perTryTimeout");
    if !retry_on.is_empty() {
        for policy in retry_on.split(',') {
            let is_code = policy.parse::<i64>().is_ok_and(is_known_http_status);
            if !is_code && !RETRY_ON.contains(&policy) {
                r.err(
                    at(path, "retryOn"),
                    format!("{policy:?} is not a valid retryOn policy"),
                );
            }
        }
    }
}

fn check_rewrite(r: &mut Report, path: &str, rw: &Value) {
    let uri = !str_field(rw, "uri").is_empty();
    let regex = field(rw, "uriRegexRewrite");
    if uri && regex.is_some() {
        r.err(
            path,
            "a rewrite may set only one of uri and uriRegexRewrite",
        );
    }
    if !uri && regex.is_none() && str_field(rw, "authority").is_empty() {
        r.err(
            path,
            "a rewrite must specify uri, uriRegexRewrite or authority",
        );
    }
    if let Some(re) = regex {
        let p = at(path, "uriRegexRewrite");
        let m = str_field(re, "match");
        if m.is_empty() || str_field(re, "rewrite").is_empty() {
            r.err(&p, "both match and rewrite must be set");
        }
        if !m.is_empty() {
            r.check(at(&p, "match"), validate_regex(m));
        }
    }
}

fn check_http_destinations(r: &mut Report, path: &str, routes: &[Value]) {
    for (i, rd) in routes.iter().enumerate() {
        let p = idx(path, i);
        if !rd.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        match field(rd, "destination") {
            None => r.err(at(&p, "destination"), "is required"),
            Some(d) => check_destination(r, &at(&p, "destination"), d),
        }
        if let Some(h) = field(rd, "headers") {
            check_header_operations(r, &at(&p, "headers"), h);
        }
    }
    check_weights(r, path, routes);
}
