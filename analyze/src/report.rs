//! Collecting messages while analyzers run.

use crate::facts::Facts;
use crate::message::{Code, Message};

/// The messages found so far.
#[derive(Debug, Default)]
pub struct Report {
    messages: Vec<Message>,
}

impl Report {
    /// A finding about `f`.
    pub fn push(&mut self, f: &Facts, code: Code, path: &str, text: String) {
        self.messages.push(Message {
            code,
            kind: f.kind.as_str().to_owned(),
            namespace: f.namespace.clone(),
            name: f.name.clone(),
            path: path.to_owned(),
            text,
        });
    }

    /// The messages by object (namespace, kind, name), then path and code;
    /// without repeats.
    pub fn into_messages(mut self) -> Vec<Message> {
        self.messages.sort_by(|a, b| {
            (
                &a.namespace,
                &a.kind,
                &a.name,
                &a.path,
                a.code.code,
                &a.text,
            )
                .cmp(&(
                    &b.namespace,
                    &b.kind,
                    &b.name,
                    &b.path,
                    b.code.code,
                    &b.text,
                ))
        });
        self.messages.dedup();
        self.messages
    }
}
