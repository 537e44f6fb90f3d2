//! Authentication and authorization, as plugins: bearer tokens from a token file (a
//! kube-apiserver style `--token-auth-file`), then each [`Authenticator`] the server is
//! built with; then a chain of [`Authorizer`]s, the first with an opinion deciding, as
//! kube-apiserver's union authorizer.
//!
//! The core's own authorizer is [`GroupAuthorizer`]: one group may do everything,
//! another read and watch. An authorizer may allow a request on a [`Scope`]: the
//! server then checks every object the request reads or writes against it (the stored
//! object of a get, update, patch or delete, the new object of a create, update or
//! patch, and each object of a list or watch). Health, readiness and `/version` need
//! no token. The stand-in cluster also takes EKS tokens ([`eks_token`]) and authorizes
//! their users by RBAC ([`rbac`]).

pub mod eks_token;
pub mod rbac;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::admission::Reads;
use crate::request::{RequestInfo, ResourceRequest};
use crate::selectors::Selectable;
use crate::status::ApiError;

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

/// Authenticates bearer tokens of one kind (the token file is always asked first).
pub trait Authenticator: Send + Sync + 'static {
    /// `Ok(None)` when `token` is not of this kind (the next authenticator is asked),
    /// `Ok(Some(user))` when it is valid, `Err` (401) when it is of this kind and not
    /// valid. Reads only what `reads` holds in memory: it runs on every request.
    fn authenticate(&self, token: &str, reads: &Reads<'_>) -> Result<Option<User>, ApiError>;
}

/// What an authorized request may touch.
#[derive(Clone, Debug)]
pub enum Access {
    /// Whatever the request names.
    Full,
    /// Only the objects in a scope.
    Scoped(Arc<dyn Scope>),
}

impl Access {
    /// Whether the request may touch `object`.
    pub fn allows(&self, object: &dyn Selectable) -> bool {
        match self {
            Access::Full => true,
            Access::Scoped(scope) => scope.owns(object),
        }
    }
}

/// The objects a request allowed on a scope may touch.
pub trait Scope: Send + Sync + std::fmt::Debug + 'static {
    /// Whether `object` is in the scope.
    fn owns(&self, object: &dyn Selectable) -> bool;

    /// The value the watch cache files every object of the scope under
    /// ([`crate::registry::IndexBy`]), when there is one: lists and watches then read
    /// only those objects.
    fn index_key(&self) -> Option<&str> {
        None
    }

    /// The 403 message for an object outside the scope.
    fn forbidden(&self, user: &User, request: &ResourceRequest) -> String {
        format!(
            "{}: the object is outside the user's scope",
            forbidden_message(user, request)
        )
    }
}

/// What one authorizer says of a request.
#[derive(Clone, Debug)]
pub enum Decision {
    /// Allowed, on what it may touch.
    Allow(Access),
    /// Forbidden, with the Kubernetes-style reason (no later authorizer is asked).
    Deny(String),
    /// Neither: the next authorizer decides.
    NoOpinion,
}

/// Decides whether a user may make a request.
pub trait Authorizer: Send + Sync + 'static {
    /// The request step of authorization.
    fn authorize(&self, user: &User, request: &RequestInfo) -> Decision;
}

/// The authorizers of a server, asked in order; a request no one allows is forbidden.
#[derive(Clone, Default)]
pub struct AuthorizerChain {
    authorizers: Vec<Arc<dyn Authorizer>>,
}

impl std::fmt::Debug for AuthorizerChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorizerChain")
            .field("authorizers", &self.authorizers.len())
            .finish()
    }
}

impl AuthorizerChain {
    /// Adds an authorizer at the end of the chain.
    pub fn push(&mut self, authorizer: Arc<dyn Authorizer>) {
        self.authorizers.push(authorizer);
    }

    /// `Ok` with what the request may touch, `Err` with why it is forbidden.
    pub fn authorize(&self, user: &User, request: &RequestInfo) -> Result<Access, String> {
        for authorizer in &self.authorizers {
            match authorizer.authorize(user, request) {
                Decision::Allow(access) => return Ok(access),
                Decision::Deny(why) => return Err(why),
                Decision::NoOpinion => {}
            }
        }
        Err(match request {
            RequestInfo::Resource(r) => forbidden_message(user, r),
            RequestInfo::NonResource { path, verb } => format!(
                "forbidden: User {:?} cannot {verb} path {path:?}",
                user.name
            ),
        })
    }
}

/// Members of `admins` may do everything, members of `viewers` may get, list and
/// watch; any authenticated user may read discovery, OpenAPI and version information.
#[derive(Clone, Debug)]
pub struct GroupAuthorizer {
    /// The group whose members may do everything.
    pub admins: String,
    /// The group whose members may read and watch everything.
    pub viewers: String,
}

impl Authorizer for GroupAuthorizer {
    fn authorize(&self, user: &User, request: &RequestInfo) -> Decision {
        let admin = user.groups.contains(&self.admins);
        let viewer = user.groups.contains(&self.viewers);
        match request {
            RequestInfo::Resource(r) if admin || (viewer && r.verb.is_read()) => {
                Decision::Allow(Access::Full)
            }
            RequestInfo::NonResource { verb, .. } if admin || verb == "get" => {
                Decision::Allow(Access::Full)
            }
            _ => Decision::NoOpinion,
        }
    }
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

    const ADMINS: &str = "example:admins";
    const VIEWERS: &str = "example:viewers";

    fn chain() -> AuthorizerChain {
        let mut chain = AuthorizerChain::default();
        chain.push(Arc::new(GroupAuthorizer {
            admins: ADMINS.into(),
            viewers: VIEWERS.into(),
        }));
        chain
    }

    #[test]
    fn parses_token_files_with_quoted_groups() {
        let file: TokenFile = "# comment\nt1,alice,1,\"example:admins,dev\"\nt2,bob,2\n"
            .parse()
            .unwrap();
        let alice = file.authenticate("t1").unwrap();
        assert_eq!(alice.groups, vec!["example:admins", "dev"]);
        assert!(file.authenticate("t2").unwrap().groups.is_empty());
        assert!(file.authenticate("nope").is_none());
        assert!("x".parse::<TokenFile>().is_err());
    }

    #[test]
    fn viewers_read_admins_write() {
        let user = |name: &str, groups: &[&str]| User {
            name: name.into(),
            uid: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        };
        let (viewer, admin, nobody) = (user("v", &[VIEWERS]), user("a", &[ADMINS]), user("n", &[]));
        let get = RequestInfo::parse(
            &Method::GET,
            "/apis/example.com/v1/namespaces/x/widgets",
            true,
        );
        let delete = RequestInfo::parse(
            &Method::DELETE,
            "/apis/example.com/v1/namespaces/x/widgets/w",
            false,
        );
        let chain = chain();
        assert!(chain.authorize(&viewer, &get).is_ok());
        let err = chain.authorize(&viewer, &delete).unwrap_err();
        assert_eq!(
            err,
            "widgets.example.com \"w\" is forbidden: User \"v\" cannot delete resource \"widgets\" in API group \"example.com\" in the namespace \"x\""
        );
        assert!(chain.authorize(&admin, &delete).is_ok());
        assert!(chain.authorize(&nobody, &get).is_err());
        let metrics = RequestInfo::parse(&Method::GET, "/metrics", false);
        assert!(chain.authorize(&nobody, &metrics).is_ok());
        let post = RequestInfo::parse(&Method::POST, "/metrics", false);
        assert_eq!(
            chain.authorize(&nobody, &post).unwrap_err(),
            "forbidden: User \"n\" cannot post path \"/metrics\""
        );
    }
}
