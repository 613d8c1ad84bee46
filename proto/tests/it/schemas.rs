//! The Istio configuration schemas under `schema/`: every body message istiod
//! consumes is in the descriptor pool, and every real-world fixture's `spec`
//! deserializes strictly (no unknown field) into its body message and
//! survives a protobuf round trip.

use meshhub_testkit::fixtures;
use prost::Message as _;
use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor};

/// Every message the Istio kinds need, including the ones they reference.
const REQUIRED: &[&str] = &[
    // istio.networking.v1alpha3: the kinds.
    "istio.networking.v1alpha3.VirtualService",
    "istio.networking.v1alpha3.DestinationRule",
    "istio.networking.v1alpha3.Gateway",
    "istio.networking.v1alpha3.ServiceEntry",
    "istio.networking.v1alpha3.Sidecar",
    "istio.networking.v1alpha3.EnvoyFilter",
    "istio.networking.v1alpha3.WorkloadEntry",
    "istio.networking.v1alpha3.WorkloadGroup",
    // istio.networking.v1alpha3: what they reference.
    "istio.networking.v1alpha3.HTTPRoute",
    "istio.networking.v1alpha3.HTTPMatchRequest",
    "istio.networking.v1alpha3.HTTPRouteDestination",
    "istio.networking.v1alpha3.HTTPRedirect",
    "istio.networking.v1alpha3.HTTPDirectResponse",
    "istio.networking.v1alpha3.HTTPRewrite",
    "istio.networking.v1alpha3.HTTPRetry",
    "istio.networking.v1alpha3.HTTPFaultInjection",
    "istio.networking.v1alpha3.HTTPFaultInjection.Abort",
    "istio.networking.v1alpha3.HTTPFaultInjection.Delay",
    "istio.networking.v1alpha3.HTTPMirrorPolicy",
    "istio.networking.v1alpha3.CorsPolicy",
    "istio.networking.v1alpha3.Headers",
    "istio.networking.v1alpha3.TLSRoute",
    "istio.networking.v1alpha3.TCPRoute",
    "istio.networking.v1alpha3.TLSMatchAttributes",
    "istio.networking.v1alpha3.L4MatchAttributes",
    "istio.networking.v1alpha3.RouteDestination",
    "istio.networking.v1alpha3.StringMatch",
    "istio.networking.v1alpha3.Destination",
    "istio.networking.v1alpha3.PortSelector",
    "istio.networking.v1alpha3.Percent",
    "istio.networking.v1alpha3.Delegate",
    "istio.networking.v1alpha3.TrafficPolicy",
    "istio.networking.v1alpha3.Subset",
    "istio.networking.v1alpha3.LoadBalancerSettings",
    "istio.networking.v1alpha3.LocalityLoadBalancerSetting",
    "istio.networking.v1alpha3.WarmupConfiguration",
    "istio.networking.v1alpha3.ConnectionPoolSettings",
    "istio.networking.v1alpha3.OutlierDetection",
    "istio.networking.v1alpha3.ClientTLSSettings",
    "istio.networking.v1alpha3.Server",
    "istio.networking.v1alpha3.Port",
    "istio.networking.v1alpha3.ServerTLSSettings",
    "istio.networking.v1alpha3.ServicePort",
    "istio.networking.v1alpha3.IstioEgressListener",
    "istio.networking.v1alpha3.IstioIngressListener",
    "istio.networking.v1alpha3.OutboundTrafficPolicy",
    "istio.networking.v1alpha3.SidecarPort",
    "istio.networking.v1alpha3.WorkloadSelector",
    "istio.networking.v1alpha3.ReadinessProbe",
    "istio.networking.v1alpha3.EnvoyFilter.EnvoyConfigObjectPatch",
    "istio.networking.v1alpha3.EnvoyFilter.Filter",
    // istio.networking.v1beta1.
    "istio.networking.v1beta1.ProxyConfig",
    "istio.networking.v1beta1.ProxyImage",
    // istio.security.v1beta1.
    "istio.security.v1beta1.AuthorizationPolicy",
    "istio.security.v1beta1.PeerAuthentication",
    "istio.security.v1beta1.RequestAuthentication",
    "istio.security.v1beta1.Rule",
    "istio.security.v1beta1.Source",
    "istio.security.v1beta1.Operation",
    "istio.security.v1beta1.Condition",
    "istio.security.v1beta1.JWTRule",
    "istio.security.v1beta1.JWTHeader",
    "istio.security.v1beta1.ClaimToHeader",
    // istio.telemetry.v1alpha1.
    "istio.telemetry.v1alpha1.Telemetry",
    "istio.telemetry.v1alpha1.Tracing",
    "istio.telemetry.v1alpha1.Metrics",
    "istio.telemetry.v1alpha1.AccessLogging",
    // istio.extensions.v1alpha1.
    "istio.extensions.v1alpha1.WasmPlugin",
    "istio.extensions.v1alpha1.VmConfig",
    "istio.extensions.v1alpha1.TrafficExtension",
    "istio.extensions.v1alpha1.WasmConfig",
    "istio.extensions.v1alpha1.LuaConfig",
    "istio.extensions.v1alpha1.TrafficSelector",
    // Added by Istio 1.29-1.32.
    "istio.networking.v1alpha3.ZoneAwareLoadBalancerSetting",
    "istio.networking.v1alpha3.LoadBalancerSettings.BackendUtilizationLB",
    "istio.networking.v1alpha3.ConnectionPoolSettings.HTTPSettings.ConnectionKeepalive",
    // istio.type.v1beta1.
    "istio.type.v1beta1.WorkloadSelector",
    "istio.type.v1beta1.PortSelector",
    "istio.type.v1beta1.PolicyTargetReference",
];

