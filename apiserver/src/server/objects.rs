//! `GET` and `DELETE` of one object, and `DELETE` of a collection. Deleting an object
//! with finalizers only marks it (`deletionTimestamp`); it goes when the last finalizer
//! is removed (see `write.rs`).

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use serde_json::{Value, json};

use super::body::{json, read};
use super::dispatch::Call;
use super::list::Filter;
use crate::object_meta::{finalizers, from_store, is_deleting, mark_deleting, to_store};
use crate::status::{ApiError, Subject};
use crate::storage::{KeyValue, ListOptions, Revision, StoreError};
use crate::table;

/// Attempts at an unconditional write (no resourceVersion sent) that loses races before
/// giving up with 409. kube-apiserver retries until it lands; each lost race means
/// another writer's landed, so this bound is only reached by as many writers of one
/// object at once.
pub const RETRIES: usize = 64;

/// An object read for a read-modify-write ([`Call::current`]).
pub struct Current {
    /// The store revision it was read at: the write's precondition.
    pub revision: Revision,
    /// The object, `resourceVersion` set.
    pub object: Value,
    /// Whether it came from the watch cache (possibly behind the store).
    pub cached: bool,
}

impl Call {
    /// The object's name from the path.
    pub fn name(&self) -> &str {
        self.request.name.as_deref().unwrap_or_default()
    }

    /// The subject of errors about the named object.
    pub fn subject(&self) -> Subject {
        Subject::of(&self.rt, self.name())
    }

    /// The store key of the named object.
    pub fn key(&self) -> String {
        self.rt.key(self.namespace(), self.name())
    }

    /// The named object as stored, or 404.
    pub async fn load(&self) -> Result<(KeyValue, Value), ApiError> {
        let kv = self
            .state
            .store
            .get(&self.key())
            .await
            .map_err(|e| ApiError::from_store(e, self.subject()))?
            .ok_or_else(|| ApiError::NotFound(self.subject()))?;
        let object = from_store(&kv)?;
        Ok((kv, object))
    }

    /// The named object for a read-modify-write, `None` when the store has none. With
    /// `from_cache`, the watch cache's copy when it holds one, as kube-apiserver's
    /// `GuaranteedUpdate` starts from the cacher's object: no store read when the cache
    /// is current, which it nearly always is, and not when this server wrote the object
    /// since the cache's revision ([`crate::watch_cache::WatchCache::get_current`]: a
    /// client's second write in a row). A caller trusts a try that started from
    /// the cache only when its compare-and-swap write lands (that proves the copy was
    /// current); a refusal, a conflict or a no-op it tries again from the store.
    pub async fn current(&self, from_cache: bool) -> Result<Option<Current>, ApiError> {
        if from_cache
            && let Some(cached) = self
                .state
                .cache(&self.rt)?
                .get_current(self.namespace(), self.name())
        {
            return Ok(Some(Current {
                revision: cached.revision,
                object: cached.value()?,
                cached: true,
            }));
        }
        let Some(kv) = self
            .state
            .store
            .get(&self.key())
            .await
            .map_err(|e| ApiError::from_store(e, self.subject()))?
        else {
            return Ok(None);
        };
        Ok(Some(Current {
            revision: kv.mod_revision,
            object: from_store(&kv)?,
            cached: false,
        }))
    }

    /// Whether the request is a dry run (`dryRun=All`).
    pub fn dry_run(&self) -> bool {
        self.params.get("dryRun").is_some_and(|v| v == "All")
    }

    /// One object in the response format the client asked for.
    pub fn respond(&self, code: StatusCode, object: &Value) -> Response {
        if table::wants_table(self.accept()) {
            let include =
                table::IncludeObject::from_query(self.param("includeObject")).unwrap_or_default();
            let meta = json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""))});
            let table = table::table(
                &self.rt,
                std::slice::from_ref(object),
                meta,
                include,
                jiff::Timestamp::now(),
            );
            return json(code, &table);
        }
        json(code, object)
    }
}

pub async fn get(call: &Call) -> Result<Response, ApiError> {
    let (_, object) = call.load().await?;
    call.check_access(&object)?;
    Ok(call.respond(StatusCode::OK, &object))
}

