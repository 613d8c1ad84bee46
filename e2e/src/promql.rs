//! The metric names PromQL expressions refer to, and the families a
//! `/metrics` page exposes: what the chart's dashboards and alerts are
//! checked against (`e2e/tests/it/chart_monitoring.rs`).
//!
//! Not a PromQL parser: a tokenizer that knows what is not a metric name —
//! strings, label matchers (`{…}`), range and subquery selectors (`[…]`),
//! label lists after `by`, `without`, `on`, `ignoring`, `group_left` and
//! `group_right`, function and aggregation names, keywords, numbers and
//! durations, and Grafana's `$variables`. What is left is a metric name.
//! promtool's parser checks the syntax separately.

use std::collections::{BTreeMap, BTreeSet};

/// Aggregation operators: names followed by a label list or `(`, never
/// metrics.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Keywords that take a label list in parentheses.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Other keywords and literals.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end",
];

fn ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// The index just past the string literal starting at `i` (`"…"`, `'…'`
/// with backslash escapes, or a raw `` `…` ``).
fn skip_string(b: &[u8], i: usize) -> usize {
    let quote = b[i];
    let mut j = i + 1;
    while j < b.len() && b[j] != quote {
        if b[j] == b'\\' && quote != b'`' {
            j += 1;
        }
        j += 1;
    }
    j + 1
}

/// The index just past the bracket `open` at `i` closes (strings inside
/// skipped, nesting counted).
fn skip_group(b: &[u8], i: usize, open: u8, close: u8) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j < b.len() {
        match b[j] {
            b'"' | b'\'' | b'`' => {
                j = skip_string(b, j);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    j
}

fn next_non_space(b: &[u8], mut i: usize) -> Option<u8> {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    b.get(i).copied()
}

/// The metric names `expr` selects.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let b = expr.as_bytes();
    let mut out = BTreeSet::new();
    let mut label_list_next = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' | b'\'' | b'`' => i = skip_string(b, i),
            b'{' => i = skip_group(b, i, b'{', b'}'),
            b'[' => i = skip_group(b, i, b'[', b']'),
            b'(' if label_list_next => {
                label_list_next = false;
                i = skip_group(b, i, b'(', b')');
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            // Grafana variables: $name, ${name}, ${name:format}.
            b'$' => {
                i += 1;
                if b.get(i) == Some(&b'{') {
                    i = skip_group(b, i, b'{', b'}');
                } else {
                    while i < b.len() && ident_char(b[i]) {
                        i += 1;
                    }
                }
            }
            // Numbers and durations (0.99, 1e3, 0x1f, 5m, 1h30m).
            c if c.is_ascii_digit()
                || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) =>
            {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
            }
            c if ident_start(c) => {
                let start = i;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                let word = &expr[start..i];
                let lower = word.to_ascii_lowercase();
                if LABEL_LISTS.contains(&lower.as_str()) {
                    // group_left/group_right may have no list.
                    label_list_next = next_non_space(b, i) == Some(b'(');
                } else if KEYWORDS.contains(&lower.as_str())
                    || AGGREGATIONS.contains(&lower.as_str())
                    || next_non_space(b, i) == Some(b'(')
                {
                    // A keyword, an aggregation or a function call.
                } else {
                    out.insert(word.to_owned());
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// The metric names a Grafana variable's query selects: its selector for
/// `label_values(selector, label)` (and `label_values(label)`: none), the
/// expression itself for `query_result(expr)` or a plain expression.
pub fn variable_query_names(query: &str) -> BTreeSet<String> {
    let q = query.trim();
    if let Some(args) = q
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return match args.rfind(',') {
            Some(comma) => metric_names(&args[..comma]),
            None => BTreeSet::new(),
        };
    }
    if let Some(inner) = q
        .strip_prefix("query_result(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return metric_names(inner);
    }
    metric_names(q)
}

/// The families a Prometheus text page exposes, with their type
/// (`untyped` when no `# TYPE` line names them).
pub fn exposed_families(text: &str) -> BTreeMap<String, String> {
    let mut families = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                families.insert(name.to_owned(), kind.to_owned());
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let name: String = line
                .bytes()
                .take_while(|c| ident_char(*c))
                .map(char::from)
                .collect();
            families.entry(name).or_insert_with(|| "untyped".to_owned());
        }
    }
    families
}

/// Whether `name` is a series of `families`: a family itself, or a
/// histogram's `_bucket`/`_sum`/`_count`, a summary's `_sum`/`_count`.
pub fn is_exposed(name: &str, families: &BTreeMap<String, String>) -> bool {
    if families.contains_key(name) {
        return true;
    }
    let of = |suffix: &str, kinds: &[&str]| {
        name.strip_suffix(suffix)
            .and_then(|base| families.get(base))
            .is_some_and(|k| kinds.contains(&k.as_str()))
    };
    of("_bucket", &["histogram"])
        || of("_sum", &["histogram", "summary"])
        || of("_count", &["histogram", "summary"])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        metric_names(expr).into_iter().collect()
    }

    #[test]
    fn only_metric_names_are_taken() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.99, sum by (le) (rate(meshhub_x_seconds_bucket{job=~"$job", role="source"}[$__rate_interval])))"#
            ),
            ["meshhub_x_seconds_bucket"]
        );
        assert_eq!(
            names(
                "max by (namespace, job) (a{job=\"meshhub\"}) - (count by (namespace, job) (b) or max by (namespace, job) (a) * 0) > 0"
            ),
            ["a", "b"]
        );
        assert_eq!(
            names(
                "(time() - max(t{x=\"}\"})) > on (job) group_left (cluster) d offset 5m and ignoring(le) e[1h30m:1m] unless f == bool 1e3"
            ),
            ["d", "e", "f", "t"]
        );
        assert_eq!(
            names(
                "sum without (instance) (x) / ignoring (a) group_left y + vector(0) or absent(z)"
            ),
            ["x", "y", "z"]
        );
        assert_eq!(
            names("label_replace(up, \"a\", \"$1\", \"b\", \"(.*)\") # a comment naming q\n"),
            ["up"]
        );
        assert_eq!(names("sum(rate(x[${__range}]))"), ["x"]);
    }

    #[test]
    fn variable_queries_name_their_selector() {
        let v = |q: &str| variable_query_names(q).into_iter().collect::<Vec<_>>();
        assert_eq!(
            v("label_values(meshhub_clusters, job)"),
            ["meshhub_clusters"]
        );
        assert_eq!(v(r#"label_values(c{job=~"$job"}, cluster)"#), ["c"]);
        assert!(v("label_values(job)").is_empty());
        assert_eq!(v("query_result(max(x))"), ["x"]);
    }

    #[test]
    fn histograms_and_summaries_expose_their_series() {
        let f = exposed_families(
            "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_sum 1\ns_count 1\nplain 3\n",
        );
        for n in [
            "h", "h_bucket", "h_sum", "h_count", "s", "s_sum", "s_count", "plain",
        ] {
            assert!(is_exposed(n, &f), "{n}: {f:?}");
        }
        for n in ["s_bucket", "plain_count", "other", "h_total"] {
            assert!(!is_exposed(n, &f), "{n}: {f:?}");
        }
    }
}
