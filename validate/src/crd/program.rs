//! The CRDs' CEL rules (`x-kubernetes-validations`) compiled, and the
//! environment they run in: CEL's standard library, the strings extension
//! and the Kubernetes functions the Gateway API's rules call (`isIP`,
//! `duration`).
//!
//! A rule that refers to `oldSelf` is a transition rule: the API server
//! applies it to updates only, against the object stored before; meshhub
//! judges every object as a create (its webhook an UPDATE too: it has no
//! earlier object to compare with), so such a rule is skipped, and each
//! cluster's API server applies it. A rule that calls a function this
//! environment lacks, or a transition rule with `optionalOldSelf` (which
//! the API server also evaluates on a create, with `oldSelf` absent), is
//! not evaluated; [`super::CrdSchemas`] lists such rules with the reason,
//! so nothing is skipped silently.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr};
use cel::{Context, Env, ExecutionError, Program};
use serde_json::Value;

/// The functions a rule may call here: CEL's standard library (less the
/// `timestamp` family), the strings extension, and the Kubernetes
/// functions of this module. (By name: a rule calling a strings function
/// on a list, as Kubernetes' lists library allows for `indexOf`, fails when
/// evaluated.)
const FUNCTIONS: &[&str] = &[
    // Standard library.
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "dyn",
    "type",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    // Strings extension.
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "strings.quote",
    "reverse",
    // Kubernetes.
    "isIP",
    "duration",
];

/// One compiled rule.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    /// The expression as written.
    pub(crate) rule: String,
    /// `message`, when given.
    pub(crate) message: Option<String>,
    /// `fieldPath`, relative to the node, when given.
    pub(crate) field_path: Option<String>,
    /// The program, or why it is not evaluated.
    pub(crate) program: Result<Program, Unevaluated>,
    /// Refers to `oldSelf`: checked on updates only.
    pub(crate) transition: bool,
    /// Every field name the expression selects or tests (`self.port`,
    /// `has(l.port)`): reading a field whose value CEL cannot take is an
    /// evaluation error, as in the API server.
    pub(crate) selects: HashSet<String>,
    /// Where in the schema the rule sits (for the report of rules not
    /// evaluated).
    pub(crate) schema_path: String,
}

/// Why a CRD's rule is not evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unevaluated {
    /// The expression does not parse as CEL.
    #[error("does not parse: {0}")]
    Parse(String),
    /// It calls functions this environment does not have.
    #[error("calls {}, which meshhub does not implement", .0.join(", "))]
    Functions(Vec<String>),
    /// A transition rule the API server also runs on creates
    /// (`optionalOldSelf: true`), with `oldSelf` absent.
    #[error("a transition rule with optionalOldSelf, which meshhub does not evaluate")]
    OptionalOldSelf,
}

impl CompiledRule {
    /// Why the rule is not evaluated on a create, if it is not.
    pub(crate) fn not_evaluated(&self) -> Option<&Unevaluated> {
        self.program.as_ref().err()
    }
}

/// The environment rules compile and run in.
pub(crate) struct RuleEnv {
    env: Arc<Env>,
}

impl Default for RuleEnv {
    fn default() -> Self {
        let mut env = Env::stdlib();
        // Registering an extension on a fresh standard environment can only
        // fail on a duplicate, which would be a bug of this function.
        env.add_extension(cel::extensions::strings)
            .expect("the strings extension registers once");
        Self { env: Arc::new(env) }
    }
}

impl RuleEnv {
    /// Compiles one entry of `x-kubernetes-validations`.
    pub(crate) fn compile(&self, entry: &Value, schema_path: &str) -> CompiledRule {
        let rule = entry
            .get("rule")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let text = |k: &str| entry.get(k).and_then(Value::as_str).map(str::to_owned);
        let mut transition = false;
        let mut selects = HashSet::new();
        let optional_old_self = entry.get("optionalOldSelf") == Some(&Value::Bool(true));
        let program = match self.env.compile(&rule) {
            Err(e) => Err(Unevaluated::Parse(first_line(&e.to_string()).to_owned())),
            Ok(p) => {
                collect_selects(p.expression(), &mut selects);
                let refs = p.references();
                transition = refs.has_variable("oldSelf");
                let unknown: Vec<String> = refs
                    .functions()
                    .into_iter()
                    .filter(|f| is_named_function(f) && !FUNCTIONS.contains(f))
                    .map(str::to_owned)
                    .collect();
                if !unknown.is_empty() {
                    Err(Unevaluated::Functions(unknown))
                } else if transition && optional_old_self {
                    Err(Unevaluated::OptionalOldSelf)
                } else {
                    Ok(p)
                }
            }
        };
        CompiledRule {
            rule,
            message: text("message"),
            field_path: text("fieldPath"),
            program,
            transition,
            selects,
            schema_path: schema_path.to_owned(),
        }
    }

    /// A context for one object's rules.
    pub(crate) fn context(&self) -> Context<'static, 'static> {
        let mut ctx = Context::with_env(self.env.clone());
        // `isIP` is no standard overload. `duration` is one only with the
        // crate's chrono feature, which meshhub leaves off; were another
        // crate to turn it on, the standard `duration` (which parses the
        // same syntax into a duration that compares alike) would stay,
        // and this registration fails harmlessly.
        let _ = ctx.add_function("isIP", |s: Arc<String>| is_ip(&s));
        let _ = ctx.add_function("duration", |s: Arc<String>| {
            parse_duration(&s).map_err(|m| ExecutionError::function_error("duration", m))
        });
        ctx
    }
}

/// Operators and macros are not functions a CRD author names.
fn is_named_function(f: &str) -> bool {
    f.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// Every field name `e` selects or tests.
fn collect_selects(e: &IdedExpr, out: &mut HashSet<String>) {
    match &e.expr {
        Expr::Select(sel) => {
            out.insert(sel.field.clone());
            collect_selects(&sel.operand, out);
        }
        Expr::Call(call) => {
            if let Some(t) = &call.target {
                collect_selects(t, out);
            }
            call.args.iter().for_each(|a| collect_selects(a, out));
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                collect_selects(x, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| collect_selects(x, out)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    collect_selects(&me.key, out);
                    collect_selects(&me.value, out);
                }
            }
        }
        Expr::Struct(st) => {
            for entry in &st.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    collect_selects(&f.value, out);
                }
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Kubernetes' `isIP`: an IPv4 or IPv6 address, without a zone and not an
/// IPv4-mapped IPv6 address.
fn is_ip(s: &str) -> bool {
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => true,
        Ok(IpAddr::V6(a)) => a.to_ipv4_mapped().is_none(),
        Err(_) => false,
    }
}

/// A Go duration (`1h30m`, `-1.5s`, `300ms`, `0`) as nanoseconds: what
/// CEL's `duration()` takes. The rules only compare durations, and
/// nanoseconds compare as durations do.
pub(crate) fn parse_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("invalid duration {s:?}");
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        let (num, tail) = rest.split_at(num_end);
        if num.is_empty() || num == "." {
            return Err(bad());
        }
        let n: f64 = num.parse().map_err(|_| bad())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(format!("unknown unit {unit:?} in duration {s:?}")),
        };
        total += n * scale;
        rest = next;
    }
    if total > i64::MAX as f64 {
        return Err(format!("duration {s:?} out of range"));
    }
    let ns = total.round() as i64;
    Ok(if neg { -ns } else { ns })
}
