//! Authentication by bearer token (a kube-apiserver style token file) and
//! authorization by group.
//!
//! Groups: `outpost:admins` may do everything; `outpost:viewers` may get, list and
//! watch; `outpost:approvers` ([`APPROVERS`]) may read like viewers and decide on Plans
//! (`plans/NAME/approval`); runners (`outpost:runners`, authenticated by [`RunnerToken`]s) reach only
//! their own install's objects ([`authorize_runner`]). Health, readiness and
//! `/version` need no token. The stand-in cluster also takes EKS tokens
//! ([`eks_token`]) and authorizes their users by RBAC ([`rbac`]).

pub mod eks_token;
pub mod rbac;
mod runner_access;
mod runner_token;

use std::collections::HashMap;
use std::path::Path;

pub use outpost_api::plan_lifecycle::APPROVERS;
pub use runner_access::{
    Access, INSTALL_LABEL, InstallScope, Owner, SCOPE_FIELD, authorize_runner, object_forbidden,
};
pub use runner_token::{PREFIX as RUNNER_TOKEN_PREFIX, RUNNERS, RunnerToken, runner_install};

use crate::request::{RequestInfo, ResourceRequest};

/// The group whose members may do everything.
pub const ADMINS: &str = "outpost:admins";
/// The group whose members may read and watch everything.
pub const VIEWERS: &str = "outpost:viewers";

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// User name.
    pub name: String,
    /// User id.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// Bearer tokens and their users, from a CSV file like kube-apiserver's
/// `--token-auth-file`: `token,user,uid,"group1,group2"`.
#[derive(Clone, Debug, Default)]
pub struct TokenFile {
    users: HashMap<String, User>,
}

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file cannot be read.
    #[error("cannot read token file {path}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("token file line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

impl TokenFile {
    /// Reads a token file.
    pub fn read(path: &Path) -> Result<Self, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        text.parse()
    }

    /// Adds a token.
    pub fn insert(&mut self, token: impl Into<String>, user: User) {
        self.users.insert(token.into(), user);
    }

    /// The user a bearer token belongs to.
    pub fn authenticate(&self, token: &str) -> Option<&User> {
        self.users.get(token)
    }
}

impl std::str::FromStr for TokenFile {
    type Err = TokenFileError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut file = TokenFile::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_csv(line).map_err(|reason| TokenFileError::Line {
                line: i + 1,
                reason,
            })?;
            if fields.len() < 3 || fields[0].is_empty() || fields[1].is_empty() {
                return Err(TokenFileError::Line {
                    line: i + 1,
                    reason: "expected token,user,uid[,\"group1,group2\"]".into(),
                });
            }
            let groups = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            file.insert(
                fields[0].clone(),
                User {
                    name: fields[1].clone(),
                    uid: fields[2].clone(),
                    groups,
                },
            );
        }
        Ok(file)
    }
}

/// Splits one CSV line, honouring double quotes (`""` inside quotes is a quote).
fn split_csv(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', false) if field.is_empty() => quoted = true,
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            (',', false) => fields.push(std::mem::take(&mut field).trim().to_owned()),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err("unterminated quote".into());
    }
    fields.push(field.trim().to_owned());
    Ok(fields)
}

/// Decides whether a user may make a request.
pub trait Authorizer: Send + Sync + 'static {
    /// The request step: `Ok` with what the request may touch (the server checks each
    /// object against an [`Access::Install`] scope); `Err` with the Kubernetes-style
    /// reason to forbid.
    fn authorize(&self, user: &User, request: &RequestInfo) -> Result<Access, String>;
}

/// `outpost:admins` may do everything, `outpost:viewers` may read and watch,
/// `outpost:approvers` may read and watch and decide on Plans, runners reach their own
/// install ([`authorize_runner`]); any authenticated user may read discovery, OpenAPI
/// and version information.
#[derive(Clone, Debug, Default)]
pub struct GroupAuthorizer;

impl Authorizer for GroupAuthorizer {
    fn authorize(&self, user: &User, request: &RequestInfo) -> Result<Access, String> {
        let admin = user.groups.iter().any(|g| g == ADMINS);
        let approver = user.groups.iter().any(|g| g == APPROVERS);
        let viewer = approver || user.groups.iter().any(|g| g == VIEWERS);
        match request {
            RequestInfo::Resource(r) if admin || (viewer && r.verb.is_read()) => Ok(Access::Full),
            RequestInfo::Resource(r) if approver && decides_on_plan(r) => Ok(Access::Full),
            RequestInfo::Resource(r) => match runner_install(user) {
                Some((namespace, install)) => authorize_runner(namespace, install, r)
                    .map_err(|why| format!("{}: {why}", forbidden_message(user, r))),
                None => Err(forbidden_message(user, r)),
            },
            RequestInfo::NonResource { verb, .. } if admin || verb == "get" => Ok(Access::Full),
            RequestInfo::NonResource { path, verb } => Err(format!(
                "forbidden: User {:?} cannot {verb} path {path:?}",
                user.name
            )),
        }
    }
}

