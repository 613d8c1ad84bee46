//! Unit and property tests of the semantic rules. The fixture-driven tests
//! live in `validate/tests/it/fixtures.rs`.

use std::collections::BTreeMap;

use meshhub_proto::object::{Object, ObjectMeta};
use serde_json::{Value, json};

use crate::hosts::hosts_overlap;
use crate::names::{is_wildcard_hostname_label, validate_wildcard_domain};
use crate::net::validate_ip_subnet;
use crate::values::parse_duration;
use crate::{problems, validate};

mod props;

fn object(api_version: &str, kind: &str, spec: Value) -> Object {
    let mut content = serde_json::Map::new();
    content.insert("spec".into(), spec);
    Object {
        api_version: api_version.into(),
        kind: kind.into(),
        metadata: ObjectMeta {
            name: "test".into(),
            namespace: Some("ns1".into()),
            ..ObjectMeta::default()
        },
        content,
    }
}

/// `path: message` of every problem of a `kind` in its Istio group.
fn check(kind: &str, spec: Value) -> Vec<String> {
    let group = match kind {
        "AuthorizationPolicy" | "PeerAuthentication" | "RequestAuthentication" => {
            "security.istio.io/v1"
        }
        "Telemetry" => "telemetry.istio.io/v1",
        "WasmPlugin" => "extensions.istio.io/v1alpha1",
        _ => "networking.istio.io/v1",
    };
    problems(&object(group, kind, spec))
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn assert_has(found: &[String], want: &str) {
    assert!(
        found.iter().any(|f| f == want),
        "expected {want:?} among {found:#?}"
    );
}

#[test]
fn names_and_hosts() {
    assert!(validate_wildcard_domain("*.example.com").is_ok());
    assert!(validate_wildcard_domain("*").is_ok());
    assert!(validate_wildcard_domain("reviews").is_ok());
    assert!(validate_wildcard_domain("foo.*.com").is_err());
    assert!(validate_wildcard_domain("example.123").is_err());
    assert!(validate_wildcard_domain("").is_err());
    assert!(validate_wildcard_domain("-bad.com").is_err());
    assert!(validate_wildcard_domain("istio.io.").is_ok());
    assert!(is_wildcard_hostname_label("*-foo"));
    assert!(!is_wildcard_hostname_label("f*o"));
    assert!(hosts_overlap("*.foo.com", "a.foo.com"));
    assert!(hosts_overlap("*.com", "*.foo.com"));
    assert!(!hosts_overlap("a.foo.com", "b.foo.com"));
    assert!(validate_ip_subnet("10.0.0.0/8").is_ok());
    assert!(validate_ip_subnet("2001:db8::/129").is_err());
    assert!(validate_ip_subnet("10.0.0.1").is_ok());
    assert!(validate_ip_subnet("10.0.0/8").is_err());
}

#[test]
fn durations() {
    assert_eq!(parse_duration("1.5s"), Some(1_500_000_000));
    assert_eq!(parse_duration("1h30m"), Some(5_400_000_000_000));
    assert_eq!(parse_duration("250ms"), Some(250_000_000));
    assert_eq!(parse_duration("-1s"), Some(-1_000_000_000));
    assert_eq!(parse_duration("0"), Some(0));
    assert_eq!(parse_duration("10"), None);
    assert_eq!(parse_duration("s"), None);
    assert_eq!(parse_duration("1.2.3s"), None);
}

#[test]
fn unknown_kinds_pass() {
    let gw_api = object(
        "gateway.networking.k8s.io/v1",
        "Gateway",
        json!({"listeners": []}),
    );
    assert_eq!(validate(&gw_api), Ok(()));
    let cm = object("v1", "ConfigMap", json!("anything"));
    assert_eq!(validate(&cm), Ok(()));
}

#[test]
fn error_display_and_default_namespace() {
    let mut obj = object(
        "networking.istio.io/v1",
        "VirtualService",
        json!({"gateways": ["gw"], "http": [{"route": [{"destination": {"host": "reviews"}}]}]}),
    );
    obj.metadata.namespace = None;
    obj.metadata.name = "reviews".into();
    let err = validate(&obj).expect_err("a delegate with gateways");
    assert_eq!(
        err.to_string(),
        "VirtualService default/reviews: spec.gateways: a delegate virtual service (no hosts) must have no gateways"
    );
}

#[test]
fn a_virtual_service_without_hosts_is_a_delegate() {
    let obj = object(
        "networking.istio.io/v1",
        "VirtualService",
        json!({"http": [{"route": [{"destination": {"host": "reviews"}}]}]}),
    );
    assert_eq!(validate(&obj), Ok(()));
}

#[test]
fn names_must_be_lower_case_subdomains() {
    let mut obj = object(
        "networking.istio.io/v1",
        "VirtualService",
        json!({"hosts": ["r"], "http": [{"route": [{"destination": {"host": "r"}}]}]}),
    );
    obj.metadata.name = "Reviews_v1".into();
    let err = validate(&obj).expect_err("upper case and underscore");
    assert_eq!(err.problems[0].path, "metadata.name");
}

#[test]
fn crd_json_types_are_enforced() {
    let obj = object(
        "networking.istio.io/v1",
        "DestinationRule",
        json!({"host": "r", "trafficPolicy": {"tls": {"mode": 1},
            "connectionPool": {"tcp": {"maxConnections": "5"}, "http": {"http2MaxRequests": 10.0}}}}),
    );
    let problems = problems(&obj);
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert!(
        paths.contains(&"spec.trafficPolicy.tls.mode"),
        "{problems:?}"
    );
    assert!(
        paths.contains(&"spec.trafficPolicy.connectionPool.tcp.maxConnections"),
        "{problems:?}"
    );
    assert!(
        paths.contains(&"spec.trafficPolicy.connectionPool.http.http2MaxRequests"),
        "{problems:?}"
    );
}

#[test]
fn envoy_filter_values_are_decoded_as_envoy_types() {
    let filter = |value: serde_json::Value| {
        object(
            "networking.istio.io/v1alpha3",
            "EnvoyFilter",
            json!({"configPatches": [{"applyTo": "CLUSTER", "patch": {"operation": "MERGE", "value": value}}]}),
        )
    };
    let bad = |value: serde_json::Value| {
        let p = problems(&filter(value));
        assert_eq!(p.len(), 1, "{p:?}");
        p[0].to_string()
    };
    assert_eq!(
        validate(&filter(
            json!({"lb_policy": "LEAST_REQUEST", "connectTimeout": "1m30s", "unknown": 1})
        )),
        Ok(())
    );
    assert!(
        bad(json!({"lb_policy": "FASTEST"})).contains(
            "unknown value \"FASTEST\" for enum envoy.config.cluster.v3.Cluster.LbPolicy"
        )
    );
    assert!(
        bad(json!({"connect_timeout": "2 seconds"}))
            .starts_with("spec.configPatches[0].patch.value.connect_timeout: bad Duration")
    );
    assert!(
        bad(json!({"per_connection_buffer_limit_bytes": "lots"})).contains("must be an integer")
    );
    assert!(bad(json!({"name": 5})).contains("must be a string"));
    assert!(bad(json!({"typed_extension_protocol_options": {"x": {"a": 1}}})).contains("'@type'"));
    assert!(bad(json!({"typed_extension_protocol_options": {"x": {"@type": "type.googleapis.com/example.Bogus"}}})).contains("referenced type unknown"));
    assert_eq!(
        validate(&filter(json!({"typed_extension_protocol_options": {"x": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {}}}}}))),
        Ok(())
    );
}

