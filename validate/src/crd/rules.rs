//! The CRDs' CEL rules evaluated as the API server evaluates them on a
//! create: at every node that has rules, with `self` bound to the node's
//! value after defaulting (module [`super::program`] compiles them).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{Context, Program};
use serde_json::Value;

use super::program::{CompiledRule, RuleEnv};
use super::schema::{Schema, Type};
use crate::report::{Report, at, idx, key};

/// Evaluates every rule under `v` (whose schema is `s`, at `path`),
/// recording failures in `r`.
pub(crate) fn evaluate(env: &RuleEnv, v: &Value, s: &Schema, path: &str, r: &mut Report) {
    let ctx = env.context();
    walk(&ctx, v, Some(s), path, r);
}

/// What [`walk`] gives back of a subtree: its CEL value, the names of the
/// fields under it whose values CEL cannot take, and (when there are any)
/// the value with each of them left out, and with each replaced by
/// [`InvalidData`].
struct Converted {
    value: cel::Value,
    unreadable: HashSet<String>,
    without: Option<cel::Value>,
    poisoned: Option<cel::Value>,
}

impl Converted {
    fn without(&self) -> &cel::Value {
        self.without.as_ref().unwrap_or(&self.value)
    }

    fn poisoned(&self) -> &cel::Value {
        self.poisoned.as_ref().unwrap_or(&self.value)
    }
}

/// A field CEL cannot take: equal to nothing, not even itself, and
/// neither ordered nor usable in arithmetic (those are errors).
#[derive(Debug, Eq)]
struct InvalidData;

impl PartialEq for InvalidData {
    fn eq(&self, _: &Self) -> bool {
        false
    }
}

impl cel::objects::Opaque for InvalidData {
    fn runtime_type_name(&self) -> &str {
        "meshhub.InvalidData"
    }
}

/// Converts `v` to CEL (typed by `s` where it has one) and evaluates the
/// rules of every node on the way, children first.
///
/// The API server hands CEL a field of an `integer` schema only when it
/// holds an integer: `80.0`, which the OpenAPI check lets through, is
/// "invalid data", and a rule whose evaluation reads the field (selects
/// it, or tests it with `has`) fails with an evaluation error; one that
/// never gets to it (the other branch of a `?:`) passes. Such a field is
/// kept here as a number and its name recorded; a rule over the subtree
/// that names it is evaluated again without the field and with it
/// replaced by [`InvalidData`], and is taken to read it when a result
/// differs (a rule that never reads the field gives the same result all
/// three times). One way this falls short: a rule that reads the field
/// but whose result none of the three changes (`!has(self.port) ||
/// self.port != 22` with `port: 80.0`) passes here and fails in the API
/// server; none of the Gateway API's rules is of that shape.
fn walk(ctx: &Context, v: &Value, s: Option<&Schema>, path: &str, r: &mut Report) -> Converted {
    let mut unreadable = HashSet::new();
    let (value, without, poisoned) = match v {
        Value::Null => (cel::Value::Null, None, None),
        Value::Bool(b) => (cel::Value::Bool(*b), None, None),
        Value::Number(n) => {
            let as_float = s.is_some_and(|s| s.ty == Some(Type::Number));
            let value = match n.as_i64() {
                Some(i) if !as_float => cel::Value::Int(i),
                _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            };
            (value, None, None)
        }
        Value::String(x) => (cel::Value::String(Arc::new(x.clone())), None, None),
        Value::Array(items) => {
            let item = s.and_then(|s| s.items.as_deref());
            let children: Vec<Converted> = items
                .iter()
                .enumerate()
                .map(|(i, x)| walk(ctx, x, item, &idx(path, i), r))
                .collect();
            for c in &children {
                unreadable.extend(c.unreadable.iter().cloned());
            }
            let list = |f: &dyn Fn(&Converted) -> cel::Value| {
                cel::Value::List(Arc::new(children.iter().map(f).collect()))
            };
            let (without, poisoned) = if unreadable.is_empty() {
                (None, None)
            } else {
                (
                    Some(list(&|c| c.without().clone())),
                    Some(list(&|c| c.poisoned().clone())),
                )
            };
            (list(&|c| c.value.clone()), without, poisoned)
        }
        Value::Object(m) => {
            let mut children = Vec::with_capacity(m.len());
            for (field, x) in m {
                let child = s.and_then(|s| s.child(field));
                let property = s.is_some_and(|s| s.properties.contains_key(field));
                let p = if property {
                    at(path, field)
                } else {
                    key(path, field)
                };
                // A property reaches CEL by its escaped name (a map's keys
                // as they are); one that can't be escaped not at all.
                let escaped = if property {
                    escape(field)
                } else {
                    Some(field.clone())
                };
                let Some(k) = escaped else { continue };
                let k = &k;
                let bad =
                    child.is_some_and(|c| wants_int(c) && x.is_number() && x.as_i64().is_none());
                if bad {
                    unreadable.insert(k.clone());
                }
                let c = walk(ctx, x, child, &p, r);
                unreadable.extend(c.unreadable.iter().cloned());
                children.push((k.clone(), bad, c));
            }
            let map = |f: &dyn Fn(bool, &Converted) -> Option<cel::Value>| {
                let entries: HashMap<Key, cel::Value> = children
                    .iter()
                    .filter_map(|(k, bad, c)| {
                        Some((Key::String(Arc::new((*k).clone())), f(*bad, c)?))
                    })
                    .collect();
                cel::Value::Map(Map {
                    map: Arc::new(entries),
                })
            };
            let (without, poisoned) = if unreadable.is_empty() {
                (None, None)
            } else {
                (
                    Some(map(&|bad, c| (!bad).then(|| c.without().clone()))),
                    Some(map(&|bad, c| {
                        Some(if bad {
                            cel::Value::Opaque(Arc::new(InvalidData))
                        } else {
                            c.poisoned().clone()
                        })
                    })),
                )
            };
            (map(&|_, c| Some(c.value.clone())), without, poisoned)
        }
    };
    let converted = Converted {
        value,
        unreadable,
        without,
        poisoned,
    };
    // Rules apply to values, not to nulls (as in the API server); those of
    // an `allOf` part apply to the node as its own do.
    if let Some(s) = s
        && !v.is_null()
    {
        for rule in s.rules.iter().chain(s.all_of.iter().flat_map(|a| &a.rules)) {
            check_rule(ctx, rule, &converted, path, r);
        }
    }
    converted
}

