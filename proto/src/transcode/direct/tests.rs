//! The direct encoder against the general way: the same bytes whenever it
//! answers, and an answer for the plain objects users write.

use proptest::prelude::*;
use prost_reflect::{Kind as PKind, MessageDescriptor};
use serde_json::{Map, Value, json};

use super::super::tests::fixture_objects;
use super::super::{encode_canonical, kind_of, spec_to_message};
use super::encode;
use crate::kinds::KindTable;

/// The general way's bytes, or `None` when it refuses.
fn general(desc: &MessageDescriptor, spec: &Value) -> Option<Vec<u8>> {
    let msg = spec_to_message(desc, spec).ok()?;
    let mut out = Vec::new();
    encode_canonical(&msg, &mut out);
    Some(out)
}

/// Whatever the direct encoder answers is the general way's answer.
fn agree(desc: &MessageDescriptor, spec: &Value) -> Option<Vec<u8>> {
    let direct = encode(desc, spec)?;
    let general = general(desc, spec);
    assert_eq!(
        Some(&direct),
        general.as_ref(),
        "{} {spec}: the direct bytes differ from the general way's (or it refuses)",
        desc.full_name()
    );
    Some(direct)
}

fn desc(kind: &str) -> MessageDescriptor {
    KindTable::builtin()
        .iter()
        .find(|k| k.kind() == kind)
        .and_then(|k| k.descriptor())
        .expect("a builtin kind with a schema")
}

#[test]
fn every_fixture_object_encodes_as_the_general_way_and_most_directly() {
    let kinds = KindTable::builtin();
    let (mut direct, mut valid) = (0, 0);
    for obj in fixture_objects() {
        let Some(desc) = kind_of(&kinds, &obj).ok().and_then(|k| k.descriptor()) else {
            continue;
        };
        let spec = obj.spec().cloned().unwrap_or_else(|| json!({}));
        if general(&desc, &spec).is_some() {
            valid += 1;
        }
        if agree(&desc, &spec).is_some() {
            direct += 1;
        }
    }
    assert!(valid >= 50, "only {valid} valid fixture objects");
    assert!(
        direct * 10 >= valid * 9,
        "{direct} of {valid} valid fixture objects encoded directly"
    );
}

#[test]
fn plain_spellings_encode_directly() {
    let dr = desc("DestinationRule");
    let spec = json!({
        "host": "reviews",
        "trafficPolicy": {
            "connectionPool": {
                "tcp": {"maxConnections": 100, "connectTimeout": "1.5s"},
                "http": {"http2MaxRequests": 0, "idleTimeout": "-0.25s"}
            },
            "loadBalancer": {"simple": "ROUND_ROBIN"},
            "outlierDetection": {"consecutive5xxErrors": 0, "interval": "0s"}
        },
        "subsets": [
            {"name": "v1", "labels": {"version": "v1", "": "", "a": "x"}},
            {"name": "", "labels": {}}
        ],
        "exportTo": []
    });
    assert!(agree(&dr, &spec).is_some(), "taken directly");
    let vs = desc("VirtualService");
    let spec = json!({
        "hosts": ["a", "b"],
        "http": [{
            "match": [{"uri": {"prefix": "/"}, "headers": {"x": {"exact": ""}}}],
            "route": [{"destination": {"host": "a", "port": {"number": 9080}}, "weight": 0}],
            "retries": {"attempts": 3, "perTryTimeout": "2s", "retryRemoteLocalities": false},
            "fault": {"abort": {"httpStatus": 503, "percentage": {"value": 0.5}}},
            "mirror_percentage": {"value": 100},
        }]
    });
    assert!(agree(&vs, &spec).is_some(), "taken directly");
}

#[test]
fn what_only_the_general_way_decides_is_left_to_it() {
    let vs = desc("VirtualService");
    let dr = desc("DestinationRule");
    for (d, spec) in [
        // Unknown field, quoted and float integers, a bad enum name.
        (&vs, json!({"hots": ["a"]})),
        (
            &dr,
            json!({"trafficPolicy": {"connectionPool": {"tcp": {"maxConnections": "100"}}}}),
        ),
        (
            &dr,
            json!({"trafficPolicy": {"connectionPool": {"tcp": {"maxConnections": 100.0}}}}),
        ),
        (
            &dr,
            json!({"trafficPolicy": {"loadBalancer": {"simple": "FASTEST"}}}),
        ),
        // Two members of one oneof; one field by both names.
        (
            &vs,
            json!({"http": [{"match": [{"uri": {"prefix": "/", "exact": "/"}}]}]}),
        ),
        (&vs, json!({"exportTo": ["."], "export_to": ["*"]})),
        // A Go duration (relaxed by the general way), a null map value.
        (
            &dr,
            json!({"trafficPolicy": {"connectionPool": {"tcp": {"connectTimeout": "1m"}}}}),
        ),
        (
            &dr,
            json!({"subsets": [{"name": "v1", "labels": {"version": null}}]}),
        ),
        // Not an object at all.
        (&vs, json!(["a"])),
    ] {
        assert!(encode(d, &spec).is_none(), "{spec} taken directly");
    }
}

