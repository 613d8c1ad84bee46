//! Every built-in kind's Resource body decoder (what an agent decodes from
//! a hub's push).
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode;

static KINDS: LazyLock<KindTable> = LazyLock::new(KindTable::builtin);

fuzz_target!(|data: &[u8]| {
    for kind in KINDS.iter() {
        let _ = transcode::decode_resource(kind, data);
    }
});
