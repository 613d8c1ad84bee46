//! Transcoding.
