//! Building blocks shared by the per-kind rules: lenient JSON access, the
//! problem collector, and the host, label, port, address and duration checks
//! Istio applies across kinds.

use std::net::IpAddr;

use serde_json::{Map, Value};

use super::Problem;

/// Collects the problems of one object.
#[derive(Debug, Default)]
pub(crate) struct Report {
    problems: Vec<Problem>,
}

impl Report {
    /// Records a problem at `path`.
    pub(crate) fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Records `result`'s error, if any, at `path`.
    pub(crate) fn check(&mut self, path: impl Into<String>, result: Result<(), String>) {
        if let Err(message) = result {
            self.err(path, message);
        }
    }

    /// The problems found so far.
    pub(crate) fn into_problems(self) -> Vec<Problem> {
        self.problems
    }
}

/// `base.field`.
pub(crate) fn at(base: &str, field: &str) -> String {
    format!("{base}.{field}")
}

/// `base[i]`.
pub(crate) fn idx(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

/// `base["key"]`, for map entries.
pub(crate) fn key(base: &str, k: &str) -> String {
    format!("{base}[{k:?}]")
}

// ---------------------------------------------------------------------------
// JSON access. Absent, null and wrongly typed fields all read as the proto
// default, as they would after the schema layer rejected or defaulted them.

/// The field, unless absent or null.
pub(crate) fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v.get(name).filter(|f| !f.is_null())
}

/// Whether the field is present and not null (a set message or oneof).
pub(crate) fn has(v: &Value, name: &str) -> bool {
    field(v, name).is_some()
}

/// A string field, `""` when absent.
pub(crate) fn str_field<'a>(v: &'a Value, name: &str) -> &'a str {
    v.get(name).and_then(Value::as_str).unwrap_or("")
}

/// A repeated field, empty when absent.
pub(crate) fn list<'a>(v: &'a Value, name: &str) -> &'a [Value] {
    v.get(name)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The strings of a repeated string field; other elements are skipped.
pub(crate) fn strings<'a>(v: &'a Value, name: &str) -> Vec<&'a str> {
    list(v, name).iter().filter_map(Value::as_str).collect()
}

/// A map (or message) field.
pub(crate) fn map<'a>(v: &'a Value, name: &str) -> Option<&'a Map<String, Value>> {
    v.get(name).and_then(Value::as_object)
}

/// A map field with string values, as `(key, value)` pairs.
pub(crate) fn string_map<'a>(v: &'a Value, name: &str) -> Vec<(&'a str, &'a str)> {
    map(v, name)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.as_str(), s)))
                .collect()
        })
        .unwrap_or_default()
}

/// An integer from a JSON number or a decimal string (proto JSON allows
/// both). Values beyond `i64` saturate.
pub(crate) fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|_| i64::MAX))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0)
                    .map(|f| f.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
            }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// An integer field (also the plain form of `Int32Value`/`UInt32Value`).
pub(crate) fn int_field(v: &Value, name: &str) -> Option<i64> {
    v.get(name).and_then(as_int)
}

/// A floating point field.
pub(crate) fn num_field(v: &Value, name: &str) -> Option<f64> {
    match v.get(name)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A bool field (also the plain form of `BoolValue`), `false` when absent.
pub(crate) fn bool_field(v: &Value, name: &str) -> bool {
    v.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// An enum field as its name. Enums arrive as names or numbers; `names`
/// lists the names in number order, its first entry being the default.
/// An unknown number reads as `""`.
pub(crate) fn enum_field<'a>(v: &'a Value, name: &str, names: &'static [&'static str]) -> &'a str {
    let default = names.first().copied().unwrap_or("");
    match v.get(name) {
        Some(Value::String(s)) => s.as_str(),
        Some(n @ Value::Number(_)) => as_int(n)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| names.get(i).copied())
            .unwrap_or(""),
        _ => default,
    }
}

// ---------------------------------------------------------------------------
// Names.

/// RFC 1123 label: 1–63 alphanumerics and `-`, not starting or ending in `-`.
/// Istio accepts upper case here.
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A DNS label that may instead be `*`, or start with `*` or `*-`.
pub(crate) fn is_wildcard_dns1123_label(s: &str) -> bool {
    if s.len() > 63 {
        return false;
    }
    s == "*"
        || is_dns1123_label(s)
        || s.strip_prefix("*-").is_some_and(is_dns1123_label)
        || s.strip_prefix('*').is_some_and(is_dns1123_label)
}