#[test]
fn non_object_spec_is_reported() {
    assert_eq!(check("Gateway", json!([1, 2])), ["spec: must be an object"]);
}

#[test]
fn virtual_service_routes() {
    let found = check(
        "VirtualService",
        json!({
            "hosts": ["*", "reviews", "reviews"],
            "http": [
                {"match": [{"uri": {"regex": "(["}, "headers": {"bad header": {"exact": "x"}}}]},
                {"route": [
                    {"destination": {"host": "a", "subset": "v_1"}, "weight": 0},
                    {"destination": {"host": "b", "port": {"number": 70000}}, "weight": 0}
                 ],
                 "redirect": {"uri": "/x"},
                 "timeout": "0s",
                 "retries": {"attempts": 0, "retryOn": "5xx,bogus"},
                 "fault": {"abort": {"httpStatus": 700, "percentage": {"value": 120}}}}
            ]
        }),
    );
    assert_has(
        &found,
        "spec.hosts[0]: wildcard host * is not allowed for virtual services bound to the mesh gateway",
    );
    assert_has(
        &found,
        "spec.http[0].route: an HTTP route needs a route, a redirect, a directResponse or a delegate",
    );
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("spec.http[0].match[0].uri.regex: invalid regex"))
    );
    assert_has(
        &found,
        "spec.http[0].match[0].headers[\"bad header\"]: \"bad header\" is not a valid header name",
    );
    assert_has(
        &found,
        "spec.http[1]: an HTTP route cannot contain both route and redirect",
    );
    assert_has(
        &found,
        "spec.http[1]: an HTTP route cannot contain both fault and redirect",
    );
    assert_has(
        &found,
        "spec.http[1].route[0].destination.subset: invalid subset name \"v_1\"",
    );
    assert_has(
        &found,
        "spec.http[1].route[1].destination.port.number: port number 70000 must be in the range 1..65535",
    );
    assert_has(
        &found,
        "spec.http[1].route: total destination weight must not be 0",
    );
    assert_has(
        &found,
        "spec.http[1].timeout: duration must be at least 1ms",
    );
    assert_has(
        &found,
        "spec.http[1].retries: retry policy configured while attempts is 0 (retries disabled)",
    );
    assert_has(
        &found,
        "spec.http[1].retries.retryOn: \"bogus\" is not a valid retryOn policy",
    );
    assert_has(
        &found,
        "spec.http[1].fault.abort.httpStatus: HTTP status 700 is not in the range 200..599",
    );
    assert_has(
        &found,
        "spec.http[1].fault.abort.percentage.value: percentage 120 is neither 0 nor in the range [0.0001, 100]",
    );
}

