//! Property: no JSON makes validation panic.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::object;
use crate::validate;

/// Field names and values that steer random JSON into the rules' paths.
const WORDS: &[&str] = &[
    "hosts",
    "http",
    "tcp",
    "tls",
    "route",
    "destination",
    "host",
    "subset",
    "port",
    "number",
    "weight",
    "match",
    "headers",
    "uri",
    "regex",
    "exact",
    "prefix",
    "redirect",
    "directResponse",
    "delegate",
    "rewrite",
    "uriRegexRewrite",
    "timeout",
    "retries",
    "attempts",
    "retryOn",
    "perTryTimeout",
    "fault",
    "abort",
    "delay",
    "percentage",
    "value",
    "httpStatus",
    "fixedDelay",
    "mirror",
    "mirrors",
    "mirrorPercentage",
    "corsPolicy",
    "allowOrigins",
    "maxAge",
    "gateways",
    "sniHosts",
    "destinationSubnets",
    "exportTo",
    "trafficPolicy",
    "subsets",
    "name",
    "labels",
    "loadBalancer",
    "consistentHash",
    "maglev",
    "tableSize",
    "localityLbSetting",
    "distribute",
    "failover",
    "from",
    "to",
    "connectionPool",
    "outlierDetection",
    "portLevelSettings",
    "mode",
    "servers",
    "bind",
    "protocol",
    "credentialName",
    "addresses",
    "ports",
    "resolution",
    "endpoints",
    "address",
    "workloadSelector",
    "egress",
    "ingress",
    "defaultEndpoint",
    "outboundTrafficPolicy",
    "egressProxy",
    "configPatches",
    "applyTo",
    "patch",
    "operation",
    "listener",
    "filterChain",
    "filter",
    "subFilter",
    "filters",
    "filterType",
    "rules",
    "source",
    "when",
    "key",
    "values",
    "action",
    "provider",
    "selector",
    "matchLabels",
    "portLevelMtls",
    "jwtRules",
    "issuer",
    "jwksUri",
    "jwks",
    "template",
    "probe",
    "httpGet",
    "targetRef",
    "targetRefs",
    "metrics",
    "overrides",
    "tagOverrides",
    "tracing",
    "customTags",
    "url",
    "vmConfig",
    "env",
    "*",
    "*.a.com",
    "ns/*",
    "./a.b",
    "unix:///sock",
    "10.0.0.0/8",
    "::1",
    "1s",
    "-1s",
    "1.0005s",
    "DNS",
    "STATIC",
    "NONE",
    "DNS_ROUND_ROBIN",
    "SIMPLE",
    "MUTUAL",
    "ISTIO_MUTUAL",
    "HTTPS",
    "TLS",
    "CUSTOM",
    "DENY",
    "UPSERT",
    "REMOVE",
    "HTTP_FILTER",
    "MERGE",
    "@request.auth.claims.x",
    "([",
    "mesh",
    "127.0.0.1:80",
    "é",
    "",
];

fn arb_json() -> impl Strategy<Value = Value> {
    let word = prop::sample::select(WORDS).prop_map(str::to_owned);
    let text = prop_oneof![word.clone(), "\\PC{0,12}"];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-2i64..70000).prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text.clone().prop_map(Value::String),
    ];
    let key = prop_oneof![4 => word, 1 => "\\PC{0,6}"];
    leaf.prop_recursive(5, 96, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const KINDS: &[(&str, &str)] = &[
    ("networking.istio.io/v1", "VirtualService"),
    ("networking.istio.io/v1", "DestinationRule"),
    ("networking.istio.io/v1", "Gateway"),
    ("networking.istio.io/v1", "ServiceEntry"),
    ("networking.istio.io/v1", "Sidecar"),
    ("networking.istio.io/v1alpha3", "EnvoyFilter"),
    ("networking.istio.io/v1", "WorkloadEntry"),
    ("networking.istio.io/v1", "WorkloadGroup"),
    ("networking.istio.io/v1beta1", "ProxyConfig"),
    ("security.istio.io/v1", "AuthorizationPolicy"),
    ("security.istio.io/v1", "PeerAuthentication"),
    ("security.istio.io/v1", "RequestAuthentication"),
    ("telemetry.istio.io/v1", "Telemetry"),
    ("extensions.istio.io/v1alpha1", "WasmPlugin"),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn never_panics_on_any_spec(spec in arb_json(), dry_run in proptest::option::of("\\PC{0,5}")) {
        for (api, kind) in KINDS {
            let mut obj = object(api, kind, spec.clone());
            if let Some(v) = &dry_run {
                obj.metadata.annotations.insert("istio.io/dry-run".into(), v.clone());
            }
            if let Err(e) = validate(&obj) {
                prop_assert!(!e.problems.is_empty());
                let prefix = format!("{} ns1/test: ", kind);
                prop_assert!(e.to_string().starts_with(&prefix));
            }
        }
    }

    #[test]
    fn never_panics_on_wrapped_specs(inner in arb_json(), field in prop::sample::select(WORDS)) {
        // Put random JSON one level under a real field name, where the
        // rules look first.
        for (api, kind) in KINDS {
            let spec = json!({ field: inner.clone(), "hosts": [field], "http": [inner.clone()] });
            let _ = validate(&object(api, kind, spec));
        }
    }
}