/// Whether `r` is a decision on a Plan (`PATCH`/`PUT plans/NAME/approval`).
fn decides_on_plan(r: &ResourceRequest) -> bool {
    r.group == outpost_api::GROUP
        && r.resource == "plans"
        && r.subresource.as_deref() == Some("approval")
        && r.name.is_some()
        && matches!(
            r.verb,
            crate::request::Verb::Patch | crate::request::Verb::Update
        )
}

/// The message kube-apiserver gives for a forbidden resource request.
pub fn forbidden_message(user: &User, r: &ResourceRequest) -> String {
    let resource = match &r.subresource {
        Some(sub) => format!("{}/{sub}", r.resource),
        None => r.resource.clone(),
    };
    let qualified = if r.group.is_empty() {
        r.resource.clone()
    } else {
        format!("{}.{}", r.resource, r.group)
    };
    let subject = match &r.name {
        Some(name) => format!("{qualified} {name:?}"),
        None => qualified,
    };
    let scope = match &r.namespace {
        Some(ns) => format!(" in the namespace {ns:?}"),
        None => " at the cluster scope".into(),
    };
    format!(
        "{subject} is forbidden: User {:?} cannot {} resource {resource:?} in API group {:?}{scope}",
        user.name,
        r.verb.as_str(),
        r.group
    )
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    #[test]
    fn parses_token_files_with_quoted_groups() {
        let file: TokenFile = "# comment\nt1,alice,1,\"outpost:admins,dev\"\nt2,bob,2\n"
            .parse()
            .unwrap();
        let alice = file.authenticate("t1").unwrap();
        assert_eq!(alice.groups, vec!["outpost:admins", "dev"]);
        assert!(file.authenticate("t2").unwrap().groups.is_empty());
        assert!(file.authenticate("nope").is_none());
        assert!("x".parse::<TokenFile>().is_err());
    }

    #[test]
    fn viewers_read_admins_write() {
        let viewer = User {
            name: "v".into(),
            uid: "1".into(),
            groups: vec![VIEWERS.into()],
        };
        let admin = User {
            name: "a".into(),
            uid: "2".into(),
            groups: vec![ADMINS.into()],
        };
        let get = RequestInfo::parse(
            &Method::GET,
            "/apis/outpost.dev/v1alpha1/namespaces/x/installs",
            true,
        );
        let delete = RequestInfo::parse(
            &Method::DELETE,
            "/apis/outpost.dev/v1alpha1/namespaces/x/installs/i",
            false,
        );
        assert!(GroupAuthorizer.authorize(&viewer, &get).is_ok());
        let err = GroupAuthorizer.authorize(&viewer, &delete).unwrap_err();
        assert_eq!(
            err,
            "installs.outpost.dev \"i\" is forbidden: User \"v\" cannot delete resource \"installs\" in API group \"outpost.dev\" in the namespace \"x\""
        );
        assert!(GroupAuthorizer.authorize(&admin, &delete).is_ok());
        let nobody = User {
            name: "n".into(),
            uid: "3".into(),
            groups: vec![],
        };
        assert!(GroupAuthorizer.authorize(&nobody, &get).is_err());
    }

    #[test]
    fn approvers_read_and_decide_on_plans_only() {
        let approver = User {
            name: "ann".into(),
            uid: "4".into(),
            groups: vec![APPROVERS.into()],
        };
        let viewer = User {
            name: "v".into(),
            uid: "1".into(),
            groups: vec![VIEWERS.into()],
        };
        let plans = "/apis/outpost.dev/v1alpha1/namespaces/x/plans";
        let request = |method: Method, path: &str| RequestInfo::parse(&method, path, false);
        let decide = request(Method::PATCH, &format!("{plans}/p/approval"));
        assert!(GroupAuthorizer.authorize(&approver, &decide).is_ok());
        assert!(
            GroupAuthorizer
                .authorize(&approver, &request(Method::GET, plans))
                .is_ok()
        );
        assert!(GroupAuthorizer.authorize(&viewer, &decide).is_err());
        for other in [
            request(Method::PATCH, &format!("{plans}/p/status")),
            request(Method::PATCH, &format!("{plans}/p")),
            request(Method::DELETE, &format!("{plans}/p")),
            request(
                Method::PATCH,
                "/apis/outpost.dev/v1alpha1/namespaces/x/installs/p/approval",
            ),
        ] {
            assert!(
                GroupAuthorizer.authorize(&approver, &other).is_err(),
                "{other:?}"
            );
        }
    }
}
