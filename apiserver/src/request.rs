//! What a request is about, parsed from its method, path and query the way the
//! Kubernetes API server's `RequestInfoFactory` does.

use http::Method;

use crate::status::ApiError;
use crate::storage::Revision;

/// The verb of a resource request, as authorization sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// GET one object.
    Get,
    /// GET a collection.
    List,
    /// GET a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE one object.
    Delete,
    /// DELETE a collection.
    DeleteCollection,
}

impl Verb {
    /// The lowercase name used in RBAC and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    /// Whether the verb only reads.
    pub fn is_read(self) -> bool {
        matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
}

/// A request for a resource: `/api/v1/...` or `/apis/GROUP/VERSION/...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRequest {
    /// The verb.
    pub verb: Verb,
    /// API group, empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Namespace from the path, if any.
    pub namespace: Option<String>,
    /// Plural resource name.
    pub resource: String,
    /// Object name, if any.
    pub name: Option<String>,
    /// Subresource (`status`), if any.
    pub subresource: Option<String>,
    /// The `labelSelector` of a list or watch (set by the server from the query, as
    /// kube-apiserver does for authorization with selectors).
    pub label_selector: Option<String>,
    /// The `fieldSelector` of a list or watch.
    pub field_selector: Option<String>,
}

/// What a request is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestInfo {
    /// A resource request.
    Resource(ResourceRequest),
    /// Anything else (`/version`, discovery, `/openapi/v3`, `/metrics`, ...).
    NonResource {
        /// The path.
        path: String,
        /// `get` for GET/HEAD, else the lowercase method.
        verb: String,
    },
}

impl RequestInfo {
    /// Parses a request. `watch` is the `watch` query parameter.
    pub fn parse(method: &Method, path: &str, watch: bool) -> RequestInfo {
        let non_resource = || RequestInfo::NonResource {
            path: path.to_owned(),
            verb: match *method {
                Method::GET | Method::HEAD => "get".into(),
                ref other => other.as_str().to_lowercase(),
            },
        };
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, version, rest) = match segments.as_slice() {
            ["api", version, rest @ ..] if !rest.is_empty() => ("", *version, rest),
            ["apis", group, version, rest @ ..] if !rest.is_empty() => (*group, *version, rest),
            _ => return non_resource(),
        };
        let (namespace, rest) = match rest {
            // `/namespaces/NAME` and `/namespaces/NAME/status` are the Namespace object itself.
            ["namespaces", ns, tail @ ..]
                if !tail.is_empty() && tail != ["status"] && tail != ["finalize"] =>
            {
                (Some((*ns).to_owned()), tail)
            }
            _ => (None, rest),
        };
        let (resource, name, subresource) = match rest {
            [resource] => (*resource, None, None),
            [resource, name] => (*resource, Some(*name), None),
            [resource, name, sub] => (*resource, Some(*name), Some(*sub)),
            _ => return non_resource(),
        };
        if resource.is_empty() || name.is_some_and(str::is_empty) {
            return non_resource();
        }
        let verb = match (method.clone(), name.is_some()) {
            (Method::GET | Method::HEAD, true) => Verb::Get,
            (Method::GET | Method::HEAD, false) if watch => Verb::Watch,
            (Method::GET | Method::HEAD, false) => Verb::List,
            (Method::POST, _) => Verb::Create,
            (Method::PUT, _) => Verb::Update,
            (Method::PATCH, _) => Verb::Patch,
            (Method::DELETE, true) => Verb::Delete,
            (Method::DELETE, false) => Verb::DeleteCollection,
            _ => return non_resource(),
        };
        RequestInfo::Resource(ResourceRequest {
            verb,
            group: group.to_owned(),
            version: version.to_owned(),
            namespace,
            resource: resource.to_owned(),
            name: name.map(str::to_owned),
            subresource: subresource.map(str::to_owned),
            label_selector: None,
            field_selector: None,
        })
    }
}

/// A `resourceVersion` query parameter other than `"0"` (which callers handle first) as
/// the store revision it names; anything else is a 400.
pub fn parse_resource_version(rv: &str) -> Result<Revision, ApiError> {
    revision_of(rv).ok_or_else(|| ApiError::BadRequest(format!("invalid resourceVersion {rv:?}")))
}

/// The revision a resourceVersion names: decimal digits only, as kube-apiserver parses
/// them (`strconv.ParseUint`). A sign is refused: `-1` would otherwise read as a
/// revision, which etcd takes for "the latest" in an exact read.
pub fn revision_of(rv: &str) -> Option<Revision> {
    if rv.is_empty() || !rv.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rv.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(method: Method, path: &str, watch: bool) -> ResourceRequest {
        match RequestInfo::parse(&method, path, watch) {
            RequestInfo::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn parses_kubernetes_paths() {
        let r = resource(
            Method::GET,
            "/apis/example.com/v1/namespaces/acme/widgets/a",
            false,
        );
        assert_eq!(
            (
                r.verb,
                r.group.as_str(),
                r.namespace.as_deref(),
                r.resource.as_str(),
                r.name.as_deref()
            ),
            (Verb::Get, "example.com", Some("acme"), "widgets", Some("a"))
        );
        let r = resource(Method::GET, "/apis/example.com/v1/widgets", true);
        assert_eq!((r.verb, r.namespace), (Verb::Watch, None));
        let r = resource(
            Method::PUT,
            "/apis/example.com/v1/namespaces/a/widgets/w/status",
            false,
        );
        assert_eq!(
            (r.verb, r.subresource.as_deref()),
            (Verb::Update, Some("status"))
        );
        let r = resource(Method::GET, "/api/v1/namespaces/default", false);
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.namespace),
            ("namespaces", Some("default"), None)
        );
        let r = resource(Method::DELETE, "/api/v1/namespaces/x/configmaps", false);
        assert_eq!(r.verb, Verb::DeleteCollection);
        assert!(matches!(
            RequestInfo::parse(&Method::GET, "/apis/example.com/v1", false),
            RequestInfo::NonResource { .. }
        ));
        assert!(matches!(
            RequestInfo::parse(&Method::GET, "/version", false),
            RequestInfo::NonResource { .. }
        ));
    }

    /// Fuzzing finding (`versions`): `-1` and `+7` parsed as revisions (Rust's integer
    /// parser takes a sign); kube-apiserver refuses them with 400.
    #[test]
    fn resource_versions_are_unsigned_decimal_numbers() {
        assert_eq!(parse_resource_version("42").unwrap(), 42);
        assert_eq!(revision_of("0"), Some(0));
        for bad in ["-1", "+7", "", " 1", "1e3", "0x10", "99999999999999999999"] {
            let err = parse_resource_version(bad).unwrap_err();
            assert_eq!(err.code(), 400, "{bad:?}");
            assert_eq!(err.to_string(), format!("invalid resourceVersion {bad:?}"));
        }
    }
}