fn dns_preconditions(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 255 {
        return Err(format!("domain name {name:?} is too long (max 255)"));
    }
    Ok(())
}

/// Dot-separated DNS labels; a trailing dot is allowed, an all-numeric top
/// level domain is not.
fn dns1123_labels(domain: &str, labels: &str) -> Result<(), String> {
    let parts: Vec<&str> = labels.split('.').collect();
    let tld = parts.last().copied().unwrap_or("");
    if !tld.is_empty() && tld.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "domain name {domain:?} is invalid (top level domain {tld:?} cannot be all-numeric)"
        ));
    }
    for (i, label) in parts.iter().enumerate() {
        if i == parts.len() - 1 && label.is_empty() {
            break;
        }
        if !is_dns1123_label(label) {
            return Err(format!(
                "domain name {domain:?} is invalid (label {label:?} is invalid)"
            ));
        }
    }
    Ok(())
}

/// A fully qualified domain name (no wildcard).
pub(crate) fn validate_fqdn(name: &str) -> Result<(), String> {
    dns_preconditions(name)?;
    dns1123_labels(name, name)
}

/// A domain name whose first label may be a wildcard (`*.example.com`,
/// `*`); wildcards anywhere else are invalid.
pub(crate) fn validate_wildcard_domain(name: &str) -> Result<(), String> {
    dns_preconditions(name)?;
    let (first, rest) = match name.split_once('.') {
        Some((f, r)) => (f, Some(r)),
        None => (name, None),
    };
    if !is_wildcard_dns1123_label(first) {
        return Err(format!(
            "domain name {name:?} is invalid (label {first:?} is invalid)"
        ));
    }
    match rest {
        Some(rest) => dns1123_labels(name, rest),
        None => Ok(()),
    }
}

/// Only a full `*.` prefix (or `*` alone) is allowed, not `*foo.com`.
pub(crate) fn validate_partial_wildcard(host: &str) -> Result<(), String> {
    if host.contains('*') && host.len() != 1 && !host.starts_with("*.") {
        return Err(format!("partial wildcard {host:?} is not allowed"));
    }
    Ok(())
}

/// Istio's `host.Name` is wildcarded when it starts with `*`.
fn is_wildcarded(h: &str) -> bool {
    h.starts_with('*')
}

/// Whether two host names overlap (`*.foo.com` and `a.foo.com`, or two
/// wildcards where one contains the other).
pub(crate) fn hosts_overlap(a: &str, b: &str) -> bool {
    match (is_wildcarded(a), is_wildcarded(b)) {
        (true, true) => {
            let (a, b) = (&a[1..], &b[1..]);
            if a.len() < b.len() {
                b.ends_with(a)
            } else {
                a.ends_with(b)
            }
        }
        (true, false) => b.ends_with(&a[1..]),
        (false, true) => a.ends_with(&b[1..]),
        (false, false) => a == b,
    }
}

/// Whether every name `sub` matches is also matched by `sup`.
pub(crate) fn host_subset_of(sub: &str, sup: &str) -> bool {
    match (is_wildcarded(sub), is_wildcarded(sup)) {
        (true, true) => sub[1..].ends_with(&sup[1..]),
        (true, false) => false,
        (false, true) => sub.ends_with(&sup[1..]),
        (false, false) => sub == sup,
    }
}

/// A Kubernetes label key: optional DNS prefix and `/`, then a qualified
/// name of at most 63 characters.
fn validate_label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let bad = || format!("invalid label key {k:?}");
    if let Some(p) = prefix
        && (p.len() > 253 || p.split('.').any(|l| !is_dns1123_label(l)))
    {
        return Err(bad());
    }
    if !is_qualified_name(name) || name.len() > 63 {
        return Err(bad());
    }
    Ok(())
}

/// Alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
fn is_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// Kubernetes-style labels (subset labels, endpoint labels, source labels).
pub(crate) fn check_labels(r: &mut Report, path: &str, v: &Value, name: &str) {
    let p = at(path, name);
    for (k, val) in string_map(v, name) {
        r.check(key(&p, k), validate_label_key(k));
        if !val.is_empty() && !is_qualified_name(val) {
            r.err(key(&p, k), format!("invalid label value {val:?}"));
        }
    }
}

