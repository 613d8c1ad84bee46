//! Pins the wire format independently of our generated code: every expected
//! byte string below is written out by hand from the protobuf encoding rules
//! and the field numbers in the reference (§1.3), not produced by an encoder.
//!
//! A key byte is `(field number << 3) | wire type`, wire type 0 = varint,
//! 2 = length-delimited (LEN). Lengths are single-byte varints here (< 128).
//! Maps hold a single entry so that the order is fixed.

use bytes::Bytes;
use meshhub_proto::ads::DiscoveryResponse;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::{Metadata, RequestResources, Resource, Resources, SinkNode};
use meshhub_proto::wire::{EncodedDiscoveryResponse, EncodedResources};
use meshhub_proto::{RpcStatus, descriptor, transcode};
use prost::Message;
use prost_reflect::{DynamicMessage, Value};

/// Concatenates hand-written pieces.
fn bytes(pieces: &[&[u8]]) -> Vec<u8> {
    pieces.concat()
}

#[rustfmt::skip] // hand-aligned byte tables
fn request_resources_bytes() -> Vec<u8> {
    bytes(&[
        &[0x0a, 0x0c],           // 1 sink_node, LEN 12
        &[0x0a, 0x02], b"n1",    //   SinkNode 1 id, LEN 2
        &[0x12, 0x06],           //   SinkNode 2 annotations (map entry), LEN 6
        &[0x0a, 0x01], b"k",     //     entry 1 key, LEN 1
        &[0x12, 0x01], b"v",     //     entry 2 value, LEN 1
        &[0x12, 0x01], b"c",     // 2 collection, LEN 1
        // 3 initial_resource_versions: empty, not written
        &[0x22, 0x01], b"7",     // 4 response_nonce, LEN 1
        &[0x2a, 0x07],           // 5 error_detail (google.rpc.Status), LEN 7
        &[0x08, 0x03],           //   Status 1 code, varint 3
        &[0x12, 0x03], b"bad",   //   Status 2 message, LEN 3
        &[0x30, 0x01],           // 6 incremental, varint 1 (true)
    ])
}

#[test]
fn request_resources_wire_format() {
    let wire = request_resources_bytes();
    let expected = RequestResources {
        sink_node: Some(SinkNode {
            id: "n1".to_owned(),
            annotations: [("k".to_owned(), "v".to_owned())].into(),
        }),
        collection: "c".to_owned(),
        initial_resource_versions: Default::default(),
        response_nonce: "7".to_owned(),
        error_detail: Some(RpcStatus {
            code: 3,
            message: "bad".to_owned(),
            details: vec![],
        }),
        incremental: true,
    };
    let decoded = RequestResources::decode(wire.as_slice()).expect("decodes");
    assert_eq!(decoded, expected);
    assert_eq!(expected.encode_to_vec(), wire);
    assert_eq!(expected.encoded_len(), 2 + 12 + 3 + 3 + 2 + 7 + 2);
}

/// `istio.mcp.v1alpha1.Resource{metadata{name: "ns/a", version: "1"},
/// body: Any{VirtualService, hosts: ["r"]}}`: 80 bytes.
#[rustfmt::skip] // hand-aligned byte tables
fn resource_bytes() -> Vec<u8> {
    bytes(&[
        &[0x0a, 0x09],               // 1 metadata, LEN 9
        &[0x0a, 0x04], b"ns/a",      //   Metadata 1 name, LEN 4
        // Metadata 2 create_time: absent
        &[0x1a, 0x01], b"1",         //   Metadata 3 version, LEN 1
        &[0x12, 0x43],               // 2 body (google.protobuf.Any), LEN 67
        &[0x0a, 0x3c],               //   Any 1 type_url, LEN 60
        b"type.googleapis.com/istio.networking.v1alpha3.VirtualService",
        &[0x12, 0x03],               //   Any 2 value, LEN 3
        &[0x0a, 0x01], b"r",         //     VirtualService 1 hosts, LEN 1
    ])
}

fn resource() -> Resource {
    Resource {
        metadata: Some(Metadata {
            name: "ns/a".to_owned(),
            create_time: None,
            version: "1".to_owned(),
            labels: Default::default(),
            annotations: Default::default(),
        }),
        body: Some(prost_types::Any {
            type_url: "type.googleapis.com/istio.networking.v1alpha3.VirtualService".to_owned(),
            value: vec![0x0a, 0x01, b'r'],
        }),
    }
}

#[test]
#[rustfmt::skip] // hand-aligned byte tables
fn resources_wire_format() {
    let res = resource_bytes();
    assert_eq!(res.len(), 80);
    let wire = bytes(&[
        &[0x0a, 0x02], b"v1",        // 1 system_version_info, LEN 2
        &[0x12, 0x01], b"c",         // 2 collection, LEN 1
        &[0x1a, 0x50], &res,         // 3 resources[0], LEN 80
        &[0x22, 0x04], b"ns/b",      // 4 removed_resources[0], LEN 4
        &[0x2a, 0x01], b"n",         // 5 nonce, LEN 1
        &[0x30, 0x01],               // 6 incremental, varint 1
    ]);
    let expected = Resources {
        system_version_info: "v1".to_owned(),
        collection: "c".to_owned(),
        resources: vec![resource()],
        removed_resources: vec!["ns/b".to_owned()],
        nonce: "n".to_owned(),
        incremental: true,
    };
    assert_eq!(Resources::decode(wire.as_slice()).expect("decodes"), expected);
    assert_eq!(expected.encode_to_vec(), wire);

    // The pre-encoded twin writes the same bytes.
    let twin = EncodedResources {
        system_version_info: "v1".to_owned(),
        collection: "c".to_owned(),
        resources: std::sync::Arc::new(vec![Bytes::from(res.clone())].into()),
        removed_resources: vec!["ns/b".to_owned()],
        nonce: "n".to_owned(),
        incremental: true,
    };
    assert_eq!(twin.encode_to_vec(), wire);
    assert_eq!(EncodedResources::decode(wire.as_slice()).expect("decodes"), twin);
}

