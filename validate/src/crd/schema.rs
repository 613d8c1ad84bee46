//! A CRD version's OpenAPI v3 schema, read once into a tree that the
//! checks walk: the structural part (types, properties, items, maps), the
//! value validations (limits, patterns, enums, formats, `anyOf`/`oneOf`/
//! `not`), Kubernetes' extensions (list types, int-or-string, preserved
//! unknown fields, defaults) and the compiled CEL rules.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

use super::program::{CompiledRule, RuleEnv};

/// The type a schema node declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "object" => Self::Object,
            "array" => Self::Array,
            "string" => Self::String,
            "integer" => Self::Integer,
            "number" => Self::Number,
            "boolean" => Self::Boolean,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Array => "array",
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }
}

/// `x-kubernetes-list-type`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum ListType {
    /// `atomic` (or unset): any list.
    #[default]
    Atomic,
    /// `set`: no two equal items.
    Set,
    /// `map`: no two items with equal values of these keys.
    Map(Vec<String>),
}

/// One node of the schema.
#[derive(Debug, Default)]
pub(crate) struct Schema {
    pub(crate) ty: Option<Type>,
    pub(crate) nullable: bool,
    pub(crate) format: Option<String>,
    pub(crate) properties: BTreeMap<String, Schema>,
    /// `additionalProperties` as a schema: the node is a map.
    pub(crate) additional: Option<Box<Schema>>,
    pub(crate) items: Option<Box<Schema>>,
    pub(crate) required: Vec<String>,
    pub(crate) enumeration: Option<Vec<Value>>,
    /// The pattern as written (for messages) and compiled.
    pub(crate) pattern: Option<(String, Regex)>,
    pub(crate) min_length: Option<u64>,
    pub(crate) max_length: Option<u64>,
    pub(crate) min_items: Option<u64>,
    pub(crate) max_items: Option<u64>,
    pub(crate) min_properties: Option<u64>,
    pub(crate) max_properties: Option<u64>,
    pub(crate) minimum: Option<f64>,
    pub(crate) maximum: Option<f64>,
    pub(crate) exclusive_minimum: bool,
    pub(crate) exclusive_maximum: bool,
    pub(crate) multiple_of: Option<f64>,
    pub(crate) default: Option<Value>,
    pub(crate) list_type: ListType,
    pub(crate) preserve_unknown: bool,
    pub(crate) int_or_string: bool,
    pub(crate) all_of: Vec<Schema>,
    pub(crate) any_of: Vec<Schema>,
    pub(crate) one_of: Vec<Schema>,
    pub(crate) not: Option<Box<Schema>>,
    pub(crate) rules: Vec<CompiledRule>,
}

/// Why a schema could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A `pattern` is not a regular expression.
    #[error("{path}.pattern: {message}")]
    Pattern {
        /// Where in the schema.
        path: String,
        /// The regex parser's complaint.
        message: String,
    },
    /// A keyword has a value of the wrong shape.
    #[error("{path}.{keyword}: {message}")]
    Shape {
        /// Where in the schema.
        path: String,
        /// The keyword.
        keyword: &'static str,
        /// What is wrong.
        message: &'static str,
    },
}

fn count(node: &Value, keyword: &'static str, path: &str) -> Result<Option<u64>, SchemaError> {
    match node.get(keyword) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| SchemaError::Shape {
            path: path.to_owned(),
            keyword,
            message: "must be a non-negative integer",
        }),
    }
}

fn number(node: &Value, keyword: &'static str, path: &str) -> Result<Option<f64>, SchemaError> {
    match node.get(keyword) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| SchemaError::Shape {
            path: path.to_owned(),
            keyword,
            message: "must be a number",
        }),
    }
}

fn flag(node: &Value, keyword: &str) -> bool {
    node.get(keyword).and_then(Value::as_bool).unwrap_or(false)
}

