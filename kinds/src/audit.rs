//! The audit log is append-only: an `AuditEvent` is written once, by the runner token
//! of its install, as the next link of that install's chain, and never changed or
//! deleted afterwards — by anyone, admins included.
//!
//! * Update, patch, delete and deletecollection of `auditevents` are 405
//!   `MethodNotAllowed` for every user the authorizer lets through ([`refuse_change`]).
//! * A create is 403 unless the user is the runner of the event's install
//!   (`spec.install`); 422 unless the event is named `<install>-<sequence>`, the name
//!   the runner ships it under and `outpost audit verify` expects; 409 `Conflict`
//!   unless it is the next link: sequence 0, or the event `<install>-<sequence - 1>` is
//!   stored and its `hash` is this event's `previousHash` ([`next_link`]). An event
//!   whose name is taken is 409 `AlreadyExists` from the store. Since no event is ever
//!   deleted, the chain so written has no gaps.

use outpost_apiserver::admission::{Admission, Attributes, Operation, Reads};
use outpost_apiserver::auth::{User, forbidden_message};
use outpost_apiserver::registry::ResourceType;
use outpost_apiserver::request::{ResourceRequest, Verb};
use outpost_apiserver::status::{ApiError, Subject};
use outpost_apiserver::storage::Store;
use serde_json::Value;

use crate::runner_token::runner_install;

/// The admission plugin that keeps the audit log append-only.
#[derive(Clone, Copy, Debug, Default)]
pub struct AppendOnlyAuditLog;

#[async_trait::async_trait]
impl Admission for AppendOnlyAuditLog {
    fn admit_request(&self, rt: &ResourceType, request: &ResourceRequest) -> Result<(), ApiError> {
        refuse_change(rt, request)
    }

    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        reads: &Reads<'_>,
    ) -> Result<(), ApiError> {
        if attributes.operation != Operation::Create {
            return Ok(());
        }
        admit_create(
            reads.store(),
            attributes.rt,
            attributes.user,
            attributes.request,
            object,
        )
        .await
    }
}

/// Why the audit log refuses changes, said in every 405.
pub const APPEND_ONLY: &str =
    "the audit log is append-only: audit events are never updated, patched or deleted";

/// Whether `rt` is the audit log's kind.
pub fn is_audit_log(rt: &ResourceType) -> bool {
    rt.group == outpost_api::GROUP && rt.kind == "AuditEvent"
}

/// 405 for any request that would change or delete an `AuditEvent`.
pub fn refuse_change(rt: &ResourceType, request: &ResourceRequest) -> Result<(), ApiError> {
    if !is_audit_log(rt) {
        return Ok(());
    }
    match request.verb {
        Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection => {
            Err(ApiError::AppendOnly {
                subject: Subject::of(rt, request.name.as_deref().unwrap_or_default()),
                why: APPEND_ONLY,
            })
        }
        Verb::Get | Verb::List | Verb::Watch | Verb::Create => Ok(()),
    }
}

/// What the create of `event` (decoded, defaulted, named) must pass, checked against
/// the stored events of the request's namespace.
pub async fn admit_create(
    store: &dyn Store,
    rt: &ResourceType,
    user: &User,
    request: &ResourceRequest,
    event: &Value,
) -> Result<(), ApiError> {
    if !is_audit_log(rt) {
        return Ok(());
    }
    let text = |pointer: &str| event.pointer(pointer).and_then(Value::as_str);
    let name = text("/metadata/name").unwrap_or_default();
    let subject = Subject::of(rt, name);
    let install = text("/spec/install").unwrap_or_default();
    let namespace = request.namespace.as_deref().unwrap_or_default();
    if runner_install(user) != Some((namespace, install)) {
        return Err(ApiError::Forbidden(format!(
            "{}: only the runner token of install {install:?} may append to its audit log",
            forbidden_message(user, request)
        )));
    }
    let Some(sequence) = event.pointer("/spec/sequence").and_then(Value::as_u64) else {
        return Ok(()); // the kind's validation has already answered 422
    };
    let expected = format!("{install}-{sequence}");
    if name != expected {
        return Err(ApiError::Invalid {
            subject,
            causes: vec![outpost_api::FieldError::invalid(
                "metadata.name",
                name,
                format!("an audit event is named <spec.install>-<spec.sequence>: {expected}"),
            )],
        });
    }
    let previous = match sequence.checked_sub(1) {
        None => None,
        Some(before) => {
            let key = rt.key(Some(namespace), &format!("{install}-{before}"));
            let kv = store
                .get(&key)
                .await
                .map_err(|e| ApiError::from_store(e, subject.clone()))?;
            Some(match kv {
                Some(kv) => outpost_apiserver::object_meta::from_store(&kv)?,
                None => Value::Null,
            })
        }
    };
    match next_link(
        install,
        sequence,
        text("/spec/previousHash"),
        previous.as_ref(),
    ) {
        Ok(()) => Ok(()),
        Err(reason) => Err(ApiError::Conflict { subject, reason }),
    }
}

/// Whether an event with `sequence` and `previous_hash` is the next link after
/// `previous` (the stored event `sequence - 1`, `Null` when there is none; `None` for
/// the first event): `Err` with why not.
pub fn next_link(
    install: &str,
    sequence: u64,
    previous_hash: Option<&str>,
    previous: Option<&Value>,
) -> Result<(), String> {
    let Some(previous) = previous else {
        return Ok(()); // sequence 0: the kind's validation forbids a previousHash
    };
    let before = sequence - 1;
    if previous.is_null() {
        return Err(format!(
            "sequence {sequence} is not the next of install {install:?}'s audit log: event {install}-{before} is not stored"
        ));
    }
    let stored = previous.pointer("/spec/hash").and_then(Value::as_str);
    if stored != previous_hash {
        return Err(format!(
            "spec.previousHash {:?} is not the hash of event {install}-{before} ({:?})",
            previous_hash.unwrap_or_default(),
            stored.unwrap_or_default()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_event_links_to_the_stored_one_before_it() {
        assert_eq!(next_link("acme", 0, None, None), Ok(()));
        let first = json!({"spec": {"hash": "sha256:aa"}});
        assert_eq!(
            next_link("acme", 1, Some("sha256:aa"), Some(&first)),
            Ok(())
        );
        assert_eq!(
            next_link("acme", 1, Some("sha256:bb"), Some(&first)),
            Err(
                "spec.previousHash \"sha256:bb\" is not the hash of event acme-0 (\"sha256:aa\")"
                    .into()
            )
        );
        assert_eq!(
            next_link("acme", 5, Some("sha256:aa"), Some(&Value::Null)),
            Err("sequence 5 is not the next of install \"acme\"'s audit log: event acme-4 is not stored".into())
        );
    }
}
