//! A strategic merge patch (`LIVE 0xFF BODY`, see [`outpost_fuzz::split`]), as the
//! stand-in cluster's built-in kinds take it, then its bookkeeping, the limits and the
//! read-back of what would be stored.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_apiserver::patch::apply_strategic_merge;

fuzz_target!(|data: &[u8]| {
    outpost_fuzz::patch_then_store(data, apply_strategic_merge);
});
