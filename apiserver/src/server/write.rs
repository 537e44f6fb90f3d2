//! `POST`, `PUT` and `PATCH`: decode, check unknown fields (`fieldValidation`), fill in
//! server-managed metadata, validate against the schema and the type's strategy, run
//! the admission chain, record managed fields, then write with the store revision as
//! the precondition.

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use serde_json::Value;

use super::body::{
    content_type, decode_object, json_bytes_with_warnings, json_with_warnings, read,
};
use super::dispatch::Call;
use super::objects::RETRIES;
use crate::admission::{Attributes, Operation};
use crate::object_meta::{
    StoredJson, WriteScope, check_url_name, finalizers, is_deleting, prepare_create,
    prepare_update, sent_resource_version, set_resource_version, strip_unstored,
};
use crate::patch::{
    PatchType, apply_patch, apply_strategic_merge, parse_apply_body, record_update,
    server_side_apply, validate_patch_options,
};
use crate::schema;
use crate::status::{ApiError, FieldError, Subject};
use crate::storage::{Revision, StoreError};

impl Call {
    /// The field manager: `fieldManager`, else the client's name from its User-Agent.
    pub fn field_manager(&self) -> String {
        if let Some(manager) = self.param("fieldManager") {
            return manager.to_owned();
        }
        self.headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .filter(|m| !m.is_empty())
            .unwrap_or("unknown")
            .to_owned()
    }

    /// The object as it is stored, if within the server's limits (size, nesting).
    fn stored(&self, object: &Value, subject: &Subject) -> Result<StoredJson, ApiError> {
        let stored = StoredJson::of(object);
        self.state
            .config
            .limits
            .check_object(subject, &stored.bytes, object)?;
        Ok(stored)
    }

    pub(super) fn scope(&self) -> WriteScope {
        match self.request.subresource.as_deref() {
            Some("status") => WriteScope::Status,
            _ => WriteScope::Main,
        }
    }
}

/// Applies `fieldValidation` (`Strict` rejects unknown fields with 400, `Warn` (the
/// default) and `Ignore` drop them) and returns the warnings to send.
fn field_validation(call: &Call, object: &mut Value) -> Result<Vec<String>, ApiError> {
    let Some(schema) = &call.rt.schema else {
        return Ok(Vec::new());
    };
    let unknown = schema::unknown_fields(schema, object);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    match call.param("fieldValidation").unwrap_or("Warn") {
        "Strict" => Err(ApiError::BadRequest(schema::strict_decoding_message(
            &unknown,
        ))),
        "Ignore" => {
            schema::prune(schema, object);
            Ok(Vec::new())
        }
        "Warn" => {
            schema::prune(schema, object);
            Ok(unknown
                .iter()
                .map(|f| format!("unknown field {f:?}"))
                .collect())
        }
        other => Err(ApiError::BadRequest(format!(
            "invalid fieldValidation {other:?}: must be Ignore, Warn or Strict"
        ))),
    }
}

/// Schema validation and the type's strategy: 422 with every cause.
fn validate(call: &Call, object: &Value, name: &str) -> Result<(), ApiError> {
    let mut causes: Vec<FieldError> = Vec::new();
    if let Some(schema) = &call.rt.schema {
        causes.extend(schema::validate(schema, object));
    }
    if causes.is_empty() {
        causes.extend(call.rt.strategy.validate(object));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Invalid {
            subject: Subject::of(&call.rt, name),
            causes,
        })
    }
}

/// The admission chain ([`crate::admission`]) on a write of `object` (replacing `old`
/// on an update).
async fn admit(
    call: &Call,
    name: &str,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let attributes = Attributes {
        rt: &call.rt,
        request: &call.request,
        user: &call.user,
        name,
        operation: if old.is_some() {
            Operation::Update
        } else {
            Operation::Create
        },
        old,
    };
    call.state
        .config
        .admission
        .admit(&attributes, object, &call.reads())
        .await
}

pub async fn create(call: &Call, body: Body) -> Result<Response, ApiError> {
    let bytes = read(body, call.state.config.limits.max_request_body_bytes).await?;
    let mut object = decode_object(&call.headers, &bytes)?;
    let warnings = field_validation(call, &mut object)?;
    create_object(call, object, warnings, Fields::Written).await
}

