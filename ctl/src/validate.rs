//! `meshhubctl validate -f PATH…`: the hub's checks on files, offline —
//! kind lookup, the schema (transcoding, unknown fields refused as the
//! hub's default `unknownFields: reject` does) and Istio's semantic rules
//! (meshhub-validate), each object named by file and document. With
//! `--crds`, custom resources of the kinds those CRDs define (the Gateway
//! API's) are also checked against the CRDs' schemas and CEL rules, as the
//! hub's `validation.crds` and a kube-apiserver check them.
//! Exit 0 when every object passes, 1 when one does not, 2 on trouble.

use std::path::{Path, PathBuf};

use meshhub_proto::kinds::KindTable;
use meshhub_proto::object::Object;
use meshhub_proto::transcode;
use meshhub_validate::{CrdSchemas, Finding, Validator};
use serde::Serialize;

use crate::files::{self, Document};
use crate::output::{Format, render, structured};

/// Flags of `meshhubctl validate`.
#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Files or directories to check (YAML or JSON; `-` reads standard
    /// input). Repeatable.
    #[arg(long = "filename", short = 'f', required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Pass objects of kinds the hub does not serve (Deployments, ...)
    /// instead of refusing them as the hub does.
    #[arg(long)]
    pub ignore_unknown_kinds: bool,
    /// CRD files or directories (the Gateway API's `standard-install.yaml`,
    /// say): objects of their kinds are checked against their schemas and
    /// CEL rules, as the hub's `validation.crds` does. Repeatable.
    #[arg(long = "crds", num_args = 1..)]
    pub crds: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Format,
}

/// The result for one document.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Checked {
    /// The file (`-`: standard input).
    pub file: String,
    /// The document's number in it, from 1 (`2`, `2.items[0]` in a
    /// `List`; `0`: the file as a whole).
    pub document: String,
    /// Its kind, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `namespace/name`, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Why the hub would refuse it; empty when it passes.
    pub errors: Vec<String>,
    /// The object, when it passes (for `analyze`).
    #[serde(skip)]
    pub object: Option<Object>,
}

impl Checked {
    /// `file#document`, as messages name the document.
    pub fn at(&self) -> String {
        format!("{}#{}", self.file, self.document)
    }

    /// `Kind namespace/name`, or what is known of it.
    pub fn label(&self) -> String {
        match (&self.kind, &self.name) {
            (Some(k), Some(n)) => format!("{k} {n}"),
            (Some(k), None) => k.clone(),
            _ => "-".to_owned(),
        }
    }
}

/// A finding without the object (the table has a column for it).
fn text(f: &Finding) -> String {
    if f.path.is_empty() {
        f.message.clone()
    } else {
        format!("{}: {}", f.path, f.message)
    }
}

/// Checks one document as the hub checks what a source delivers.
pub fn check(
    kinds: &KindTable,
    validator: &Validator,
    doc: Document,
    ignore_unknown: bool,
) -> Checked {
    let mut out = Checked {
        file: doc.file,
        document: doc.index,
        kind: None,
        name: None,
        errors: Vec::new(),
        object: None,
    };
    let obj = match doc.parsed {
        Ok(o) => o,
        Err(e) => {
            out.errors.push(e);
            return out;
        }
    };
    out.kind = Some(obj.kind.clone());
    out.name = Some(match obj.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", obj.metadata.name),
        _ => obj.metadata.name.clone(),
    });
    let kind = match transcode::kind_of(kinds, &obj) {
        Ok(k) => k,
        Err(_) if ignore_unknown => return out,
        Err(e) => {
            out.errors.push(text(&Finding::from(&e)));
            return out;
        }
    };
    match transcode::resource_name(kind, &obj) {
        Ok(name) => out.name = Some(name),
        Err(e) => out.errors.push(Finding::from(&e).to_string()),
    }
    if let Err(e) = transcode::object_to_resource(kind, &obj) {
        out.errors.push(text(&Finding::from(&e)));
    }
    if let Err(e) = validator.validate(&obj) {
        out.errors.extend(e.findings().iter().map(text));
    }
    if out.errors.is_empty() {
        out.object = Some(obj);
    }
    out
}

/// Every document of `paths` (but those of `skip`), checked.
pub fn check_files(
    paths: &[PathBuf],
    skip: Option<&Path>,
    validator: &Validator,
    ignore_unknown: bool,
) -> Result<Vec<Checked>, String> {
    let kinds = KindTable::builtin();
    Ok(files::read(paths, skip)?
        .into_iter()
        .map(|d| check(&kinds, validator, d, ignore_unknown))
        .collect())
}

/// The checks, with the CRDs of `crds` (none: Istio's rules only).
pub fn validator(crds: &[PathBuf]) -> Result<Validator, String> {
    if crds.is_empty() {
        return Ok(Validator::default());
    }
    let schemas = CrdSchemas::load(crds).map_err(|e| format!("--crds: {e}"))?;
    for n in schemas.not_evaluated() {
        eprintln!(
            "warning: {} rule {:?} at {} is not evaluated: {}",
            n.label(),
            n.rule,
            n.schema_path,
            n.reason
        );
    }
    Ok(Validator::new(schemas))
}

/// What `-o json|yaml` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    objects: &'a [Checked],
    valid: usize,
    invalid: usize,
}

/// Runs the command: whether every object passed.
pub fn run(args: ValidateArgs) -> Result<bool, String> {
    let validator = validator(&args.crds)?;
    let checked = check_files(&args.files, None, &validator, args.ignore_unknown_kinds)?;
    let invalid = checked.iter().filter(|c| !c.errors.is_empty()).count();
    let report = Report {
        objects: &checked,
        valid: checked.len() - invalid,
        invalid,
    };
    let text = match structured(&report, args.output) {
        Some(text) => text?,
        None => table(&report),
    };
    print!("{text}");
    Ok(invalid == 0)
}

fn table(r: &Report<'_>) -> String {
    let mut rows = vec![vec![
        "FILE".to_owned(),
        "DOC".to_owned(),
        "OBJECT".to_owned(),
        "RESULT".to_owned(),
        "MESSAGE".to_owned(),
    ]];
    for c in r.objects {
        let result = if c.errors.is_empty() {
            "valid"
        } else {
            "invalid"
        };
        let first = c.errors.first().cloned().unwrap_or_else(|| "-".to_owned());
        rows.push(vec![
            c.file.clone(),
            c.document.clone(),
            c.label(),
            result.to_owned(),
            first,
        ]);
        for e in c.errors.iter().skip(1) {
            rows.push(vec![
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                e.clone(),
            ]);
        }
    }
    let mut out = render(&rows);
    out.push_str(&format!(
        "\n{} object(s): {} valid, {} invalid\n",
        r.objects.len(),
        r.valid,
        r.invalid
    ));
    out
}
