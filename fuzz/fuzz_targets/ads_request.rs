//! `ads::DiscoveryRequest` from untrusted bytes: decodes or errs, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meshhub_proto::ads::DiscoveryRequest;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let _ = DiscoveryRequest::decode(data);
});