/// How a write's `managedFields` are recorded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fields {
    /// A create, update or non-apply patch: the caller's manager is recorded as the
    /// writer of what it changed (`Update`).
    Written,
    /// A server-side apply: its `Apply` entry is already recorded (`server_side_apply`)
    /// and is the record. An `Update` recorded over it would take what the apply set from
    /// the applier, so its next apply could neither drop a field it stopped applying nor
    /// change one without conflicting with itself.
    Applied,
}

async fn create_object(
    call: &Call,
    mut object: Value,
    warnings: Vec<String>,
    fields: Fields,
) -> Result<Response, ApiError> {
    // Kept past `prepare_create` (which drops it) only where the type's strategy lets
    // admission decide on it, and only if there is something to decide on.
    let status = (call.rt.status_subresource && call.rt.strategy.status_on_create())
        .then(|| object.get("status").cloned())
        .flatten()
        .filter(|s| s.as_object().is_some_and(|m| !m.is_empty()));
    let name = prepare_create(&call.rt, &mut object, call.namespace())?;
    if let (Some(status), Some(map)) = (status, object.as_object_mut()) {
        map.insert("status".into(), status);
    }
    call.check_access(&object)?;
    validate(call, &object, &name)?;
    super::definitions::admit(call, &mut object, None, &name)?;
    admit(call, &name, &mut object, None).await?;
    if fields == Fields::Written {
        record_update(
            None,
            &mut object,
            &call.field_manager(),
            "Update",
            &crate::object_meta::now(),
        );
    }
    if call.dry_run() {
        return Ok(json_with_warnings(StatusCode::CREATED, &object, &warnings));
    }
    let key = call.rt.key(call.namespace(), &name);
    let stored = call.stored(&object, &Subject::of(&call.rt, &name))?;
    let kv = call
        .state
        .store
        .create(&key, stored.bytes.clone())
        .await
        .map_err(|e| ApiError::from_store(e, Subject::of(&call.rt, &name)))?;
    wrote(call, &name, kv.mod_revision);
    strip_unstored(&mut object);
    set_resource_version(&mut object, kv.mod_revision);
    let committed = Committed {
        json: stored.at_revision(kv.mod_revision),
        object,
        wrote: true,
    };
    Ok(committed.answer(StatusCode::CREATED, &warnings))
}

pub async fn update(call: &Call, body: Body) -> Result<Response, ApiError> {
    let bytes = read(body, call.state.config.limits.max_request_body_bytes).await?;
    let mut object = decode_object(&call.headers, &bytes)?;
    let warnings = field_validation(call, &mut object)?;
    let subject = call.subject();
    let Some(sent) = sent_resource_version(&object, &subject)? else {
        return Err(ApiError::Invalid {
            subject,
            causes: vec![FieldError::invalid(
                "metadata.resourceVersion",
                "",
                "must be specified for an update",
            )],
        });
    };
    // The watch cache usually holds exactly the version the client sent: no store read.
    let cached = call
        .state
        .cache(&call.rt)?
        .object_at(call.namespace(), call.name(), sent);
    let (revision, old) = match cached {
        Some(old) => (sent, old),
        None => {
            let (kv, old) = call.load().await?;
            (kv.mod_revision, old)
        }
    };
    if sent != revision {
        return Err(conflict(call));
    }
    let committed = commit_update(call, revision, &old, object, Fields::Written).await?;
    Ok(committed.answer(StatusCode::OK, &warnings))
}

/// Tells the type's watch cache that this server wrote `name` at `revision`, so that the
/// next read-modify-write of it does not start from the cache's older copy
/// ([`Call::current`]).
pub(super) fn wrote(call: &Call, name: &str, revision: crate::storage::Revision) {
    if let Ok(cache) = call.state.cache(&call.rt) {
        cache.wrote(call.namespace(), name, revision);
    }
}

fn conflict(call: &Call) -> ApiError {
    ApiError::from_store(
        StoreError::Conflict {
            key: call.key(),
            expected: 0,
            actual: 0,
        },
        call.subject(),
    )
}

/// What [`commit_update`] answers: the object, and whether the store took a write (a
/// no-op or a dry run takes none).
struct Committed {
    object: Value,
    wrote: bool,
    /// `object`'s JSON when the write made it already (the stored bytes with the
    /// revision spliced in).
    json: Option<bytes::Bytes>,
}

