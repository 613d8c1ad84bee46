//! String formats (`format:` of a string field), checked as Kubernetes'
//! OpenAPI validator checks them: `ipv4`, `ipv6`, `cidr`, `date-time`,
//! `date` and `uuid`. The API server checks more (`byte`, `hostname`,
//! `uri`, `email`, `mac`, `duration`, `uuid3`/`4`/`5`, `k8s-short-name`,
//! `k8s-long-name`); those pass here and are left to the cluster's API
//! server (the Gateway API's CRDs use none of them). Differences kept:
//! Go's `ParseIPSloppy` takes an IPv4 address with leading zeros, which
//! this refuses.

use std::net::IpAddr;
use std::sync::LazyLock;

use regex::Regex;

static DATE_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$")
        .expect("date-time pattern")
});
static DATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$").expect("date pattern")
});
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
