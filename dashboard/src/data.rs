//! What the pages show, read for the logged-in user: each kind is authorized exactly as
//! a `list` through the API would be (a runner token sees only its install's objects),
//! then read from the watch cache at one revision.

use std::sync::Arc;

use http::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Dashboard;
use outpost_apiserver::auth::{Access, SCOPE_FIELD, User};
use outpost_apiserver::registry::ResourceType;
use outpost_apiserver::request::RequestInfo;
use outpost_apiserver::selectors::Selectable;
use outpost_apiserver::status::ApiError;
use outpost_apiserver::storage::Revision;

use outpost_api::{GROUP, VERSION};

/// The served type of an Outpost kind by plural.
pub fn resource_type(state: &Dashboard, plural: &str) -> Result<Arc<ResourceType>, ApiError> {
    state
        .api
        .resource_type(GROUP, VERSION, plural)
        .ok_or_else(|| ApiError::Internal(format!("{plural}.{GROUP} is not served")))
}

/// What `user` may list of `plural` in every namespace, as the API's authorizer says.
pub fn list_access(state: &Dashboard, user: &User, plural: &str) -> Result<Access, ApiError> {
    let info = RequestInfo::parse(
        &Method::GET,
        &format!("/apis/{GROUP}/{VERSION}/{plural}"),
        false,
    );
    state.api.authorize(user, &info)
}

/// Whether `access` lets the user see `object`.
pub fn visible(access: &Access, object: &(impl Selectable + ?Sized)) -> bool {
    match access {
        Access::Full => true,
        Access::Install(scope) => scope.owns(object),
    }
}

/// Every object of `plural` the user may see, as JSON, and the revision they were read
/// at: from the watch cache, as the API serves lists.
pub async fn list_values(
    state: &Dashboard,
    user: &User,
    plural: &str,
) -> Result<(Vec<Value>, Revision), ApiError> {
    cached_values(state, user, plural, None, None)
}

/// The objects of `plural` the user may see, in `namespace` when given, and only those
/// that belong to `install` (`spec.install`) when given: then read through the watch
/// cache's install index, which looks only at that install's objects.
fn cached_values(
    state: &Dashboard,
    user: &User,
    plural: &str,
    namespace: Option<&str>,
    install: Option<&str>,
) -> Result<(Vec<Value>, Revision), ApiError> {
    let access = list_access(state, user, plural)?;
    let rt = resource_type(state, plural)?;
    let snapshot = state.api.cache(&rt)?.list(namespace, install, |object| {
        install.is_none_or(|i| object.field(SCOPE_FIELD) == i) && visible(&access, object)
    });
    let objects = snapshot
        .objects
        .iter()
        .map(|o| o.value())
        .collect::<Result<Vec<_>, _>>()?;
    Ok((objects, snapshot.revision))
}

/// Every object of `plural` the user may see, typed (objects that do not decode as `K`
/// are skipped with a warning: the page shows what it can).
pub async fn list<K: DeserializeOwned>(
    state: &Dashboard,
    user: &User,
    plural: &str,
) -> Result<Vec<K>, ApiError> {
    let (values, _) = list_values(state, user, plural).await?;
    Ok(decode_all(plural, values))
}

/// Every object of `plural` in `namespace` the user may see, typed.
pub fn list_in<K: DeserializeOwned>(
    state: &Dashboard,
    user: &User,
    plural: &str,
    namespace: &str,
) -> Result<Vec<K>, ApiError> {
    let (values, _) = cached_values(state, user, plural, Some(namespace), None)?;
    Ok(decode_all(plural, values))
}

/// The objects of `plural` in `namespace` that belong to `install` and the user may
/// see, typed, read by the install index (not by scanning the fleet).
pub fn list_of_install<K: DeserializeOwned>(
    state: &Dashboard,
    user: &User,
    plural: &str,
    namespace: &str,
    install: &str,
) -> Result<Vec<K>, ApiError> {
    let (values, _) = cached_values(state, user, plural, Some(namespace), Some(install))?;
    Ok(decode_all(plural, values))
}

/// The object `namespace/name` of `plural`, typed, if the user may see it (authorized
/// as a [`list`] is, so a runner token sees only its install's): one cache lookup.
pub async fn get<K: DeserializeOwned>(
    state: &Dashboard,
    user: &User,
    plural: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<K>, ApiError> {
    let access = list_access(state, user, plural)?;
    let rt = resource_type(state, plural)?;
    let found = state
        .api
        .cache(&rt)?
        .get(Some(namespace), name)
        .filter(|object| visible(&access, object.as_ref()))
        .map(|object| object.value())
        .transpose()?;
    Ok(decode_all(plural, found).into_iter().next())
}

/// Decodes objects as `K`, skipping (and logging) those that do not decode.
pub fn decode_all<K: DeserializeOwned>(
    plural: &str,
    values: impl IntoIterator<Item = Value>,
) -> Vec<K> {
    values
        .into_iter()
        .filter_map(|v| match serde_json::from_value(v) {
            Ok(k) => Some(k),
            Err(err) => {
                tracing::warn!(resource = plural, error = %err, "dashboard skips an object it cannot decode");
                None
            }
        })
        .collect()
}
