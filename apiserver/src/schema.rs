//! STUB
use outpost_api::FieldError;
use serde_json::Value;
pub fn validate(_s: &Value, _o: &Value) -> Vec<FieldError> { Vec::new() }
pub fn unknown_fields(_s: &Value, _o: &Value) -> Vec<String> { Vec::new() }
pub fn prune(_s: &Value, _o: &mut Value) {}
pub fn strict_decoding_message(p: &[String]) -> String { format!("strict decoding error: {p:?}") }
