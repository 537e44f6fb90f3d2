//! STUB
use std::collections::BTreeMap;
use serde_json::Value;
pub struct LabelSelector(Vec<(String, String)>);
impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(LabelSelector(s.split(',').filter_map(|p| p.split_once('=')).map(|(a, b)| (a.to_owned(), b.to_owned())).collect()))
    }
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}
pub struct FieldSelector(Vec<(String, String)>);
impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(FieldSelector(s.split(',').filter_map(|p| p.split_once('=')).map(|(a, b)| (a.to_owned(), b.to_owned())).collect()))
    }
    pub fn fields(&self) -> Vec<&str> { self.0.iter().map(|(k, _)| k.as_str()).collect() }
    pub fn matches(&self, o: &Value) -> bool {
        self.0.iter().all(|(k, v)| o.pointer(&format!("/{}", k.replace('.', "/"))).and_then(Value::as_str) == Some(v))
    }
}
pub fn labels_of(o: &Value) -> BTreeMap<String, String> {
    o.pointer("/metadata/labels").and_then(Value::as_object).map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect()).unwrap_or_default()
}
