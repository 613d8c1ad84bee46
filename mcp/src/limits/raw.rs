//! The `limits:` block of a configuration file (hub and sink agent), as
//! written, and its checks.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::Deserialize;

use super::Limits;
use crate::settings::duration;

/// `limits:` as written: every key optional, defaults from
/// [`Limits::default`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLimits {
    /// `newStreamsPerSecond`.
    pub new_streams_per_second: Option<u32>,
    /// `newStreamsBurst`.
    pub new_streams_burst: Option<u32>,
    /// `connectionStreamsPerSecond`.
    pub connection_streams_per_second: Option<u32>,
    /// `connectionStreamsBurst`.
    pub connection_streams_burst: Option<u32>,
    /// `maxStreams`.
    pub max_streams: Option<usize>,
    /// `maxStreamsPerConnection`.
    pub max_streams_per_connection: Option<u32>,
    /// `maxMessageSize` (bytes).
    pub max_message_size: Option<usize>,
    /// `keepaliveInterval` (`30s`).
    #[serde(default, deserialize_with = "duration")]
    pub keepalive_interval: Option<Duration>,
    /// `keepaliveTimeout`.
    #[serde(default, deserialize_with = "duration")]
    pub keepalive_timeout: Option<Duration>,
    /// `sendTimeout` (`0s`: none).
    #[serde(default, deserialize_with = "duration")]
    pub send_timeout: Option<Duration>,
    /// `streamRequestsPerSecond`.
    pub stream_requests_per_second: Option<u32>,
    /// `streamRequestsBurst`.
    pub stream_requests_burst: Option<u32>,
}

/// A `limits` key with a value out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct LimitsError {
    /// The key (`maxStreams`), without the `limits.` prefix.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

fn error(field: &'static str, message: impl Into<String>) -> LimitsError {
    LimitsError {
        field,
        message: message.into(),
    }
}

impl RawLimits {
    /// The checked limits: unset keys take [`Limits::default`].
    pub fn check(&self) -> Result<Limits, LimitsError> {
        let d = Limits::default();
        let positive = |field: &'static str, v: Option<u32>, default: NonZeroU32| match v {
            None => Ok(default),
            Some(n) => NonZeroU32::new(n).ok_or_else(|| error(field, "must be positive")),
        };
        let limits = Limits {
            new_streams_per_second: positive(
                "newStreamsPerSecond",
                self.new_streams_per_second,
                d.new_streams_per_second,
            )?,
            new_streams_burst: positive(
                "newStreamsBurst",
                self.new_streams_burst,
                d.new_streams_burst,
            )?,
            connection_streams_per_second: positive(
                "connectionStreamsPerSecond",
                self.connection_streams_per_second,
                d.connection_streams_per_second,
            )?,
            connection_streams_burst: positive(
                "connectionStreamsBurst",
                self.connection_streams_burst,
                d.connection_streams_burst,
            )?,
            max_streams: self.max_streams.unwrap_or(d.max_streams),
            max_streams_per_connection: self
                .max_streams_per_connection
                .unwrap_or(d.max_streams_per_connection),
            max_message_bytes: self.max_message_size.unwrap_or(d.max_message_bytes),
            keepalive_interval: self.keepalive_interval.unwrap_or(d.keepalive_interval),
            keepalive_timeout: self.keepalive_timeout.unwrap_or(d.keepalive_timeout),
            // 0s: no send deadline.
            send_timeout: match self.send_timeout {
                None => d.send_timeout,
                Some(t) if t.is_zero() => None,
                Some(t) => Some(t),
            },
            stream_requests_per_second: positive(
                "streamRequestsPerSecond",
                self.stream_requests_per_second,
                d.stream_requests_per_second,
            )?,
            stream_requests_burst: positive(
                "streamRequestsBurst",
                self.stream_requests_burst,
                d.stream_requests_burst,
            )?,
        };
        if limits.max_streams == 0 {
            return Err(error("maxStreams", "must be positive"));
        }
        if limits.max_streams_per_connection == 0 {
            return Err(error("maxStreamsPerConnection", "must be positive"));
        }
        if limits.max_message_bytes < 4096 {
            return Err(error(
                "maxMessageSize",
                format!(
                    "{} bytes is below the minimum of 4096",
                    limits.max_message_bytes
                ),
            ));
        }
        if limits.keepalive_interval.is_zero() || limits.keepalive_timeout.is_zero() {
            return Err(error(
                "keepaliveInterval",
                "keepaliveInterval and keepaliveTimeout must be positive",
            ));
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> RawLimits {
        serde_json::from_str(json).expect("parses")
    }

    #[test]
    fn unset_keys_take_the_defaults_and_set_ones_apply() {
        assert_eq!(raw("{}").check(), Ok(Limits::default()));
        let l = raw(r#"{"maxStreams": 7, "maxMessageSize": 8192, "keepaliveInterval": "2s", "sendTimeout": "0s"}"#)
            .check()
            .expect("valid");
        assert_eq!(l.max_streams, 7);
        assert_eq!(l.max_message_bytes, 8192);
        assert_eq!(l.keepalive_interval, Duration::from_secs(2));
        assert_eq!(l.send_timeout, None);
        let l = raw(r#"{"streamRequestsPerSecond": 5, "streamRequestsBurst": 9}"#)
            .check()
            .expect("valid");
        assert_eq!(
            (
                l.request_rate().per_second.get(),
                l.request_rate().burst.get()
            ),
            (5, 9)
        );
    }

    #[test]
    fn out_of_range_values_name_their_key() {
        for (json, field) in [
            (r#"{"newStreamsBurst": 0}"#, "newStreamsBurst"),
            (r#"{"maxStreams": 0}"#, "maxStreams"),
            (
                r#"{"maxStreamsPerConnection": 0}"#,
                "maxStreamsPerConnection",
            ),
            (r#"{"maxMessageSize": 100}"#, "maxMessageSize"),
            (r#"{"keepaliveTimeout": "0s"}"#, "keepaliveInterval"),
            (
                r#"{"streamRequestsPerSecond": 0}"#,
                "streamRequestsPerSecond",
            ),
            (r#"{"streamRequestsBurst": 0}"#, "streamRequestsBurst"),
        ] {
            assert_eq!(raw(json).check().map_err(|e| e.field), Err(field), "{json}");
        }
        assert!(serde_json::from_str::<RawLimits>(r#"{"maxStream": 1}"#).is_err());
    }
}
