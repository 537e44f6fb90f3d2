//! Masking secret values in what the runner reports, as CI systems do (GitHub Actions'
//! `add-mask`): every secret value resolved for a Plan, and the secret parts of its
//! role's credentials, become `***` in logs, outputs, failure messages, drift reports
//! and audit details before they are written to the state dir's outbox (journal, audit
//! log, drift reports) and shipped to the control plane.
//!
//! A [`Masker`] is built from the values resolved for one Plan (or one drift check):
//! [`Masker::of_env`] takes the `OUTPOST_SECRET_*` values and
//! [`SECRET_CREDENTIALS`] of a step environment (the access key id is an identifier, not
//! a secret, and stays readable). Each value is masked in the forms it is commonly
//! printed in: as is, base64 (standard and URL-safe alphabets, at each of the three
//! byte alignments a value can have inside a longer base64 text), URL-encoded
//! (`%XX`, and `+` for spaces) and JSON-escaped. Occurrences may overlap or touch; the
//! union of all matches is masked, so no fragment of one value is left next to another.
//!
//! Values shorter than [`MIN_LEN`] characters are not masked: masking `1` or `yes`
//! would mangle every log and hide nothing worth hiding (GitHub Actions does the same).
//!
//! A masker masks whole texts: a value split across chunks of a child's output is
//! masked because callers mask the accumulated log, never chunk by chunk.
//!
//! [`Masks`] holds the maskers of what is in flight (the Plan being executed, drift
//! checks); the session masks with all of them at once (see `Session::audit`).
//!
//! # Warning
//!
//! Masking stops accidental disclosure, not a step bent on leaking: code that has a
//! value can print it reversed, hex-encoded or a character per line. What keeps a
//! vendor's step from secrets it was not given is that it is given only the secrets
//! it references (`executor::job`), and the customer sees those references in the Plan
//! they approve. A log truncated to its tail may begin with the end of a value whose
//! start was cut off; that fragment is not masked.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use serde_json::Value;

/// What a masked value is replaced by.
pub const MASK: &str = "***";

/// Values with fewer characters than this are not masked.
pub const MIN_LEN: usize = 4;

/// The step-environment variables holding a role's secret credentials.
pub const SECRET_CREDENTIALS: [&str; 2] = ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"];

/// Replaces given secret values, in their common encodings, by [`MASK`].
#[derive(Clone, Default)]
pub struct Masker {
    /// Every form of every value, at least [`MIN_LEN`] bytes, sorted and deduplicated.
    needles: Vec<String>,
}

impl std::fmt::Debug for Masker {
    /// Says how many forms are masked, never which.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("forms", &self.needles.len())
            .finish()
    }
}

