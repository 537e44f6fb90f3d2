//! Kubernetes RBAC for the stand-in cluster's EKS-authenticated users
//! ([`super::eks_token`]): a request is allowed when a rule of a (Cluster)Role bound to
//! the user or one of their groups matches its verb, API group, resource and name —
//! `ClusterRoleBinding`s everywhere, `RoleBinding`s in their namespace. Nothing else
//! grants them anything; discovery (`GET` of non-resource paths) is open to them, as
//! `system:discovery` is.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};

use super::{Access, User, forbidden_message};
use crate::request::{RequestInfo, ResourceRequest};

/// The RBAC objects a request is decided on: every ClusterRole and ClusterRoleBinding,
/// the Roles and RoleBindings of the request's namespace.
#[derive(Clone, Debug, Default)]
pub struct RbacObjects {
    /// ClusterRoles.
    pub cluster_roles: Vec<ClusterRole>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// Roles of the request's namespace.
    pub roles: Vec<Role>,
    /// RoleBindings of the request's namespace.
    pub role_bindings: Vec<RoleBinding>,
}

/// Whether `objects` let `user` make `request`; `Err` with kube-apiserver's message.
pub fn authorize(
    objects: &RbacObjects,
    user: &User,
    request: &RequestInfo,
) -> Result<Access, String> {
    match request {
        RequestInfo::NonResource { verb, .. } if verb == "get" => Ok(Access::Full),
        RequestInfo::NonResource { path, verb } => Err(format!(
            "forbidden: User {:?} cannot {verb} path {path:?}",
            user.name
        )),
        RequestInfo::Resource(r) if objects.allow(user, r) => Ok(Access::Full),
        RequestInfo::Resource(r) => Err(forbidden_message(user, r)),
    }
}

impl RbacObjects {
    fn allow(&self, user: &User, request: &ResourceRequest) -> bool {
        let cluster_wide = self
            .cluster_role_bindings
            .iter()
            .filter(|b| binds(b.subjects.as_deref(), user))
            .flat_map(|b| self.rules(&b.role_ref, None));
        let namespaced = self
            .role_bindings
            .iter()
            .filter(|b| b.metadata.namespace.is_some() && b.metadata.namespace == request.namespace)
            .filter(|b| binds(b.subjects.as_deref(), user))
            .flat_map(|b| self.rules(&b.role_ref, b.metadata.namespace.as_deref()));
        cluster_wide
            .chain(namespaced)
            .any(|rule| matches(rule, request))
    }

    /// The rules of the role `role_ref` names (a Role in `namespace`, or a ClusterRole).
    fn rules<'a>(&'a self, role_ref: &RoleRef, namespace: Option<&str>) -> Vec<&'a PolicyRule> {
        let rules = match (role_ref.kind.as_str(), namespace) {
            ("ClusterRole", _) => self
                .cluster_roles
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(&role_ref.name))
                .and_then(|r| r.rules.as_ref()),
            ("Role", Some(ns)) => self
                .roles
                .iter()
                .find(|r| {
                    r.metadata.name.as_deref() == Some(&role_ref.name)
                        && r.metadata.namespace.as_deref() == Some(ns)
                })
                .and_then(|r| r.rules.as_ref()),
            _ => None,
        };
        rules.map(|r| r.iter().collect()).unwrap_or_default()
    }
}

/// Whether `subjects` name `user` or one of their groups.
fn binds(subjects: Option<&[Subject]>, user: &User) -> bool {
    subjects
        .unwrap_or_default()
        .iter()
        .any(|s| match s.kind.as_str() {
            "User" => s.name == user.name,
            "Group" => user.groups.contains(&s.name),
            _ => false,
        })
}

