//! People's groups: `outpost:admins` may do everything, `outpost:viewers` may get, list
//! and watch (the core's [`GroupAuthorizer`](outpost_apiserver::auth::GroupAuthorizer)
//! with these names); `outpost:approvers` ([`APPROVERS`]) may read like viewers and
//! decide on Plans (`plans/NAME/approval`, [`Approvers`]).

use outpost_apiserver::auth::{Access, Authorizer, Decision, User};
use outpost_apiserver::request::{RequestInfo, ResourceRequest, Verb};

pub use outpost_api::plan_lifecycle::APPROVERS;

/// The group whose members may do everything.
pub const ADMINS: &str = "outpost:admins";
/// The group whose members may read and watch everything.
pub const VIEWERS: &str = "outpost:viewers";

/// Approvers read like viewers and decide on Plans; anyone else is for the next
/// authorizer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Approvers;

impl Authorizer for Approvers {
    fn authorize(&self, user: &User, request: &RequestInfo) -> Decision {
        if !user.groups.iter().any(|g| g == APPROVERS) {
            return Decision::NoOpinion;
        }
        match request {
            RequestInfo::Resource(r) if r.verb.is_read() || decides_on_plan(r) => {
                Decision::Allow(Access::Full)
            }
            _ => Decision::NoOpinion,
        }
    }
}

/// Whether `user` may decide on Plans: an approver or an admin.
pub fn may_decide(user: &User) -> bool {
    user.groups.iter().any(|g| g == APPROVERS || g == ADMINS)
}

/// Whether `r` is a decision on a Plan (`PATCH`/`PUT plans/NAME/approval`).
fn decides_on_plan(r: &ResourceRequest) -> bool {
    r.group == outpost_api::GROUP
        && r.resource == "plans"
        && r.subresource.as_deref() == Some(crate::approval::SUBRESOURCE)
        && r.name.is_some()
        && matches!(r.verb, Verb::Patch | Verb::Update)
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    fn authorize(user: &User, request: &RequestInfo) -> Result<Access, String> {
        crate::server_config(Default::default())
            .authorizers
            .authorize(user, request)
    }

    fn user(name: &str, group: &str) -> User {
        User {
            name: name.into(),
            uid: name.into(),
            groups: vec![group.into()],
        }
    }

    #[test]
    fn viewers_read_admins_write() {
        let (viewer, admin) = (user("v", VIEWERS), user("a", ADMINS));
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
        assert!(authorize(&viewer, &get).is_ok());
        let err = authorize(&viewer, &delete).unwrap_err();
        assert_eq!(
            err,
            "installs.outpost.dev \"i\" is forbidden: User \"v\" cannot delete resource \"installs\" in API group \"outpost.dev\" in the namespace \"x\""
        );
        assert!(authorize(&admin, &delete).is_ok());
        let nobody = User {
            name: "n".into(),
            uid: "3".into(),
            groups: vec![],
        };
        assert!(authorize(&nobody, &get).is_err());
    }

    #[test]
    fn approvers_read_and_decide_on_plans_only() {
        let (approver, viewer) = (user("ann", APPROVERS), user("v", VIEWERS));
        let plans = "/apis/outpost.dev/v1alpha1/namespaces/x/plans";
        let request = |method: Method, path: &str| RequestInfo::parse(&method, path, false);
        let decide = request(Method::PATCH, &format!("{plans}/p/approval"));
        assert!(authorize(&approver, &decide).is_ok());
        assert!(authorize(&approver, &request(Method::GET, plans)).is_ok());
        assert!(authorize(&viewer, &decide).is_err());
        for other in [
            request(Method::PATCH, &format!("{plans}/p/status")),
            request(Method::PATCH, &format!("{plans}/p")),
            request(Method::DELETE, &format!("{plans}/p")),
            request(
                Method::PATCH,
                "/apis/outpost.dev/v1alpha1/namespaces/x/installs/p/approval",
            ),
        ] {
            assert!(authorize(&approver, &other).is_err(), "{other:?}");
        }
    }
}