/// Fixture documents whose `spec` carries a field that never existed in any
/// istio/api release, so strict deserialization must reject them naming that
/// field, and lenient deserialization (unknown fields skipped, as Istio's own
/// jsonpb unmarshalling and the Kubernetes API server's pruning do) must
/// accept them: (file name, document index, unknown field).
const UNKNOWN_FIELD_FIXTURES: &[(&str, usize, &str)] = &[
    // `peerLevelMtls` is a typo for `portLevelMtls` in Istio 1.5's dataset;
    // PeerAuthentication has only ever had `port_level_mtls = 3`.
    (
        "security-v1beta1-PeerAuthentication-valid.yaml",
        0,
        "peerLevelMtls",
    ),
];

#[test]
fn every_required_message_is_in_the_pool() {
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|name| meshhub_proto::descriptor::message(name).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "messages missing from the pool: {missing:?}"
    );
}

#[test]
fn removed_fields_are_reserved_or_deprecated_like_upstream() {
    let field = |msg: &str, name: &str| {
        meshhub_proto::descriptor::message(msg)
            .unwrap_or_else(|| panic!("{msg} missing"))
            .get_field_by_name(name)
    };
    // Upstream reserves these; they must not come back.
    assert!(field("istio.networking.v1alpha3.PortSelector", "name").is_none());
    assert!(
        field(
            "istio.networking.v1alpha3.HTTPFaultInjection.Abort",
            "percent"
        )
        .is_none()
    );
    assert!(field("istio.networking.v1alpha3.HTTPRoute", "websocket_upgrade").is_none());
    // Kept (deprecated) with their Istio 1.5 numbers for old resources.
    let labels = field("istio.networking.v1alpha3.EnvoyFilter", "workload_labels").unwrap();
    assert_eq!(labels.number(), 1);
    let filters = field("istio.networking.v1alpha3.EnvoyFilter", "filters").unwrap();
    assert_eq!(filters.number(), 2);
}

/// The body message of a Kubernetes `apiVersion` + `kind`.
fn body_message(api_version: &str, kind: &str) -> MessageDescriptor {
    let group = api_version.split('/').next().unwrap_or_default();
    let full = match group {
        "networking.istio.io" if kind == "ProxyConfig" => {
            format!("istio.networking.v1beta1.{kind}")
        }
        "networking.istio.io" => format!("istio.networking.v1alpha3.{kind}"),
        "security.istio.io" => format!("istio.security.v1beta1.{kind}"),
        "telemetry.istio.io" => format!("istio.telemetry.v1alpha1.{kind}"),
        "extensions.istio.io" => format!("istio.extensions.v1alpha1.{kind}"),
        other => panic!("no body message for group {other:?} ({api_version} {kind})"),
    };
    meshhub_proto::descriptor::message(&full)
        .unwrap_or_else(|| panic!("{full} is not in the descriptor pool"))
}

/// Deserializes `spec` into `desc`, encodes it, decodes it back and checks
/// that nothing changed.
fn round_trip(
    desc: MessageDescriptor,
    spec: &serde_json::Value,
    deny_unknown_fields: bool,
) -> Result<DynamicMessage, String> {
    let options = DeserializeOptions::new().deny_unknown_fields(deny_unknown_fields);
    let msg = DynamicMessage::deserialize_with_options(desc.clone(), spec, &options)
        .map_err(|e| e.to_string())?;
    let bytes = msg.encode_to_vec();
    let back = DynamicMessage::decode(desc, bytes.as_slice()).map_err(|e| e.to_string())?;
    // Compared through their JSON forms: a field explicitly set to its
    // default in the YAML (`index: FIRST`) is not encoded, so the messages
    // differ in presence only, and map entries have no fixed wire order.
    let json = |m: &DynamicMessage| serde_json::to_value(m).map_err(|e| e.to_string());
    if json(&back)? != json(&msg)? {
        return Err("protobuf round trip changed the message".to_owned());
    }
    Ok(msg)
}

#[test]
fn every_fixture_spec_deserializes_strictly() {
    let files = fixtures::valid_objects();
    assert!(
        files.len() > 30,
        "fixtures not found under {}",
        fixtures::istio().display()
    );
    let mut checked = 0;
    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{name}: not YAML: {e}"));
        for (index, doc) in docs.iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            let api_version = doc["apiVersion"].as_str().unwrap_or_default();
            let kind = doc["kind"].as_str().unwrap_or_default();
            let desc = body_message(api_version, kind);
            let spec = doc
                .get("spec")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({}));
            checked += 1;

            let exception = UNKNOWN_FIELD_FIXTURES
                .iter()
                .find(|(file, i, _)| *file == name && *i == index);
            match (round_trip(desc.clone(), &spec, true), exception) {
                (Ok(_), None) => {}
                (Err(e), None) => {
                    failures.push(format!("{name} document {index} ({kind}): {e}"));
                }
                (Ok(_), Some((_, _, field))) => failures.push(format!(
                    "{name} document {index} ({kind}): unknown field `{field}` was accepted"
                )),
                (Err(e), Some((_, _, field))) => {
                    if !e.contains(field) {
                        failures.push(format!(
                            "{name} document {index} ({kind}): expected an error naming \
                             `{field}`, got: {e}"
                        ));
                    }
                    if let Err(e) = round_trip(desc, &spec, false) {
                        failures.push(format!(
                            "{name} document {index} ({kind}), unknown fields skipped: {e}"
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "fixture specs rejected:\n{}",
        failures.join("\n")
    );
    assert!(checked >= 50, "only {checked} documents checked");
}