impl Committed {
    fn unwritten(object: Value) -> Self {
        Committed {
            object,
            wrote: false,
            json: None,
        }
    }

    /// The response: the object, with the request's warnings.
    fn answer(self, code: StatusCode, warnings: &[String]) -> Response {
        match self.json {
            Some(json) => json_bytes_with_warnings(code, json, warnings),
            None => json_with_warnings(code, &self.object, warnings),
        }
    }
}

/// Writes `new` over `old` (the version at `revision`): server fields, validation,
/// finalizer completion, no-op detection, managed fields, compare-and-swap.
async fn commit_update(
    call: &Call,
    revision: Revision,
    old: &Value,
    mut new: Value,
    fields: Fields,
) -> Result<Committed, ApiError> {
    call.check_access(old)?;
    prepare_update(&call.rt, old, &mut new, call.scope())?;
    call.check_access(&new)?;
    if call.rt.strategy.immutable_spec() && old.get("spec") != new.get("spec") {
        return Err(ApiError::Invalid {
            subject: call.subject(),
            causes: vec![FieldError::invalid("spec", "", "field is immutable")],
        });
    }
    validate(call, &new, call.name())?;
    super::definitions::admit(call, &mut new, Some(old), call.name())?;
    admit(call, call.name(), &mut new, Some(old)).await?;
    set_resource_version(&mut new, revision);
    if new == *old {
        // Nothing to write: the resourceVersion stays.
        return Ok(Committed::unwritten(new));
    }
    if call.dry_run() {
        return Ok(Committed::unwritten(new));
    }
    let store = &call.state.store;
    if is_deleting(&new) && finalizers(&new).is_empty() {
        // The last finalizer is gone: the object goes.
        let (_, deleted) = store
            .delete(&call.key(), Some(revision))
            .await
            .map_err(|e| ApiError::from_store(e, call.subject()))?;
        wrote(call, call.name(), deleted);
        return Ok(Committed {
            object: new,
            wrote: true,
            json: None,
        });
    }
    if fields == Fields::Written {
        record_update(
            Some(old),
            &mut new,
            &call.field_manager(),
            "Update",
            &crate::object_meta::now(),
        );
    }
    let stored = call.stored(&new, &call.subject())?;
    let written = store
        .update(&call.key(), stored.bytes.clone(), revision)
        .await
        .map_err(|e| ApiError::from_store(e, call.subject()))?;
    wrote(call, call.name(), written.mod_revision);
    // What was stored, with its revision: `new` itself, as `to_store` wrote it (no
    // decode of the bytes just encoded), and its JSON those bytes with the revision.
    strip_unstored(&mut new);
    set_resource_version(&mut new, written.mod_revision);
    Ok(Committed {
        json: stored.at_revision(written.mod_revision),
        object: new,
        wrote: true,
    })
}

/// Whether a patch sets `metadata.resourceVersion`, making it conditional on that
/// version, as kube-apiserver treats it: a merge or apply body naming it, a JSON patch
/// operation on it.
fn sets_resource_version(kind: PatchType, patch: &Value) -> bool {
    const PATH: &str = "/metadata/resourceVersion";
    if kind == PatchType::Json {
        patch.as_array().is_some_and(|ops| {
            ops.iter().any(|op| {
                op.get("path").and_then(Value::as_str) == Some(PATH)
                    && op.get("op").and_then(Value::as_str) != Some("remove")
            })
        })
    } else {
        patch
            .pointer(PATH)
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
    }
}

