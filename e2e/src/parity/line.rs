//! What one Istio line (a release's CRDs and its istiod) knows of the API
//! meshhub speaks, by meshhub's own since-table (`analyze/src/since.tsv`):
//! meshhub has one verdict, written for the newest API, so a case using a
//! field, enum value or kind newer than a line's CRDs (its API server
//! refuses the unknown field, its istiod never sees it), or a value of a
//! value row newer than them (the line's API server or istiod refuses it),
//! is no question for that line and is kept out of that line's agreement.

use std::collections::BTreeMap;

use meshhub_analyze::since::{self, Need};
use serde_json::Value;

use super::corpus::Case;

/// The newest Istio minor (of 1.x) whose additions a line's CRDs hold,
/// per kind.
#[derive(Clone, Debug, Default)]
pub struct LineKnows {
    minors: BTreeMap<String, u32>,
}

impl LineKnows {
    /// Reads a `crd-all.gen.yaml`: per kind, [`since::crd_knows`] of its
    /// served schemas.
    pub fn read(crds: &str) -> Self {
        let mut minors = BTreeMap::new();
        for doc in meshhub_proto::transcode::parse_yaml(crds) {
            let Ok(obj) = doc else { continue };
            let Ok(crd) = serde_json::to_value(&obj) else {
                continue;
            };
            if let Some((kind, paths)) = since::crd_paths(&crd) {
                let knows = since::crd_knows(&kind, &paths);
                minors.insert(kind, knows);
            }
        }
        Self { minors }
    }

    /// The line capped at its Istio release (`minor` of 1.x): its CRDs'
    /// fields can tell a minor above it (1.28.3's DestinationRule CRD lacks
    /// nothing of 1.29 and 1.30, which added no DestinationRule field), and
    /// a value row of such a minor (a value istiod's validation first
    /// accepts there) is still beyond the line.
    pub fn at_most(mut self, minor: u32) -> Self {
        for m in self.minors.values_mut() {
            *m = (*m).min(minor);
        }
        self
    }

    /// The minor the line knows of `kind` (`None`: a kind it lacks).
    pub fn minor(&self, kind: &str) -> Option<u32> {
        self.minors.get(kind).copied()
    }

    /// The kinds, each with the minor the line knows of it.
    pub fn kinds(&self) -> impl Iterator<Item = (&str, u32)> {
        self.minors.iter().map(|(k, m)| (k.as_str(), *m))
    }

    /// What `case` uses that the line does not know (empty: the line can
    /// judge it).
    pub fn beyond(&self, case: &Case) -> Vec<Need> {
        let spec = case.object.get("spec").unwrap_or(&Value::Null);
        let Some(knows) = self.minor(case.kind()) else {
            return since::needs(case.kind(), spec);
        };
        since::needs(case.kind(), spec)
            .into_iter()
            .filter(|n| n.since > knows)
            .collect()
    }

    /// Splits `cases` into those the line can judge and those using what
    /// it does not know.
    pub fn partition(&self, cases: Vec<Case>) -> (Vec<Case>, Vec<Case>) {
        cases.into_iter().partition(|c| self.beyond(c).is_empty())
    }
}

/// `spec.a.b (1.31)` for each need, comma-separated.
pub fn show_needs(needs: &[Need]) -> String {
    needs
        .iter()
        .map(|n| {
            let what = match &n.value {
                Some(v) => format!("{}={v}", n.path),
                None if n.path.is_empty() => "the kind".to_owned(),
                None => n.path.clone(),
            };
            format!("{what} (1.{})", n.since)
        })
        .collect::<Vec<_>>()
        .join(", ")
}
