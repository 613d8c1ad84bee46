//! The semantic validator against real Istio configuration: Istio 1.5's
//! per-kind valid/invalid data set and the Bookinfo sample.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use meshhub_proto::object::Object;
use meshhub_testkit::fixtures;
use meshhub_validate::validate;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Every problem each invalid document of Istio 1.5's data set must
/// produce, in order. A rule change that alters a message fails here. An
/// empty list: current Istio (the version the rules follow, see
/// docs/validation.md) accepts what Istio 1.5 refused.
const EXPECTED: &[(&str, &[&str])] = &[
    (
        "networking-v1alpha3-DestinationRule-invalid.yaml",
        &["DestinationRule default/invalid-destination-rule: spec.host: must not be empty"],
    ),
    (
        "networking-v1beta-DestinationRule-invalid.yaml",
        &["DestinationRule default/invalid-destination-rule: spec.host: must not be empty"],
    ),
    (
        "networking-v1alpha3-EnvoyFilter-invalid.yaml",
        &[
            "EnvoyFilter default/simple-envoy-filter: spec.filters: unknown field (the pre-1.6 EnvoyFilter API is not in Istio's CRD; use configPatches and workloadSelector)",
            "EnvoyFilter default/simple-envoy-filter: spec.workloadLabels: unknown field (the pre-1.6 EnvoyFilter API is not in Istio's CRD; use configPatches and workloadSelector)",
        ],
    ),
    (
        "networking-v1alpha3-Gateway-invalid.yaml",
        &["Gateway default/invalid-gateway: spec.servers: a gateway must have at least one server"],
    ),
    (
        "networking-v1beta-Gateway-invalid.yaml",
        &["Gateway default/invalid-gateway: spec.servers: a gateway must have at least one server"],
    ),
    (
        "networking-v1alpha3-ServiceEntry-invalid.yaml",
        &[
            "ServiceEntry default/invalid-service-entry: spec.hosts: must not be empty",
            // `discovery: DNS` is not a field (the schema layer rejects it),
            // so resolution stays NONE, which takes no endpoints.
            "ServiceEntry default/invalid-service-entry: spec.endpoints: no endpoints may be given for resolution NONE",
        ],
    ),
    (
        "networking-v1alpha3-Sidecar-invalid.yaml",
        &[
            "Sidecar default/invalid-sidecar-config: spec: a sidecar must set at least one of egress, ingress, outboundTrafficPolicy or inboundConnectionPool",
        ],
    ),
    (
        "networking-v1beta-Sidecar-invalid.yaml",
        &[
            "Sidecar default/invalid-sidecar-config: spec: a sidecar must set at least one of egress, ingress, outboundTrafficPolicy or inboundConnectionPool",
        ],
    ),
    (
        // Istio 1.6 made a VirtualService without hosts a valid delegate.
        "networking-v1alpha3-VirtualService-invalid.yaml",
        &[],
    ),
    ("networking-v1beta-VirtualService-invalid.yaml", &[]),
    (
        "security-v1beta1-AuthorizationPolicy-invalid.yaml",
        &[
            "AuthorizationPolicy default/invalid-authorization-policy: spec.rules[0].when[0].key: must not be empty",
        ],
    ),
    (
        "security-v1beta1-PeerAuthentication-invalid.yaml",
        &[
            "PeerAuthentication default/invalid-peer-authentication: spec.portLevelMtls: Invalid value: 0: spec.portLevelMtls in body should have at least 1 properties",
        ],
    ),
    (
        "security-v1beta1-RequestAuthentication-invalid.yaml",
        &[
            "RequestAuthentication default/invalid-request-authentication: spec.jwtRules[0].issuer: Invalid value: \"\": spec.jwtRules[0].issuer in body should be at least 1 chars long",
        ],
    ),
];

/// JSON as Kubernetes makes it from YAML: mapping keys that YAML reads as
/// numbers or booleans (`8080:` in `portLevelMtls`) become strings.
struct KubeJson(Value);

impl<'de> Deserialize<'de> for KubeJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KubeJsonVisitor).map(KubeJson)
    }
}

struct KubeJsonVisitor;

impl<'de> Visitor<'de> for KubeJsonVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        KubeJson::deserialize(d).map(|v| v.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(KubeJson(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some((KubeJson(k), KubeJson(v))) = map.next_entry()? {
            let k = match k {
                Value::String(s) => s,
                Value::Null => return Err(de::Error::custom("null mapping key")),
                other => other.to_string(),
            };
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// Every document of a multi-document YAML file, as objects.
fn load(path: &Path) -> Vec<Object> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<KubeJson> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    docs.into_iter()
        .filter(|d| !d.0.is_null())
        .map(|d| serde_json::from_value(d.0).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    fixtures::yaml_files(&fixtures::istio().join(dir), |_| true)
}

fn file_name(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or_default()
}

/// Valid documents of Istio 1.5's data set that current Istio refuses.
const NO_LONGER_VALID: &[&str] = &[
    // The pre-1.6 `filters` API is gone from the CRD.
    "networking-v1alpha3-EnvoyFilter-valid.yaml",
];

fn assert_all_valid(files: &[PathBuf]) -> usize {
    let mut count = 0;
    for f in files {
        for obj in load(f) {
            if NO_LONGER_VALID.contains(&file_name(f)) {
                assert!(validate(&obj).is_err(), "{}", file_name(f));
            } else if let Err(e) = validate(&obj) {
                panic!("{}: unexpected rejection: {e}", file_name(f));
            }
            count += 1;
        }
    }
    count
}

#[test]
fn valid_data_set_passes() {
    let files: Vec<PathBuf> = yaml_files("validation")
        .into_iter()
        .filter(|p| file_name(p).ends_with("-valid.yaml"))
        .collect();
    assert_eq!(files.len(), 13, "one valid file per kind and version");
    assert_eq!(assert_all_valid(&files), 13);
}

#[test]
fn bookinfo_passes() {
    let files = yaml_files("bookinfo");
    assert_eq!(
        assert_all_valid(&files),
        38,
        "every Bookinfo document loads"
    );
}

#[test]
fn invalid_data_set_is_rejected_with_the_expected_messages() {
    let expected: BTreeMap<&str, &[&str]> = EXPECTED.iter().copied().collect();
    let files: Vec<PathBuf> = yaml_files("validation")
        .into_iter()
        .filter(|p| file_name(p).ends_with("-invalid.yaml"))
        .collect();
    assert_eq!(files.len(), 13, "one invalid file per kind and version");
    for f in &files {
        let name = file_name(f);
        let want = expected
            .get(name)
            .unwrap_or_else(|| panic!("{name}: no expected messages listed"));
        let objs = load(f);
        assert_eq!(objs.len(), 1, "{name}: one document");
        let got = validate(&objs[0])
            .err()
            .map(|e| e.messages())
            .unwrap_or_default();
        assert_eq!(got, *want, "{name}");
    }
    assert_eq!(
        expected.len(),
        files.len(),
        "every expectation has its file"
    );
}

#[test]
fn display_names_kind_namespace_and_every_problem() {
    let f = fixtures::istio().join("validation/networking-v1alpha3-ServiceEntry-invalid.yaml");
    let err = validate(&load(&f)[0]).expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "ServiceEntry default/invalid-service-entry: spec.hosts: must not be empty; \
         spec.endpoints: no endpoints may be given for resolution NONE"
    );
}
