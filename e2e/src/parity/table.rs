//! The verdicts of every case and the agreement table over them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::corpus::Case;
use super::judge::Outcome;

/// Every judge's verdict on one case.
#[derive(Clone, Debug)]
pub struct Row {
    /// The case.
    pub case: Case,
    /// The kube-apiserver's dry run.
    pub api: Outcome,
    /// istiod's webhook.
    pub istiod: Outcome,
    /// meshhub's admission webhook.
    pub webhook: Outcome,
    /// meshhub's file source.
    pub file: Outcome,
}

/// Which way meshhub differs from Istio.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// meshhub refuses what Istio accepts.
    FalseReject,
    /// meshhub accepts what Istio refuses.
    FalseAccept,
}

impl Row {
    /// Istio's verdict: accepted by the API server and by istiod.
    pub fn istio_accepts(&self) -> bool {
        self.api.accepted() && self.istiod.accepted()
    }

    /// Istio's reason to refuse (the API server's first).
    pub fn istio_message(&self) -> &str {
        if !self.api.accepted() {
            self.api.message()
        } else {
            self.istiod.message()
        }
    }

    /// How meshhub (its webhook) differs from Istio, if it does.
    pub fn disagreement(&self) -> Option<Direction> {
        match (self.webhook.accepted(), self.istio_accepts()) {
            (false, true) => Some(Direction::FalseReject),
            (true, false) => Some(Direction::FalseAccept),
            _ => None,
        }
    }

    /// Whether meshhub's webhook and file source disagree with each other.
    pub fn meshhub_split(&self) -> bool {
        self.webhook.accepted() != self.file.accepted()
    }
}

/// A difference kept on purpose: which rows it covers and why.
#[derive(Clone, Copy)]
pub struct Disagreement {
    /// Short name.
    pub name: &'static str,
    /// Direction it covers.
    pub direction: Direction,
    /// Whether it covers `row`.
    pub covers: fn(&Row) -> bool,
    /// Why meshhub differs (also in docs/validation.md).
    pub reason: &'static str,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    cases: usize,
    agree: usize,
    false_reject: usize,
    false_accept: usize,
    accepted_diff: usize,
}

/// The agreement table of a run.
pub struct Table<'a> {
    rows: &'a [Row],
    accepted: &'a [Disagreement],
}

impl<'a> Table<'a> {
    /// The table of `rows`, with the differences kept on purpose.
    pub fn new(rows: &'a [Row], accepted: &'a [Disagreement]) -> Self {
        Self { rows, accepted }
    }

    /// The accepted difference covering `row`, if any.
    pub fn accepted_for(&self, row: &Row) -> Option<&'a Disagreement> {
        let d = row.disagreement()?;
        self.accepted
            .iter()
            .find(|a| a.direction == d && (a.covers)(row))
    }

    /// Rows where meshhub differs from Istio and no accepted difference
    /// covers it.
    pub fn unexplained(&self) -> Vec<&'a Row> {
        self.rows
            .iter()
            .filter(|r| r.disagreement().is_some() && self.accepted_for(r).is_none())
            .collect()
    }

    /// Rows where meshhub's webhook and file source disagree.
    pub fn splits(&self) -> Vec<&'a Row> {
        self.rows.iter().filter(|r| r.meshhub_split()).collect()
    }

    /// (cases, agreements) over every row.
    pub fn totals(&self) -> (usize, usize) {
        let agree = self
            .rows
            .iter()
            .filter(|r| r.disagreement().is_none())
            .count();
        (self.rows.len(), agree)
    }

    /// The table, per family and per kind, then the totals, as Markdown.
    pub fn render(&self) -> String {
        let mut by_family: BTreeMap<String, Counts> = BTreeMap::new();
        let mut by_kind: BTreeMap<String, Counts> = BTreeMap::new();
        let mut all = Counts::default();
        for r in self.rows {
            for c in [
                by_family.entry(r.case.family.clone()).or_default(),
                by_kind.entry(r.case.kind().to_owned()).or_default(),
                &mut all,
            ] {
                c.cases += 1;
                match r.disagreement() {
                    None => c.agree += 1,
                    Some(_) if self.accepted_for(r).is_some() => c.accepted_diff += 1,
                    Some(Direction::FalseReject) => c.false_reject += 1,
                    Some(Direction::FalseAccept) => c.false_accept += 1,
                }
            }
        }
        let mut out = String::new();
        let header = "| {} | cases | agree | false rejects | false accepts | accepted differences | agreement |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        for (title, map) in [("family", &by_family), ("kind", &by_kind)] {
            out.push_str(&header.replace("{}", title));
            for (k, c) in map {
                line(&mut out, k, c);
            }
            line(&mut out, "**total**", &all);
            out.push('\n');
        }
        out
    }

    /// One paragraph per disagreement (accepted ones marked).
    pub fn render_disagreements(&self) -> String {
        let mut out = String::new();
        for r in self.rows.iter().filter(|r| r.disagreement().is_some()) {
            let d = r.disagreement().expect("filtered");
            let accepted = self
                .accepted_for(r)
                .map_or(String::new(), |a| format!(" [accepted: {}]", a.name));
            let mut object = r.case.object["spec"].to_string();
            if object.len() > 400 {
                object = format!("{}…", truncate(&object, 400));
            }
            let _ = writeln!(
                out,
                "- {d:?}{accepted} {} {}/{} ({}: {})\n  istio: {}\n  meshhub: {}\n  spec: {object}",
                r.case.kind(),
                r.case.namespace(),
                truncate(r.case.name(), 70),
                r.case.family,
                r.case.label,
                or_accepted(r.istio_message()),
                or_accepted(r.webhook.message()),
            );
        }
        out
    }
}

fn or_accepted(m: &str) -> String {
    if m.is_empty() {
        "accepted".into()
    } else {
        truncate(m, 500).to_owned()
    }
}

/// At most `n` bytes of `s`, cut at a character boundary.
pub(crate) fn truncate(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn line(out: &mut String, name: &str, c: &Counts) {
    let pct = if c.cases == 0 {
        100.0
    } else {
        100.0 * (c.agree + c.accepted_diff) as f64 / c.cases as f64
    };
    let _ = writeln!(
        out,
        "| {name} | {} | {} | {} | {} | {} | {pct:.2} % |",
        c.cases, c.agree, c.false_reject, c.false_accept, c.accepted_diff
    );
}
