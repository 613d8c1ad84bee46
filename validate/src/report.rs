//! The problem collector every rule writes to, and the builders of the
//! field paths it records.

use std::fmt::Write as _;

use crate::problem::Problem;

/// Collects the problems of one object.
#[derive(Debug, Default)]
pub(crate) struct Report {
    problems: Vec<Problem>,
}

impl Report {
    /// Records a problem at `path`.
    pub(crate) fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Records `result`'s error, if any, at `path`.
    pub(crate) fn check(&mut self, path: impl Into<String>, result: Result<(), String>) {
        if let Err(message) = result {
            self.err(path, message);
        }
    }

    /// Whether no problem was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problems found so far.
    pub(crate) fn into_problems(self) -> Vec<Problem> {
        self.problems
    }
}

/// `base.field`.
pub(crate) fn at(base: &str, field: &str) -> String {
    if base.is_empty() {
        return field.to_owned();
    }
    // Built by hand: every field of every object gets a path, and the
    // formatting machinery costs several times these three copies.
    let mut path = String::with_capacity(base.len() + 1 + field.len());
    path.push_str(base);
    path.push('.');
    path.push_str(field);
    path
}

/// `base[i]`.
pub(crate) fn idx(base: &str, i: usize) -> String {
    let mut path = String::with_capacity(base.len() + 8);
    path.push_str(base);
    path.push('[');
    // Writing to a `String` cannot fail.
    let _ = write!(path, "{i}");
    path.push(']');
    path
}

/// `base["key"]`, for map entries.
pub(crate) fn key(base: &str, k: &str) -> String {
    format!("{base}[{k:?}]")
}
