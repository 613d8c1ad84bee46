//! Naming rules: DNS labels, subdomains and domain names, and Kubernetes
//! label keys and values.
//!
//! "DNS label" has two meanings in practice, and each has one name here:
//!
//! * [`is_dns1123_label`]: Kubernetes' DNS-1123 label, lower case only, what
//!   Kubernetes allows as a namespace name (and what meshhub takes for
//!   cluster names). [`is_dns1123_subdomain`] joins such labels with dots
//!   (object names such as a Lease's).
//! * [`is_hostname_label`]: an RFC 1123 host name label in either case (DNS
//!   compares names case-insensitively). Istio's own `IsDNS1123Label`
//!   accepts upper case, so the Istio rules (hosts, subset and port names,
//!   namespaces named in specs) use this one.

/// Longest DNS label.
const MAX_LABEL: usize = 63;
/// Longest DNS-1123 subdomain (a Kubernetes object name).
const MAX_SUBDOMAIN: usize = 253;
/// Longest domain name Istio accepts for a host.
const MAX_DOMAIN: usize = 255;

/// 1–63 characters of `allowed`, starting and ending alphanumeric.
fn is_label(s: &str, allowed: impl Fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL
        && b.iter().all(|c| allowed(*c) || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// Kubernetes' DNS-1123 label: 1–63 lower-case letters, digits and `-`,
/// starting and ending with a letter or digit (a namespace name).
pub fn is_dns1123_label(s: &str) -> bool {
    is_label(s, |c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// Kubernetes' DNS-1123 subdomain: lower-case letters, digits and `-` in
/// dot-separated parts that start and end alphanumeric, at most 253
/// characters in all (most object names). As in Kubernetes, a part may be
/// longer than a DNS label's 63 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= MAX_SUBDOMAIN
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b.first().is_some_and(u8::is_ascii_alphanumeric)
                && b.last().is_some_and(u8::is_ascii_alphanumeric)
        })
}

/// An RFC 1123 host name label: 1–63 letters (either case), digits and
/// `-`, starting and ending with a letter or digit.
pub fn is_hostname_label(s: &str) -> bool {
    is_label(s, |c| c.is_ascii_alphanumeric())
}

/// A host name label that may instead be `*`, or start with `*` or `*-`.
pub fn is_wildcard_hostname_label(s: &str) -> bool {
    if s.len() > MAX_LABEL {
        return false;
    }
    s == "*"
        || is_hostname_label(s)
        || s.strip_prefix("*-").is_some_and(is_hostname_label)
        || s.strip_prefix('*').is_some_and(is_hostname_label)
}

fn domain_preconditions(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_DOMAIN {
        return Err(format!("domain name {name:?} is too long (max 255)"));
    }
    Ok(())
}

/// Dot-separated host name labels; a trailing dot is allowed, an
/// all-numeric top level domain is not.
fn hostname_labels(domain: &str, labels: &str) -> Result<(), String> {
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
        if !is_hostname_label(label) {
            return Err(format!(
                "domain name {domain:?} is invalid (label {label:?} is invalid)"
            ));
        }
    }
    Ok(())
}

/// A fully qualified domain name (no wildcard).
pub fn validate_fqdn(name: &str) -> Result<(), String> {
    domain_preconditions(name)?;
    hostname_labels(name, name)
}

/// A domain name whose first label may be a wildcard (`*.example.com`,
/// `*`); wildcards anywhere else are invalid.
pub fn validate_wildcard_domain(name: &str) -> Result<(), String> {
    domain_preconditions(name)?;
    let (first, rest) = match name.split_once('.') {
        Some((f, r)) => (f, Some(r)),
        None => (name, None),
    };
    if !is_wildcard_hostname_label(first) {
        return Err(format!(
            "domain name {name:?} is invalid (label {first:?} is invalid)"
        ));
    }
    match rest {
        Some(rest) => hostname_labels(name, rest),
        None => Ok(()),
    }
}

/// Only a full `*.` prefix (or `*` alone) is allowed, not `*foo.com`.
pub fn validate_partial_wildcard(host: &str) -> Result<(), String> {
    if host.contains('*') && host.len() != 1 && !host.starts_with("*.") {
        return Err(format!("partial wildcard {host:?} is not allowed"));
    }
    Ok(())
}

/// A Kubernetes qualified name (a label value, or a label key's name
/// part): alphanumerics, `-`, `_` and `.`, starting and ending
/// alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A Kubernetes label key: an optional prefix of host name labels (at most
/// 253 characters) and `/`, then a qualified name of at most 63.
pub fn validate_label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let bad = || format!("invalid label key {k:?}");
    if let Some(p) = prefix
        && (p.len() > MAX_SUBDOMAIN || p.split('.').any(|l| !is_hostname_label(l)))
    {
        return Err(bad());
    }
    if !is_qualified_name(name) || name.len() > MAX_LABEL {
        return Err(bad());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