#[test]
fn virtual_service_weights_need_not_sum_to_100() {
    let found = check(
        "VirtualService",
        json!({"hosts": ["r"], "http": [{"route": [
            {"destination": {"host": "r", "subset": "a"}, "weight": 1},
            {"destination": {"host": "r", "subset": "b"}, "weight": 1}
        ]}]}),
    );
    assert!(found.is_empty(), "{found:?}");
    let neg = check(
        "VirtualService",
        json!({"hosts": ["r"], "tcp": [{"route": [{"destination": {"host": "r"}, "weight": -5}]}]}),
    );
    assert_eq!(
        neg,
        ["spec.tcp[0].route[0].weight: weight -5 must not be negative"]
    );
}

#[test]
fn virtual_service_gateway_bound_and_tls() {
    let found = check(
        "VirtualService",
        json!({
            "hosts": ["*.example.com"],
            "gateways": ["istio-system/gw", "bad_ns/gw"],
            "tls": [{"match": [{"sniHosts": ["a.other.com"]}], "route": [{"destination": {"host": "x.svc"}}]}],
        }),
    );
    assert_eq!(
        found,
        [
            "spec.gateways[1]: invalid namespace \"bad_ns\"",
            "spec.tls[0].match[0].sniHosts[0]: SNI host \"a.other.com\" is not a compatible subset of any of the virtual service hosts [*.example.com]",
        ]
    );
}

