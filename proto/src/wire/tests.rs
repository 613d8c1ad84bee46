//! The pre-encoded twins against the generated and Envoy's own types.

use proptest::prelude::*;

use super::*;
use crate::ads::DiscoveryResponse;
use crate::mcp::{Metadata, Resource, Resources};

/// A resource with every field set; one label and one annotation so that the
/// encoding (map order) is fixed.
fn resource(name: &str, version: &str, body: &[u8]) -> Resource {
    Resource {
        metadata: Some(Metadata {
            name: name.to_owned(),
            create_time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 5,
            }),
            version: version.to_owned(),
            labels: [("app".to_owned(), name.to_owned())].into(),
            annotations: [("note".to_owned(), version.to_owned())].into(),
        }),
        body: Some(prost_types::Any {
            type_url: "type.googleapis.com/istio.networking.v1alpha3.VirtualService".to_owned(),
            value: body.to_vec(),
        }),
    }
}

fn twin_of(r: &Resources) -> EncodedResources {
    EncodedResources {
        system_version_info: r.system_version_info.clone(),
        collection: r.collection.clone(),
        resources: Arc::new(
            r.resources
                .iter()
                .map(|x| Bytes::from(x.encode_to_vec()))
                .collect(),
        ),
        removed_resources: r.removed_resources.clone(),
        nonce: r.nonce.clone(),
        incremental: r.incremental,
    }
}

fn assert_same_as_resources(r: &Resources) {
    let twin = twin_of(r);
    let bytes = twin.encode_to_vec();
    assert_eq!(bytes, r.encode_to_vec(), "byte-identical to mcp::Resources");
    assert_eq!(twin.encoded_len(), bytes.len());
    assert_eq!(
        EncodedResources::decode(bytes.as_slice()).expect("decodes"),
        twin
    );
    assert_eq!(Resources::decode(bytes.as_slice()).expect("decodes"), *r);
}

#[test]
fn encoded_resources_match_resources() {
    assert_same_as_resources(&Resources::default());
    assert_same_as_resources(&Resources {
        system_version_info: "istio/networking/v1alpha3/virtualservices/7".to_owned(),
        collection: "istio/networking/v1alpha3/virtualservices".to_owned(),
        resources: vec![
            resource("default/reviews", "abc", &[0x0a, 0x01, b'r']),
            resource("default/ratings", "def", &[]),
        ],
        removed_resources: vec!["default/details".to_owned(), "x/y".to_owned()],
        nonce: "42".to_owned(),
        incremental: true,
    });
}

fn discovery_response(resources: &[Resource]) -> EncodedDiscoveryResponse {
    EncodedDiscoveryResponse {
        version_info: "v9".to_owned(),
        resources: Arc::new(
            resources
                .iter()
                .map(|r| Bytes::from(r.encode_to_vec()))
                .collect(),
        ),
        type_url: "networking.istio.io/v1/VirtualService".to_owned(),
        nonce: "n1".to_owned(),
    }
}

fn assert_envoy_reads(ours: &EncodedDiscoveryResponse, resources: &[Resource]) {
    let bytes = ours.encode_to_vec();
    assert_eq!(ours.encoded_len(), bytes.len());
    let envoy = DiscoveryResponse::decode(bytes.as_slice()).expect("Envoy's type decodes it");
    assert_eq!(envoy.version_info, ours.version_info);
    assert_eq!(envoy.type_url, ours.type_url);
    assert_eq!(envoy.nonce, ours.nonce);
    assert!(!envoy.canary);
    assert_eq!(envoy.resources.len(), resources.len());
    for (any, expected) in envoy.resources.iter().zip(resources) {
        assert_eq!(any.type_url, MCP_RESOURCE_TYPE_URL);
        let r = Resource::decode(any.value.as_slice()).expect("unpacks");
        assert_eq!(&r, expected);
    }
    // Envoy's encoding of the same response is byte-identical, and ours
    // decodes it back.
    assert_eq!(envoy.encode_to_vec(), bytes);
    assert_eq!(
        &EncodedDiscoveryResponse::decode(bytes.as_slice()).expect("decodes"),
        ours
    );
}

#[test]
fn encoded_discovery_response_is_an_envoy_discovery_response() {
    let resources = [
        resource("default/reviews", "1", &[0x0a, 0x01, b'r']),
        resource("bookinfo/ratings", "2", &[]),
    ];
    assert_envoy_reads(&discovery_response(&resources), &resources);
    assert_envoy_reads(&discovery_response(&[]), &[]);
    assert_envoy_reads(&EncodedDiscoveryResponse::default(), &[]);
}

#[test]
fn a_foreign_resource_type_is_refused() {
    let envoy = DiscoveryResponse {
        resources: vec![envoy_types::pb::google::protobuf::Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned(),
            value: vec![],
        }],
        ..Default::default()
    };
    let err = EncodedDiscoveryResponse::decode(envoy.encode_to_vec().as_slice())
        .expect_err("not an MCP resource");
    assert!(
        err.to_string().contains("envoy.config.cluster.v3.Cluster"),
        "{err}"
    );
}

/// A short string without map-order concerns.
fn text() -> impl Strategy<Value = String> {
    "[a-z0-9/._-]{0,12}"
}

prop_compose! {
    fn any_resource()(name in text(), version in text(), body in proptest::collection::vec(any::<u8>(), 0..40)) -> Resource {
        resource(&name, &version, &body)
    }
}

proptest! {
    #[test]
    fn encoded_resources_match_for_any_content(
        system_version_info in text(),
        collection in text(),
        resources in proptest::collection::vec(any_resource(), 0..4),
        removed_resources in proptest::collection::vec(text(), 0..3),
        nonce in text(),
        incremental in any::<bool>(),
    ) {
        assert_same_as_resources(&Resources {
            system_version_info,
            collection,
            resources,
            removed_resources,
            nonce,
            incremental,
        });
    }

    #[test]
    fn encoded_discovery_response_matches_for_any_content(
        resources in proptest::collection::vec(any_resource(), 0..4),
        version_info in text(),
        nonce in text(),
    ) {
        let mut ours = discovery_response(&resources);
        ours.version_info = version_info;
        ours.nonce = nonce;
        assert_envoy_reads(&ours, &resources);
    }
}
