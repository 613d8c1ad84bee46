//! What Istio added between 1.28 and 1.32 (istio.io/api v1.32.0), checked
//! as `meshhubctl validate` and the hub check an object (schema
//! transcoding, then Istio's rules): the objects of
//! `tests/data/istio-1.32-valid.yaml` (the three of issue 36 among them)
//! pass, and each of `tests/data/istio-1.32-invalid.yaml` gives exactly the
//! problems below, each one a rule Istio 1.32 applies to a new field or
//! kind (the CRD's OpenAPI and CEL rules, istiod's `pkg/config/validation`).

use std::path::PathBuf;

use meshhub_proto::kinds::KindTable;
use meshhub_proto::object::Object;
use meshhub_proto::transcode;
use meshhub_validate::Finding;
use serde_json::Value;

/// `Kind ns/name` and its problems, in order, as `path: message`.
const EXPECTED_INVALID: &[(&str, &[&str])] = &[
    (
        "DestinationRule bookinfo/keepalive-no-timeout",
        &[
            "spec.trafficPolicy.connectionPool.http.http2KeepAlive.interval: duration must be at least 1ms",
            "spec.trafficPolicy.connectionPool.http.http2KeepAlive.timeout: is required when http2KeepAlive is set",
        ],
    ),
    (
        "DestinationRule bookinfo/zone-aware",
        &[
            "spec.trafficPolicy.loadBalancer: only one of localityLbSetting and zoneAwareLbSetting can be set",
            "spec.trafficPolicy.loadBalancer.zoneAwareLbSetting.failoverPriority[0]: must not use topology label \"topology.kubernetes.io/zone\"; region- and zone-level routing are handled automatically",
            "spec.trafficPolicy.loadBalancer.zoneAwareLbSetting.failover[0]: failover from and to must be different regions",
            "spec.trafficPolicy.loadBalancer.zoneAwareLbSetting.failover[1]: failover may only name regions; zone and subzone failover are automatic",
            "spec.trafficPolicy.loadBalancer.zoneAwareLbSetting.failover[1]: failover regions must not contain a * wildcard",
            "spec.trafficPolicy.loadBalancer.zoneAwareLbSetting.minClusterSize: must be at least 1",
        ],
    ),
    (
        "DestinationRule bookinfo/outlier-ranges",
        &[
            "spec.trafficPolicy.outlierDetection.outlierDetectionHttpErrorCodes[0]: must be an HTTP status code in the range 100..599",
            "spec.trafficPolicy.outlierDetection.outlierDetectionHttpErrorCodes[1]: must be an HTTP status code in the range 100..599",
            "spec.trafficPolicy.outlierDetection.failurePercentageThreshold: percentage 101 is not in the range 0..100",
        ],
    ),
    (
        "DestinationRule bookinfo/two-lb-policies",
        &["spec.trafficPolicy.loadBalancer: multiple fields provided for oneof 'lb_policy'"],
    ),
    (
        "VirtualService bookinfo/redirect-uri-and-prefix",
        &["spec.http[0].redirect: a redirect may only specify one of uri or prefixRewrite"],
    ),
    (
        "VirtualService bookinfo/redirect-prefix-on-exact",
        &[
            "spec.http[0].redirect.prefixRewrite: needs every URI match of the route to be a prefix match",
        ],
    ),
    (
        "AuthorizationPolicy bookinfo/bad-trust-domains",
        &[
            "spec.rules[0].from[0].source.trustDomains: wildcard is only allowed at the start or end, found \"a*b\"",
            "spec.rules[0].from[0].source.notTrustDomains: trust domain must not contain '/', found \"example.com/ns\"",
        ],
    ),
    (
        "AuthorizationPolicy bookinfo/custom-trust-domains",
        &["spec.rules[0].from[0].source.trustDomains: not supported with the CUSTOM action"],
    ),
    (
        "EnvoyFilter bookinfo/waypoint-context-without-match",
        &["spec.configPatches[0].match: only support waypointMatch when context is WAYPOINT"],
    ),
    (
        "EnvoyFilter bookinfo/waypoint-match-elsewhere",
        &[
            "spec.configPatches[0].match: only support waypointMatch when context is WAYPOINT",
            "spec.configPatches[0].match.waypoint.portNumber: port must be between 1-65535",
        ],
    ),
    (
        "Telemetry bookinfo/empty-formatter",
        &[
            "spec.tracing[0].customTags[\"route\"].formatter.value: Invalid value: \"\": spec.tracing[0].customTags[\"route\"].formatter.value in body should be at least 1 chars long",
        ],
    ),
    (
        "TrafficExtension bookinfo/no-filter",
        &[
            "spec: only one of targetRefs or selector can be set",
            "spec.selector.matchLabels[\"app\"]: wildcard is not supported in a selector",
            "spec.targetRefs[0].namespace: must not be set; cross namespace referencing is not supported",
            "spec: exactly one of wasm or lua must be set",
        ],
    ),
    (
        "TrafficExtension bookinfo/both-filters",
        &[
            "spec: multiple fields provided for oneof 'filter_config'",
            "spec: exactly one of wasm or lua must be set",
            "spec.wasm.url: unsupported URL scheme \"ftp\"",
            "spec.wasm.sha256: must be 64 lower case hexadecimal characters",
            "spec.match[0].ports[0].number: port 0 is out of the range 1..65535",
        ],
    ),
    (
        "TrafficExtension bookinfo/empty-lua",
        &[
            "spec.lua.inlineCode: Invalid value: \"\": spec.lua.inlineCode in body should be at least 1 chars long",
        ],
    ),
    (
        "TrafficExtension bookinfo/wasm-env",
        &[
            "spec.wasm.vmConfig.env[0].value: may only be set when valueFrom is INLINE",
            "spec.wasm.vmConfig.env[1].name: duplicate env \"A\"",
        ],
    ),
    (
        "RequestAuthentication bookinfo/bad-presence",
        &[
            "spec.jwtRules[0].presence: unknown enum value \"MANDATORY\" (expected one of OPTIONAL, REQUIRED)",
        ],
    ),
];