#[test]
fn destination_rule_policies() {
    let found = check(
        "DestinationRule",
        json!({
            "host": "reviews.prod.svc.cluster.local",
            "trafficPolicy": {
                "connectionPool": {"tcp": {"maxConnections": -1, "connectTimeout": "1.5ms"}},
                "loadBalancer": {"consistentHash": {"maglev": {"tableSize": 1000}, "httpCookie": {"ttl": "1s"}}},
                "outlierDetection": {"maxEjectionPercent": 150, "consecutiveLocalOriginFailures": 3},
                "tls": {"mode": "MUTUAL"}
            },
            "subsets": [{"name": "v1"}, {"name": "v1"}, {"name": ""}, {"name": "v2", "trafficPolicy": {}}]
        }),
    );
    for want in [
        "spec.trafficPolicy.outlierDetection.consecutiveLocalOriginFailures: needs splitExternalLocalOriginErrors to be true",
        "spec.trafficPolicy.outlierDetection.maxEjectionPercent: percentage 150 is not in the range 0..100",
        "spec.trafficPolicy.connectionPool.tcp.maxConnections: must not be negative",
        "spec.trafficPolicy.connectionPool.tcp.connectTimeout: only durations to ms precision are supported",
        "spec.trafficPolicy.loadBalancer.consistentHash.httpCookie.name: is required for httpCookie",
        "spec.trafficPolicy.loadBalancer.consistentHash.maglev.tableSize: must be a prime number for maglev",
        "spec.trafficPolicy.tls.clientCertificate: is required for MUTUAL TLS",
        "spec.trafficPolicy.tls.privateKey: is required for MUTUAL TLS",
        "spec.subsets[1].name: duplicate subset name \"v1\"",
        "spec.subsets[2].name: must not be empty",
        "spec.subsets[3].trafficPolicy: a traffic policy must set at least one field",
    ] {
        assert_has(&found, want);
    }
}

#[test]
fn destination_rule_locality() {
    let found = check(
        "DestinationRule",
        json!({"host": "a.b", "trafficPolicy": {"loadBalancer": {"localityLbSetting": {
            "distribute": [{"from": "us-west/*", "to": {"us-west/zone1/*": 60, "us-east/*": 30}}]
        }}}}),
    );
    assert_eq!(
        found,
        [
            "spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].to: total locality weight 90 != 100"
        ]
    );
}

#[test]
fn gateway_servers() {
    let found = check(
        "Gateway",
        json!({"servers": [
            {"port": {"number": 443, "name": "https", "protocol": "HTTPS"}, "hosts": ["ns/foo.*.com", "short"]},
            {"port": {"number": 80, "name": "https", "protocol": "HTTP"}, "hosts": ["*"],
             "tls": {"mode": "SIMPLE", "serverCertificate": "/c"}},
            {"port": {"number": 8443, "name": "tls", "protocol": "TLS"}, "hosts": ["*/a.com"],
             "tls": {"mode": "MUTUAL", "credentialName": "c"}}
        ]}),
    );
    for want in [
        "spec.servers[0].hosts[0]: domain name \"foo.*.com\" is invalid (label \"*\" is invalid)",
        "spec.servers[0].hosts[0]: partial wildcard \"foo.*.com\" is not allowed",
        "spec.servers[0].hosts[1]: short name \"short\" is not allowed; use a fully qualified name",
        "spec.servers[0].tls: a server on an HTTPS or TLS port must have TLS settings",
        "spec.servers[1].tls.privateKey: is required for SIMPLE TLS",
        "spec.servers[1].tls: a server on a plain text HTTP port cannot have TLS settings other than httpsRedirect",
        "spec.servers[1].port.name: port names of servers must be unique: duplicate \"https\"",
    ] {
        assert_has(&found, want);
    }
    assert_eq!(found.len(), 7, "{found:#?}");
}

