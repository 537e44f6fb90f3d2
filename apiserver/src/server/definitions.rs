//! Writes of CustomResourceDefinitions: the checks that need the served types, and the
//! status a stored CRD gets ([`crate::apiextensions`]).

use serde_json::Value;

use super::dispatch::Call;
use crate::apiextensions;
use crate::object_meta::WriteScope;
use crate::status::{ApiError, Subject};

/// For a CRD written through the main resource: 422 when its names clash with a served
/// type or an update changes what may not change; otherwise its status is set to
/// accepted and established. Other kinds, and `/status` writes, pass unchanged.
pub(super) fn admit(
    call: &Call,
    object: &mut Value,
    old: Option<&Value>,
    name: &str,
) -> Result<(), ApiError> {
    if !apiextensions::defines_types(&call.rt) || call.scope() == WriteScope::Status {
        return Ok(());
    }
    let causes = apiextensions::validate(
        &call.state.registry(),
        call.state.served.base(),
        object,
        old,
    );
    if !causes.is_empty() {
        return Err(ApiError::Invalid {
            subject: Subject::of(&call.rt, name),
            causes,
        });
    }
    apiextensions::accept(object, old);
    Ok(())
}
