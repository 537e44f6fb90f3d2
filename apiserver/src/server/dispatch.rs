//! The one request handler: what is it, who asks, may they, then answer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, Request};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode, header};

use super::ServerState;
use super::{discovery, fence, inflight, list, objects, watch, write};
use crate::apiextensions;
use crate::auth::eks_token::AWS_AUTH;
use crate::auth::{Access, User, eks_token, rbac};
use crate::request::{RequestInfo, ResourceRequest, Verb};
use crate::standin_cluster::RBAC;
use crate::status::ApiError;

/// Query parameters, by name.
pub type Params = HashMap<String, String>;

/// Everything a resource handler (the core's, or a plugin's [`super::Subresource`])
/// needs about the request.
pub struct Call {
    pub(crate) state: Arc<ServerState>,
    /// The type the request is about.
    pub rt: Arc<crate::registry::ResourceType>,
    /// What the request is about.
    pub request: ResourceRequest,
    /// Query parameters.
    pub params: Params,
    /// Request headers.
    pub headers: HeaderMap,
    /// Who asks.
    pub user: User,
    /// What the authorizer allowed the request to touch.
    pub access: Access,
}

impl Call {
    /// A query parameter that is `true` or `1`.
    pub fn flag(&self, name: &str) -> bool {
        matches!(
            self.params.get(name).map(String::as_str),
            Some("true" | "1")
        )
    }

    /// A query parameter, if present and not empty.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The request's namespace (path), for namespaced types.
    pub fn namespace(&self) -> Option<&str> {
        self.request.namespace.as_deref()
    }

    /// The object step of authorization: 403 if `object` is outside the user's scope.
    pub fn check_access(&self, object: &serde_json::Value) -> Result<(), ApiError> {
        match &self.access {
            Access::Scoped(scope) if !scope.owns(object) => Err(ApiError::Forbidden(
                scope.forbidden(&self.user, &self.request),
            )),
            _ => Ok(()),
        }
    }

    /// What plugins may read (types, caches, store).
    pub fn reads(&self) -> crate::admission::Reads<'_> {
        self.state.reads()
    }

    /// The request body, within the server's limit (413 above).
    pub async fn read_body(&self, body: axum::body::Body) -> Result<bytes::Bytes, ApiError> {
        super::body::read(body, self.state.config.limits.max_request_body_bytes).await
    }

    /// Waits until the watch caches have every store change up to `revision`, at most
    /// `timeout`: whether they have.
    pub async fn wait_for_caches(
        &self,
        revision: crate::storage::Revision,
        timeout: Duration,
    ) -> bool {
        self.state.progress.wait_for(revision, timeout).await
    }

    /// The named object, answered as a `GET` of it would be.
    pub async fn get_object(&self) -> Result<Response, ApiError> {
        objects::get(self).await
    }

    /// The `Accept` header.
    pub fn accept(&self) -> &str {
        self.headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
    }
}

pub async fn dispatch(state: Arc<ServerState>, request: Request) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let params: Params = Query::try_from_uri(request.uri())
        .map(|Query(p)| p)
        .unwrap_or_default();
    let watch = matches!(params.get("watch").map(String::as_str), Some("true" | "1"));
    let mut info = RequestInfo::parse(&method, &path, watch);
    if let RequestInfo::Resource(r) = &mut info {
        r.label_selector = params.get("labelSelector").cloned();
        r.field_selector = params.get("fieldSelector").cloned();
    }
    let (verb, resource) = match &info {
        RequestInfo::Resource(r) => (r.verb.as_str().to_owned(), r.resource.clone()),
        RequestInfo::NonResource { verb, .. } => (verb.clone(), String::new()),
    };
    let response = match answer(&state, request, info, params).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    };
    state
        .metrics
        .observe_request(&verb, &resource, response.status(), started.elapsed());
    response
}