/// `DeleteOptions` preconditions.
fn check_preconditions(
    call: &Call,
    options: &Value,
    kv: &KeyValue,
    object: &Value,
) -> Result<(), ApiError> {
    if let Some(rv) = options
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
        && rv != kv.mod_revision.to_string()
    {
        return Err(ApiError::Conflict {
            subject: call.subject(),
            reason: format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                kv.mod_revision
            ),
        });
    }
    if let Some(uid) = options
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
        && Some(uid) != object.pointer("/metadata/uid").and_then(Value::as_str)
    {
        return Err(ApiError::Conflict {
            subject: call.subject(),
            reason: format!("Precondition failed: UID in precondition: {uid}"),
        });
    }
    Ok(())
}

pub async fn delete(call: &Call, body: Body) -> Result<Response, ApiError> {
    let bytes = read(body, call.state.config.limits.max_request_body_bytes).await?;
    let options: Value = if bytes.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::BadRequest(format!("invalid DeleteOptions: {e}")))?
    };
    let dry_run = call.dry_run()
        || options
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "All"));
    let object = delete_one(call, &call.key(), &options, dry_run).await?;
    Ok(call.respond(StatusCode::OK, &object))
}

/// Deletes (or, with finalizers, marks for deletion) one object, retrying on races.
async fn delete_one(
    call: &Call,
    key: &str,
    options: &Value,
    dry_run: bool,
) -> Result<Value, ApiError> {
    let store = &call.state.store;
    for _ in 0..RETRIES {
        let kv = store
            .get(key)
            .await
            .map_err(|e| ApiError::from_store(e, call.subject()))?
            .ok_or_else(|| ApiError::NotFound(call.subject()))?;
        let mut object = from_store(&kv)?;
        let subject = Subject::of(
            &call.rt,
            crate::object_meta::name_of(&object).unwrap_or_default(),
        );
        call.check_access(&object)?;
        check_preconditions(call, options, &kv, &object)?;
        if !finalizers(&object).is_empty() {
            if is_deleting(&object) || dry_run {
                if dry_run {
                    mark_deleting(&mut object);
                }
                return Ok(object);
            }
            mark_deleting(&mut object);
            match store.update(key, to_store(&object), kv.mod_revision).await {
                Ok(updated) => {
                    wrote(call, &object, updated.mod_revision);
                    return from_store(&updated);
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(err) => return Err(ApiError::from_store(err, subject)),
            }
        }
        if dry_run {
            return Ok(object);
        }
        match store.delete(key, Some(kv.mod_revision)).await {
            Ok((_, deleted)) => {
                wrote(call, &object, deleted);
                return Ok(object);
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(err) => return Err(ApiError::from_store(err, subject)),
        }
    }
    Err(ApiError::from_store(
        StoreError::Conflict {
            key: key.into(),
            expected: 0,
            actual: 0,
        },
        call.subject(),
    ))
}

/// [`super::write::wrote`] for `object`, which a collection's delete may find in any
/// namespace.
fn wrote(call: &Call, object: &Value, revision: crate::storage::Revision) {
    if let (Ok(cache), Some(name)) = (
        call.state.cache(&call.rt),
        crate::object_meta::name_of(object),
    ) {
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        cache.wrote(namespace, name, revision);
    }
}

pub async fn delete_collection(call: &Call) -> Result<Response, ApiError> {
    let filter = Filter::from_call(call)?;
    let page = call
        .state
        .store
        .list(
            &call.rt.key_prefix(call.namespace()),
            ListOptions::default(),
        )
        .await
        .map_err(|e| ApiError::from_store(e, call.subject()))?;
    let mut deleted = Vec::new();
    for kv in &page.items {
        let object = from_store(kv)?;
        if !filter.matches(&object) {
            continue;
        }
        match delete_one(call, &kv.key, &json!({}), call.dry_run()).await {
            Ok(object) => deleted.push(object),
            Err(ApiError::NotFound(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(json(
        StatusCode::OK,
        &json!({
            "apiVersion": call.rt.api_version(),
            "kind": call.rt.list_kind,
            "metadata": {"resourceVersion": page.revision.to_string()},
            "items": deleted,
        }),
    ))
}
