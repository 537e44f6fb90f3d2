//! A JSON merge patch (`LIVE 0xFF BODY`, see [`outpost_fuzz::split`]) through the
//! server's patch code, then its bookkeeping, the limits and the read-back of what would
//! be stored.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_apiserver::limits::Limits;
use outpost_apiserver::patch::{PatchType, apply_patch};

fuzz_target!(|data: &[u8]| {
    outpost_fuzz::patch_then_store(data, |live, body| {
        apply_patch(PatchType::Merge, live, body, &Limits::default())
    });
});
