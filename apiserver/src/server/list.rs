//! `GET` on a collection: paged, consistent lists with label and field selectors, as
//! JSON lists or `meta.k8s.io/v1` Tables.

use std::borrow::Borrow;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse as _, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::json;

use super::body::json;
use super::dispatch::Call;
use super::list_body::ListBody;
use crate::auth::Access;
use crate::registry::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector, Operator, Selectable};
use crate::status::{ApiError, Subject};
use crate::storage::{ContinueToken, ListOptions, Revision, StoreError};
use crate::table;
use crate::watch_cache::{CachedObject, Snapshot};

/// The label and field selectors of a list or watch, and the scope of the user's
/// access: objects outside it are never listed or watched.
pub struct Filter {
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
    access: Access,
    /// How the type's objects are indexed, if they are.
    index: Option<crate::registry::IndexBy>,
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
        Ok(Filter {
            labels,
            fields,
            access: call.access.clone(),
            index: call.rt.index.clone(),
        })
    }

    /// Whether `object` passes.
    pub fn matches(&self, object: &impl Selectable) -> bool {
        self.labels.as_ref().is_none_or(|l| l.matches(object))
            && self.fields.as_ref().is_none_or(|f| f.matches(object))
            && self.access.allows(object)
    }

    /// The one value every object that passes is indexed under ([`ResourceType::index`]),
    /// when the filter pins it (by the index's label, by its field, or by the user's
    /// scope): the watch cache then looks only at those objects.
    pub fn index_key(&self) -> Option<&str> {
        let index = self.index.as_ref()?;
        let by_scope = || match &self.access {
            Access::Full => None,
            Access::Scoped(scope) => scope.index_key(),
        };
        let by_label = || {
            self.labels.as_ref().and_then(|l| {
                l.requirements().iter().find_map(|r| {
                    (r.key == index.label
                        && matches!(r.operator, Operator::Equals | Operator::In)
                        && r.values.len() == 1)
                        .then(|| r.values[0].as_str())
                })
            })
        };
        let by_field = || {
            self.fields.as_ref().and_then(|f| {
                f.terms()
                    .iter()
                    .find(|t| t.field == index.field && !t.negated)
                    .map(|t| t.value.as_str())
            })
        };
        by_scope().or_else(by_label).or_else(by_field)
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
    let rv = crate::request::parse_resource_version(rv)?;
    match call.param("resourceVersionMatch") {
        Some("Exact") => Ok(Some(rv)),
        _ => Ok(None),
    }
}

/// How long a consistent list waits for the watch cache to catch up with the store
/// before reading the store instead.
const CACHE_WAIT: Duration = Duration::from_secs(3);

pub async fn list(call: &Call) -> Result<Response, ApiError> {
    let filter = Filter::from_call(call)?;
    let limit: usize = match call.param("limit") {
        Some(l) => l
            .parse()
            .map_err(|_| ApiError::BadRequest(format!("invalid limit {l:?}")))?,
        None => 0,
    };
    if let Some(token) = call.param("continue") {
        if let Some(page) = from_snapshot(call, &filter, token, limit).await? {
            return Ok(page);
        }
    } else if read_revision(call)?.is_none() {
        // As kube-apiserver's cache does, `resourceVersion=0` answers with every
        // object at once: there is no snapshot in the store to page through.
        let limit = if call.param("resourceVersion") == Some("0") {
            0
        } else {
            limit
        };
        if let Some(snapshot) = from_cache(call, &filter, limit).await? {
            return cached_list(call, snapshot, limit);
        }
    }
    list_from_store(call, &filter, limit).await
}

/// A continue page from the objects the watch cache kept at the list's revision
/// ([`crate::watch_cache::WatchCache::list_paged`]): those after the token's key that
/// pass this request's own filter (selectors and access), as a page read from the store
/// would be. `None` when the cache no longer keeps them, when the store compacted that
/// revision (its read answers 410 with a fresh token, as kube-apiserver's cache drops
/// snapshots the store compacted), or the token is not one this list made (the store
/// read answers it, or refuses it).
async fn from_snapshot(
    call: &Call,
    filter: &Filter,
    token: &str,
    limit: usize,
) -> Result<Option<Response>, ApiError> {
    let Ok(token) = ContinueToken::decode(token, &call.rt.key_prefix(call.namespace())) else {
        return Ok(None);
    };
    let cache = call.state.cache(&call.rt)?;
    let Some(objects) = cache.snapshot_at(call.namespace(), token.revision) else {
        return Ok(None);
    };
    let held = call
        .state
        .store
        .holds_revision(token.revision)
        .await
        .map_err(|e| ApiError::from_store(e, Subject::of(&call.rt, "")))?;
    if !held {
        return Ok(None);
    }
    let start = objects.partition_point(|o| o.key < token.start);
    let rest = &objects[start..];
    let mut items = Vec::new();
    let mut next = None;
    for (i, object) in rest.iter().enumerate() {
        if !filter.matches(object.as_ref()) {
            continue;
        }
        items.push(object.clone());
        if limit > 0 && items.len() == limit {
            if i + 1 < rest.len() {
                next = Some(ContinueToken::after(token.revision, &object.key).encode());
            }
            break;
        }
    }
    let mut list_meta = json!({"resourceVersion": token.revision.to_string()});
    if let Some(next) = next {
        list_meta["continue"] = json!(next);
    }
    list_response(call, items, list_meta).map(Some)
}

