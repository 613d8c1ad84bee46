//! The size-limit table and its rule: each limit kind over and at its
//! bound, characters counted as code points, one message per field where
//! one of Istio's own rules bounds the same field.

use std::collections::BTreeSet;

use meshhub_proto::object::{Object, ObjectMeta};
use serde_json::{Map, Value, json};

use super::{Row, TABLE_TEXT, crd_rows, parse_table, table_rows};
use crate::problems;

/// `path: message` of every problem of a `kind` in its Istio group.
fn check(kind: &str, spec: Value) -> Vec<String> {
    let api_version = match kind {
        "AuthorizationPolicy" | "PeerAuthentication" | "RequestAuthentication" => {
            "security.istio.io/v1"
        }
        "Telemetry" => "telemetry.istio.io/v1",
        "WasmPlugin" | "TrafficExtension" => "extensions.istio.io/v1alpha1",
        _ => "networking.istio.io/v1",
    };
    let mut content = Map::new();
    content.insert("spec".into(), spec);
    let obj = Object {
        api_version: api_version.into(),
        kind: kind.into(),
        metadata: ObjectMeta {
            name: "test".into(),
            namespace: Some("ns1".into()),
            ..ObjectMeta::default()
        },
        content,
    };
    problems(&obj).iter().map(ToString::to_string).collect()
}

/// The problems of `found` at `path` (exactly, not below it).
fn at<'a>(found: &'a [String], path: &str) -> Vec<&'a str> {
    found
        .iter()
        .filter_map(|f| f.strip_prefix(path)?.strip_prefix(": "))
        .collect()
}

fn hosts(n: usize) -> Value {
    (0..n).map(|i| json!(format!("h{i}.example.com"))).collect()
}

fn service_entry(hosts: Value) -> Value {
    json!({
        "hosts": hosts,
        "location": "MESH_EXTERNAL",
        "resolution": "DNS",
        "ports": [{"number": 80, "name": "http", "protocol": "HTTP"}],
    })
}

fn labels(n: usize, value: &str) -> Value {
    (0..n)
        .map(|i| (format!("k{i}"), json!(value)))
        .collect::<Map<_, _>>()
        .into()
}

#[test]
fn the_shipped_table_parses_with_one_row_per_limit() {
    let rows = parse_table(TABLE_TEXT).unwrap();
    assert_eq!(rows.len(), table_rows());
    assert!(rows.len() > 150, "{} rows", rows.len());
    let keys: BTreeSet<_> = rows.iter().map(|r| (&r.kind, &r.path, r.limit)).collect();
    assert_eq!(keys.len(), rows.len(), "a (kind, path, limit) twice");
    // Rows print as they are written.
    let printed: Vec<String> = rows.iter().map(Row::to_string).collect();
    for p in &printed {
        assert!(TABLE_TEXT.lines().any(|l| l == p), "{p:?}");
    }
}

#[test]
fn malformed_rows_are_refused_with_their_line() {
    for (text, why) in [
        (
            "ServiceEntry\tspec.hosts\tmaxItems",
            "expected four tab-separated columns",
        ),
        (
            "ServiceEntry\thosts\tmaxItems\t256",
            "a path starts at spec",
        ),
        (
            "ServiceEntry\tspec..hosts\tmaxItems\t256",
            "an empty path segment",
        ),
        (
            "ServiceEntry\tspec.hosts\tmaximum\t256",
            "not a size limit keyword",
        ),
        ("ServiceEntry\tspec.hosts\tmaxItems\t-1", "not a count"),
        ("\tspec.hosts\tmaxItems\t256", "no kind"),
    ] {
        let err = parse_table(&format!("# a comment\n\n{text}")).unwrap_err();
        assert_eq!((err.line, err.why), (3, why), "{text:?}");
    }
}

#[test]
fn a_list_over_max_items_is_refused_naming_the_field_and_the_limit() {
    let found = check("ServiceEntry", service_entry(hosts(257)));
    assert_eq!(
        at(&found, "spec.hosts"),
        ["Too many: 257: must have at most 256 items"],
        "{found:#?}"
    );
    // Below a list of objects: the path has the index.
    let dr = json!({
        "host": "reviews",
        "subsets": [{"name": "v1"}, {"name": "v2", "trafficPolicy": {
            "portLevelSettings": (1..=4097).map(|p| json!({"port": {"number": p}})).collect::<Vec<_>>(),
        }}],
    });
    let found = check("DestinationRule", dr);
    assert_eq!(
        at(&found, "spec.subsets[1].trafficPolicy.portLevelSettings"),
        ["Too many: 4097: must have at most 4096 items"],
        "{found:#?}"
    );
}

#[test]
fn objects_exactly_at_their_limits_pass() {
    assert_eq!(
        check("ServiceEntry", service_entry(hosts(256))),
        Vec::<String>::new()
    );
    let ef = json!({"workloadSelector": {"labels": labels(256, &"v".repeat(63))}});
    assert_eq!(check("EnvoyFilter", ef), Vec::<String>::new());
    let we = json!({
        "address": "10.0.0.1",
        "network": "n".repeat(2048),
        "serviceAccount": "s".repeat(253),
    });
    assert_eq!(check("WorkloadEntry", we), Vec::<String>::new());
    let pa = json!({"selector": {"matchLabels": {"app": "a"}}, "portLevelMtls": {"8080": {"mode": "STRICT"}}});
    assert_eq!(check("PeerAuthentication", pa), Vec::<String>::new());
}