#[test]
#[rustfmt::skip] // hand-aligned byte tables
fn discovery_response_wire_format() {
    let res = bytes(&[
        &[0x0a, 0x05],           // Resource 1 metadata, LEN 5
        &[0x0a, 0x03], b"a/b",   //   Metadata 1 name, LEN 3
    ]);
    let wire = bytes(&[
        &[0x0a, 0x01], b"1",     // 1 version_info, LEN 1
        &[0x12, 0x3a],           // 2 resources[0] (google.protobuf.Any), LEN 58
        &[0x0a, 0x2f],           //   Any 1 type_url, LEN 47
        b"type.googleapis.com/istio.mcp.v1alpha1.Resource",
        &[0x12, 0x07], &res,     //   Any 2 value, LEN 7
        // 3 canary: false, not written
        &[0x22, 0x25],           // 4 type_url, LEN 37
        b"networking.istio.io/v1/VirtualService",
        &[0x2a, 0x01], b"n",     // 5 nonce, LEN 1
    ]);
    let ours = EncodedDiscoveryResponse {
        version_info: "1".to_owned(),
        resources: std::sync::Arc::new(vec![Bytes::from(res.clone())].into()),
        type_url: "networking.istio.io/v1/VirtualService".to_owned(),
        nonce: "n".to_owned(),
    };
    assert_eq!(ours.encode_to_vec(), wire);
    assert_eq!(ours.encoded_len(), wire.len());

    let envoy = DiscoveryResponse::decode(wire.as_slice()).expect("Envoy's type decodes it");
    assert_eq!(envoy.version_info, "1");
    assert_eq!(envoy.type_url, "networking.istio.io/v1/VirtualService");
    assert_eq!(envoy.nonce, "n");
    assert_eq!(envoy.resources.len(), 1);
    assert_eq!(
        envoy.resources[0].type_url,
        "type.googleapis.com/istio.mcp.v1alpha1.Resource"
    );
    let inner = Resource::decode(envoy.resources[0].value.as_slice()).expect("MCP resource");
    assert_eq!(inner.metadata.map(|m| m.name), Some("a/b".to_owned()));
}

/// `VirtualService{hosts: ["reviews"], http: [{route: [{destination:
/// {host: "reviews", subset: "v1"}, weight: 75}]}]}`: 30 bytes.
#[rustfmt::skip] // hand-aligned byte tables
fn virtual_service_bytes() -> Vec<u8> {
    bytes(&[
        &[0x0a, 0x07], b"reviews",   // 1 hosts[0], LEN 7
        &[0x1a, 0x13],               // 3 http[0] (HTTPRoute), LEN 19
        &[0x12, 0x11],               //   HTTPRoute 2 route[0] (HTTPRouteDestination), LEN 17
        &[0x0a, 0x0d],               //     HTTPRouteDestination 1 destination, LEN 13
        &[0x0a, 0x07], b"reviews",   //       Destination 1 host, LEN 7
        &[0x12, 0x02], b"v1",        //       Destination 2 subset, LEN 2
        &[0x10, 0x4b],               //     HTTPRouteDestination 2 weight, varint 75
    ])
}

const VIRTUAL_SERVICE: &str = "
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 75
";

#[test]
fn virtual_service_wire_format() {
    let wire = virtual_service_bytes();
    assert_eq!(wire.len(), 30);
    let desc = descriptor::message("istio.networking.v1alpha3.VirtualService")
        .expect("VirtualService schema");

    // Decode: the values are where the hand-written bytes put them.
    let vs = DynamicMessage::decode(desc, wire.as_slice()).expect("decodes");
    let hosts = vs.get_field_by_name("hosts").expect("hosts");
    assert_eq!(
        hosts.as_list(),
        Some(&[Value::String("reviews".to_owned())][..])
    );
    let http = vs.get_field_by_name("http").expect("http");
    let route0 = http
        .as_list()
        .and_then(|l| l.first())
        .and_then(Value::as_message);
    let route0 = route0.expect("http[0]");
    let dest = route0
        .get_field_by_name("route")
        .and_then(|r| r.as_list().and_then(|l| l.first()).cloned())
        .expect("route[0]");
    let dest = dest.as_message().expect("HTTPRouteDestination");
    assert_eq!(
        dest.get_field_by_name("weight").and_then(|w| w.as_i32()),
        Some(75)
    );
    let d = dest.get_field_by_name("destination").expect("destination");
    let d = d.as_message().expect("Destination");
    let host = d.get_field_by_name("host");
    assert_eq!(host.as_deref().and_then(Value::as_str), Some("reviews"));
    let subset = d.get_field_by_name("subset");
    assert_eq!(subset.as_deref().and_then(Value::as_str), Some("v1"));

    // Encode: the transcoder turns the YAML into exactly these bytes.
    let kinds = KindTable::builtin();
    let mut objs = transcode::parse_yaml(VIRTUAL_SERVICE);
    let obj = objs.pop().expect("one object").expect("parses");
    let kind = transcode::kind_of(&kinds, &obj).expect("kind");
    let res = transcode::object_to_resource(kind, &obj).expect("transcodes");
    let body = res.body.expect("body");
    assert_eq!(
        body.type_url,
        "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
    );
    assert_eq!(body.value, wire);
    assert_eq!(vs.encode_to_vec(), wire, "prost-reflect agrees");
}
