//! STUB
use serde_json::Value;
use crate::status::{ApiError, Subject};
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType { Merge, Json, Apply, StrategicMerge }
impl PatchType {
    pub fn from_content_type(c: &str) -> Result<PatchType, ApiError> {
        Ok(match c { "application/merge-patch+json" => PatchType::Merge, "application/json-patch+json" => PatchType::Json, "application/apply-patch+yaml" => PatchType::Apply, _ => return Err(ApiError::UnsupportedMediaType(c.into())) })
    }
}
pub fn apply_patch(kind: PatchType, existing: &Value, body: &[u8]) -> Result<Value, ApiError> {
    let mut v = existing.clone();
    let p: Value = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    match kind { PatchType::Merge => json_patch::merge(&mut v, &p), _ => {
        let p: json_patch::Patch = serde_json::from_value(p).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        json_patch::patch(&mut v, &p).map_err(|e| ApiError::BadRequest(e.to_string()))? } }
    Ok(v)
}
pub struct ApplyConflict;
impl ApplyConflict { pub fn into_api_error(self, s: Subject) -> ApiError { ApiError::Conflict { subject: s, reason: "conflict".into() } } }
pub fn server_side_apply(existing: Option<&Value>, applied: &Value, _m: &str, _f: bool, _n: &str) -> Result<Value, ApplyConflict> {
    let mut v = existing.cloned().unwrap_or(serde_json::json!({})); json_patch::merge(&mut v, applied); Ok(v)
}
pub fn record_update(_e: Option<&Value>, _u: &mut Value, _m: &str, _o: &str, _n: &str) {}