async fn answer(
    state: &Arc<ServerState>,
    request: Request,
    info: RequestInfo,
    params: Params,
) -> Result<Response, ApiError> {
    let path = request.uri().path().trim_end_matches('/').to_owned();
    // Health and version need no credentials, as with kube-apiserver's default RBAC.
    match path.as_str() {
        "/healthz" | "/livez" => return Ok((StatusCode::OK, "ok").into_response()),
        "/readyz" => return Ok(readyz(state).await),
        "/version" => return Ok(discovery::version()),
        _ => {}
    }
    let user = authenticate(state, request.headers()).await?;
    // After authentication, as kube-apiserver: a client without credentials is answered
    // 401 at once and never holds a slot.
    let slot = match &info {
        RequestInfo::Resource(r) if r.verb == Verb::Watch => {
            state.inflight.open_watch(&user.name)?
        }
        RequestInfo::Resource(r) => state
            .inflight
            .admit(!matches!(r.verb, Verb::Get | Verb::List))?,
        RequestInfo::NonResource { verb, .. } => state.inflight.admit(verb != "get")?,
    };
    let response = answer_as(state, request, info, params, path, user).await?;
    Ok(inflight::hold(response, slot))
}

/// [`answer`] once `user` is known and holds a slot.
async fn answer_as(
    state: &Arc<ServerState>,
    request: Request,
    info: RequestInfo,
    params: Params,
    path: String,
    user: User,
) -> Result<Response, ApiError> {
    let access = authorize(state, &user, &info)?;
    let resource = match info {
        RequestInfo::NonResource { .. } => {
            if request.method() != Method::GET && request.method() != Method::HEAD {
                return Err(ApiError::MethodNotAllowed);
            }
            let accept = request
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            return match path.as_str() {
                "/metrics" => Ok(state.metrics.render(state)),
                _ => discovery::answer(state, &path, &accept),
            };
        }
        RequestInfo::Resource(r) => r,
    };
    let rt = state
        .registry()
        .get(&resource.group, &resource.version, &resource.resource)
        .ok_or(ApiError::NoRoute)?;
    if !rt.namespaced && resource.namespace.is_some() {
        return Err(ApiError::NoRoute);
    }
    let plugin = match resource.subresource.as_deref() {
        None => None,
        Some("status") if rt.status_subresource => None,
        Some(name) => Some(
            state
                .subresource(&rt, name)
                .ok_or(ApiError::NoRoute)?
                .clone(),
        ),
    };
    let (parts, body) = request.into_parts();
    let call = Call {
        state: state.clone(),
        rt,
        request: resource,
        params,
        headers: parts.headers,
        user,
        access,
    };
    if let Some(plugin) = plugin.as_ref().filter(|p| !p.fenced()) {
        return plugin.answer(&call, body).await;
    }
    state
        .config
        .admission
        .admit_request(&call.rt, &call.request)?;
    if !matches!(call.request.verb, Verb::Get | Verb::List | Verb::Watch) {
        fence::check(&call).await?;
    }
    if let Some(plugin) = plugin {
        return plugin.answer(&call, body).await;
    }
    let defines_types = apiextensions::defines_types(&call.rt) && !call.request.verb.is_read();
    let answer = match call.request.verb {
        Verb::Get => objects::get(&call).await,
        Verb::List => list::list(&call).await,
        Verb::Watch => watch::watch(call).await,
        Verb::Create => {
            if call.request.name.is_some() {
                return Err(ApiError::MethodNotAllowed);
            }
            write::create(&call, body).await
        }
        Verb::Update => write::update(&call, body).await,
        Verb::Patch => write::patch(&call, body).await,
        Verb::Delete => objects::delete(&call, body).await,
        Verb::DeleteCollection => objects::delete_collection(&call).await,
    };
    if answer.is_ok() && defines_types {
        // A CRD's types are served once the caches have its write: answer after that.
        await_caches(state).await;
    }
    answer
}

/// Waits (at most 10 s) until the watch caches have every change the store has now.
async fn await_caches(state: &ServerState) {
    if let Ok(revision) = state.store.current_revision().await
        && !state
            .progress
            .wait_for(revision, Duration::from_secs(10))
            .await
    {
        tracing::warn!(revision, "the watch caches are behind the store");
    }
}

/// How long `/readyz` waits for the store before it calls it down; below the Helm
/// chart's probe timeout (3 s), so the probe gets an answer rather than a timeout.
const STORE_READY_TIMEOUT: Duration = Duration::from_secs(2);

