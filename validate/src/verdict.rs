//! The answer to "may this object be served?": the errors that refuse it and
//! the warnings that accompany it, each naming the object and, where one is
//! known, the field.

use std::fmt;

use meshhub_proto::transcode::TranscodeError;

/// One thing a check found about an object.
///
/// Displays as `VirtualService default/reviews: spec.hosts: must not be
/// empty`; the object and the path are left out when empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The object, as `Kind namespace/name`; empty when the message names it
    /// itself (or it could not be named).
    pub object: String,
    /// Field path from the object's top level (`spec.http[0].route`); empty
    /// when the finding is about the object as a whole.
    pub path: String,
    /// What was found, e.g. `must not be empty` or `unknown field pruned`.
    pub message: String,
}

impl Finding {
    /// A finding about the field at `path` of `object`.
    pub fn at(
        object: impl Into<String>,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            object: object.into(),
            path: path.into(),
            message: message.into(),
        }
    }

    /// A finding whose message says everything (object included).
    pub fn whole(message: impl Into<String>) -> Self {
        Self::at("", "", message)
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in [&self.object, &self.path] {
            if !part.is_empty() {
                write!(f, "{part}: ")?;
            }
        }
        f.write_str(&self.message)
    }
}

impl From<&TranscodeError> for Finding {
    /// Field errors keep their path; every other transcoding error is one
    /// message (it names the object itself).
    fn from(e: &TranscodeError) -> Self {
        match e {
            TranscodeError::Field {
                kind,
                name,
                path,
                reason,
            } => Self::at(format!("{kind} {name}"), path.clone(), reason.clone()),
            TranscodeError::UnknownField { kind, name, path } => {
                Self::at(format!("{kind} {name}"), path.clone(), "unknown field")
            }
            other => Self::whole(other.to_string()),
        }
    }
}

/// What checking one object says: accepted when there are no errors, with
/// its warnings (fields pruned, ...); refused otherwise, with every error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Why the object is refused; empty when it is accepted.
    pub errors: Vec<Finding>,
    /// What was changed or is worth knowing about an accepted object.
    pub warnings: Vec<Finding>,
}

impl Verdict {
    /// Whether the object passes (no errors).
    pub fn is_accepted(&self) -> bool {
        self.errors.is_empty()
    }

    /// One line per error.
    pub fn error_messages(&self) -> Vec<String> {
        self.errors.iter().map(ToString::to_string).collect()
    }

    /// One line per warning.
    pub fn warning_messages(&self) -> Vec<String> {
        self.warnings.iter().map(ToString::to_string).collect()
    }
}

#[cfg(test)]
mod tests;
