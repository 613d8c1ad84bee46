//! Go's `net/url` as far as istiod's check of a Wasm module's `url`
//! reaches (`strictParseURL` in istiod's `pkg/config/validation`, and the
//! same `isURL` fallback in the WasmPlugin and TrafficExtension CRDs): a
//! URL is parsed with `url.ParseRequestURI`, and when that fails, again
//! with `http://` in front; the scheme of what parses must be one Istio
//! loads from. A registry reference with a port (`reg.example:5000/f:v1`)
//! therefore parses as a URL of scheme `reg.example` and is refused.
//!
//! Go 1.26 made `net/url` refuse an `http`/`https` host with more than one
//! `:` (an IPv6 address needs brackets; go.dev/issue/75223). The newest
//! istiod, built with Go 1.26 semantics, refuses `::1`; istiod 1.28.3
//! (Go 1.24 semantics) accepts it as the host `::1`. meshhub follows the
//! stricter one, so what it accepts every line accepts (docs/validation.md,
//! "Accepted differences").

/// Why a string is no URL to Go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UrlError {
    /// A byte below 0x20 or 0x7f.
    Control,
    /// Empty.
    Empty,
    /// Starts with `:`.
    MissingScheme,
    /// Neither a scheme nor an absolute path.
    NotForRequest,
    /// A `%` not followed by two hex digits, or an escaped ASCII byte in a
    /// host.
    Escape(String),
    /// A byte a host may not hold.
    HostByte(char),
    /// A port that is not all digits.
    Port(String),
    /// A bracketed host that is not an IPv6 address.
    IpLiteral,
    /// An `http`/`https` host with more than one `:` (Go 1.26).
    StrictColons,
    /// User information with a byte it may not hold.
    Userinfo,
}

impl std::fmt::Display for UrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Control => f.write_str("invalid control character in URL"),
            Self::Empty => f.write_str("empty url"),
            Self::MissingScheme => f.write_str("missing protocol scheme"),
            Self::NotForRequest => f.write_str("invalid URI for request"),
            Self::Escape(s) => write!(f, "invalid URL escape {s:?}"),
            Self::HostByte(c) => write!(f, "invalid character {c:?} in host name"),
            Self::Port(p) => write!(f, "invalid port {p:?} after host"),
            Self::IpLiteral => f.write_str("invalid IP-literal"),
            Self::StrictColons => f.write_str(
                "an http(s) host with more than one ':' (an IPv6 address needs brackets)",
            ),
            Self::Userinfo => f.write_str("invalid userinfo"),
        }
    }
}

/// istiod's `strictParseURL`: the (lower-case) scheme of `raw`, parsed as
/// is or with `http://` in front; the first attempt's error when neither
/// parses (as istiod reports it), except that a second attempt refused
/// only for Go 1.26's colon rule says so.
pub(crate) fn strict_parse_scheme(raw: &str) -> Result<String, UrlError> {
    match parse_request_uri(raw) {
        Ok(scheme) => Ok(scheme),
        Err(first) => match parse_request_uri(&format!("http://{raw}")) {
            Ok(scheme) => Ok(scheme),
            Err(UrlError::StrictColons) => Err(UrlError::StrictColons),
            Err(_) => Err(first),
        },
    }
}

/// Go's `url.ParseRequestURI`: the lower-case scheme (empty for an
/// absolute path).
pub(crate) fn parse_request_uri(raw: &str) -> Result<String, UrlError> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(UrlError::Control);
    }
    if raw.is_empty() {
        return Err(UrlError::Empty);
    }
    if raw == "*" {
        return Ok(String::new());
    }
    let (scheme, rest) = scheme(raw)?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = match rest.strip_suffix('?') {
        Some(r) if !r.contains('?') => r,
        _ => rest.split_once('?').map_or(rest, |(r, _)| r),
    };
    if !rest.starts_with('/') {
        if scheme.is_empty() {
            return Err(UrlError::NotForRequest);
        }
        return Ok(scheme);
    }
    let path = match rest.strip_prefix("//").filter(|_| !scheme.is_empty()) {
        Some(after) => {
            let (authority, path) = after.find('/').map_or((after, ""), |i| after.split_at(i));
            authority_ok(&scheme, authority)?;
            path
        }
        None => rest,
    };
    unescape_ok(path, false)?;
    Ok(scheme)
}

