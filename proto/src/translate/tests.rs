use super::*;
use crate::mcp::Resource;
use crate::transcode::{encode_object, parse_yaml, resource_to_object};

fn object(yaml: &str) -> Object {
    let mut docs = parse_yaml(yaml);
    assert_eq!(docs.len(), 1);
    docs.remove(0).expect("the test's YAML parses")
}

fn translation() -> WasmPluginTranslation {
    WasmPluginTranslation::new(&KindTable::builtin()).expect("both kinds are built in")
}

/// Every field of a WasmPlugin, as the encoded resource a snapshot holds.
const PLUGIN: &str = r#"
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata:
  name: openid-connect
  namespace: istio-ingress
  labels: {app: auth}
  annotations: {owner: team-a}
  creationTimestamp: "2026-01-02T03:04:05Z"
spec:
  selector:
    matchLabels: {istio: ingressgateway}
  url: oci://private-registry:5000/openid-connect/openid:latest
  sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  imagePullPolicy: Always
  imagePullSecret: private-registry-ps
  verificationKey: "-----BEGIN PUBLIC KEY-----"
  pluginConfig:
    openid_server: authn
    openid_realm: ingress
  pluginName: openid
  phase: AUTHN
  priority: 10
  failStrategy: FAIL_OPEN
  vmConfig:
    env:
    - name: POD_NAME
      valueFrom: HOST
    - name: TRUST_DOMAIN
      value: cluster.local
  match:
  - mode: SERVER
    ports: [{number: 8080}]
  type: HTTP
"#;

const EXPECTED: &str = r#"
apiVersion: extensions.istio.io/v1alpha1
kind: TrafficExtension
metadata:
  name: openid-connect~istio-translated-wasmplugin
  namespace: istio-ingress
spec:
  selector:
    matchLabels: {istio: ingressgateway}
  phase: AUTHN
  priority: 10
  match:
  - mode: SERVER
    ports: [{number: 8080}]
  wasm:
    url: oci://private-registry:5000/openid-connect/openid:latest
    sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    imagePullPolicy: Always
    imagePullSecret: private-registry-ps
    pluginConfig:
      openid_server: authn
      openid_realm: ingress
    pluginName: openid
    failStrategy: FAIL_OPEN
    vmConfig:
      env:
      - name: POD_NAME
        valueFrom: HOST
      - name: TRUST_DOMAIN
        value: cluster.local
    type: HTTP
"#;

#[test]
fn an_encoded_plugin_becomes_the_extension_istiod_makes_of_it() {
    let t = translation();
    let encoded = encode_object(t.plugin(), &object(PLUGIN)).unwrap();
    let out = t.translate(&encoded, "7f3a").unwrap();
    assert_eq!(
        out.name,
        "istio-ingress/openid-connect~istio-translated-wasmplugin"
    );
    assert_eq!(
        out.version, "7f3a",
        "the plugin's version, as istiod keeps it"
    );
    let resource = Resource::decode(out.encoded.as_ref()).unwrap();
    let body = resource.body.as_ref().unwrap();
    assert_eq!(
        body.type_url,
        "type.googleapis.com/istio.extensions.v1alpha1.TrafficExtension"
    );
    let meta = resource.metadata.as_ref().unwrap();
    assert!(meta.labels.is_empty() && meta.annotations.is_empty());
    assert_eq!(
        meta.create_time
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("2026-01-02T03:04:05Z")
    );
    let mut back = resource_to_object(t.extension(), &resource).unwrap();
    back.metadata.creation_timestamp = None;
    // What the TrafficExtension decodes to is exactly the expected object
    // (no verificationKey, phase and the wasm fields carried).
    assert_eq!(back, object(EXPECTED));
}

#[test]
fn the_singular_target_ref_is_used_only_without_target_refs() {
    let with = |refs: &str| {
        object(&format!(
            "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {{name: p, namespace: ns}}\nspec:\n  url: oci://r/p\n{refs}"
        ))
    };
    let one = "  targetRef: {kind: Gateway, group: gateway.networking.k8s.io, name: a}\n";
    let many = "  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: b}]\n";
    let names = |o: &Object| -> Vec<String> {
        o.content["spec"]["targetRefs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| r["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(names(&traffic_extension_of(&with(one))), ["a"]);
    assert_eq!(names(&traffic_extension_of(&with(many))), ["b"]);
    assert_eq!(
        names(&traffic_extension_of(&with(&format!("{one}{many}")))),
        ["b"]
    );
    assert!(names(&traffic_extension_of(&with(""))).is_empty());
    let te = traffic_extension_of(&with(""));
    assert!(te.content["spec"].get("targetRef").is_none());
    assert_eq!(te.content["spec"]["wasm"]["url"], "oci://r/p");
}

#[test]
fn an_unspecified_phase_is_left_out() {
    let plugin = object(
        "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: p}\nspec:\n  url: oci://r/p\n  phase: UNSPECIFIED_PHASE\n",
    );
    let te = traffic_extension_of(&plugin);
    assert!(te.content["spec"].get("phase").is_none(), "{te:?}");
    // It encodes (ExecutionPhase has no UNSPECIFIED_PHASE).
    let t = translation();
    let encoded = encode_object(t.plugin(), &plugin).unwrap();
    let out = t.translate(&encoded, "1").unwrap();
    assert_eq!(out.name, "default/p~istio-translated-wasmplugin");
}

#[test]
fn bytes_that_are_not_a_plugin_are_an_error() {
    let t = translation();
    assert!(t.translate(b"\xff\xff not protobuf", "1").is_err());
    // A TrafficExtension is not a WasmPlugin.
    let te = object(EXPECTED);
    let encoded = encode_object(t.extension(), &te).unwrap();
    assert!(t.translate(&encoded, "1").is_err());
}