/// Selector labels: keys must be set and neither keys nor values may hold a
/// wildcard.
pub(crate) fn check_selector_labels(r: &mut Report, path: &str, v: &Value, name: &str) {
    let p = at(path, name);
    for (k, val) in string_map(v, name) {
        if k.is_empty() {
            r.err(key(&p, k), "empty key is not supported in a selector");
        }
        if k.contains('*') || val.contains('*') {
            r.err(key(&p, k), "wildcard is not supported in a selector");
        }
    }
}

/// The `selector`/`targetRef`/`targetRefs` trio of the policy kinds.
pub(crate) fn check_policy_target(r: &mut Report, spec: &Value) {
    let set = usize::from(has(spec, "selector"))
        + usize::from(has(spec, "targetRef"))
        + usize::from(!list(spec, "targetRefs").is_empty());
    if set > 1 {
        r.err(
            "spec",
            "only one of selector, targetRef or targetRefs can be set",
        );
    }
    if let Some(sel) = field(spec, "selector") {
        check_selector_labels(r, "spec.selector", sel, "matchLabels");
    }
    if let Some(t) = field(spec, "targetRef") {
        check_target_ref(r, "spec.targetRef", t);
    }
    for (i, t) in list(spec, "targetRefs").iter().enumerate() {
        check_target_ref(r, &idx("spec.targetRefs", i), t);
    }
}

/// A policy target: a Service, ServiceEntry or Gateway API Gateway in the
/// policy's own namespace.
fn check_target_ref(r: &mut Report, path: &str, t: &Value) {
    if str_field(t, "name").is_empty() {
        r.err(at(path, "name"), "must be set");
    }
    if !str_field(t, "namespace").is_empty() {
        r.err(
            at(path, "namespace"),
            "must not be set; cross namespace referencing is not supported",
        );
    }
    let group = str_field(t, "group");
    let kind = str_field(t, "kind");
    let allowed = matches!(
        (group, kind),
        ("" | "core", "Service")
            | ("networking.istio.io", "ServiceEntry")
            | ("gateway.networking.k8s.io", "Gateway")
    );
    if !allowed {
        r.err(
            path,
            format!(
                "must refer to a core Service, a networking.istio.io ServiceEntry or a gateway.networking.k8s.io Gateway, found {group}/{kind}"
            ),
        );
    }
}

// ---------------------------------------------------------------------------
// Ports, protocols, addresses.

/// A port number in 1..=65535.
pub(crate) fn validate_port(n: i64) -> Result<(), String> {
    if (1..=65535).contains(&n) {
        Ok(())
    } else {
        Err(format!("port number {n} must be in the range 1..65535"))
    }
}

/// Checks an optional port field (absent passes, `0` does not).
pub(crate) fn check_port_field(r: &mut Report, path: &str, v: &Value, name: &str) {
    if let Some(n) = int_field(v, name) {
        r.check(at(path, name), validate_port(n));
    }
}

/// Port names are DNS labels.
pub(crate) fn validate_port_name(name: &str) -> Result<(), String> {
    if is_dns1123_label(name) {
        Ok(())
    } else {
        Err(format!("invalid port name {name:?}"))
    }
}

/// The protocols Istio knows for a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Http,
    Http2,
    HttpProxy,
    Grpc,
    GrpcWeb,
    Https,
    Tls,
    Tcp,
    Udp,
    Mongo,
    Redis,
    Mysql,
}

impl Protocol {
    /// Parses a protocol name, ignoring case.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "http" => Self::Http,
            "http2" => Self::Http2,
            "http_proxy" => Self::HttpProxy,
            "grpc" => Self::Grpc,
            "grpc-web" => Self::GrpcWeb,
            "https" => Self::Https,
            "tls" => Self::Tls,
            "tcp" => Self::Tcp,
            "udp" => Self::Udp,
            "mongo" => Self::Mongo,
            "redis" => Self::Redis,
            "mysql" => Self::Mysql,
            _ => return None,
        })
    }

    /// Carried over HTTP (plain or HTTP/2).
    pub(crate) fn is_http(self) -> bool {
        matches!(
            self,
            Self::Http | Self::Http2 | Self::HttpProxy | Self::Grpc | Self::GrpcWeb
        )
    }

    /// Carried over TLS.
    pub(crate) fn is_tls(self) -> bool {
        matches!(self, Self::Https | Self::Tls)
    }
}

