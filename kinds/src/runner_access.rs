//! What a runner token may do: read its own install's definition, execute its own
//! install's Plans and report about its own install — nothing else.
//!
//! Authorization has two steps. The request step ([`authorize_runner`]) looks at the
//! verb, resource, namespace, name and selectors. Where the answer depends on an object
//! (a Plan's `spec.install`), it allows with an [`InstallScope`] (`Access::Scoped`), and the
//! server checks every object the request reads or writes against it
//! ([`InstallScope::owns`]): the stored object of a get, update, patch or delete, the
//! new object of a create, update or patch, and each object of a list or watch.

use std::sync::Arc;

use outpost_api::GROUP;
use outpost_apiserver::auth::{Access, Authorizer, Decision, Scope, User, forbidden_message};
use outpost_apiserver::request::{RequestInfo, ResourceRequest, Verb};
use outpost_apiserver::selectors::{FieldSelector, LabelSelector, Operator, Selectable};

use crate::runner_token::runner_install;
/// The label controllers put on an install's objects.
pub const INSTALL_LABEL: &str = "outpost.dev/install";
/// The field by which an install's objects (Plans, DriftReports, AuditEvents) name it.
pub const SCOPE_FIELD: &str = "spec.install";

/// Authorizes runner users ([`authorize_runner`]); others are for the next authorizer.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunnerAuthorizer;

impl Authorizer for RunnerAuthorizer {
    fn authorize(&self, user: &User, request: &RequestInfo) -> Decision {
        let (RequestInfo::Resource(r), Some((namespace, install))) =
            (request, runner_install(user))
        else {
            return Decision::NoOpinion;
        };
        match authorize_runner(namespace, install, r) {
            Ok(access) => Decision::Allow(access),
            Err(why) => Decision::Deny(format!("{}: {why}", forbidden_message(user, r))),
        }
    }
}

/// Objects that belong to one install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallScope {
    /// The install's name (the namespace is checked on the request).
    pub install: String,
    /// How an object names its install.
    pub owner: Owner,
}

/// How an object names the install it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// `spec.install` (Plans, DriftReports, AuditEvents); the `outpost.dev/install`
    /// label, when set, must agree, so that a label selector cannot be fooled.
    SpecInstall,
    /// `metadata.name` (the install's Runner).
    Name,
}

impl Scope for InstallScope {
    fn owns(&self, object: &dyn Selectable) -> bool {
        match self.owner {
            Owner::Name => object.field("metadata.name") == self.install.as_str(),
            Owner::SpecInstall => {
                object.field(SCOPE_FIELD) == self.install.as_str()
                    && object
                        .label(INSTALL_LABEL)
                        .is_none_or(|l| l == self.install)
            }
        }
    }

    /// The install objects in this scope name by [`SCOPE_FIELD`] or [`INSTALL_LABEL`]
    /// (what the watch cache indexes), when the scope is about such objects.
    fn index_key(&self) -> Option<&str> {
        (self.owner == Owner::SpecInstall).then_some(self.install.as_str())
    }

    fn forbidden(&self, user: &User, request: &ResourceRequest) -> String {
        object_forbidden(user, request)
    }
}

/// The request step of a runner's authorization: `Err` with why it is forbidden.
pub fn authorize_runner(
    namespace: &str,
    install: &str,
    request: &ResourceRequest,
) -> Result<Access, &'static str> {
    if request.group != GROUP || request.namespace.as_deref() != Some(namespace) {
        return Err("a runner may only reach its install's namespace");
    }
    let verb = request.verb;
    let name_is_install = request.name.as_deref() == Some(install);
    let scope = |owner| {
        Access::Scoped(Arc::new(InstallScope {
            install: install.to_owned(),
            owner,
        }))
    };
    let own = scope(Owner::SpecInstall);
    let collection = matches!(verb, Verb::List | Verb::Watch);
    match (request.resource.as_str(), request.subresource.as_deref()) {
        ("installs", None) if verb == Verb::Get && name_is_install => Ok(Access::Full),
        ("installs", None) if collection && selects_name(request, install) => Ok(Access::Full),
        ("installs", _) => Err("a runner may only read its own Install"),
        ("apps" | "components" | "actions" | "policies" | "operationroles", None)
            if verb.is_read() =>
        {
            Ok(Access::Full)
        }
        // Its own install's InstallStack (named like the install): read it and report
        // what it read of the stack in the customer's account.
        ("installstacks", None) if verb == Verb::Get && name_is_install => Ok(own),
        ("installstacks", Some("status"))
            if matches!(verb, Verb::Get | Verb::Update | Verb::Patch) && name_is_install =>
        {
            Ok(own)
        }
        ("installstacks", _) => {
            Err("a runner may only read its own InstallStack and write its status")
        }
        ("plans", None) if verb == Verb::Get => Ok(own),
        ("plans", Some("status")) if matches!(verb, Verb::Get | Verb::Update | Verb::Patch) => {
            Ok(own)
        }
        ("runners", None | Some("status"))
            if matches!(verb, Verb::Create | Verb::Get | Verb::Update | Verb::Patch)
                && (request.name.is_none() || name_is_install) =>
        {
            Ok(scope(Owner::Name))
        }
        ("runners", None) if collection && selects_name(request, install) => Ok(Access::Full),
        ("driftreports", None)
            if matches!(verb, Verb::Create | Verb::Get | Verb::Update | Verb::Patch) =>
        {
            Ok(own)
        }
        ("auditevents", None) if matches!(verb, Verb::Create | Verb::Get) => Ok(own),
        ("plans" | "driftreports" | "auditevents", None) if collection => {
            if selects_install(request, install) {
                Ok(own)
            } else {
                Err(
                    "a runner must select its own install (labelSelector outpost.dev/install=INSTALL or fieldSelector spec.install=INSTALL)",
                )
            }
        }
        _ => Err("not allowed for runner tokens"),
    }
}

