//! ProxyConfig rules.

use serde_json::Value;

use crate::json::{field, int_field};
use crate::report::Report;
use crate::selectors::check_selector_labels;

/// Checks a ProxyConfig spec.
pub(crate) fn check(r: &mut Report, spec: &Value) {
    if let Some(sel) = field(spec, "selector") {
        check_selector_labels(r, "spec.selector", sel, "matchLabels");
    }
    if int_field(spec, "concurrency").is_some_and(|n| n < 0) {
        r.err("spec.concurrency", "must not be negative");
    }
}
