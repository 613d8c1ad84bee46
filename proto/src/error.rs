//! Errors on one line.

/// `e` and its causes on one line, `outer: inner: innermost`; a cause
/// whose text is already in the line (errors that repeat their source's
/// message) is not repeated.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn chains_every_cause() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(super::error_chain(&e), "outer: inner");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("outer: inner")]
    struct Repeating(#[source] std::io::Error);

    #[test]
    fn a_cause_already_said_is_not_repeated() {
        let e = Repeating(std::io::Error::other("inner"));
        assert_eq!(super::error_chain(&e), "outer: inner");
    }
}
