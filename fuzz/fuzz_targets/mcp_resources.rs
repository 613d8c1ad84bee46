//! `mcp::Resources` from untrusted bytes: decodes or errs, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meshhub_proto::mcp::Resources;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let _ = Resources::decode(data);
});
