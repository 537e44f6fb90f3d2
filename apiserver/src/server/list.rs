//! `GET` on a collection: paged, consistent lists with label and field selectors, as
//! JSON lists or `meta.k8s.io/v1` Tables.

use axum::response::Response;
use http::StatusCode;
use serde_json::{Value, json};

use super::body::json;
use super::dispatch::Call;
use crate::auth::{Access, InstallScope};
use crate::object_meta::from_store;
use crate::registry::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector, labels_of};
use crate::status::{ApiError, Subject};
use crate::storage::{ContinueToken, ListOptions, Revision, StoreError};
use crate::table;

/// The label and field selectors of a list or watch, and the install scope of the
/// user's access: objects outside it are never listed or watched.
pub struct Filter {
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
    scope: Option<InstallScope>,
}

impl Filter {
    /// Parses `labelSelector` and `fieldSelector`; a field the type cannot select on is 400.
    pub fn from_call(call: &Call) -> Result<Filter, ApiError> {
        let labels = call
            .param("labelSelector")
            .map(LabelSelector::parse)
            .transpose()
            .map_err(ApiError::BadRequest)?;
        let fields = call
            .param("fieldSelector")
            .map(FieldSelector::parse)
            .transpose()
            .map_err(ApiError::BadRequest)?;
        if let Some(fields) = &fields {
            for field in fields.fields() {
                if !selectable(&call.rt, field) {
                    return Err(ApiError::BadRequest(format!(
                        "field label not supported: {field}"
                    )));
                }
            }
        }
        let scope = match &call.access {
            Access::Full => None,
            Access::Install(scope) => Some(scope.clone()),
        };
        Ok(Filter {
            labels,
            fields,
            scope,
        })
    }

    /// Whether `object` passes.
    pub fn matches(&self, object: &Value) -> bool {
        self.labels
            .as_ref()
            .is_none_or(|l| l.matches(&labels_of(object)))
            && self.fields.as_ref().is_none_or(|f| f.matches(object))
            && self.scope.as_ref().is_none_or(|s| s.owns(object))
    }
}

fn selectable(rt: &ResourceType, field: &str) -> bool {
    field == "metadata.name"
        || field == "metadata.namespace"
        || rt.selectable_fields.iter().any(|f| f == field)
}

/// The revision a list is read at, from `resourceVersion` and `resourceVersionMatch`.
fn read_revision(call: &Call) -> Result<Option<Revision>, ApiError> {
    let Some(rv) = call.param("resourceVersion").filter(|rv| *rv != "0") else {
        return Ok(None);
    };
    let rv: Revision = rv
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("invalid resourceVersion {rv:?}")))?;
    match call.param("resourceVersionMatch") {
        Some("Exact") => Ok(Some(rv)),
        _ => Ok(None),
    }
}

pub async fn list(call: &Call) -> Result<Response, ApiError> {
    let rt = &call.rt;
    let prefix = rt.key_prefix(call.namespace());
    let filter = Filter::from_call(call)?;
    let limit: usize = match call.param("limit") {
        Some(l) => l
            .parse()
            .map_err(|_| ApiError::BadRequest(format!("invalid limit {l:?}")))?,
        None => 0,
    };
    let sent_continue = call.param("continue").map(str::to_owned);
    let mut token = sent_continue.clone();
    let revision = if token.is_some() {
        None
    } else {
        read_revision(call)?
    };
    let subject = Subject::of(rt, "");
    let mut items = Vec::new();
    let mut next = None;
    let read_at;
    'pages: loop {
        let page = call
            .state
            .store
            .list(
                &prefix,
                ListOptions {
                    limit: (limit > 0).then_some(limit),
                    continue_token: token.take(),
                    revision,
                },
            )
            .await;
        let page = match page {
            Ok(page) => page,
            Err(StoreError::Expired { .. }) if sent_continue.is_some() => {
                return Err(continue_expired(call, &prefix, sent_continue.as_deref()).await);
            }
            Err(err) => return Err(ApiError::from_store(err, subject)),
        };
        let count = page.items.len();
        for (i, kv) in page.items.iter().enumerate() {
            let object = from_store(kv)?;
            if !filter.matches(&object) {
                continue;
            }
            items.push(object);
            if limit > 0 && items.len() == limit {
                if i + 1 < count || page.continue_token.is_some() {
                    next = Some(ContinueToken::after(page.revision, &kv.key).encode());
                }
                read_at = page.revision;
                break 'pages;
            }
        }
        match page.continue_token {
            Some(more) => token = Some(more),
            None => {
                read_at = page.revision;
                break;
            }
        }
    }
    let mut list_meta = json!({"resourceVersion": read_at.to_string()});
    if let Some(next) = next {
        list_meta["continue"] = json!(next);
    }
    if table::wants_table(call.accept()) {
        let include = table::IncludeObject::from_query(call.param("includeObject"))?;
        let table = table::table(rt, &items, list_meta, include, jiff::Timestamp::now());
        return Ok(json(StatusCode::OK, &table));
    }
    Ok(json(
        StatusCode::OK,
        &json!({
            "apiVersion": rt.api_version(),
            "kind": rt.list_kind,
            "metadata": list_meta,
            "items": items,
        }),
    ))
}

/// 410 for a compacted continue token, with a fresh token from the same key.
async fn continue_expired(call: &Call, prefix: &str, sent: Option<&str>) -> ApiError {
    let fresh = match (
        sent.map(|t| ContinueToken::decode(t, prefix)),
        call.state.store.current_revision().await,
    ) {
        (Some(Ok(old)), Ok(now)) => Some(
            ContinueToken {
                revision: now,
                start: old.start,
            }
            .encode(),
        ),
        _ => None,
    };
    ApiError::ContinueExpired {
        fresh_continue: fresh,
    }
}
