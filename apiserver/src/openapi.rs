//! STUB
use serde_json::{Value, json};
use crate::registry::Registry;
pub fn discovery_index(_r: &Registry) -> Value { json!({"paths":{}}) }
pub fn group_version_document(_r: &Registry, _g: &str, _v: &str) -> Option<Value> { None }
