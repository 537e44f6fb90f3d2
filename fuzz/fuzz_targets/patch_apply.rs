//! A server-side apply (`LIVE 0xFF BODY`, see [`outpost_fuzz::split`]; a body's first
//! byte picks force and whether the object exists) through the server's apply code, then
//! the limits and the read-back of what would be stored.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_apiserver::patch::{parse_apply_body, server_side_apply};
use outpost_fuzz::{split, store_and_read_back};

fuzz_target!(|data: &[u8]| {
    let (live, body) = split(data);
    let Some((mode, body)) = body.split_first() else {
        return;
    };
    let force = mode & 1 == 1;
    let existing = (mode & 2 == 0).then_some(&live);
    let Ok(applied) = parse_apply_body(body) else {
        return;
    };
    match server_side_apply(existing, &applied, "fuzz", force, "2026-01-02T03:04:05Z") {
        Ok(object) => store_and_read_back(&object),
        Err(conflict) => assert!(!force, "a forced apply conflicts: {conflict}"),
    }
});