/// The list from the watch cache, once it has every change up to the revision the
/// request asks for: the store's current one when `resourceVersion` is unset (a
/// consistent read, as kube-apiserver serves from its cache), any with `0`, at least
/// `N` with `N`. `None` when the cache did not catch up in time. A list that exceeds
/// `limit` leaves its snapshot in the cache for its continue pages.
async fn from_cache(
    call: &Call,
    filter: &Filter,
    limit: usize,
) -> Result<Option<Snapshot>, ApiError> {
    let cache = call.state.cache(&call.rt)?;
    let wanted = match call.param("resourceVersion") {
        Some("0") => None,
        Some(rv) => Some(crate::request::parse_resource_version(rv)?),
        None => Some(
            call.state
                .store
                .current_revision()
                .await
                .map_err(|e| ApiError::from_store(e, Subject::of(&call.rt, "")))?,
        ),
    };
    if let Some(revision) = wanted
        && !call.state.progress.wait_for(revision, CACHE_WAIT).await
    {
        tracing::warn!(
            revision,
            "the watch cache is behind the store: listing from the store"
        );
        return Ok(None);
    }
    Ok(Some(cache.list_paged(
        call.namespace(),
        filter.index_key(),
        |object| filter.matches(object),
        limit,
    )))
}

/// Answers a list from a cache snapshot: its objects' JSON as it is, or a Table.
/// A `limit` it exceeds gives a continue token at the snapshot's revision: its pages
/// are read from what the cache kept at that revision ([`from_snapshot`]), or from the
/// store once the cache no longer keeps it.
fn cached_list(call: &Call, snapshot: Snapshot, limit: usize) -> Result<Response, ApiError> {
    let Snapshot {
        mut objects,
        revision,
    } = snapshot;
    let mut list_meta = json!({"resourceVersion": revision.to_string()});
    if limit > 0 && objects.len() > limit {
        objects.truncate(limit);
        let last = &objects[limit - 1].key;
        list_meta["continue"] = json!(ContinueToken::after(revision, last).encode());
    }
    list_response(call, objects, list_meta)
}

/// A list's answer: its objects' JSON as it is, after the list's head, written as it
/// is sent ([`ListBody`]), or a Table.
fn list_response<T: Borrow<CachedObject> + Send + Unpin + 'static>(
    call: &Call,
    objects: Vec<T>,
    list_meta: serde_json::Value,
) -> Result<Response, ApiError> {
    let rt = &call.rt;
    if table::wants_table(call.accept()) {
        let include = table::IncludeObject::from_query(call.param("includeObject"))?;
        let items = objects
            .iter()
            .map(|o| o.borrow().value())
            .collect::<Result<Vec<_>, _>>()?;
        let table = table::table(rt, &items, list_meta, include, jiff::Timestamp::now());
        return Ok(json(StatusCode::OK, &table));
    }
    let head = json!({"apiVersion": rt.api_version(), "kind": rt.list_kind, "metadata": list_meta});
    let head = serde_json::to_vec(&head).expect("JSON encodes");
    let body = ListBody::new(&head, objects);
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Body::new(body),
    )
        .into_response())
}

/// The largest page a selective list grows to, as kube-apiserver's etcd3 store
/// (`maxLimit` in `GetList`): a list whose selector drops most objects doubles its page
/// after each page that did not fill the `limit`, so it takes O(log n) store reads up
/// to this size instead of one read per `limit` objects.
pub(crate) const MAX_PAGE: usize = 10_000;

/// The page size after one that left the list short of its `limit`: twice as large,
/// at most [`MAX_PAGE`] (a `limit` above it stays as it is).
fn grown(page: usize) -> usize {
    if page < MAX_PAGE {
        (page * 2).min(MAX_PAGE)
    } else {
        page
    }
}

/// The list read from the store (continue tokens, and reads at an exact revision).
async fn list_from_store(call: &Call, filter: &Filter, limit: usize) -> Result<Response, ApiError> {
    let rt = &call.rt;
    let prefix = rt.key_prefix(call.namespace());
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
    let mut page_size = limit;
    'pages: loop {
        let page = call
            .state
            .store
            .list(
                &prefix,
                ListOptions {
                    limit: (page_size > 0).then_some(page_size),
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
            // As the cache holds it: the stored JSON with its resourceVersion, only the
            // members selectors read decoded (a page of decoded Installs, ten times
            // their JSON, was most of a 10,000-install list's cost in memory).
            let object = CachedObject::from_store(rt, kv)?;
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
        page_size = grown(page_size);
    }
    let mut list_meta = json!({"resourceVersion": read_at.to_string()});
    if let Some(next) = next {
        list_meta["continue"] = json!(next);
    }
    list_response(call, items, list_meta)
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