/// CEL's reserved words: a property of one of these names is reached as
/// `__name__`.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property's name as CEL reaches it (Kubernetes' escaping): a reserved
/// word as `__word__`, and `__`, `.`, `-` and `/` as `__underscores__`,
/// `__dot__`, `__dash__` and `__slash__`. `None` for a name CEL can't
/// reach (empty, a leading digit, another character).
pub(crate) fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if let Some(tail) = rest.strip_prefix("__") {
            out.push_str("__underscores__");
            rest = tail;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

/// Whether CEL takes the field as an `int`.
fn wants_int(s: &Schema) -> bool {
    s.ty == Some(Type::Integer) || s.int_or_string
}

fn execute(ctx: &Context, program: &Program, value: &cel::Value) -> cel::ResolveResult {
    let mut scope = ctx.new_inner_scope();
    scope.add_variable_from_value("self", value.clone());
    program.execute(&scope)
}

fn check_rule(ctx: &Context, rule: &CompiledRule, node: &Converted, path: &str, r: &mut Report) {
    if rule.transition {
        return;
    }
    let Ok(program) = &rule.program else { return };
    let at_path = match &rule.field_path {
        Some(fp) if fp.starts_with('[') => format!("{path}{fp}"),
        Some(fp) => at(path, fp.trim_start_matches('.')),
        None => path.to_owned(),
    };
    let result = execute(ctx, program, &node.value);
    if let Some(field) = rule.selects.iter().find(|f| node.unreadable.contains(*f)) {
        let same = |other: &cel::ResolveResult| match (&result, other) {
            (Ok(a), Ok(b)) => a == b,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        let reads = !same(&execute(ctx, program, node.without()))
            || !same(&execute(ctx, program, node.poisoned()));
        if reads {
            r.err(
                at_path,
                format!(
                    "rule {:?}: evaluation error: invalid data in field {field:?}: an integer written with a fraction",
                    rule.rule
                ),
            );
            return;
        }
    }
    match result {
        Ok(cel::Value::Bool(true)) => {}
        Ok(cel::Value::Bool(false)) => {
            let m = rule
                .message
                .clone()
                .unwrap_or_else(|| format!("failed rule: {}", rule.rule));
            r.err(at_path, m);
        }
        Ok(other) => r.err(
            at_path,
            format!("rule {:?} gave {other:?}, not a boolean", rule.rule),
        ),
        Err(e) => r.err(
            at_path,
            format!("rule {:?}: evaluation error: {e}", rule.rule),
        ),
    }
}
