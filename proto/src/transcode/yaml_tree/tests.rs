//! The fast path is held equal to serde-saphyr: whatever `read` returns,
//! serde-saphyr (with the options `parse.rs` uses) returns too.

use std::path::Path;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::read;
use crate::transcode::parse::split_documents;

/// serde-saphyr's reading of one document, as `parse.rs` asks for it.
fn reference(text: &str) -> Result<Value, String> {
    let options = serde_saphyr::options! { with_snippet: false };
    serde_saphyr::from_str_with_options::<Option<Value>>(text, options)
        .map(|v| v.unwrap_or(Value::Null))
        .map_err(|e| e.to_string())
}

/// Asserts that when the fast path reads `text`, serde-saphyr reads the
/// same value; returns whether the fast path read it.
fn same_as_reference(text: &str) -> bool {
    let Some(fast) = read(text) else {
        return false;
    };
    match reference(text) {
        Ok(expected) => assert_eq!(fast, expected, "different values for {text:?}"),
        Err(e) => panic!("the fast path read {text:?} as {fast}, serde-saphyr rejects it: {e}"),
    }
    true
}

fn yaml_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read fixtures dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

#[test]
fn every_fixture_document_reads_as_serde_saphyr_reads_it() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    yaml_files(&manifest.join("../../shared/fixtures/istio"), &mut files);
    yaml_files(&manifest.join("../examples"), &mut files);
    let (mut documents, mut fast) = (0, 0);
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read fixture");
        for doc in split_documents(&text) {
            documents += 1;
            if same_as_reference(&doc.text) {
                fast += 1;
            }
        }
    }
    assert!(documents >= 100, "only {documents} fixture documents found");
    // The fixtures are manifests: all of them take the fast path.
    assert!(
        fast == documents,
        "only {fast} of {documents} fixture documents took the fast path"
    );
}

#[test]
fn scalars_are_typed_as_serde_saphyr_types_them() {
    let scalars = [
        "",
        "~",
        "null",
        "Null",
        "NULL",
        "nULL",
        "true",
        "True",
        "TRUE",
        "tRuE",
        "false",
        "yes",
        "Yes",
        "YES",
        "y",
        "Y",
        "n",
        "N",
        "no",
        "No",
        "on",
        "On",
        "ON",
        "off",
        "Off",
        "0",
        "-0",
        "+0",
        "00",
        "007",
        "-007",
        "+7",
        "7",
        "-7",
        "1_000",
        "1__000",
        "_1",
        "1_",
        "0x1F",
        "0X1f",
        "0x",
        "0xg",
        "-0x10",
        "+0x10",
        "0o17",
        "0O17",
        "0o8",
        "0b101",
        "0B2",
        "0b_1",
        "0x_1",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "9223372036854775807",
        "0.5",
        "-0.5",
        "+0.5",
        ".5",
        "5.",
        "1e5",
        "1E5",
        "1e-5",
        "1.5e+3",
        "1e",
        "e1",
        "1.2.3",
        "10.0.0.1",
        "10.0.0.0/8",
        "1_000.5",
        "5s",
        "100ms",
        "1h30m",
        "50%",
        "0.1%",
        "v1",
        "v1alpha3",
        "1.28",
        "1.0",
        "2.0",
        "0755",
        "0x7fffffffffffffff",
        "-0b1",
        "inf",
        "-inf",
        "Infinity",
        "nan",
        "NaN",
        "+inf",
        "infinity",
        ".Nan",
        ".iNf",
        "- x",
        "a b",
        "a: b",
        "http://example.com:8080/path",
        "*.example.com",
        "example.com",
        "istio-system",
        "ISTIO_MUTUAL",
        "GET",
        "x-request-id",
        "=",
        "'a'",
        "\"a\"",
        "a#b",
        "+",
        "-",
        ".",
        "..",
        "0.",
        "-.",
        "+.",
        "1__0",
        "0b",
        "0o",
    ];
    let mut fast = 0;
    for scalar in scalars {
        for text in [
            format!("v: {scalar}\n"),
            format!("- {scalar}\n"),
            format!("{{v: {scalar}}}\n"),
            format!("{scalar}: v\n"),
        ] {
            if same_as_reference(&text) {
                fast += 1;
            }
        }
    }
    assert!(
        fast > 300,
        "only {fast} of the scalar texts took the fast path"
    );
}