#[test]
fn a_string_over_max_length_counts_characters_not_bytes() {
    // 2048 two-byte characters: 4096 bytes, at the limit.
    let we = |network: String| json!({"address": "10.0.0.1", "network": network});
    assert_eq!(
        check("WorkloadEntry", we("é".repeat(2048))),
        Vec::<String>::new()
    );
    let found = check("WorkloadEntry", we("é".repeat(2049)));
    assert_eq!(
        found,
        ["spec.network: Too long: may not be more than 2048 bytes"]
    );
    // A label value: 63 four-byte characters pass, 64 do not.
    let sel = |v: &str| json!({"workloadSelector": {"labels": {"app": v}}, "egress": [{"hosts": ["./*"]}]});
    assert_eq!(
        check("Sidecar", sel(&"🦀".repeat(63))),
        Vec::<String>::new()
    );
    assert_eq!(
        check("Sidecar", sel(&"🦀".repeat(64))),
        ["spec.workloadSelector.labels[\"app\"]: Too long: may not be more than 63 bytes"]
    );
    // The items of a list of strings.
    let mut se = service_entry(hosts(1));
    se["addresses"] = json!(["10.0.0.1", "a".repeat(65)]);
    se["resolution"] = json!("STATIC");
    se["endpoints"] = json!([{"address": "10.0.0.2"}]);
    // (No address is that long: Istio's own rule refuses it too.)
    let found = check("ServiceEntry", se);
    assert_eq!(
        at(&found, "spec.addresses[1]").first(),
        Some(&"Too long: may not be more than 64 bytes"),
        "{found:#?}"
    );
}

#[test]
fn a_map_over_max_properties_is_refused() {
    let ef = json!({"workloadSelector": {"labels": labels(257, "v")}});
    assert_eq!(
        check("EnvoyFilter", ef),
        ["spec.workloadSelector.labels: Too many: 257: must have at most 256 items"]
    );
    // A map's values: one message per value over the limit.
    let pc = json!({"environmentVariables": {"A": "x".repeat(2049), "B": "ok"}});
    assert_eq!(
        check("ProxyConfig", pc),
        ["spec.environmentVariables[\"A\"]: Too long: may not be more than 2048 bytes"]
    );
}

#[test]
fn minimums_are_said_once_in_the_api_servers_words() {
    let found = check("ServiceEntry", service_entry(json!([])));
    assert_eq!(
        at(&found, "spec.hosts"),
        ["Invalid value: 0: spec.hosts in body should have at least 1 items"],
        "{found:#?}"
    );
    // Absent, Istio's own rule says it.
    let mut se = service_entry(json!(null));
    se.as_object_mut().unwrap().remove("hosts");
    assert_eq!(
        at(&check("ServiceEntry", se), "spec.hosts"),
        ["must not be empty"]
    );

    let pa = json!({"selector": {"matchLabels": {"app": "a"}}, "portLevelMtls": {}});
    assert_eq!(
        check("PeerAuthentication", pa),
        [
            "spec.portLevelMtls: Invalid value: 0: spec.portLevelMtls in body should have at least 1 properties"
        ]
    );
    let ap = json!({"targetRef": {"kind": "Service", "name": ""}});
    assert_eq!(
        check("AuthorizationPolicy", ap),
        [
            "spec.targetRef.name: Invalid value: \"\": spec.targetRef.name in body should be at least 1 chars long"
        ]
    );
    let ap = json!({"targetRef": {"kind": "Service"}});
    assert_eq!(
        check("AuthorizationPolicy", ap),
        ["spec.targetRef.name: must be set"]
    );
    let gw = json!({"servers": [{
        "port": {"number": 443, "name": "https", "protocol": "HTTPS"},
        "hosts": ["*"],
        "tls": {"mode": "SIMPLE", "credentialName": "c", "credentialNames": []},
    }]});
    assert_eq!(
        check("Gateway", gw),
        [
            "spec.servers[0].tls.credentialNames: Invalid value: 0: spec.servers[0].tls.credentialNames in body should have at least 1 items"
        ]
    );
    let ra = json!({"jwtRules": [{"issuer": "", "jwksUri": "https://example.com/jwks", "audiences": ["a", ""]}]});
    assert_eq!(
        check("RequestAuthentication", ra),
        [
            "spec.jwtRules[0].audiences[1]: Invalid value: \"\": spec.jwtRules[0].audiences[1] in body should be at least 1 chars long",
            "spec.jwtRules[0].issuer: Invalid value: \"\": spec.jwtRules[0].issuer in body should be at least 1 chars long",
        ]
    );
}