/// A random JSON value for `desc`, mostly plain spellings, sometimes not.
fn arbitrary(desc: &MessageDescriptor, rng: &mut Rng, depth: u32) -> Value {
    let mut obj = Map::new();
    for f in desc.fields() {
        if !rng.chance(3) {
            continue;
        }
        let name = if rng.chance(8) {
            f.name()
        } else {
            f.json_name()
        };
        let value = if rng.chance(30) {
            rng.odd()
        } else if f.is_map() {
            let PKind::Message(entry) = f.kind() else {
                continue;
            };
            let (k, v) = (entry.map_entry_key_field(), entry.map_entry_value_field());
            let mut m = Map::new();
            for _ in 0..rng.below(3) {
                let key = match scalar(&k.kind(), rng, depth) {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                m.insert(key, scalar(&v.kind(), rng, depth));
            }
            Value::Object(m)
        } else if f.is_list() {
            Value::Array(
                (0..rng.below(3))
                    .map(|_| scalar(&f.kind(), rng, depth))
                    .collect(),
            )
        } else {
            scalar(&f.kind(), rng, depth)
        };
        obj.insert(name.to_owned(), value);
    }
    Value::Object(obj)
}

fn scalar(kind: &PKind, rng: &mut Rng, depth: u32) -> Value {
    match kind {
        PKind::Bool => json!(rng.chance(2)),
        PKind::String => json!(["", "a", "reviews.default.svc", "ü"][rng.below(4)]),
        PKind::Int32 | PKind::Sint32 | PKind::Sfixed32 => {
            json!([0, 1, -1, 2_147_483_647, -2_147_483_648][rng.below(5)])
        }
        PKind::Int64 | PKind::Sint64 | PKind::Sfixed64 => {
            json!([0_i64, 7, -7, i64::MAX, i64::MIN][rng.below(5)])
        }
        PKind::Uint32 | PKind::Fixed32 => json!([0_u32, 1, u32::MAX][rng.below(3)]),
        PKind::Uint64 | PKind::Fixed64 => json!([0_u64, 1, u64::MAX][rng.below(3)]),
        PKind::Float | PKind::Double => json!([0.0, -0.0, 0.5, 1e10, 3.0, -2.25][rng.below(6)]),
        PKind::Bytes => json!("aGk="),
        PKind::Enum(e) => {
            let values: Vec<_> = e.values().collect();
            match rng.below(3) {
                0 => json!(values[rng.below(values.len())].name()),
                1 => json!(values[rng.below(values.len())].number()),
                _ => json!(values[0].name()),
            }
        }
        PKind::Message(m) => match m.full_name() {
            "google.protobuf.Duration" => {
                json!(["1s", "0s", "1.5s", "-0.001s", "3600s"][rng.below(5)])
            }
            "google.protobuf.BoolValue" => json!(rng.chance(2)),
            "google.protobuf.UInt32Value" | "google.protobuf.Int32Value" => json!(rng.below(3)),
            "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => json!(0.0),
            "google.protobuf.StringValue" => json!(""),
            "google.protobuf.Struct" => json!({"a": 1, "b": [true, null]}),
            "google.protobuf.Value" => json!(null),
            _ if depth == 0 => json!({}),
            _ => arbitrary(m, rng, depth - 1),
        },
    }
}

/// A small deterministic generator (the case's seed comes from proptest).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }

    /// A spelling the direct encoder should leave alone or refuse.
    fn odd(&mut self) -> Value {
        [
            json!(null),
            json!("80"),
            json!(80.0),
            json!({}),
            json!([]),
            json!(true),
        ][self.below(6)]
        .clone()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random objects of every kind with a schema: whatever is encoded
    /// directly is the general way's bytes, and it is accepted by it.
    #[test]
    fn random_objects_of_every_kind_agree(seed in 1_u64..) {
        let mut rng = Rng(seed);
        for kind in KindTable::builtin().iter() {
            let Some(d) = kind.descriptor() else { continue };
            let spec = arbitrary(&d, &mut rng, 3);
            agree(&d, &spec);
        }
    }
}

/// The random objects reach the direct encoder (or the property above
/// would hold by falling back every time).
#[test]
fn random_objects_are_mostly_encoded_directly() {
    let (mut direct, mut valid) = (0, 0);
    for seed in 1_u64..=200 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for kind in KindTable::builtin().iter() {
            let Some(d) = kind.descriptor() else { continue };
            let spec = arbitrary(&d, &mut rng, 3);
            valid += usize::from(general(&d, &spec).is_some());
            direct += usize::from(agree(&d, &spec).is_some());
        }
    }
    assert!(
        direct * 2 >= valid,
        "{direct} of {valid} valid random objects encoded directly"
    );
    eprintln!("{direct} of {valid} valid random objects encoded directly");
}

