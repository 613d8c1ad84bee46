//! The pre-encoded twins against the generated and Envoy's own types.

use proptest::prelude::*;

use super::*;
use crate::ads::{DeltaDiscoveryResponse, DiscoveryResponse};
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

fn delta_response(resources: &[Resource], removed: &[&str]) -> EncodedDeltaDiscoveryResponse {
    EncodedDeltaDiscoveryResponse {
        system_version_info: "v3".to_owned(),
        resources: resources
            .iter()
            .map(|r| EncodedDeltaResource::from_mcp(Bytes::from(r.encode_to_vec())).unwrap())
            .collect(),
        type_url: "networking.istio.io/v1/VirtualService".to_owned(),
        nonce: "n2".to_owned(),
        removed_resources: removed.iter().map(|s| (*s).to_owned()).collect(),
    }
}

fn assert_envoy_reads_delta(ours: &EncodedDeltaDiscoveryResponse, resources: &[Resource]) {
    let bytes = ours.encode_to_vec();
    assert_eq!(ours.encoded_len(), bytes.len());
    let envoy = DeltaDiscoveryResponse::decode(bytes.as_slice()).expect("Envoy's type decodes it");
    assert_eq!(envoy.system_version_info, ours.system_version_info);
    assert_eq!(envoy.type_url, ours.type_url);
    assert_eq!(envoy.nonce, ours.nonce);
    assert_eq!(envoy.removed_resources, ours.removed_resources);
    assert_eq!(envoy.resources.len(), resources.len());
    for (r, expected) in envoy.resources.iter().zip(resources) {
        let meta = expected.metadata.clone().unwrap_or_default();
        assert_eq!(r.name, meta.name, "the envelope names the resource");
        assert_eq!(r.version, meta.version, "and carries its version");
        let any = r.resource.as_ref().expect("an Any");
        assert_eq!(any.type_url, MCP_RESOURCE_TYPE_URL);
        assert_eq!(&Resource::decode(any.value.as_slice()).unwrap(), expected);
    }
    assert_eq!(envoy.encode_to_vec(), bytes, "byte-identical to Envoy's");
    assert_eq!(
        &EncodedDeltaDiscoveryResponse::decode(bytes.as_slice()).expect("decodes"),
        ours
    );
}

#[test]
fn encoded_delta_response_is_an_envoy_delta_discovery_response() {
    let resources = [
        resource("default/reviews", "1", &[0x0a, 0x01, b'r']),
        resource("bookinfo/ratings", "2", &[]),
    ];
    assert_envoy_reads_delta(&delta_response(&resources, &[]), &resources);
    assert_envoy_reads_delta(&delta_response(&[], &["ns/gone", "ns/old"]), &[]);
    assert_envoy_reads_delta(&EncodedDeltaDiscoveryResponse::default(), &[]);
}

#[test]
fn delta_resource_reads_name_and_version_only() {
    let r =
        EncodedDeltaResource::from_mcp(Bytes::from(resource("ns/a", "7", b"body").encode_to_vec()))
            .unwrap();
    assert_eq!((r.name.as_str(), r.version.as_str()), ("ns/a", "7"));
    let bare = EncodedDeltaResource::from_mcp(Bytes::new()).unwrap();
    assert_eq!((bare.name.as_str(), bare.version.as_str()), ("", ""));
    assert!(EncodedDeltaResource::from_mcp(Bytes::from_static(&[0x0a, 0x05, 0x01])).is_err());
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

    #[test]
    fn encoded_delta_response_matches_for_any_content(
        resources in proptest::collection::vec(any_resource(), 0..4),
        removed in proptest::collection::vec(text(), 0..3),
        system_version_info in text(),
        nonce in text(),
    ) {
        let mut ours = delta_response(&resources, &[]);
        ours.removed_resources = removed;
        ours.system_version_info = system_version_info;
        ours.nonce = nonce;
        assert_envoy_reads_delta(&ours, &resources);
    }
}

#[test]
fn a_section_is_every_resource_framed_built_once_while_it_lives() {
    let list: ResourceList = (0..5)
        .map(|i| Bytes::from(vec![b'r'; 10 + i * 200]))
        .collect();
    for framing in [Framing::Mcp, Framing::Any] {
        let mut expected = Vec::new();
        for r in list.iter() {
            write_framed(framing, r, &mut expected);
        }
        let a = list.section(framing);
        assert_eq!(a[..], expected[..]);
        assert_eq!(list.section_len(framing), expected.len());
        // While a copy (even a slice) lives, the same bytes are handed out.
        let tail = a.slice(100..);
        drop(a);
        let b = list.section(framing);
        assert_eq!(b.as_ptr(), tail.as_ptr().wrapping_sub(100));
        drop((b, tail));
        // Then nothing is kept.
        let slot = list.sections[framing as usize].lock().unwrap();
        assert!(slot.upgrade().is_none(), "freed after the last copy");
    }
    // The two framings are wire-identical to the responses' fields.
    let mcp = EncodedResources {
        resources: Arc::new(list.clone()),
        ..Default::default()
    };
    assert_eq!(mcp.encode_to_vec(), list.section(Framing::Mcp)[..]);
}
