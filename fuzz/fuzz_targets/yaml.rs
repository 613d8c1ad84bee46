//! The file sources' YAML parser (`transcode::parse_yaml`), also with a
//! small per-document limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meshhub_proto::transcode;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = transcode::parse_yaml(&text);
    let _ = transcode::parse_yaml_limited(&text, 64);
});