/// A pool with what Istio's messages lack: floats, JSON names that are
/// another field's proto name, proto3 `optional`, integer and bool map
/// keys, packed zigzag and fixed lists, a proto2 message.
fn odd_pool() -> prost_reflect::DescriptorPool {
    struct Source;
    impl protox::file::FileResolver for Source {
        fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
            let source = match name {
                "odd.proto" => ODD_PROTO,
                "old.proto" => OLD_PROTO,
                _ => return Err(protox::Error::file_not_found(name)),
            };
            protox::file::File::from_source(name, source)
        }
    }
    let mut chain = protox::file::ChainFileResolver::new();
    chain.add(Source);
    chain.add(protox::file::GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(chain);
    compiler.include_imports(true);
    compiler.open_file("odd.proto").expect("odd.proto compiles");
    compiler.descriptor_pool()
}

const ODD_PROTO: &str = r#"
syntax = "proto3";
package odd;
import "google/protobuf/wrappers.proto";
import "google/protobuf/duration.proto";
import "old.proto";
enum E { E_ZERO = 0; E_ONE = 1; }
message M {
  float f = 1;
  string a = 2 [json_name = "b"];
  string b = 3 [json_name = "c"];
  repeated float fl = 4;
  google.protobuf.FloatValue fv = 5;
  optional int32 o = 6;
  map<int64, string> im = 7;
  map<bool, M> bm = 8;
  repeated sint32 ss = 9;
  repeated fixed64 fx = 10;
  oneof choice { string s1 = 11; int32 s2 = 12; }
  map<uint32, E> em = 13;
  repeated E es = 14;
  double d = 15;
  google.protobuf.Duration du = 16;
  old.Old old = 17;
  repeated M children = 18;
  sfixed32 sf = 19;
  sint64 s64 = 20;
}
"#;

const OLD_PROTO: &str = r#"
syntax = "proto2";
package old;
message Old {
  optional int32 n = 1;
  optional string s = 2 [default = "x"];
  repeated int32 packed_not = 3;
}
"#;

#[test]
fn odd_schemas_agree_with_the_general_way() {
    let pool = odd_pool();
    let m = pool.get_message_by_name("odd.M").expect("odd.M");
    for spec in [
        // An integer a float rounds differently through f64.
        json!({"f": 18_014_399_583_223_809_u64}),
        json!({"f": -1_152_921_573_326_323_713_i64, "fl": [18_014_399_583_223_809_u64, 1]}),
        json!({"fv": 18_014_399_583_223_809_u64}),
        json!({"f": 3.5e38}),
        // "b" is `a`'s JSON name and `b`'s proto name: `a` it is.
        json!({"b": "x"}),
        json!({"b": "x", "c": "y"}),
        json!({"a": "x", "b": "y"}),
        // proto3 optional at its default, a oneof member at its default.
        json!({"o": 0, "s2": 0}),
        json!({"s1": "", "s2": null}),
        json!({"s1": "", "s2": 1}),
        // Integer and bool keys in their spellings, defaults in entries.
        json!({"im": {"0": "", "-7": "a", "01": "b"}}),
        json!({"im": {"1": "a", "01": "b"}}),
        json!({"im": {"+1": "a"}}),
        json!({"bm": {"true": {}, "false": {"f": 0.0}}}),
        json!({"em": {"4294967295": "E_ONE", "0": 0, "5": 7}}),
        json!({"es": ["E_ONE", 0, -1, 2_147_483_647], "ss": [-1, 0, 1], "fx": [0, 1]}),
        json!({"es": ["E_TWO"]}),
        json!({"es": [null]}),
        json!({"d": -0.0, "sf": -1, "s64": -9_223_372_036_854_775_808_i64}),
        json!({"du": "315576000001s"}),
        json!({"du": "-1.000000001s"}),
        json!({"old": {"n": 0, "s": "", "packedNot": [1, 2]}}),
        json!({"children": [{"children": [{"f": 1}]}, {}]}),
    ] {
        agree(&m, &spec);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random objects of the odd schema agree too.
    #[test]
    fn random_odd_objects_agree(seed in 1_u64..) {
        let pool = odd_pool();
        let m = pool.get_message_by_name("odd.M").expect("odd.M");
        let mut rng = Rng(seed);
        for _ in 0..8 {
            let spec = arbitrary(&m, &mut rng, 3);
            agree(&m, &spec);
        }
    }
}