/// Go's `getScheme`.
fn scheme(raw: &str) -> Result<(&str, &str), UrlError> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err(UrlError::MissingScheme),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// Go's `parseAuthority`.
fn authority_ok(scheme: &str, authority: &str) -> Result<(), UrlError> {
    let (user, host) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    host_ok(scheme, host)?;
    if let Some(user) = user {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c);
        if !user.chars().all(allowed) {
            return Err(UrlError::Userinfo);
        }
        unescape_ok(user, false)?;
    }
    Ok(())
}

/// Go's `parseHost`.
fn host_ok(scheme: &str, host: &str) -> Result<(), UrlError> {
    match host.rfind('[') {
        Some(i) if i > 0 => return Err(UrlError::IpLiteral),
        Some(_) => {
            let close = host.rfind(']').ok_or(UrlError::IpLiteral)?;
            port_ok(&host[close + 1..])?;
            let inner = &host[1..close];
            let addr = inner.split_once("%25").map_or(inner, |(a, _)| a);
            unescape_ok(addr, true)?;
            return match addr.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(_)) => Ok(()),
                _ => Err(UrlError::IpLiteral),
            };
        }
        None => {}
    }
    if let Some(first) = host.find(':') {
        let last = host.rfind(':').unwrap_or(first);
        if last != first && (scheme == "http" || scheme == "https") {
            // Go 1.26: `port_ok(&host[first..])` would fail on the second ':'.
            return Err(UrlError::StrictColons);
        }
        port_ok(&host[last..])?;
    }
    unescape_ok(host, true)
}

fn port_ok(colon_port: &str) -> Result<(), UrlError> {
    match colon_port.strip_prefix(':') {
        _ if colon_port.is_empty() => Ok(()),
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
        _ => Err(UrlError::Port(colon_port.to_owned())),
    }
}

/// Go's `unescape` check: every `%` starts a two-hex-digit escape; in a
/// host, an escape is of a non-ASCII byte (or `%25`) and every ASCII byte
/// is one a host may hold.
fn unescape_ok(s: &str, host: bool) -> Result<(), UrlError> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |j: usize| b.get(j).is_some_and(u8::is_ascii_hexdigit);
            if !hex(i + 1) || !hex(i + 2) {
                return Err(UrlError::Escape(s[i..].chars().take(3).collect()));
            }
            if host && b[i + 1] < b'8' && &s[i..i + 3] != "%25" {
                return Err(UrlError::Escape(s[i..i + 3].to_owned()));
            }
            i += 3;
            continue;
        }
        if host && b[i] < 0x80 && !host_byte(b[i]) {
            return Err(UrlError::HostByte(b[i] as char));
        }
        i += 1;
    }
    Ok(())
}

/// The ASCII bytes Go's `net/url` lets a host hold unescaped.
fn host_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Go 1.26's `net/url` says (checked with a Go program against
    /// istiod's `strictParseURL`).
    #[test]
    fn urls_parse_as_go_1_26_parses_them() {
        for (raw, want) in [
            // Go says "missing protocol scheme" (the first attempt's
            // error); the second attempt failed on the colon rule.
            ("::1", Err(UrlError::StrictColons)),
            ("a:b:c", Ok("a")),
            ("reg.io:5000/x:v1", Ok("reg.io")),
            ("http://a:1:2/x", Ok("http")),
            ("oci://a:1:2/x", Ok("oci")),
            ("1.2.3.4:80/x", Ok("http")),
            ("https://[::1]/x", Ok("https")),
            ("x::1/y", Ok("x")),
            ("http://h/%zz", Err(UrlError::Escape("%zz".into()))),
            ("h/%zz", Err(UrlError::NotForRequest)),
            (":80", Ok("http")),
            ("oci://h:/x", Ok("oci")),
            ("http://h:x/", Ok("http")),
            ("registry.example.com/f:v1", Ok("http")),
            ("oci://registry.example.com/f:v1", Ok("oci")),
            ("http://h/a b", Ok("http")),
            ("http://a b/", Ok("http")),
            ("", Ok("http")),
            ("a b", Err(UrlError::NotForRequest)),
            ("[::1]:80/x", Ok("http")),
            ("ftp://x/y", Ok("ftp")),
            ("h%41/x", Err(UrlError::NotForRequest)),
            ("fe80::1%en0", Ok("fe80")),
        ] {
            let got = strict_parse_scheme(raw);
            assert_eq!(got, want.map(str::to_owned), "{raw:?}");
        }
    }
}