#[test]
fn a_field_istio_also_bounds_gets_one_message() {
    let ap =
        |accounts: Value| json!({"rules": [{"from": [{"source": {"serviceAccounts": accounts}}]}]});
    let path = "spec.rules[0].from[0].source.serviceAccounts";
    let many: Vec<String> = (0..17).map(|i| format!("ns/sa{i}")).collect();
    assert_eq!(
        check("AuthorizationPolicy", ap(json!(many))),
        [format!("{path}: Too many: 17: must have at most 16 items")]
    );
    assert_eq!(
        check("AuthorizationPolicy", ap(json!(["a".repeat(321)]))),
        [format!(
            "{path}[0]: Too long: may not be more than 320 bytes"
        )]
    );
    // 320 characters but 640 bytes: the CRD lets it pass, istiod does not.
    let found = check("AuthorizationPolicy", ap(json!(["é".repeat(320)])));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with(&format!("{path}: value cannot exceed 320 bytes")),
        "{found:#?}"
    );
    // The same for a Wasm plugin's name, secret and env names.
    let wasm = |name: String| json!({"url": "oci://example.com/f:v1", "pluginName": name});
    assert_eq!(
        check("WasmPlugin", wasm("p".repeat(257))),
        ["spec.pluginName: Too long: may not be more than 256 bytes"]
    );
    assert_eq!(
        check("WasmPlugin", wasm("é".repeat(256))),
        ["spec.pluginName: must be at most 256 bytes long"]
    );
    assert_eq!(
        check("WasmPlugin", wasm(String::new())),
        [
            "spec.pluginName: Invalid value: \"\": spec.pluginName in body should be at least 1 chars long"
        ]
    );
    let te = json!({"lua": {"inlineCode": ""}});
    assert_eq!(
        check("TrafficExtension", te),
        [
            "spec.lua.inlineCode: Invalid value: \"\": spec.lua.inlineCode in body should be at least 1 chars long"
        ]
    );
    let targets: Vec<Value> = (0..17)
        .map(|i| json!({"kind": "Service", "name": format!("s{i}")}))
        .collect();
    let te =
        json!({"targetRefs": targets, "lua": {"inlineCode": "function envoy_on_request(h) end"}});
    assert_eq!(
        check("TrafficExtension", te),
        ["spec.targetRefs: Too many: 17: must have at most 16 items"]
    );
}

#[test]
fn null_fields_and_other_kinds_are_not_bounded() {
    let mut se = service_entry(hosts(1));
    se["addresses"] = Value::Null;
    assert_eq!(check("ServiceEntry", se), Vec::<String>::new());
    // Null map values are pruned before the API server counts.
    let mut many = labels(256, "v");
    many["k999"] = Value::Null;
    let ef = json!({"workloadSelector": {"labels": many}});
    assert_eq!(check("EnvoyFilter", ef), Vec::<String>::new());
    let pa = json!({"selector": {"matchLabels": {"app": "a"}}, "portLevelMtls": {"8080": null}});
    assert_eq!(
        check("PeerAuthentication", pa),
        [
            "spec.portLevelMtls: Invalid value: 0: spec.portLevelMtls in body should have at least 1 properties"
        ]
    );
    // A null custom tag is absent too (and no limit of Telemetry's).
    let tel =
        json!({"tracing": [{"providers": [{"name": "zipkin"}], "customTags": {"route": null}}]});
    assert_eq!(check("Telemetry", tel), Vec::<String>::new());
    // VirtualService's CRD has no size limit.
    let vs = json!({"hosts": hosts(300), "http": [{"route": [{"destination": {"host": "r"}}]}]});
    assert_eq!(check("VirtualService", vs), Vec::<String>::new());
}

#[test]
fn a_crds_limits_are_derived_from_its_served_versions() {
    let crd = json!({
        "spec": {
            "names": {"kind": "Thing"},
            "versions": [
                {"name": "v1", "served": true, "schema": {"openAPIV3Schema": {"properties": {"spec": {
                    "type": "object",
                    "properties": {
                        "hosts": {"type": "array", "maxItems": 8, "items": {"type": "string", "maxLength": 5}},
                        "labels": {"type": "object", "maxProperties": 3,
                                   "additionalProperties": {"type": "string", "minLength": 1}},
                        "one": {"type": "object", "oneOf": [{"properties": {"a": {"type": "string", "maxLength": 2}}}]},
                    },
                }}}}},
                {"name": "v0", "served": false, "schema": {"openAPIV3Schema": {"properties": {"spec": {
                    "type": "object", "properties": {"old": {"type": "string", "maxLength": 1}},
                }}}}},
            ],
        },
    });
    let rows: Vec<String> = crd_rows(&crd).unwrap().iter().map(Row::to_string).collect();
    assert_eq!(
        rows,
        [
            "Thing\tspec.hosts\tmaxItems\t8",
            "Thing\tspec.hosts\tmaxLength\t5",
            "Thing\tspec.labels\tmaxProperties\t3",
            "Thing\tspec.labels.*\tminLength\t1",
            "Thing\tspec.one.a\tmaxLength\t2",
        ]
    );
    assert!(crd_rows(&json!({"kind": "ConfigMap"})).is_none());
}