impl Masker {
    /// A masker of `values` (values shorter than [`MIN_LEN`] characters are ignored).
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut masker = Self::default();
        for value in values {
            masker.add(value);
        }
        masker
    }

    /// A masker of the secret values in a step environment: resolved secrets
    /// (`OUTPOST_SECRET_*`) and the role's [`SECRET_CREDENTIALS`].
    pub fn of_env(env: &BTreeMap<String, String>) -> Self {
        Self::new(
            env.iter()
                .filter(|(name, _)| is_secret_variable(name))
                .map(|(_, value)| value.as_str()),
        )
    }

    /// Adds `value` in all its forms.
    pub fn add(&mut self, value: &str) {
        if value.chars().count() < MIN_LEN {
            return;
        }
        self.needles.extend(
            forms(value)
                .into_iter()
                .filter(|form| form.len() >= MIN_LEN),
        );
        self.needles.sort();
        self.needles.dedup();
    }

    /// Adds everything `other` masks.
    pub fn extend(&mut self, other: &Masker) {
        self.needles.extend(other.needles.iter().cloned());
        self.needles.sort();
        self.needles.dedup();
    }

    /// Whether this masker masks nothing.
    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// `text` with every occurrence of every form replaced by [`MASK`] (overlapping or
    /// adjacent occurrences become one).
    pub fn mask(&self, text: &str) -> String {
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for needle in &self.needles {
            let mut from = 0;
            while let Some(found) = text[from..].find(needle.as_str()) {
                let start = from + found;
                spans.push((start, start + needle.len()));
                // Overlapping occurrences too: go on from the next character.
                from = start + text[start..].chars().next().map_or(1, char::len_utf8);
            }
        }
        if spans.is_empty() {
            return text.to_owned();
        }
        spans.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut written = 0;
        let mut spans = spans.into_iter();
        let mut current = spans.next();
        while let Some((start, mut end)) = current {
            current = None;
            for (next_start, next_end) in spans.by_ref() {
                if next_start <= end {
                    end = end.max(next_end);
                } else {
                    current = Some((next_start, next_end));
                    break;
                }
            }
            out.push_str(&text[written..start]);
            out.push_str(MASK);
            written = end;
        }
        out.push_str(&text[written..]);
        out
    }

    /// `value` with every string in it (object keys too) masked.
    pub fn mask_json(&self, value: &Value) -> Value {
        if self.is_empty() {
            return value.clone();
        }
        match value {
            Value::String(s) => Value::String(self.mask(s)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.mask_json(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.mask(k), self.mask_json(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// `values` with every string in them masked.
    pub fn mask_map(&self, values: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
        values
            .iter()
            .map(|(k, v)| (self.mask(k), self.mask_json(v)))
            .collect()
    }
}

/// Whether the step-environment variable `name` holds a secret value.
pub fn is_secret_variable(name: &str) -> bool {
    name.starts_with(crate::secrets::ENV_PREFIX) || SECRET_CREDENTIALS.contains(&name)
}

/// The forms `value` is masked in.
fn forms(value: &str) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let mut forms = vec![value.to_owned()];
    // JSON-escaped: the serialized string without its quotes.
    let json = serde_json::to_string(value).expect("a string always serializes");
    forms.push(json[1..json.len() - 1].to_owned());
    // URL-encoded, as `encodeURIComponent` and as a form (`+` for a space).
    const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    let url = percent_encoding::utf8_percent_encode(value, COMPONENT).to_string();
    forms.push(url.replace("%20", "+"));
    forms.push(url);
    // base64: the whole encoding, and the characters that depend on the value alone at
    // each alignment inside a longer encoded text.
    for engine in [STANDARD, URL_SAFE] {
        forms.push(engine.encode(value));
        let bytes = value.as_bytes();
        for shift in 0..3usize {
            let mut shifted = vec![0u8; shift];
            shifted.extend_from_slice(bytes);
            let encoded = engine.encode(&shifted);
            // Character i covers bits [6i, 6i + 6) of the shifted bytes.
            let first = (8 * shift).div_ceil(6);
            let last = 8 * shifted.len() / 6;
            if first < last {
                forms.push(encoded[first..last].to_owned());
            }
        }
    }
    forms
}

/// The maskers of what is in flight: the Plan being executed and each drift check
/// running. The session masks what it records with all of them.
#[derive(Debug, Default)]
pub struct Masks {
    held: Mutex<BTreeMap<u64, Masker>>,
    next: AtomicU64,
}

impl Masks {
    /// Starts holding a masker, empty until values are [added](Held::add); it is let
    /// go when the returned guard is dropped.
    pub fn hold(&self) -> Held<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, Masker::default());
        Held { masks: self, id }
    }

    /// One masker of everything held now.
    pub fn current(&self) -> Masker {
        let mut all = Masker::default();
        for masker in self.lock().values() {
            all.extend(masker);
        }
        all
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Masker>> {
        self.held
            .lock()
            .expect("masks lock is never poisoned: its holders do not panic")
    }
}

/// A masker held by [`Masks`] until this is dropped.
#[derive(Debug)]
pub struct Held<'a> {
    masks: &'a Masks,
    id: u64,
}

impl Held<'_> {
    /// Masks what `masker` masks too, while held.
    pub fn add(&self, masker: &Masker) {
        if let Some(held) = self.masks.lock().get_mut(&self.id) {
            held.extend(masker);
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.masks.lock().remove(&self.id);
    }
}

#[cfg(test)]
#[path = "mask_tests.rs"]
mod tests;
