//! `labelSelector` and `fieldSelector` query values through the server's parsers, and
//! the parsed selectors matched against objects.
//!
//! Properties: parsing never panics; a label selector that parses prints (`Display`,
//! what the dashboard and errors show) a selector that parses back to the same one.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use outpost_apiserver::selectors::{FieldSelector, LabelSelector, labels_of};
use outpost_fuzz::default_live;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let object = default_live();
    let mut labels = labels_of(&object);
    labels.insert("tier".into(), "7".into());
    if let Ok(selector) = LabelSelector::parse(text) {
        let printed = selector.to_string();
        let reparsed = LabelSelector::parse(&printed).unwrap_or_else(|e| {
            panic!("{text:?} prints as {printed:?}, which does not parse: {e}")
        });
        assert_eq!(
            reparsed, selector,
            "{text:?} prints as {printed:?}, another selector"
        );
        let _ = selector.matches(&labels);
        let _ = selector.matches(&BTreeMap::new());
    }
    if let Ok(selector) = FieldSelector::parse(text) {
        let _ = selector.matches(&object);
    }
});
