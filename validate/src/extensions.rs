//! Rules for Telemetry (`telemetry.istio.io`), WasmPlugin and
//! TrafficExtension (`extensions.istio.io`).

use serde_json::Value;

use crate::enums::{ENV_VALUE_SOURCE, TAG_OPERATION};
use crate::go_url::strict_parse_scheme;
use crate::json::{enum_field, field, has, int_field, list, map, num_field, str_field};
use crate::limits::over_in_bytes_only;
use crate::report::{Report, at, idx, key};
use crate::selectors::{check_policy_target, check_selector_labels, check_target_ref};
use crate::values::parse_duration;

/// URL schemes a WasmPlugin may load from (none means an OCI image).
const WASM_SCHEMES: &[&str] = &["file", "http", "https", "oci"];

/// Every provider reference needs a name (an empty one is the CRD's
/// minLength, limits.tsv).
fn check_providers(r: &mut Report, path: &str, v: &Value) {
    for (i, p) in list(v, "providers").iter().enumerate() {
        if !has(p, "name") {
            r.err(
                at(&idx(&at(path, "providers"), i), "name"),
                "must not be empty",
            );
        }
    }
}

/// Checks a Telemetry spec.
pub(crate) fn telemetry(r: &mut Report, spec: &Value) {
    check_policy_target(r, spec);
    for (i, m) in list(spec, "metrics").iter().enumerate() {
        let p = idx("spec.metrics", i);
        check_providers(r, &p, m);
        // The CRD: a duration of at least 1ms (no precision rule).
        if let Some(d) = field(m, "reportingInterval").and_then(Value::as_str)
            && parse_duration(d).is_none_or(|ns| ns < 1_000_000)
        {
            r.err(
                at(&p, "reportingInterval"),
                "must be a valid duration greater than 1ms",
            );
        }
        for (j, o) in list(m, "overrides").iter().enumerate() {
            let op = idx(&at(&p, "overrides"), j);
            if !o.is_object() {
                r.err(op, "must not be null");
                continue;
            }
            let tp = at(&op, "tagOverrides");
            for (tag, to) in map(o, "tagOverrides").into_iter().flatten() {
                let kp = key(&tp, tag);
                if !to.is_object() {
                    r.err(kp, "must not be null");
                    continue;
                }
                let value = str_field(to, "value");
                match enum_field(to, "operation", &TAG_OPERATION) {
                    "UPSERT" if value.is_empty() => {
                        r.err(at(&kp, "value"), "must be set when operation is UPSERT");
                    }
                    "REMOVE" if !value.is_empty() => {
                        r.err(at(&kp, "value"), "may only be set when operation is UPSERT");
                    }
                    _ => {}
                }
            }
        }
    }
    for (i, t) in list(spec, "tracing").iter().enumerate() {
        let p = idx("spec.tracing", i);
        check_providers(r, &p, t);
        if let Some(pct) = num_field(t, "randomSamplingPercentage")
            && !(0.0..=100.0).contains(&pct)
        {
            r.err(
                at(&p, "randomSamplingPercentage"),
                "must be in the range 0..100",
            );
        }
        let cp = at(&p, "customTags");
        for (name, tag) in map(t, "customTags").into_iter().flatten() {
            let kp = key(&cp, name);
            if name.is_empty() {
                r.err(&kp, "tag name must not be empty");
            }
            // A null tag is absent: the API server prunes it, and istiod
            // reads it as an empty tag, which its rules pass.
            if !tag.is_object() {
                continue;
            }
            // Each source names what it reads (`formatter`: Istio 1.30+);
            // an empty name or value is the CRD's minLength (limits.tsv).
            for (f, inner) in [
                ("literal", "value"),
                ("header", "name"),
                ("environment", "name"),
                ("formatter", "value"),
            ] {
                if field(tag, f).is_some_and(|v| !has(v, inner)) {
                    r.err(at(&at(&kp, f), inner), "must not be empty");
                }
            }
        }
    }
    for (i, l) in list(spec, "accessLogging").iter().enumerate() {
        check_providers(r, &idx("spec.accessLogging", i), l);
        // istiod parses the filter with cel-go (syntax only, no type
        // check); an absent expression is the empty one, which does not
        // parse.
        if let Some(filter) = field(l, "filter").filter(|f| f.is_object()) {
            let expr = str_field(filter, "expression");
            if let Err(e) = cel::Program::compile(expr) {
                r.err(
                    at(&at(&idx("spec.accessLogging", i), "filter"), "expression"),
                    format!(
                        "must be a valid CEL expression: {}",
                        first_line(&e.to_string())
                    ),
                );
            }
        }
    }
}

/// Checks a WasmPlugin spec.
pub(crate) fn wasm_plugin(r: &mut Report, spec: &Value) {
    check_policy_target(r, spec);
    check_wasm_module(r, "spec", spec);
    check_traffic_match(r, spec);
}