/// Whether the request's selectors restrict it to objects of `install`.
fn selects_install(request: &ResourceRequest, install: &str) -> bool {
    let by_label = request
        .label_selector
        .as_deref()
        .and_then(|s| LabelSelector::parse(s).ok())
        .is_some_and(|s| {
            s.requirements().iter().any(|r| {
                r.key == INSTALL_LABEL
                    && matches!(r.operator, Operator::Equals | Operator::In)
                    && r.values == [install]
            })
        });
    by_label || selects_field(request, "spec.install", install)
}

/// Whether the request's field selector restricts it to the object named `name`.
fn selects_name(request: &ResourceRequest, name: &str) -> bool {
    selects_field(request, "metadata.name", name)
}

fn selects_field(request: &ResourceRequest, field: &str, value: &str) -> bool {
    request
        .field_selector
        .as_deref()
        .and_then(|s| FieldSelector::parse(s).ok())
        .is_some_and(|s| {
            s.terms()
                .iter()
                .any(|t| t.field == field && t.value == value && !t.negated)
        })
}

/// The 403 message, kube-apiserver style, for an object outside the user's scope.
pub fn object_forbidden(user: &User, request: &ResourceRequest) -> String {
    format!(
        "{}: the object belongs to another install",
        forbidden_message(user, request)
    )
}

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::json;

    use super::*;

    fn request(method: Method, path: &str, query: Option<(&str, &str)>) -> ResourceRequest {
        let watch = query.is_some_and(|(k, _)| k == "watch");
        let RequestInfo::Resource(mut r) = RequestInfo::parse(&method, path, watch) else {
            panic!("{path} is a resource path");
        };
        match query {
            Some(("labelSelector", s)) => r.label_selector = Some(s.into()),
            Some(("fieldSelector", s)) => r.field_selector = Some(s.into()),
            _ => {}
        }
        r
    }

    const PLANS: &str = "/apis/outpost.dev/v1alpha1/namespaces/shop/plans";

    #[test]
    fn runners_reach_only_their_install() {
        let allow = |r: ResourceRequest| authorize_runner("shop", "b", &r);
        let get_plan = request(Method::GET, &format!("{PLANS}/p"), None);
        let Ok(Access::Scoped(scope)) = allow(get_plan) else {
            panic!("a plan get is scoped to the install");
        };
        assert!(scope.owns(&json!({"spec": {"install": "b"}})));
        assert!(!scope.owns(&json!({"spec": {"install": "a"}})));
        assert!(!scope.owns(
            &json!({"metadata": {"labels": {"outpost.dev/install": "a"}}, "spec": {"install": "b"}})
        ));
        assert!(allow(request(Method::GET, PLANS, None)).is_err());
        assert!(
            allow(request(
                Method::GET,
                PLANS,
                Some(("labelSelector", "outpost.dev/install=a"))
            ))
            .is_err()
        );
        assert!(
            allow(request(
                Method::GET,
                PLANS,
                Some(("labelSelector", "outpost.dev/install=b"))
            ))
            .is_ok()
        );
        assert!(
            allow(request(
                Method::GET,
                PLANS,
                Some(("fieldSelector", "spec.install=b"))
            ))
            .is_ok()
        );
        assert!(allow(request(Method::PATCH, &format!("{PLANS}/p"), None)).is_err());
        assert!(allow(request(Method::PATCH, &format!("{PLANS}/p/status"), None)).is_ok());
        let installs = "/apis/outpost.dev/v1alpha1/namespaces/shop/installs";
        assert!(allow(request(Method::GET, &format!("{installs}/b"), None)).is_ok());
        assert!(allow(request(Method::GET, &format!("{installs}/a"), None)).is_err());
        assert!(allow(request(Method::POST, &format!("{installs}/b/token"), None)).is_err());
        let other_ns = "/apis/outpost.dev/v1alpha1/namespaces/other/apps";
        assert!(allow(request(Method::GET, other_ns, None)).is_err());
        let events = "/apis/outpost.dev/v1alpha1/namespaces/shop/auditevents";
        assert!(allow(request(Method::POST, events, None)).is_ok());
        assert!(allow(request(Method::PUT, &format!("{events}/e"), None)).is_err());
        assert!(allow(request(Method::DELETE, &format!("{events}/e"), None)).is_err());
        let stacks = "/apis/outpost.dev/v1alpha1/namespaces/shop/installstacks";
        let Ok(Access::Scoped(scope)) =
            allow(request(Method::PATCH, &format!("{stacks}/b/status"), None))
        else {
            panic!("a runner may write its own InstallStack's status");
        };
        assert!(scope.owns(&json!({"spec": {"install": "b"}})));
        assert!(!scope.owns(&json!({"spec": {"install": "a"}})));
        assert!(allow(request(Method::GET, &format!("{stacks}/b"), None)).is_ok());
        assert!(allow(request(Method::PATCH, &format!("{stacks}/a/status"), None)).is_err());
        assert!(allow(request(Method::PATCH, &format!("{stacks}/b"), None)).is_err());
        assert!(allow(request(Method::DELETE, &format!("{stacks}/b"), None)).is_err());
        assert!(allow(request(Method::GET, stacks, None)).is_err());
        let runners = "/apis/outpost.dev/v1alpha1/namespaces/shop/runners";
        assert!(allow(request(Method::PUT, &format!("{runners}/b/status"), None)).is_ok());
        assert!(allow(request(Method::PUT, &format!("{runners}/a"), None)).is_err());
    }
}