/// An empty protocol means "detect"; anything else must be known.
pub(crate) fn validate_protocol(p: &str) -> Result<(), String> {
    if p.is_empty() || Protocol::parse(p).is_some() {
        Ok(())
    } else {
        Err(format!("unsupported protocol {p:?}"))
    }
}

/// An IPv4 or IPv6 address.
pub(crate) fn is_ip(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok()
}

/// An IP address.
pub(crate) fn validate_ip(s: &str) -> Result<(), String> {
    if is_ip(s) {
        Ok(())
    } else {
        Err(format!("{s:?} is not a valid IP address"))
    }
}

/// An address or a CIDR block (`10.0.0.0/8`, `2001:db8::/32`).
pub(crate) fn validate_ip_subnet(s: &str) -> Result<(), String> {
    if s.matches('/').count() == 1 {
        let ok = s.split_once('/').is_some_and(|(ip, bits)| {
            let max = match ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(_)) => 32,
                Ok(IpAddr::V6(_)) => 128,
                Err(_) => return false,
            };
            !bits.is_empty()
                && bits.len() <= 3
                && bits.bytes().all(|c| c.is_ascii_digit())
                && bits.parse::<u32>().is_ok_and(|b| b <= max)
        });
        if ok {
            Ok(())
        } else {
            Err(format!("{s:?} is not a valid CIDR block"))
        }
    } else {
        validate_ip(s)
    }
}

/// Prefix marking a Unix domain socket address.
pub(crate) const UNIX_PREFIX: &str = "unix://";

/// The path of a Unix domain socket: absolute and not a directory, or an
/// abstract socket (`@name`).
pub(crate) fn validate_unix_address(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("unix address must not be empty".into());
    }
    if path.starts_with('@') {
        return Ok(());
    }
    if !path.starts_with('/') || path.ends_with('/') {
        return Err(format!("{path:?} is not an absolute path to a file"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Durations, percentages, regexes, headers.

/// Parses a duration: protobuf JSON (`1.5s`) or Go style (`1h30m`, `250ms`),
/// into nanoseconds.
pub(crate) fn parse_duration(s: &str) -> Option<i128> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        if (int.is_empty() && frac.is_empty()) || frac.contains('.') || int.len() > 20 {
            return None;
        }
        let int_v: i128 = if int.is_empty() { 0 } else { int.parse().ok()? };
        let mut part = int_v.checked_mul(scale)?;
        // Fractions beyond nanosecond resolution are dropped.
        let mut unit_scale = scale;
        for d in frac.bytes().take(18) {
            unit_scale /= 10;
            part = part.checked_add(i128::from(d - b'0') * unit_scale)?;
        }
        total = total.checked_add(part)?;
        rest = tail;
    }
    Some(if neg { -total } else { total })
}

const MILLI: i128 = 1_000_000;

/// A duration field, if set: at least 1ms, to millisecond precision.
pub(crate) fn check_duration(r: &mut Report, path: &str, v: &Value, name: &str) {
    let Some(d) = field(v, name) else { return };
    let p = at(path, name);
    let Some(s) = d.as_str() else { return };
    match parse_duration(s) {
        None => r.err(p, format!("{s:?} is not a valid duration")),
        Some(ns) if ns < MILLI => r.err(p, "duration must be at least 1ms"),
        Some(ns) if ns % MILLI != 0 => r.err(p, "only durations to ms precision are supported"),
        Some(_) => {}
    }
}

/// A `Percent` message (`{value: 12.5}`): 0, or in [0.0001, 100].
pub(crate) fn check_percent_message(r: &mut Report, path: &str, v: &Value, name: &str) {
    let Some(p) = field(v, name) else { return };
    if let Some(val) = num_field(p, "value")
        && (!(0.0..=100.0).contains(&val) || (val > 0.0 && val < 0.0001))
    {
        r.err(
            at(&at(path, name), "value"),
            format!("percentage {val} is neither 0 nor in the range [0.0001, 100]"),
        );
    }
}

/// An integer percentage in 0..=100.
pub(crate) fn check_int_percent(r: &mut Report, path: &str, v: &Value, name: &str) {
    if let Some(n) = int_field(v, name)
        && !(0..=100).contains(&n)
    {
        r.err(
            at(path, name),
            format!("percentage {n} is not in the range 0..100"),
        );
    }
}

/// An RE2 regular expression as Envoy takes it: non-empty, at most 1024
/// bytes, and compiling.
pub(crate) fn validate_regex(re: &str) -> Result<(), String> {
    if re.is_empty() {
        return Err("regex must not be empty".into());
    }
    if re.len() > 1024 {
        return Err("regex is too large, max length allowed is 1024".into());
    }
    regex::Regex::new(re)
        .map(|_| ())
        .map_err(|e| format!("invalid regex (Istio uses RE2 syntax): {e}"))
}

/// A `StringMatch`: a `regex` alternative must compile.
pub(crate) fn check_string_match_regex(r: &mut Report, path: &str, m: &Value) {
    if let Some(Value::String(re)) = m.get("regex") {
        r.check(at(path, "regex"), validate_regex(re));
    }
}

/// An HTTP header name usable in a match: `[-_A-Za-z0-9]+`.
pub(crate) fn validate_header_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("header name must not be empty".into());
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    {
        return Err(format!("{name:?} is not a valid header name"));
    }
    Ok(())
}