/// Whether `rule` covers `request`'s verb, group, resource (`resource/subresource`)
/// and name.
fn matches(rule: &PolicyRule, request: &ResourceRequest) -> bool {
    let has = |list: Option<&Vec<String>>, value: &str| {
        list.is_some_and(|l| l.iter().any(|v| v == "*" || v == value))
    };
    let resource = match &request.subresource {
        Some(sub) => format!("{}/{sub}", request.resource),
        None => request.resource.clone(),
    };
    let named = match (&rule.resource_names, &request.name) {
        (None, _) => true,
        (Some(names), _) if names.is_empty() => true,
        (Some(names), Some(name)) => names.contains(name),
        (Some(_), None) => false,
    };
    has(Some(&rule.verbs), request.verb.as_str())
        && has(rule.api_groups.as_ref(), &request.group)
        && has(rule.resources.as_ref(), &resource)
        && named
}

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::json;

    use super::*;

    fn objects() -> RbacObjects {
        fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
            serde_json::from_value(v).expect("a well-formed RBAC object")
        }
        RbacObjects {
            cluster_roles: vec![from(json!({
                "metadata": {"name": "deployer"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                           "verbs": ["get", "list", "create", "patch"]}]
            }))],
            cluster_role_bindings: vec![from(json!({
                "metadata": {"name": "provision"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "deployer"},
                "subjects": [{"kind": "Group", "name": "example:provision"}]
            }))],
            roles: vec![from(json!({
                "metadata": {"name": "status", "namespace": "shop"},
                "rules": [{"apiGroups": ["apps"], "resources": ["deployments/status"],
                           "resourceNames": ["web"], "verbs": ["get"]}]
            }))],
            role_bindings: vec![from(json!({
                "metadata": {"name": "m", "namespace": "shop"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "status"},
                "subjects": [{"kind": "User", "name": "maintenance:p"}]
            }))],
        }
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            uid: "aws-iam-authenticator:1:r:s".into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    fn request(method: Method, path: &str) -> RequestInfo {
        RequestInfo::parse(&method, path, false)
    }

    #[test]
    fn bound_rules_allow_and_nothing_else_does() {
        let o = objects();
        let provision = user("provision:p", &["example:provision"]);
        let maintenance = user("maintenance:p", &["example:maintenance"]);
        let create = request(Method::POST, "/api/v1/namespaces/shop/configmaps");
        assert!(authorize(&o, &provision, &create).is_ok());
        assert_eq!(
            authorize(&o, &maintenance, &create).unwrap_err(),
            "configmaps is forbidden: User \"maintenance:p\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"shop\""
        );
        let delete = request(Method::DELETE, "/api/v1/namespaces/shop/configmaps/c");
        assert!(authorize(&o, &provision, &delete).is_err());
        let status = "/apis/apps/v1/namespaces/shop/deployments";
        assert!(
            authorize(
                &o,
                &maintenance,
                &request(Method::GET, &format!("{status}/web/status"))
            )
            .is_ok()
        );
        assert!(
            authorize(
                &o,
                &maintenance,
                &request(Method::GET, &format!("{status}/db/status"))
            )
            .is_err()
        );
        assert!(
            authorize(
                &o,
                &maintenance,
                &request(Method::GET, &format!("{status}/web"))
            )
            .is_err()
        );
        // A RoleBinding grants nothing outside its namespace.
        let elsewhere = "/apis/apps/v1/namespaces/other/deployments/web/status";
        assert!(authorize(&o, &maintenance, &request(Method::GET, elsewhere)).is_err());
        assert!(authorize(&o, &maintenance, &request(Method::GET, "/apis")).is_ok());
        assert!(authorize(&RbacObjects::default(), &provision, &create).is_err());
    }

    /// CustomResourceDefinitions are a resource like any other: a role gets to write
    /// them only by a rule that names them (what the stand-in's aws-auth mapping gives
    /// the provision role and not the maintenance role).
    #[test]
    fn crds_are_written_only_by_a_role_granted_them() {
        let mut o = objects();
        o.cluster_roles[0].rules.as_mut().unwrap().push(
            serde_json::from_value(json!({"apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"], "verbs": ["create", "patch"]}))
            .unwrap(),
        );
        let provision = user("provision:p", &["example:provision"]);
        let maintenance = user("maintenance:p", &["example:maintenance"]);
        let create = request(
            Method::POST,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        );
        assert!(authorize(&o, &provision, &create).is_ok());
        assert_eq!(
            authorize(&o, &maintenance, &create).unwrap_err(),
            "customresourcedefinitions.apiextensions.k8s.io is forbidden: User \"maintenance:p\" cannot create resource \"customresourcedefinitions\" in API group \"apiextensions.k8s.io\" at the cluster scope"
        );
    }
}