#[test]
fn documents_of_every_shape_read_as_serde_saphyr_reads_them() {
    let texts = [
        "",
        "# only a comment\n",
        "---\n",
        "a: 1\n",
        "a:\n  b:\n    - 1\n    - x\n    - {c: d}\n  e: []\n  f: {}\n",
        "- a\n- - b\n  - c\n- d: e\n  f: g\n",
        "text: |\n  line one\n  line two\n\nfolded: >\n  a\n  b\n",
        "keep: |+\n  x\n\nstrip: |-\n  y\n",
        "quoted: 'it''s'\ndouble: \"tab\\there \\u00e9\"\n",
        "multi: a\n  b\n  c\n",
        "\"quoted key\": 1\n'single': 2\n",
        "empty:\nalso: ~\n",
        "a: [1, 2, [3, {b: c}]]\n",
        "{a: 1, b: [x, y]}\n",
        "[1, 2, 3]\n",
        "plain scalar document\n",
        "42\n",
        "a: 1 # trailing comment\n# between\nb: 2\n",
        "a:\n- 1\n- 2\n",
        "a: \"\"\nb: ''\n",
        "a: \"null\"\nb: 'true'\nc: \"1\"\n",
        "8080:\n  mode: STRICT\n",
        "a: 'one\n  two'\nb:\n  - \"x\n    y\"\n  - 'p\n\n    q\n  '\n",
        "a: \"crlf\r\n  line\"\r\nb: 1\r\n",
        "k: |\n  a\n  \n",
        "- [a, b]\n- {c: d, e: [f]}\n",
        "true: a\n1.5: b\n0x10: c\n'': d\n",
    ];
    for text in texts {
        assert!(same_as_reference(text), "the fast path refused {text:?}");
    }
    assert_eq!(
        read("a:\n  b: [1, x]\n"),
        Some(json!({"a": {"b": [1, "x"]}}))
    );
    assert_eq!(read("# nothing\n"), Some(Value::Null));
}

#[test]
fn what_the_fast_path_leaves_to_serde_saphyr() {
    let deep = format!("{}x\n{}", "[".repeat(60), "]".repeat(60));
    let texts = [
        "a: &x 1\nb: *x\n",
        "a: &x {c: 1}\nb:\n  <<: *x\n",
        "a: !!str 1\n",
        "a: !custom x\n",
        "!!map {a: 1}\n",
        "a: 1\na: 2\n",
        "<<: {a: 1}\n",
        "? [a, b]\n: c\n",
        "null: a\n",
        "~: a\n",
        // Plain integer keys are one key to serde-saphyr when their values
        // are equal (found by review).
        "0xB: 1\n11: 2\n",
        "1: a\n+1: b\n",
        "0: a\n-0: b\n",
        "1_000: a\n1000: b\n",
        "0o10: a\n8: b\n",
        "-1: a\n-0x1: b\n",
        "{0x1: a, 1: b}\n",
        "18446744073709551616: a\n0x10000000000000000: b\n",
        // serde_json's private token: with its `raw_value` feature (on in
        // the binaries) the value would be read as raw JSON.
        "$serde_json::private::RawValue: '{\"a\": 1}'\n",
        "b:\n  $serde_json::private::RawValue: '[1,2]'\n",
        "%YAML 1.2\n---\na: 1\n",
        "a: .inf\n",
        "a: -.Inf\n",
        "a: .nan\n",
        "a: 1e999\n",
        "a: [1, 2\n",
        "a: b: c\n",
        "a:\n\t- b\n",
        "a: 'unterminated\n",
        // Where saphyr-parser reads what granit-parser refuses or reads
        // otherwise (`yaml_tree::read`).
        "- 'b\n]>'\n",
        "a:\n  b: 'x\n  y'\n",
        "[>]\n",
        "{|-: 1}\n",
        "a: [1,\n  2]\n",
        "- {a\n  : b}\n",
        "k: |2\n  :\n  ",
        "aaa\n\u{feff}",
        "a: b\u{85}c\n",
        "%TAG ! tag:example.com,2000:\n---\na: 1\n",
        // Found by review: control characters (granit refuses what YAML
        // does not print), a directive after a lone CR.
        "a: b\u{1}c\n",
        "a: 'b\u{7f}c'\n",
        "a: |\n  b\u{1b}c\n",
        "a: b\u{80}c\n",
        "a: b\u{fffe}c\n",
        "a: b # c\u{1}\n",
        "#c\r%YAML 2.0\r---\ra: 1",
        deep.as_str(),
    ];
    // Over 512 KiB: serde-saphyr's budgets count comments, which the fast
    // path does not see (1,000,000 comment lines breach its event budget).
    let long = format!("a: 1\n{}", "# comment\n".repeat(60_000));
    assert_eq!(read(&long), None);
    assert!(same_as_reference(&format!(
        "a: 1\n{}",
        "# comment\n".repeat(50_000)
    )));
    // Integer keys with different values are different keys.
    assert_eq!(
        read("1: a\n2: b\n'1': c\n"),
        None,
        "'1' and 1 are one key in the JSON tree"
    );
    assert!(same_as_reference("1: a\n2: b\n0x3: c\n-4: d\n"));
    // A key inside a flow collection far from its value (granit-parser's
    // 1,024-character limit on an implicit key; found by review): left,
    // and a shorter one read.
    for long in [
        format!("{{{}: b}}\n", "a".repeat(1100)),
        format!("[{}: b]\n", "a".repeat(1100)),
        format!("a: {{\"{}\": b}}\n", "k".repeat(1100)),
        format!("{{a{}: b}}\n", " ".repeat(1100)),
    ] {
        assert_eq!(read(&long), None, "the fast path read a key of 1,100");
        assert!(
            reference(&long).is_err(),
            "serde-saphyr reads a key of 1,100"
        );
    }
    assert!(same_as_reference(&format!("{{{}: b}}\n", "a".repeat(900))));
    // Two documents in one text (`parse.rs` splits them before this).
    assert_eq!(read("a: 1\n---\nb: 2\n"), None);
    for text in texts {
        assert_eq!(read(text), None, "the fast path read {text:?}");
        // And the whole parse gives serde-saphyr's answer for it.
        let parsed = crate::transcode::parse_yaml(text);
        if let Err(reference) = reference(text) {
            let Some(Err(e)) = parsed.first() else {
                panic!(
                    "{text:?}: serde-saphyr rejects it ({reference}), the parse gave {parsed:?}"
                );
            };
            assert_eq!(
                e.message,
                reference.lines().next().unwrap_or_default(),
                "{text:?}"
            );
        }
    }
}

