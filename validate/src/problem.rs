//! What the rules report: one [`Problem`] per broken rule, gathered into a
//! [`ValidationError`] for the object.

use std::fmt;

use crate::verdict::Finding;

/// One problem found in an object: where, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Field path from the object's top level, e.g. `spec.http[0].route`.
    pub path: String,
    /// What is wrong, e.g. `must not be empty`.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// An object that breaks one or more semantic rules.
///
/// Displays as `VirtualService default/reviews: spec.hosts: must not be
/// empty`, with further problems appended after `; `.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// The object's kind.
    pub kind: String,
    /// The object's namespace (`default` when the object has none).
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// Every problem found; never empty.
    pub problems: Vec<Problem>,
}

impl ValidationError {
    /// `Kind namespace/name`: the object the problems are about.
    pub fn object(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }

    /// One line per problem, each prefixed with kind and `namespace/name`.
    pub fn messages(&self) -> Vec<String> {
        self.findings().iter().map(ToString::to_string).collect()
    }

    /// One finding per problem, naming the object and the field.
    pub fn findings(&self) -> Vec<Finding> {
        let object = self.object();
        self.problems
            .iter()
            .map(|p| Finding::at(object.clone(), p.path.clone(), p.message.clone()))
            .collect()
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.object())?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}
