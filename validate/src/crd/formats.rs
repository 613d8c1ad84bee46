//! The string formats the API server checks (`format:` of a string field),
//! as Kubernetes' OpenAPI validator defines them. Formats it does not
//! check pass here too.

use std::net::IpAddr;
use std::sync::LazyLock;

use regex::Regex;

static DATE_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})?$")
        .expect("date-time pattern")
});
static DATE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\d{4}-\d{2}-\d{2}$").expect("date pattern"));
static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
        .expect("uuid pattern")
});

/// Whether `x` is of `format`.
pub(crate) fn conforms(format: &str, x: &str) -> bool {
    match format {
        // Go's `net.ParseIP`, and the form's separator.
        "ipv4" => x.parse::<IpAddr>().is_ok() && x.contains('.'),
        "ipv6" => x.parse::<IpAddr>().is_ok() && x.contains(':'),
        "cidr" => x.split_once('/').is_some_and(|(ip, bits)| {
            ip.parse::<IpAddr>().is_ok_and(|a| {
                let max = if a.is_ipv4() { 32 } else { 128 };
                bits.parse::<u8>().is_ok_and(|b| b <= max) && !bits.starts_with('+')
            })
        }),
        "date-time" | "datetime" => DATE_TIME.is_match(x),
        "date" => DATE.is_match(x),
        "uuid" => UUID.is_match(x),
        _ => true,
    }
}
