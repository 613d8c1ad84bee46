//! Schema currency: meshhub's own schema (`schema/`, the kind table) covers
//! every kind, field and enum value of the newest Istio API, read at test
//! time from `istio.io/api` in the Go module cache (downloaded when missing
//! by `e2e/peers/istio-api.sh`; `.ci/run` names it with
//! `MESHHUB_ISTIO_API_DIR`), so that a new Istio release shows up as a
//! failing test naming what is missing, not as objects refused in the field.
//!
//! Two views of the same release:
//!
//! * its CRDs (what an API server accepts): every served version's
//!   `openAPIV3Schema` of every CRD is walked, and each kind, version, field
//!   path and enum value must be known to the kind table and the descriptor
//!   pool;
//! * its `.proto` files (what istiod decodes): compiled here with protox,
//!   every message, field and enum value of the files meshhub also defines
//!   must have the same number, type and cardinality in ours, because istiod
//!   decodes the bytes meshhub encodes.
//!
//! Without Go (and outside CI) both skip, saying so.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use meshhub_proto::kinds::KindTable;
use meshhub_testkit::istio_api::{self, Module};
use prost_reflect::{
    Cardinality, DescriptorPool, EnumDescriptor, FieldDescriptor, Kind as FieldKind,
    MessageDescriptor,
};
use serde_json::Value;

/// Upstream messages meshhub leaves out on purpose: a ServiceEntry's
/// `status` (the addresses Istio allocated), never part of a body (bodies
/// carry the `spec`).
const NOT_BODIES: &[&str] = &[
    "istio.networking.v1alpha3.ServiceEntryStatus",
    "istio.networking.v1alpha3.ServiceEntryAddress",
];

fn module_or_skip() -> Option<PathBuf> {
    match istio_api::module() {
        Module::Found(dir) => Some(dir),
        Module::NoGo => {
            eprintln!(
                "skipped: no Go toolchain to download istio.io/api@{} with (install Go, or set {})",
                istio_api::VERSION,
                istio_api::DIR_VAR
            );
            None
        }
    }
}

/// What one walk found: the paths checked and the ones meshhub lacks.
#[derive(Default)]
struct Walk {
    checked: usize,
    unknown: BTreeSet<String>,
}

impl Walk {
    /// One `spec` schema (or a part of it) against the type it must fit.
    fn schema(&mut self, schema: &Value, ty: &FieldKind, path: &str) {
        self.checked += 1;
        if let Some(values) = schema["enum"].as_array() {
            match ty {
                FieldKind::Enum(e) => {
                    for v in values.iter().filter_map(Value::as_str) {
                        if e.get_value_by_name(v).is_none() {
                            self.unknown.insert(format!("{path}: enum value {v}"));
                        }
                    }
                }
                _ => {
                    self.unknown
                        .insert(format!("{path}: an enum in the CRD, {ty:?} in meshhub"));
                }
            }
        }
        if let Some(props) = schema["properties"].as_object() {
            let FieldKind::Message(msg) = ty else {
                self.unknown
                    .insert(format!("{path}: an object in the CRD, {ty:?} in meshhub"));
                return;
            };
            for (name, sub) in props {
                let sub_path = format!("{path}.{name}");
                match field_by_json_name(msg, name) {
                    Some(f) => self.field(sub, &f, &sub_path),
                    None => {
                        self.unknown.insert(sub_path);
                    }
                }
            }
        }
        // Istio's CRDs say "one of" with `required` lists only; a branch
        // with properties would name fields too.
        for key in ["oneOf", "anyOf", "allOf"] {
            for branch in schema[key].as_array().into_iter().flatten() {
                if branch.get("properties").is_some() {
                    self.schema(branch, ty, path);
                }
            }
        }
    }