/// Checks a TrafficExtension spec (Istio 1.30+): the CRD's rules and
/// istiod's `ValidateTrafficExtension`, which reuses WasmPlugin's checks
/// for the Wasm module.
pub(crate) fn traffic_extension(r: &mut Report, spec: &Value) {
    let targets = list(spec, "targetRefs");
    if has(spec, "selector") && !targets.is_empty() {
        r.err("spec", "only one of targetRefs or selector can be set");
    }
    if let Some(sel) = field(spec, "selector") {
        check_selector_labels(r, "spec.selector", sel, "matchLabels");
    }
    // At most 16 targets: the CRD's maxItems (limits.tsv).
    for (i, t) in targets.iter().enumerate() {
        // No CEL rule narrows the kinds here (WasmPlugin's neither), so
        // istiod's list holds, GatewayClass included.
        check_target_ref(r, &idx("spec.targetRefs", i), t, true);
    }
    let (wasm, lua) = (field(spec, "wasm"), field(spec, "lua"));
    if wasm.is_some() == lua.is_some() {
        r.err("spec", "exactly one of wasm or lua must be set");
    }
    if let Some(wasm) = wasm {
        check_wasm_module(r, "spec.wasm", wasm);
    }
    if let Some(lua) = lua {
        // Set, not empty and at most 65536 characters: the CRD's
        // minLength and maxLength (limits.tsv); istiod counts bytes.
        let code = str_field(lua, "inlineCode");
        if !has(lua, "inlineCode") {
            r.err("spec.lua.inlineCode", "must be set");
        } else if over_in_bytes_only(code, LUA_MAX_BYTES) {
            r.err(
                "spec.lua.inlineCode",
                "must be at most 65536 bytes (64 KiB) long",
            );
        }
    }
    check_traffic_match(r, spec);
}

/// The largest inline Lua program (the CRD and istiod).
const LUA_MAX_BYTES: usize = 65_536;

/// A Wasm module's settings, at `path`: a WasmPlugin's spec, or a
/// TrafficExtension's `spec.wasm`.
fn check_wasm_module(r: &mut Report, path: &str, v: &Value) {
    let url = str_field(v, "url");
    let up = at(path, "url");
    // An empty URL is the CRD's minLength (limits.tsv).
    if !has(v, "url") {
        r.err(up, "must be set");
    } else if !url.is_empty() {
        // As istiod parses it (Go's net/url, `http://` tried in front).
        match strict_parse_scheme(url) {
            Err(e) => r.err(up, format!("{url:?} is not a valid URL: {e}")),
            Ok(scheme) if !scheme.is_empty() && !WASM_SCHEMES.contains(&scheme.as_str()) => {
                r.err(up, format!("unsupported URL scheme {scheme:?}"));
            }
            Ok(_) => {}
        }
    }
    let sha = str_field(v, "sha256");
    if !sha.is_empty()
        && (sha.len() != 64 || !sha.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
    {
        r.err(
            at(path, "sha256"),
            "must be 64 lower case hexadecimal characters",
        );
    }
    // istiod bounds these in bytes, the CRD (limits.tsv) in characters
    // (and refuses them empty).
    if over_in_bytes_only(str_field(v, "imagePullSecret"), 253) {
        r.err(
            at(path, "imagePullSecret"),
            "must be at most 253 bytes long",
        );
    }
    if over_in_bytes_only(str_field(v, "pluginName"), 256) {
        r.err(at(path, "pluginName"), "must be at most 256 bytes long");
    }
    if let Some(vm) = field(v, "vmConfig") {
        let mut names: Vec<&str> = Vec::new();
        for (i, env) in list(vm, "env").iter().enumerate() {
            let p = idx(&at(&at(path, "vmConfig"), "env"), i);
            if !env.is_object() {
                continue;
            }
            // Empty or over 256 characters is the CRD's (limits.tsv).
            let name = str_field(env, "name");
            if !has(env, "name") {
                r.err(at(&p, "name"), "must not be empty");
            } else if over_in_bytes_only(name, 256) {
                r.err(at(&p, "name"), "must be at most 256 bytes long");
            } else if !name.is_empty() && names.contains(&name) {
                r.err(at(&p, "name"), format!("duplicate env {name:?}"));
            }
            names.push(name);
            if enum_field(env, "valueFrom", &ENV_VALUE_SOURCE) != "INLINE"
                && !str_field(env, "value").is_empty()
            {
                r.err(at(&p, "value"), "may only be set when valueFrom is INLINE");
            }
        }
    }
}

/// `spec.match`: the traffic a WasmPlugin or TrafficExtension applies to.
fn check_traffic_match(r: &mut Report, spec: &Value) {
    for (i, sel) in list(spec, "match").iter().enumerate() {
        let p = idx("spec.match", i);
        if !sel.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        for (j, port) in list(sel, "ports").iter().enumerate() {
            let n = int_field(port, "number").unwrap_or(0);
            if !(1..=65535).contains(&n) {
                r.err(
                    at(&idx(&at(&p, "ports"), j), "number"),
                    format!("port {n} is out of the range 1..65535"),
                );
            }
        }
    }
}

/// The first line of a multi-line message.
fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}
