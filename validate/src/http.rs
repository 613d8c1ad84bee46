//! HTTP matching as Envoy takes it: RE2 regexes and header names and values.

use serde_json::Value;

use crate::report::{Report, at};

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

/// A header name as an RFC 7230 token (`tchar`s: letters, digits and
/// ``!#$%&'*+-.^_`|~``): Istio's rule for header matches and CORS headers.
pub(crate) fn validate_token_header_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("header name must not be empty".into());
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
    {
        return Err(format!("{name:?} is not a valid header name"));
    }
    Ok(())
}

/// A header name of an HTTP probe (as Kubernetes): `[-A-Za-z0-9]+`.
pub(crate) fn validate_probe_header_name(name: &str) -> Result<(), String> {
    if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
        return Err(format!("{name:?} is not a valid probe header name"));
    }
    Ok(())
}

/// An HTTP header name in Istio's strict form: `[-_A-Za-z0-9]+`.
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