/// A header value Envoy accepts: no control characters other than tab.
pub(crate) fn validate_header_value(value: &str) -> Result<(), String> {
    if value
        .chars()
        .any(|c| (c.is_control() && c != '\t') || c == '\u{7f}')
    {
        return Err(format!(
            "header value {value:?} contains control characters"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// exportTo and namespace-qualified hosts.

/// `exportTo`: `.`, `*` or namespace names, no duplicates, `*` alone; `~`
/// (nobody) only for ServiceEntries, and alone.
pub(crate) fn check_export_to(r: &mut Report, spec: &Value, namespace: &str, allow_none: bool) {
    let entries = strings(spec, "exportTo");
    let mut seen: Vec<&str> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let p = idx("spec.exportTo", i);
        let k = if *e == "." { namespace } else { e };
        if seen.contains(&k) {
            if k == *e {
                r.err(p, format!("duplicate entry {e:?}"));
            } else {
                r.err(
                    p,
                    format!("duplicate entries . and the current namespace {namespace}"),
                );
            }
            continue;
        }
        let ok = match *e {
            "." | "*" => true,
            "~" if allow_none => true,
            "~" => {
                r.err(&p, "~ (nobody) is not allowed for this kind");
                false
            }
            other => {
                if is_dns1123_label(other) {
                    true
                } else {
                    r.err(&p, "must be ., * or a valid namespace name");
                    false
                }
            }
        };
        if ok {
            seen.push(k);
        }
    }
    if seen.contains(&"*") && entries.len() > 1 {
        r.err("spec.exportTo", "cannot mix * (public) with other entries");
    }
    if seen.contains(&"~") && entries.len() > 1 {
        r.err("spec.exportTo", "cannot export to nobody (~) and somebody");
    }
}

/// The host part of a gateway or sidecar `namespace/host` entry: a
/// qualified name (no short names) with at most a leading wildcard;
/// gateways also take IP addresses.
fn validate_slash_host_part(host: &str, is_gateway: bool) -> Vec<String> {
    let mut errs = Vec::new();
    if host != "*" && !host.contains('.') {
        errs.push(format!(
            "short name {host:?} is not allowed; use a fully qualified name"
        ));
    }
    if let Err(e) = validate_wildcard_domain(host)
        && !(is_gateway && is_ip(host))
    {
        errs.push(e);
    }
    if let Err(e) = validate_partial_wildcard(host) {
        errs.push(e);
    }
    errs
}

/// A `namespace/dnsName` host of a Gateway server or Sidecar egress
/// listener. Gateways also accept the older bare `dnsName` form.
pub(crate) fn check_namespaced_host(r: &mut Report, path: &str, host: &str, is_gateway: bool) {
    let Some((ns, name)) = host.split_once('/') else {
        if is_gateway {
            for e in validate_slash_host_part(host, true) {
                r.err(path, e);
            }
        } else {
            r.err(
                path,
                format!("host {host:?} must be of the form namespace/dnsName"),
            );
        }
        return;
    };
    if ns.is_empty() || name.is_empty() {
        r.err(
            path,
            "namespace and dnsName in a host entry must not be empty",
        );
    }
    let ns_ok = ns == "*" || ns == "." || (ns == "~" && !is_gateway) || is_dns1123_label(ns);
    if !ns_ok && !ns.is_empty() {
        r.err(path, format!("invalid namespace {ns:?}"));
    }
    if !name.is_empty() {
        for e in validate_slash_host_part(name, is_gateway) {
            r.err(path, e);
        }
    }
}
