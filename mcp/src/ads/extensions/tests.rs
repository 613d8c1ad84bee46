use bytes::Bytes;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::Resource;
use meshhub_proto::transcode::{encode_object, parse_yaml, resource_to_object};
use prost::Message as _;

use super::*;

fn view() -> PluginsAsExtensions {
    PluginsAsExtensions::new(WasmPluginTranslation::new(&KindTable::builtin()).unwrap())
}

fn encoded(yaml: &str) -> Bytes {
    let kinds = KindTable::builtin();
    let obj = parse_yaml(yaml).remove(0).unwrap();
    let kind = kinds.by_api_version(&obj.api_version, &obj.kind).unwrap();
    encode_object(kind, &obj).unwrap()
}

fn plugin(name: &str, url: &str) -> EncodedResource {
    EncodedResource {
        name: format!("ns/{name}").into(),
        version: format!("v-{url}").into(),
        encoded: encoded(&format!(
            "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {{name: {name}, namespace: ns}}\nspec: {{url: '{url}', phase: STATS}}\n"
        )),
    }
}

fn extension(name: &str) -> EncodedResource {
    EncodedResource {
        name: format!("ns/{name}").into(),
        version: "native".into(),
        encoded: encoded(&format!(
            "apiVersion: extensions.istio.io/v1alpha1\nkind: TrafficExtension\nmetadata: {{name: '{name}', namespace: ns}}\nspec: {{lua: {{inlineCode: 'function envoy_on_request(h) end'}}}}\n"
        )),
    }
}

const TE: &str = "istio/extensions/v1alpha1/trafficextensions";
const WP: &str = "istio/extensions/v1alpha1/wasmplugins";

fn snapshot(extensions: Vec<EncodedResource>, plugins: Vec<EncodedResource>) -> Snapshot {
    Snapshot::new()
        .with_collection(TE, Arc::new(CollectionSnapshot::new(extensions)))
        .with_collection(WP, Arc::new(CollectionSnapshot::new(plugins)))
}

fn names(c: &CollectionSnapshot) -> Vec<String> {
    c.keys().iter().map(|k| k.name.to_string()).collect()
}

#[test]
fn without_plugins_the_extensions_are_served_as_they_are() {
    let v = view();
    let s = snapshot(vec![extension("lua")], vec![]);
    assert!(Arc::ptr_eq(&v.read(&s), &s.collection(TE)));
    // Neither collection: the shared empty one.
    assert!(v.read(&Snapshot::new()).is_empty());
}

#[test]
fn each_plugin_is_served_as_the_extension_istiod_makes_of_it() {
    let v = view();
    let s = snapshot(
        vec![extension("lua")],
        vec![plugin("b", "oci://r/b"), plugin("a", "oci://r/a")],
    );
    let served = v.read(&s);
    assert_eq!(
        names(&served),
        [
            "ns/a~istio-translated-wasmplugin",
            "ns/b~istio-translated-wasmplugin",
            "ns/lua"
        ]
    );
    assert_eq!(served.keys()[0].version.as_ref(), "v-oci://r/a");
    let kinds = KindTable::builtin();
    let te = kinds.by_collection(TE).unwrap();
    let first = Resource::decode(served.resources()[0].as_ref()).unwrap();
    let obj = resource_to_object(te, &first).unwrap();
    assert_eq!(obj.content["spec"]["wasm"]["url"], "oci://r/a");
    assert_eq!(obj.content["spec"]["phase"], "STATS");
    // The same pair of collections is translated once: every group and
    // stream serving it shares the result.
    assert!(Arc::ptr_eq(&served, &v.read(&s)));
    let other_group = s.clone();
    assert!(Arc::ptr_eq(&served, &v.read(&other_group)));
    // Equal content in other collection snapshots gives the same version.
    let again = snapshot(
        vec![extension("lua")],
        vec![plugin("a", "oci://r/a"), plugin("b", "oci://r/b")],
    );
    let served_again = v.read(&again);
    assert!(!Arc::ptr_eq(&served, &served_again));
    assert_eq!(served.version(), served_again.version());
    // A changed plugin changes the served version.
    let changed = snapshot(
        vec![extension("lua")],
        vec![plugin("a", "oci://r/a2"), plugin("b", "oci://r/b")],
    );
    assert_ne!(v.read(&changed).version(), served.version());
}

#[test]
fn a_plugin_that_cannot_be_translated_leaves_the_others_served() {
    let v = view();
    let mut broken = plugin("broken", "oci://r/x");
    broken.encoded = Bytes::from_static(b"\xff\xff not a resource");
    let s = snapshot(vec![], vec![broken, plugin("good", "oci://r/g")]);
    assert_eq!(names(&v.read(&s)), ["ns/good~istio-translated-wasmplugin"]);
}

#[test]
fn a_real_extension_of_a_translated_name_is_kept_over_the_translation() {
    let v = view();
    let s = snapshot(
        vec![extension("p~istio-translated-wasmplugin")],
        vec![plugin("p", "oci://r/p")],
    );
    let served = v.read(&s);
    assert_eq!(names(&served), ["ns/p~istio-translated-wasmplugin"]);
    assert_eq!(served.keys()[0].version.as_ref(), "native");
}

#[test]
fn translations_of_collections_gone_are_swept() {
    let v = view();
    let keep = snapshot(vec![], vec![plugin("kept", "oci://r/k")]);
    let kept = v.read(&keep);
    for i in 0..500 {
        let s = snapshot(vec![], vec![plugin("p", &format!("oci://r/{i}"))]);
        v.read(&s);
    }
    let memo = v.memo.lock().unwrap();
    assert!(
        memo.entries.len() <= 2 * memo.live_after_sweep.max(32) && memo.entries.len() < 100,
        "{} entries kept",
        memo.entries.len()
    );
    drop(memo);
    // What is still alive is still shared.
    assert!(Arc::ptr_eq(&kept, &v.read(&keep)));
}