#[test]
fn gateway_https_redirect_is_allowed_on_http() {
    let found = check(
        "Gateway",
        json!({"servers": [{"port": {"number": 80, "name": "http", "protocol": "HTTP"},
            "hosts": ["*"], "tls": {"httpsRedirect": true}}]}),
    );
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn service_entry_resolution() {
    let found = check(
        "ServiceEntry",
        json!({
            "hosts": ["*.example.com", "b.example.com"],
            "addresses": ["10.0.0.0/33", "192.168.0.0/16"],
            "ports": [{"number": 80, "name": "http", "protocol": "HTTP"},
                      {"number": 80, "name": "tcp", "protocol": "TCP"}],
            "resolution": "DNS"
        }),
    );
    assert_eq!(
        found,
        [
            "spec.addresses[0]: \"10.0.0.0/33\" is not a valid CIDR block",
            "spec.addresses: CIDR addresses are allowed only for NONE/STATIC resolution",
            "spec.ports[1].number: port 80 is already defined",
            "spec.hosts[0]: hosts must be FQDNs when no endpoints are given for resolution DNS",
            "spec.ports: multiple hosts need HTTP or TLS ports unless resolution is NONE",
        ]
    );
    let static_se = check(
        "ServiceEntry",
        json!({
            "hosts": ["db.internal"],
            "ports": [{"number": 5432, "name": "pg", "protocol": "TCP"}],
            "resolution": "STATIC",
            "endpoints": [{"address": "db.example.com"}, {"address": "10.1.1.1", "ports": {"other": 1}}]
        }),
    );
    assert_eq!(
        static_se,
        [
            "spec.endpoints[0].address: endpoint address \"db.example.com\" is not a valid IP address",
            "spec.endpoints[1].ports[\"other\"]: port is not defined by the service entry",
        ]
    );
}

#[test]
fn sidecar_listeners() {
    let found = check(
        "Sidecar",
        json!({
            "ingress": [{"port": {"number": 9080, "protocol": "HTTP", "name": "http"}, "defaultEndpoint": "10.0.0.1:8080"},
                        {"defaultEndpoint": "127.0.0.1:8080"}],
            "egress": [{"hosts": ["./*"]}, {"hosts": ["istio-system/*", "bare.host.com"]}]
        }),
    );
    assert_eq!(
        found,
        [
            "spec.ingress[0].defaultEndpoint: must be of the form 127.0.0.1:<port>, 0.0.0.0:<port>, [::1]:<port>, [::]:<port> or unix://<path>",
            "spec.ingress[1].port: is required for ingress listeners",
            "spec.egress[0]: the egress listener without a port must be the last one",
            "spec.egress[1].hosts[1]: host \"bare.host.com\" must be of the form namespace/dnsName",
        ]
    );
}

#[test]
fn envoy_filter_patches() {
    let found = check(
        "EnvoyFilter",
        json!({
            "workloadSelector": {"labels": {"app": "*"}},
            "configPatches": [
                {"patch": {"operation": "MERGE", "value": {}}},
                {"applyTo": "HTTP_FILTER", "patch": {"operation": "ADD"}},
                {"applyTo": "CLUSTER", "match": {"listener": {}}, "patch": {"operation": "REMOVE"}},
                {"applyTo": "NETWORK_FILTER",
                 "match": {"listener": {"filterChain": {"filter": {"name": "envoy.tcp_proxy", "subFilter": {"name": "x"}}}}},
                 "patch": {"operation": "MERGE", "value": {}}},
                {"applyTo": "LISTENER", "match": {"proxy": {"proxyVersion": "1.(("}}, "patch": {"operation": "REMOVE"}}
            ]
        }),
    );
    assert_eq!(found.len(), 6, "{found:#?}");
    for want in [
        "spec.workloadSelector.labels[\"app\"]: wildcard is not supported in a selector",
        "spec.configPatches[0].applyTo: is required",
        "spec.configPatches[1].patch.value: is required for every operation but REMOVE",
        "spec.configPatches[2].match: applyTo CLUSTER needs a cluster match",
        "spec.configPatches[3].match.listener.filterChain.filter.subFilter: a subFilter match needs applyTo HTTP_FILTER",
    ] {
        assert_has(&found, want);
    }
}

#[test]
fn authorization_policy_rules() {
    let found = check(
        "AuthorizationPolicy",
        json!({
            "action": "DENY",
            "provider": {"name": "ext"},
            "rules": [{
                "from": [{"source": {}}, {"source": {"ipBlocks": ["1.2.3.4/40"], "principals": [""]}}],
                "to": [{"operation": {"ports": ["99999"]}}],
                "when": [{"key": "request.headers", "values": ["x"]}, {"key": "source.ip"}]
            }]
        }),
    );
    assert_eq!(
        found,
        [
            "spec.provider: only allowed with the CUSTOM action, found DENY",
            "spec.rules[0].from[0].source: must not be empty",
            "spec.rules[0].from[1].source.ipBlocks[0]: \"1.2.3.4/40\" is not a valid CIDR block",
            "spec.rules[0].from[1].source.principals[0]: empty value not allowed",
            "spec.rules[0].to[0].operation.ports[0]: bad port \"99999\"",
            "spec.rules[0].when[0].values: invalid value for key request.headers: bad key \"request.headers\": should have the form a[b]",
            "spec.rules[0].when[1]: at least one of values or notValues must be set for key source.ip",
        ]
    );
    let custom = check(
        "AuthorizationPolicy",
        json!({"action": "CUSTOM", "rules": [{}]}),
    );
    assert_eq!(
        custom,
        ["spec.provider.name: must not be empty for the CUSTOM action"]
    );
    let deny_all = check("AuthorizationPolicy", json!({"action": "DENY"}));
    assert_eq!(deny_all.len(), 1);
}

#[test]
fn dry_run_annotation() {
    let mut obj = object(
        "security.istio.io/v1",
        "AuthorizationPolicy",
        json!({"action": "AUDIT", "rules": [{}]}),
    );
    obj.metadata.annotations = BTreeMap::from([("istio.io/dry-run".to_owned(), "true".to_owned())]);
    let err = validate(&obj).expect_err("AUDIT cannot dry-run");
    assert_eq!(
        err.messages(),
        [
            "AuthorizationPolicy ns1/test: metadata.annotations[\"istio.io/dry-run\"]: only supported with action ALLOW or DENY, found AUDIT"
        ]
    );
}

#[test]
fn peer_and_request_authentication() {
    let found = check(
        "PeerAuthentication",
        json!({"portLevelMtls": {"0": {"mode": "STRICT"}}}),
    );
    assert_eq!(
        found,
        [
            "spec.portLevelMtls: mesh- or namespace-wide peer authentication (no selector) cannot have port level mTLS",
            "spec.portLevelMtls[\"0\"]: port must be in the range 1..65535",
        ]
    );
    let found = check(
        "RequestAuthentication",
        json!({"jwtRules": [{"issuer": "me", "jwksUri": "ftp://keys", "jwks": "{}", "audiences": [""],
                             "outputClaimToHeaders": [{"claim": "sub", "header": "x y"}]}]}),
    );
    assert_eq!(
        found,
        [
            "spec.jwtRules[0].audiences[0]: Invalid value: \"\": spec.jwtRules[0].audiences[0] in body should be at least 1 chars long",
            "spec.jwtRules[0]: only one of jwks or jwksUri can be set",
            "spec.jwtRules[0].jwksUri: URI scheme \"ftp\" is not supported; use http or https",
            "spec.jwtRules[0].jwks: jwks must be a JSON Web Key Set (with \"keys\") or a JSON Web Key (with \"kty\")",
            "spec.jwtRules[0].outputClaimToHeaders[0].header: \"x y\" is not a valid header name",
        ]
    );
}

#[test]
fn workload_kinds_telemetry_and_wasm() {
    assert_eq!(
        check("WorkloadEntry", json!({"ports": {"http": 80}})),
        ["spec.address: is required unless a network is set"]
    );
    assert_eq!(
        check("WorkloadGroup", json!({"probe": {"periodSeconds": -1}})),
        [
            "spec.template: is required",
            "spec.probe.periodSeconds: must not be negative",
            "spec.probe: a probe needs one of httpGet, tcpSocket or exec",
        ]
    );
    assert_eq!(
        check("ProxyConfig", json!({"concurrency": -2})),
        ["spec.concurrency: must not be negative"]
    );
    assert_eq!(
        check(
            "Telemetry",
            json!({"selector": {"matchLabels": {"a": "b"}}, "targetRef": {"kind": "Pod", "name": "p"},
                   "tracing": [{"randomSamplingPercentage": 101, "providers": [{}]}]})
        ),
        [
            "spec: only one of selector, targetRef or targetRefs can be set",
            "spec.targetRef: must refer to a core Service, a networking.istio.io ServiceEntry or a gateway.networking.k8s.io Gateway, found /Pod",
            "spec.tracing[0].providers[0].name: must not be empty",
            "spec.tracing[0].randomSamplingPercentage: must be in the range 0..100",
        ]
    );
    assert_eq!(
        check(
            "WasmPlugin",
            json!({"url": "s3://bucket/x.wasm", "sha256": "ABC"})
        ),
        [
            "spec.url: unsupported URL scheme \"s3\"",
            "spec.sha256: must be 64 lower case hexadecimal characters",
        ]
    );
}

#[test]
fn telemetry_filters_must_parse_as_cel() {
    let telemetry = |expr: serde_json::Value| {
        object(
            "telemetry.istio.io/v1",
            "Telemetry",
            json!({"accessLogging": [{"filter": expr}]}),
        )
    };
    assert_eq!(
        validate(&telemetry(
            json!({"expression": "response.code >= 400 && request.headers['x'] == 'y'"})
        )),
        Ok(())
    );
    for bad in [
        json!({"expression": "response.code >= "}),
        json!({"expression": "(a == 1"}),
        json!({}),
    ] {
        let p = problems(&telemetry(bad));
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].path, "spec.accessLogging[0].filter.expression");
    }
}