    /// The schema of one field, by the field's cardinality.
    fn field(&mut self, schema: &Value, f: &FieldDescriptor, path: &str) {
        if f.is_map() {
            let FieldKind::Message(entry) = f.kind() else {
                unreachable!("a map field's kind is its entry message")
            };
            self.checked += 1;
            if let Some(value) = schema.get("additionalProperties").filter(|v| v.is_object()) {
                self.schema(
                    value,
                    &entry.map_entry_value_field().kind(),
                    &format!("{path}{{}}"),
                );
            }
        } else if f.is_list() {
            self.checked += 1;
            if let Some(items) = schema.get("items") {
                self.schema(items, &f.kind(), &format!("{path}[]"));
            }
        } else {
            self.schema(schema, &f.kind(), path);
        }
    }
}

fn field_by_json_name(msg: &MessageDescriptor, name: &str) -> Option<FieldDescriptor> {
    msg.fields()
        .find(|f| f.json_name() == name || f.name() == name)
}

fn read_crds(dir: &Path) -> Vec<Value> {
    let path = istio_api::crds(dir);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_kind_and_field_path_of_the_newest_istio_api_crds_is_known() {
    let Some(dir) = module_or_skip() else { return };
    let table = KindTable::builtin();
    let mut walk = Walk::default();
    let mut kinds = 0;
    for crd in read_crds(&dir) {
        let spec = &crd["spec"];
        let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str())
        else {
            continue;
        };
        kinds += 1;
        let Some(ours) = table.by_group_kind(group, kind) else {
            walk.unknown
                .insert(format!("{kind} ({group}): unknown kind"));
            continue;
        };
        let Some(body) = ours.descriptor() else {
            walk.unknown.insert(format!(
                "{kind}: no body message {} in the pool",
                ours.message()
            ));
            continue;
        };
        for version in spec["versions"].as_array().into_iter().flatten() {
            if version["served"].as_bool() != Some(true) {
                continue;
            }
            let v = version["name"].as_str().unwrap_or_default();
            if !ours.serves(v) {
                walk.unknown.insert(format!(
                    "{kind} ({group}/{v}): version not served by meshhub"
                ));
            }
            let schema = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
            if schema.is_object() {
                walk.schema(
                    schema,
                    &FieldKind::Message(body.clone()),
                    &format!("{kind}.spec"),
                );
            }
        }
    }
    eprintln!(
        "istio.io/api@{}: {kinds} kinds, {} schema nodes checked, {} unknown to meshhub",
        istio_api::VERSION,
        walk.checked,
        walk.unknown.len()
    );
    assert!(
        kinds >= 15,
        "the CRDs of {} hold {kinds} kinds",
        dir.display()
    );
    assert!(
        walk.unknown.is_empty(),
        "istio.io/api@{} has what meshhub's schema lacks:\n  {}",
        istio_api::VERSION,
        walk.unknown
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

/// The Istio `.proto` files meshhub defines (same relative paths as
/// upstream's), compiled from the module.
fn upstream_pool(dir: &Path, files: &[String]) -> DescriptorPool {
    let mut compiler = protox::Compiler::new([dir.to_path_buf(), dir.join("common-protos")])
        .expect("protox compiler");
    compiler.include_imports(true);
    compiler
        .open_files(files)
        .unwrap_or_else(|e| panic!("compiling istio.io/api's {files:?}: {e}"));
    compiler.descriptor_pool()
}

/// `Kind` without the descriptor's identity: scalar name, or the full name
/// of a message or enum.
fn kind_name(k: &FieldKind) -> String {
    match k {
        FieldKind::Message(m) => m.full_name().to_owned(),
        FieldKind::Enum(e) => e.full_name().to_owned(),
        other => format!("{other:?}"),
    }
}

fn cardinality(f: &FieldDescriptor) -> &'static str {
    if f.is_map() {
        "map"
    } else if f.is_list() {
        "repeated"
    } else if f.cardinality() == Cardinality::Required {
        "required"
    } else {
        "singular"
    }
}

fn compare_enum(theirs: &EnumDescriptor, ours: &EnumDescriptor, diffs: &mut Vec<String>) {
    for v in theirs.values() {
        match ours.get_value_by_name(v.name()) {
            None => diffs.push(format!(
                "{}: enum value {} = {} missing",
                ours.full_name(),
                v.name(),
                v.number()
            )),
            Some(o) if o.number() != v.number() => diffs.push(format!(
                "{}.{}: number {} in meshhub, {} upstream",
                ours.full_name(),
                v.name(),
                o.number(),
                v.number()
            )),
            Some(_) => {}
        }
    }
}

fn compare_message(theirs: &MessageDescriptor, ours: &MessageDescriptor, diffs: &mut Vec<String>) {
    for f in theirs.fields() {
        let Some(o) = ours.get_field_by_name(f.name()) else {
            diffs.push(format!(
                "{}.{} = {} missing",
                ours.full_name(),
                f.name(),
                f.number()
            ));
            continue;
        };
        let what = format!("{}.{}", ours.full_name(), f.name());
        if o.number() != f.number() {
            diffs.push(format!(
                "{what}: number {} in meshhub, {} upstream",
                o.number(),
                f.number()
            ));
        }
        if kind_name(&o.kind()) != kind_name(&f.kind()) {
            diffs.push(format!(
                "{what}: type {} in meshhub, {} upstream",
                kind_name(&o.kind()),
                kind_name(&f.kind())
            ));
        }
        if cardinality(&o) != cardinality(&f) {
            diffs.push(format!(
                "{what}: {} in meshhub, {} upstream",
                cardinality(&o),
                cardinality(&f)
            ));
        }
        let (oo, fo) = (o.containing_oneof(), f.containing_oneof());
        if oo.as_ref().map(|x| x.name().to_owned()) != fo.as_ref().map(|x| x.name().to_owned()) {
            diffs.push(format!(
                "{what}: oneof {:?} in meshhub, {:?} upstream",
                oo.map(|x| x.name().to_owned()),
                fo.map(|x| x.name().to_owned())
            ));
        }
    }
}

#[test]
fn field_and_enum_numbers_agree_with_the_newest_istio_api_protos() {
    let Some(dir) = module_or_skip() else { return };
    let ours = meshhub_proto::descriptor::pool();
    // The Istio API files meshhub defines; MCP, google.* and meshhub's own
    // are not Istio's config API.
    let files: Vec<String> = ours
        .files()
        .filter(|f| {
            f.package_name().starts_with("istio.") && !f.package_name().starts_with("istio.mcp.")
        })
        .map(|f| f.name().to_owned())
        .collect();
    assert!(files.len() >= 16, "Istio API files in the pool: {files:?}");
    let theirs = upstream_pool(&dir, &files);
    let mut diffs = Vec::new();
    let (mut messages, mut enums) = (0, 0);
    for file in &files {
        let Some(tf) = theirs.get_file_by_name(file) else {
            diffs.push(format!(
                "{file}: not in istio.io/api@{}",
                istio_api::VERSION
            ));
            continue;
        };
        let mut pending: Vec<MessageDescriptor> = tf.messages().collect();
        for e in tf.enums() {
            enums += 1;
            match ours.get_enum_by_name(e.full_name()) {
                Some(o) => compare_enum(&e, &o, &mut diffs),
                None => diffs.push(format!("enum {} missing", e.full_name())),
            }
        }
        while let Some(m) = pending.pop() {
            if m.is_map_entry() || NOT_BODIES.contains(&m.full_name()) {
                continue;
            }
            messages += 1;
            pending.extend(m.child_messages());
            for e in m.child_enums() {
                enums += 1;
                match ours.get_enum_by_name(e.full_name()) {
                    Some(o) => compare_enum(&e, &o, &mut diffs),
                    None => diffs.push(format!("enum {} missing", e.full_name())),
                }
            }
            match ours.get_message_by_name(m.full_name()) {
                Some(o) => compare_message(&m, &o, &mut diffs),
                None => diffs.push(format!("message {} missing", m.full_name())),
            }
        }
    }
    eprintln!(
        "istio.io/api@{}: {} files, {messages} messages, {enums} enums compared",
        istio_api::VERSION,
        files.len()
    );
    assert!(
        diffs.is_empty(),
        "meshhub's schema differs from istio.io/api@{}:\n  {}",
        istio_api::VERSION,
        diffs.join("\n  ")
    );
}