/// Scalars built from the pieces that decide typing.
fn scalar() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "0", "1", "7", "9", "_", "-", "+", ".", "e", "E", "x", "X", "o", "b", "B", "a", "f", "F",
        "inf", "Inf", "nan", "NaN", "y", "Y", "n", "N", "yes", "no", "on", "off", "true", "false",
        "null", "~", "s", "%", "/", "v", "0x", "0o", "0b",
    ]);
    prop::collection::vec(pieces, 1..6).prop_map(|p| p.concat())
}

/// Values whose YAML texts (block and flow) exercise nesting and quoting.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        scalar().prop_map(Value::String),
        "[ -~]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(scalar(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Texts of YAML's indicators, quotes, escapes, indentation and line
/// breaks in any order: mostly invalid or odd YAML, where two parsers
/// differ if they differ at all. (Before the fast path's guards, this found
/// within a few thousand cases the differences between `saphyr-parser` and
/// `granit-parser` that `yaml_tree` guards against, but for the control
/// characters and the lone-CR directive, found by review and then added
/// here, and the long flow key, which no piece here is long enough for.)
fn soup() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "a",
        "b",
        "1",
        "x y",
        "é",
        ":",
        ": ",
        "- ",
        "-",
        "? ",
        "[",
        "]",
        "{",
        "}",
        ",",
        ", ",
        "\"",
        "'",
        "''",
        "\\",
        "\\n",
        "\\/",
        "\\x41",
        "\\t",
        "| ",
        "|-",
        "|+",
        ">",
        ">-",
        ">+",
        "|2",
        "#",
        " #",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\n  ",
        "\n    ",
        "\n- ",
        "\n  - ",
        "\r\n",
        "\r",
        "---",
        "...",
        "\n---\n",
        "\n...\n",
        "&a ",
        "*a",
        "!",
        "!!str ",
        "%",
        "%YAML 1.2\n",
        "@",
        "`",
        "\t",
        "\u{feff}",
        "\u{85}",
        "\u{2028}",
        "\u{1}",
        "\u{1b}",
        "\u{7f}",
        "\u{80}",
        "\u{9f}",
        "\u{a0}",
        "\u{fffe}",
        "\r%YAML 1.2\r",
        "\r%TAG ! x\r",
        "<<",
        "~",
        "null",
        "0x1",
        "1e3",
    ]);
    prop::collection::vec(pieces, 1..64).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]
    #[test]
    fn random_texts_of_indicators_read_as_serde_saphyr_reads_them(text in soup()) {
        same_as_reference(&text);
    }
}

proptest! {
    #[test]
    fn generated_scalars_read_as_serde_saphyr_reads_them(s in scalar(), t in scalar()) {
        same_as_reference(&format!("v: {s}\n"));
        same_as_reference(&format!("- {s}\n"));
        same_as_reference(&format!("[{s}, {t}]\n"));
        same_as_reference(&format!("{s}: v\n"));
        // Two plain keys: serde-saphyr compares integer keys by value.
        same_as_reference(&format!("{s}: 1\n{t}: 2\n"));
        same_as_reference(&format!("{{{s}: 1, {t}: 2}}\n"));
    }

    #[test]
    fn generated_documents_read_as_serde_saphyr_reads_them(v in value()) {
        let yaml = serde_saphyr::to_string(&v).expect("render YAML");
        same_as_reference(&yaml);
        let json = serde_json::to_string(&v).expect("render JSON");
        same_as_reference(&json);
        let pretty = serde_json::to_string_pretty(&v).expect("render JSON");
        same_as_reference(&pretty);
    }
}

#[test]
fn long_comment_blocks_are_read_where_serde_saphyr_gives_up() {
    // The one intended difference (see `parser_options`): serde-saphyr's
    // parser buffers comments while looking ahead and refuses more than 32.
    let text = format!("a:\n{}  b: 2\n", "  # c\n".repeat(100));
    assert!(reference(&text).is_err_and(|e| e.contains("too many buffered comments")));
    assert_eq!(read(&text), Some(json!({"a": {"b": 2}})));
    let elsewhere = format!(
        "a: 1\n{}b:\n- 1\n{}- 2\n",
        "# c\n".repeat(100),
        "# c\n".repeat(100)
    );
    assert!(same_as_reference(&elsewhere));
}
