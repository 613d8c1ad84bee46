//! Connection pool settings, shared by DestinationRule traffic policies and
//! Sidecar listeners.

use serde_json::Value;

use crate::enums::H2_UPGRADE_POLICY;
use crate::json::{bool_field, enum_field, field, int_field};
use crate::report::{Report, at};
use crate::values::check_duration;

/// Connection pool settings (DestinationRule and Sidecar).
pub(crate) fn check_connection_pool(r: &mut Report, path: &str, cp: &Value) {
    let http = field(cp, "http");
    let tcp = field(cp, "tcp");
    if http.is_none() && tcp.is_none() {
        r.err(path, "a connection pool must set http or tcp");
        return;
    }
    if let Some(h) = http {
        let p = at(path, "http");
        for f in [
            "http1MaxPendingRequests",
            "http2MaxRequests",
            "maxRequestsPerConnection",
            "maxRetries",
            "maxConcurrentStreams",
        ] {
            if int_field(h, f).is_some_and(|n| n < 0) {
                r.err(at(&p, f), "must not be negative");
            }
        }
        check_duration(r, &p, h, "idleTimeout");
        // Istio 1.30+: both durations are required (istiod), at least 1ms
        // (the CRD and istiod).
        if let Some(ka) = field(h, "http2KeepAlive") {
            let kp = at(&p, "http2KeepAlive");
            for f in ["interval", "timeout"] {
                if field(ka, f).is_none() {
                    r.err(at(&kp, f), "is required when http2KeepAlive is set");
                } else {
                    check_duration(r, &kp, ka, f);
                }
            }
        }
        if enum_field(h, "h2UpgradePolicy", &H2_UPGRADE_POLICY) == "UPGRADE"
            && bool_field(h, "useClientProtocol")
        {
            r.err(
                at(&p, "useClientProtocol"),
                "must not be true when h2UpgradePolicy is UPGRADE",
            );
        }
    }
    if let Some(t) = tcp {
        let p = at(path, "tcp");
        if int_field(t, "maxConnections").is_some_and(|n| n < 0) {
            r.err(at(&p, "maxConnections"), "must not be negative");
        }
        for f in ["connectTimeout", "maxConnectionDuration", "idleTimeout"] {
            check_duration(r, &p, t, f);
        }
        if let Some(ka) = field(t, "tcpKeepalive") {
            let kp = at(&p, "tcpKeepalive");
            check_duration(r, &kp, ka, "time");
            check_duration(r, &kp, ka, "interval");
        }
    }
}