fn data(name: &str) -> Vec<Object> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    docs.into_iter()
        .filter(Value::is_object)
        .map(|d| serde_json::from_value(d).expect("a Kubernetes object"))
        .collect()
}

fn label(obj: &Object) -> String {
    format!(
        "{} {}/{}",
        obj.kind,
        obj.metadata.namespace.as_deref().unwrap_or("default"),
        obj.metadata.name
    )
}

/// The problems `meshhubctl validate` reports: the transcoder's (unknown
/// kind or field, wrong type, a second member of a oneof), then the rules'.
fn problems(kinds: &KindTable, obj: &Object) -> Vec<String> {
    let kind = match transcode::kind_of(kinds, obj) {
        Ok(k) => k,
        Err(e) => return vec![e.to_string()],
    };
    let mut out = Vec::new();
    if let Err(e) = transcode::object_to_resource(kind, obj) {
        let f = Finding::from(&e);
        out.push(format!("{}: {}", f.path, f.message));
    }
    if let Err(e) = meshhub_validate::validate(obj) {
        out.extend(
            e.problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message)),
        );
    }
    out
}

#[test]
fn objects_valid_in_istio_1_32_pass() {
    let kinds = KindTable::builtin();
    let objects = data("istio-1.32-valid.yaml");
    assert!(objects.len() >= 12, "{} objects", objects.len());
    let refused: Vec<String> = objects
        .iter()
        .filter_map(|o| {
            let p = problems(&kinds, o);
            (!p.is_empty()).then(|| format!("{}: {p:?}", label(o)))
        })
        .collect();
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
}

#[test]
fn objects_istio_1_32_refuses_give_its_reasons() {
    let kinds = KindTable::builtin();
    let objects = data("istio-1.32-invalid.yaml");
    assert_eq!(
        objects.len(),
        EXPECTED_INVALID.len(),
        "one expectation per document"
    );
    let mut diffs = Vec::new();
    for (obj, (name, want)) in objects.iter().zip(EXPECTED_INVALID) {
        assert_eq!(
            label(obj),
            *name,
            "documents and expectations in the same order"
        );
        let got = problems(&kinds, obj);
        if got != *want {
            diffs.push(format!("{name}:\n  got:  {got:#?}\n  want: {want:#?}"));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}