pub async fn patch(call: &Call, body: Body) -> Result<Response, ApiError> {
    let kind = PatchType::from_content_type(&content_type(&call.headers))?;
    if kind == PatchType::StrategicMerge && !call.rt.strategic_merge {
        // Answered before looking the object up, as kube-apiserver does for custom resources.
        let limits = &call.state.config.limits;
        return Err(
            apply_patch(kind, &Value::Null, b"{}", limits).expect_err("strategic merge is refused")
        );
    }
    let bytes = read(body, call.state.config.limits.max_request_body_bytes).await?;
    let force = call.flag("force");
    validate_patch_options(
        kind,
        call.param("fieldManager"),
        call.params.get("force").map(|_| force),
    )?;
    let manager = call.field_manager();
    let patch = OnePatch {
        call,
        kind,
        bytes: &bytes,
        manager: &manager,
        force,
    };
    // The first try starts from the watch cache's copy ([`Call::current`]); a dry run
    // answers what the store holds.
    let mut from_cache = !call.dry_run();
    for _ in 0..RETRIES {
        let Some(current) = call.current(from_cache).await? else {
            // A subresource never creates its object (an apply to `widgets/NAME/status`
            // would otherwise make a whole object).
            if kind != PatchType::Apply || call.request.subresource.is_some() {
                return Err(ApiError::NotFound(call.subject()));
            }
            let mut applied = parse_apply_body(&bytes)?;
            check_url_name(&applied, call.name())?;
            let warnings = field_validation(call, &mut applied)?;
            let object =
                server_side_apply(None, &applied, &manager, force, &crate::object_meta::now())
                    .map_err(|c| c.into_api_error(call.subject()))?;
            match create_object(call, object, warnings, Fields::Applied).await {
                Err(ApiError::AlreadyExists(_)) => continue,
                other => return other,
            }
        };
        from_cache = false;
        let cached = current.cached;
        let outcome = patch.try_on(current).await;
        if cached && !matches!(&outcome, Ok(Try::Done(committed, _)) if committed.wrote) {
            continue; // the cache's copy may be behind: again, from the store
        }
        match outcome {
            Ok(Try::Done(committed, warnings)) => {
                return Ok(committed.answer(StatusCode::OK, &warnings));
            }
            Ok(Try::Raced) => continue,
            Err(err) => return Err(err),
        }
    }
    Err(conflict(call))
}

/// One `PATCH` request's body and options, tried on a version of its object.
struct OnePatch<'a> {
    call: &'a Call,
    kind: PatchType,
    bytes: &'a [u8],
    manager: &'a str,
    force: bool,
}

/// How one try of a write ended, when not with an error.
enum Try {
    /// Committed (or nothing to write), with the warnings to answer.
    Done(Committed, Vec<String>),
    /// Lost a race with another writer, and the request set no resourceVersion: try again.
    Raced,
}

impl OnePatch<'_> {
    /// Patches `current` and writes the result on the condition that the object is still
    /// at `current.revision`.
    async fn try_on(&self, current: super::objects::Current) -> Result<Try, ApiError> {
        let OnePatch {
            call,
            kind,
            bytes,
            manager,
            force,
        } = *self;
        let old = current.object;
        let (mut new, warnings, conditional) = if kind == PatchType::Apply {
            let mut applied = parse_apply_body(bytes)?;
            check_url_name(&applied, call.name())?;
            let conditional = sets_resource_version(kind, &applied);
            let warnings = field_validation(call, &mut applied)?;
            let new = server_side_apply(
                Some(&old),
                &applied,
                manager,
                force,
                &crate::object_meta::now(),
            )
            .map_err(|c| c.into_api_error(call.subject()))?;
            (new, warnings, conditional)
        } else {
            let mut new = if kind == PatchType::StrategicMerge {
                apply_strategic_merge(&old, bytes)?
            } else {
                apply_patch(kind, &old, bytes, &call.state.config.limits)?
            };
            let conditional = serde_json::from_slice(bytes)
                .is_ok_and(|patch: Value| sets_resource_version(kind, &patch));
            let warnings = field_validation(call, &mut new)?;
            (new, warnings, conditional)
        };
        // A resourceVersion in the patch is a precondition; otherwise we retry races (the
        // patched object carries the resourceVersion read unless the patch changed it).
        if let Some(rv) = sent_resource_version(&new, &call.subject())?
            && rv != current.revision
        {
            return Err(conflict(call));
        }
        set_resource_version(&mut new, current.revision);
        // A status write keeps the stored metadata, so there the apply is recorded as an
        // update of the status (kube records it as an `Apply` of the subresource).
        let fields = if kind == PatchType::Apply && call.request.subresource.is_none() {
            Fields::Applied
        } else {
            Fields::Written
        };
        match commit_update(call, current.revision, &old, new, fields).await {
            Err(ApiError::Conflict { .. }) if !conditional => Ok(Try::Raced),
            Ok(committed) => Ok(Try::Done(committed, warnings)),
            Err(err) => Err(err),
        }
    }
}
