//! A create or update body (JSON or YAML, by the first byte's content type) through the
//! server's decoder, then the limits and the read-back of what would be stored.
#![no_main]

use http::{HeaderMap, HeaderValue, header};
use libfuzzer_sys::fuzz_target;
use outpost_apiserver::server::decode_object;
use outpost_fuzz::store_and_read_back;

const CONTENT_TYPES: [&str; 4] = [
    "application/json",
    "application/yaml",
    "application/json; charset=utf-8",
    "text/yaml",
];

fuzz_target!(|data: &[u8]| {
    let Some((first, body)) = data.split_first() else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(CONTENT_TYPES[usize::from(*first) % CONTENT_TYPES.len()]),
    );
    if let Ok(object) = decode_object(&headers, body) {
        assert!(object.is_object());
        store_and_read_back(&object);
    }
});