#[test]
fn rules_found_by_the_differential_test() {
    let paths = |kind: &str, spec: serde_json::Value| -> Vec<String> {
        problems(&object("networking.istio.io/v1", kind, spec))
            .into_iter()
            .map(|p| p.path)
            .collect()
    };
    // DestinationRule warmup: duration required, percent and aggression ranges.
    assert_eq!(
        paths(
            "DestinationRule",
            json!({"host": "r", "trafficPolicy": {"loadBalancer":
            {"warmup": {"minimumPercent": 101, "aggression": 0}}}})
        ),
        [
            "spec.trafficPolicy.loadBalancer.warmup.duration",
            "spec.trafficPolicy.loadBalancer.warmup.minimumPercent",
            "spec.trafficPolicy.loadBalancer.warmup.aggression",
        ]
    );
    // Aggression between 0 and 1 is valid since Istio 1.31 (an older
    // cluster is analysis' to flag: MH0002); 0 and below never are.
    for (aggression, valid) in [(0.5, true), (1.0, true), (-1.0, false)] {
        let spec = json!({"host": "r", "trafficPolicy": {"loadBalancer":
            {"warmup": {"duration": "60s", "aggression": aggression}}}});
        assert_eq!(
            paths("DestinationRule", spec).is_empty(),
            valid,
            "{aggression}"
        );
    }
    // An empty port-level list leaves the traffic policy without a field.
    assert_eq!(
        paths(
            "DestinationRule",
            json!({"host": "r", "trafficPolicy": {"portLevelSettings": []}})
        ),
        ["spec.trafficPolicy"]
    );
    // DYNAMIC_DNS: wildcard hosts and HTTP ports only.
    assert_eq!(
        paths(
            "ServiceEntry",
            json!({"hosts": ["*.example.com", "a.example.com"], "resolution": "DYNAMIC_DNS",
            "ports": [{"number": 80, "name": "http", "protocol": "HTTP"}, {"number": 443, "name": "tls", "protocol": "TLS"}]})
        ),
        ["spec.hosts[1]", "spec.ports[1].protocol"]
    );
    // mirror and mirrors together.
    assert_eq!(
        paths(
            "VirtualService",
            json!({"hosts": ["r"], "http": [{"route": [{"destination": {"host": "r"}}],
            "mirror": {"host": "m"}, "mirrors": [{"destination": {"host": "m"}}]}]})
        ),
        ["spec.http[0]"]
    );
    // serviceAccounts exclude namespaces and principals, and wildcards.
    let ap = problems(&object(
        "security.istio.io/v1",
        "AuthorizationPolicy",
        json!({"rules": [{"from": [{"source": {"serviceAccounts": ["ns/*"], "namespaces": ["ns"]}}]}]}),
    ));
    assert_eq!(ap.len(), 2, "{ap:?}");
}
