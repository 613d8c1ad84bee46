//! Collecting messages while analyzers run.

use std::collections::BTreeSet;
use std::sync::Arc;

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
        // Shared from here on, and of its length: a formatted message
        // grows by doubling (at 100,000 generated objects, ~20 MiB of
        // spare capacity).
        let text = Arc::from(text);
        self.messages.push(Message {
            code,
            kind: f.kind.as_str().to_owned(),
            namespace: f.namespace.clone(),
            name: f.name.clone(),
            path: path.to_owned(),
            text,
        });
    }

    /// A finding about an object analysis holds no facts of (a cluster's
    /// CustomResourceDefinition: `namespace` empty).
    pub fn push_about(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
        code: Code,
        text: String,
    ) {
        // Shared from here on, and of its length: a formatted message
        // grows by doubling (at 100,000 generated objects, ~20 MiB of
        // spare capacity).
        let text = Arc::from(text);
        self.messages.push(Message {
            code,
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            path: String::new(),
            text,
        });
    }

    /// A report of messages already found.
    pub fn from_messages(messages: impl IntoIterator<Item = Message>) -> Self {
        Self {
            messages: messages.into_iter().collect(),
        }
    }

    /// The messages by object (namespace, kind, name), then path and code;
    /// without repeats.
    pub fn into_messages(mut self) -> Vec<Message> {
        self.messages.sort_by(order);
        self.messages.dedup();
        self.messages
    }
}

/// The order of messages: by object (namespace, kind, name), then path,
/// code and text.
pub fn order(a: &Message, b: &Message) -> std::cmp::Ordering {
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
}

/// At most this many other objects are named in one message; the rest are
/// counted. Istio's analyzers name them all, so a host claimed by k
/// objects gives k messages of k names each: at 100,000 generated objects
/// that was gigabytes of text per analysis.
pub const NAMES_SHOWN: usize = 10;

/// `names` (sorted, without repeats) joined by `sep`, the first
/// [`NAMES_SHOWN`] of them: then " and N more" where `total` (how many
/// `names` yields) is known, " and more" where it is not.
pub fn name_list<S: AsRef<str>>(
    names: impl IntoIterator<Item = S>,
    total: Option<usize>,
    sep: &str,
) -> String {
    let mut out = String::new();
    let mut shown = 0;
    let mut more = false;
    for n in names {
        if shown == NAMES_SHOWN {
            more = true;
            break;
        }
        if shown > 0 {
            out.push_str(sep);
        }
        out.push_str(n.as_ref());
        shown += 1;
    }
    match total {
        Some(t) if t > shown => out.push_str(&format!(" and {} more", t - shown)),
        None if more => out.push_str(" and more"),
        _ => {}
    }
    out
}

/// The objects named in several sorted `lists` (an object may be in more
/// than one), less `me`: the first [`NAMES_SHOWN`] + 1 in order, and how
/// many there are in all where that is known without walking every list
/// (one list, or all of them short). Walking them all would make an
/// analyzer that calls this once per object quadratic.
pub fn first_names<'a>(lists: &[&'a BTreeSet<&'a str>], me: &str) -> (Vec<&'a str>, Option<usize>) {
    let mut first = BTreeSet::new();
    for list in lists {
        first.extend(
            list.iter()
                .copied()
                .filter(|n| *n != me)
                .take(NAMES_SHOWN + 1),
        );
    }
    let first: Vec<&str> = first.into_iter().take(NAMES_SHOWN + 1).collect();
    let total = match lists {
        [one] => Some(one.len() - usize::from(one.contains(me))),
        _ if first.len() <= NAMES_SHOWN => Some(first.len()),
        _ => None,
    };
    (first, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_lists_name_the_first_ten_and_count_the_rest() {
        assert_eq!(name_list(["a", "b"], Some(2), ","), "a,b");
        let many: Vec<String> = (0..25).map(|i| format!("n{i:02}")).collect();
        let shown = "n00,n01,n02,n03,n04,n05,n06,n07,n08,n09";
        assert_eq!(
            name_list(&many, Some(25), ","),
            format!("{shown} and 15 more")
        );
        assert_eq!(name_list(&many, None, ","), format!("{shown} and more"));
        assert_eq!(name_list(&many[..10], None, ","), shown);
    }

    #[test]
    fn first_names_merge_lists_without_walking_them() {
        let a: BTreeSet<&str> = ["a", "c", "me"].into();
        let b: BTreeSet<&str> = ["b", "c"].into();
        assert_eq!(first_names(&[&a], "me"), (vec!["a", "c"], Some(2)));
        assert_eq!(first_names(&[&a, &b], "me"), (vec!["a", "b", "c"], Some(3)));
        let names: Vec<String> = (0..30).map(|i| format!("n{i:02}")).collect();
        let long: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let (first, total) = first_names(&[&long, &b], "me");
        assert_eq!(first.len(), NAMES_SHOWN + 1);
        assert_eq!(total, None);
        assert_eq!(first_names(&[&long], "n00").1, Some(29));
    }

    fn message(name: &str, text: &str) -> Message {
        Message {
            code: crate::message::REFERENCED_RESOURCE_NOT_FOUND,
            kind: "VirtualService".into(),
            namespace: "ns".into(),
            name: name.into(),
            path: String::new(),
            text: text.into(),
        }
    }

    #[test]
    fn a_merge_shares_the_set_messages_in_order_without_repeats() {
        let set: Vec<std::sync::Arc<Message>> =
            vec![message("a", "x").into(), message("c", "x").into()];
        let skew = vec![message("b", "y"), message("a", "x")];
        let merged = crate::merge(&set, skew);
        let names: Vec<&str> = merged.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(
            std::sync::Arc::ptr_eq(&merged[0], &set[0]),
            "a copy of the set's message"
        );
        assert!(
            std::sync::Arc::ptr_eq(&merged[2], &set[1]),
            "a copy of the set's message"
        );
    }

    #[test]
    fn a_message_text_is_held_at_its_length() {
        let mut text = String::with_capacity(1024);
        text.push_str("short");
        let mut report = Report::default();
        report.push_about(
            "CustomResourceDefinition",
            "",
            "x",
            crate::message::REFERENCED_RESOURCE_NOT_FOUND,
            text,
        );
        let m = report.into_messages();
        assert_eq!(std::mem::size_of_val(&*m[0].text), "short".len());
    }
}
