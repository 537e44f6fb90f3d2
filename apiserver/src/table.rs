//! STUB
use serde_json::{Value, json};
use crate::registry::ResourceType;
pub enum IncludeObject { None, Metadata, Object }
impl IncludeObject { pub fn from_param(p: Option<&str>) -> Self { match p { Some("None") => Self::None, Some("Object") => Self::Object, _ => Self::Metadata } } }
pub fn wants_table(accept: &str) -> bool { accept.contains("as=Table") }
pub fn table(_rt: &ResourceType, objects: &[Value], list_meta: Value, _i: IncludeObject, _now: jiff::Timestamp) -> Value {
    json!({"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":list_meta,"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"","priority":0}],"rows":objects.iter().map(|o| json!({"cells":[o["metadata"]["name"]],"object":o})).collect::<Vec<_>>()})
}
pub fn table_row_for_watch(rt: &ResourceType, o: &Value, now: jiff::Timestamp) -> Value { table(rt, std::slice::from_ref(o), json!({}), IncludeObject::Metadata, now) }
