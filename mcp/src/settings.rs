//! What every configuration block shares, in the hub and the sink agent:
//! the error that names a setting, and humane durations.
//!
//! Each feature owns its block (a `Raw…` serde form and a `check` into its
//! typed spec, next to the code that uses it); a check names the field it
//! refuses relative to its block, and the file's aggregator adds where the
//! block is ([`SettingError::within`]) and which file it is in.

use std::time::Duration;

use serde::Deserialize as _;

/// A setting whose value parses but makes no sense.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SettingError {
    /// The setting, relative to the block checked (`reconnect.max`,
    /// `namespaces[2]`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl SettingError {
    /// `field` refused because of `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error seen from the enclosing block: `within("agent")`
    /// turns `address` into `agent.address`.
    #[must_use]
    pub fn within(self, block: &str) -> Self {
        Self {
            field: format!("{block}.{}", self.field),
            message: self.message,
        }
    }
}

/// A humane duration (`100ms`, `1s`, `2m 30s`) for `#[serde(default,
/// deserialize_with = "duration")]` fields of type `Option<Duration>`:
/// parsed during deserialization so that a bad value is reported with its
/// line.
pub fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(s.trim())
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_their_block_from_the_outside_in() {
        let e = SettingError::new("max", "too short")
            .within("reconnect")
            .within("agent");
        assert_eq!(e.to_string(), "agent.reconnect.max: too short");
    }

    #[derive(Debug, serde::Deserialize)]
    struct Block {
        #[serde(default, deserialize_with = "duration")]
        wait: Option<Duration>,
    }

    #[test]
    fn durations_are_humane_and_bad_ones_say_why() {
        let b: Block = serde_json::from_str(r#"{"wait": " 2m 30s "}"#).unwrap();
        assert_eq!(b.wait, Some(Duration::from_secs(150)));
        let b: Block = serde_json::from_str("{}").unwrap();
        assert_eq!(b.wait, None);
        let e = serde_json::from_str::<Block>(r#"{"wait": "soon"}"#).unwrap_err();
        assert!(e.to_string().contains("invalid duration \"soon\""), "{e}");
    }
}