/// `/readyz`: ready while the store answers a read, as kube-apiserver's readiness
/// includes etcd. `/livez` stays `ok` meanwhile: a server cut off from its store is
/// taken out of its Service, not restarted.
async fn readyz(state: &ServerState) -> Response {
    let failure =
        match tokio::time::timeout(STORE_READY_TIMEOUT, state.store.current_revision()).await {
            Ok(Ok(_)) => return (StatusCode::OK, "ok").into_response(),
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("no answer within {} s", STORE_READY_TIMEOUT.as_secs_f32()),
        };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("[-]store failed: {failure}\nreadyz check failed\n"),
    )
        .into_response()
}

/// The user of the bearer token: from the token file, the EKS authenticator, or the
/// first plugin [`crate::auth::Authenticator`] that knows the token.
async fn authenticate(state: &ServerState, headers: &HeaderMap) -> Result<User, ApiError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or(ApiError::Unauthorized)?;
    authenticate_token(state, token).await
}

/// The RBAC objects `info` is decided on, from the watch caches: every cluster-scoped
/// one, and the namespaced ones of its namespace.
fn rbac_objects(state: &ServerState, info: &RequestInfo) -> Result<rbac::RbacObjects, ApiError> {
    fn read<T: serde::de::DeserializeOwned>(
        state: &ServerState,
        plural: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<T>, ApiError> {
        let Some(rt) = state.config.registry.get(RBAC, "v1", plural) else {
            return Ok(Vec::new());
        };
        Ok(state
            .cache(&rt)?
            .list(namespace, None, |_| true)
            .objects
            .iter()
            .filter_map(|o| serde_json::from_slice(&o.json()).ok())
            .collect())
    }
    let namespace = match info {
        RequestInfo::Resource(r) => r.namespace.as_deref(),
        RequestInfo::NonResource { .. } => None,
    };
    // Namespaced objects only for a namespaced request: cluster-scoped requests are
    // decided on ClusterRoleBindings alone.
    let namespaced = namespace.is_some();
    Ok(rbac::RbacObjects {
        cluster_roles: read(state, "clusterroles", None)?,
        cluster_role_bindings: read(state, "clusterrolebindings", None)?,
        roles: if namespaced {
            read(state, "roles", namespace)?
        } else {
            Vec::new()
        },
        role_bindings: if namespaced {
            read(state, "rolebindings", namespace)?
        } else {
            Vec::new()
        },
    })
}

/// What `info` of `user` may touch: RBAC for the stand-in cluster's EKS users, the
/// configured authorizer for everyone else.
pub fn authorize(state: &ServerState, user: &User, info: &RequestInfo) -> Result<Access, ApiError> {
    if eks_token::is_eks_user(user) {
        rbac::authorize(&rbac_objects(state, info)?, user, info)
    } else {
        state.authorize(user, info)
    }
    .map_err(ApiError::Forbidden)
}

/// The user a bearer token belongs to (the dashboard's session cookie carries one too).
pub async fn authenticate_token(state: &ServerState, token: &str) -> Result<User, ApiError> {
    if let Some(user) = state.config.tokens.authenticate(token) {
        return Ok(user.clone());
    }
    if let (Some(eks), true) = (&state.config.eks, token.starts_with(eks_token::PREFIX)) {
        let roles = state
            .config
            .registry
            .get("", "v1", "configmaps")
            .and_then(|rt| state.cache(&rt).ok()?.get(Some(AWS_AUTH.0), AWS_AUTH.1))
            .and_then(|cm| cm.value().ok())
            .map(|cm| eks_token::map_roles(&cm))
            .unwrap_or_default();
        return eks
            .authenticate(token, std::time::SystemTime::now(), &roles)
            .await
            .map_err(|error| {
                tracing::info!(%error, "an EKS token is refused");
                ApiError::Unauthorized
            });
    }
    let reads = state.reads();
    for authenticator in &state.config.authenticators {
        if let Some(user) = authenticator.authenticate(token, &reads)? {
            return Ok(user);
        }
    }
    Err(ApiError::Unauthorized)
}