impl Schema {
    /// Reads `node` (an `openAPIV3Schema` or a part of it) at `path`,
    /// compiling its CEL rules in `env`.
    pub(crate) fn read(node: &Value, path: &str, env: &RuleEnv) -> Result<Self, SchemaError> {
        let ty = match node.get("type") {
            None | Some(Value::Null) => None,
            Some(t) => Some(t.as_str().and_then(Type::parse).ok_or(SchemaError::Shape {
                path: path.to_owned(),
                keyword: "type",
                message: "must be one of object, array, string, integer, number, boolean",
            })?),
        };
        let mut s = Schema {
            ty,
            nullable: flag(node, "nullable"),
            format: node
                .get("format")
                .and_then(Value::as_str)
                .map(str::to_owned),
            min_length: count(node, "minLength", path)?,
            max_length: count(node, "maxLength", path)?,
            min_items: count(node, "minItems", path)?,
            max_items: count(node, "maxItems", path)?,
            min_properties: count(node, "minProperties", path)?,
            max_properties: count(node, "maxProperties", path)?,
            minimum: number(node, "minimum", path)?,
            maximum: number(node, "maximum", path)?,
            exclusive_minimum: flag(node, "exclusiveMinimum"),
            exclusive_maximum: flag(node, "exclusiveMaximum"),
            multiple_of: number(node, "multipleOf", path)?,
            default: node.get("default").cloned(),
            preserve_unknown: flag(node, "x-kubernetes-preserve-unknown-fields"),
            int_or_string: flag(node, "x-kubernetes-int-or-string"),
            enumeration: node.get("enum").and_then(Value::as_array).cloned(),
            ..Schema::default()
        };
        if let Some(p) = node.get("pattern").and_then(Value::as_str) {
            let re = Regex::new(p).map_err(|e| SchemaError::Pattern {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
            s.pattern = Some((p.to_owned(), re));
        }
        if let Some(req) = node.get("required").and_then(Value::as_array) {
            s.required = req
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
        }
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let child = Schema::read(v, &format!("{path}.properties.{k}"), env)?;
                s.properties.insert(k.clone(), child);
            }
        }
        match node.get("additionalProperties") {
            Some(v @ Value::Object(_)) => {
                let child = Schema::read(v, &format!("{path}.additionalProperties"), env)?;
                s.additional = Some(Box::new(child));
            }
            // `additionalProperties: true` keeps any field, as preserving
            // unknown fields does.
            Some(Value::Bool(true)) => s.preserve_unknown = true,
            _ => {}
        }
        if let Some(items) = node.get("items").filter(|v| v.is_object()) {
            s.items = Some(Box::new(Schema::read(
                items,
                &format!("{path}.items"),
                env,
            )?));
        }
        for (keyword, out) in [
            ("allOf", &mut s.all_of),
            ("anyOf", &mut s.any_of),
            ("oneOf", &mut s.one_of),
        ] {
            for (i, v) in node
                .get(keyword)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                out.push(Schema::read(v, &format!("{path}.{keyword}[{i}]"), env)?);
            }
        }
        if let Some(not) = node.get("not").filter(|v| v.is_object()) {
            s.not = Some(Box::new(Schema::read(not, &format!("{path}.not"), env)?));
        }
        s.list_type = match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => {
                let keys: Vec<String> = node
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect();
                if keys.is_empty() {
                    return Err(SchemaError::Shape {
                        path: path.to_owned(),
                        keyword: "x-kubernetes-list-map-keys",
                        message: "a list of type map needs its keys",
                    });
                }
                ListType::Map(keys)
            }
            _ => ListType::Atomic,
        };
        for rule in node
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            s.rules.push(env.compile(rule, path));
        }
        Ok(s)
    }

    /// The schema of property `k`: its own, or the map's value schema.
    pub(crate) fn child(&self, k: &str) -> Option<&Schema> {
        self.properties.get(k).or(self.additional.as_deref())
    }

    /// Whether fields this schema does not name are kept.
    pub(crate) fn keeps_unknown(&self) -> bool {
        self.preserve_unknown || self.additional.is_some()
    }

    /// Every rule under this node (itself included), for reports.
    pub(crate) fn each_rule(&self, f: &mut dyn FnMut(&CompiledRule)) {
        self.rules.iter().for_each(&mut *f);
        for c in self.properties.values() {
            c.each_rule(f);
        }
        for c in self
            .additional
            .iter()
            .chain(self.items.iter())
            .chain(self.not.iter())
        {
            c.each_rule(f);
        }
        for c in &self.all_of {
            c.each_rule(f);
        }
    }
}
