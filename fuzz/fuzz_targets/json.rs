//! The file sources' JSON parser (`transcode::parse_json`), also with a
//! small per-document limit so that the oversized-document paths run.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meshhub_proto::transcode;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = transcode::parse_json(&text);
    let _ = transcode::parse_json_limited(&text, 64);
});
