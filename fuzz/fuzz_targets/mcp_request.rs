//! `mcp::RequestResources` from untrusted bytes: decodes or errs, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meshhub_proto::mcp::RequestResources;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let _ = RequestResources::decode(data);
});
