//! The Plan lifecycle as the API server enforces it (issue 16), for every actor: admin,
//! approver, viewer, the runner token of the Plan's install and another install's. A
//! refused request answers a Kubernetes `Status` (403, 404 or 409) and leaves the stored
//! Plan exactly as it was (same resourceVersion, same status); an allowed move lands.
//! Approvals are made only through `plans/NAME/approval`, by approvers and admins,
//! bound to the diff they reviewed, and recorded with the authenticated user.

use outpost_api::plan_lifecycle::{ChangeAction, FieldChange, PlanDiff, ResourceChange};
use outpost_testing::job_plans::deploy_plan;
use outpost_testing::{Backend, ControlPlane, Reply, manifests, on_both_backends};
use serde_json::{Value, json};

const API: &str = "/apis/outpost.dev/v1alpha1/namespaces/default";
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const JSON_PATCH: &str = "application/json-patch+json";

/// `acme` prompts for approval; `globex` approves all (manifests/installs.yaml).
const PROMPT: &str = "acme";
const APPROVE_ALL: &str = "globex";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Actor {
    Admin,
    Approver,
    Viewer,
    /// The runner token of the Plan's install.
    OwnRunner,
    /// The runner token of another install.
    OtherRunner,
}

use Actor::*;

const EVERYONE: [Actor; 5] = [Viewer, Approver, OtherRunner, OwnRunner, Admin];

struct World {
    cp: ControlPlane,
    runners: Vec<(String, String)>,
}

impl World {
    async fn start(backend: Backend) -> World {
        let cp = ControlPlane::start(backend).await;
        cp.kubectl()
            .ok(&["apply", "-f", manifests().to_str().unwrap()]);
        let runners = [PROMPT, APPROVE_ALL]
            .into_iter()
            .map(|i| (i.to_owned(), cp.mint_runner_token(&format!("default/{i}"))))
            .collect();
        World { cp, runners }
    }

    fn runner(&self, install: &str) -> &str {
        &self.runners.iter().find(|(i, _)| i == install).unwrap().1
    }

    /// The token of `actor` for a Plan of `install`.
    fn token(&self, actor: Actor, install: &str) -> &str {
        match actor {
            Admin => &self.cp.admin_token,
            Approver => &self.cp.approver_token,
            Viewer => &self.cp.viewer_token,
            OwnRunner => self.runner(install),
            OtherRunner => {
                let other = if install == PROMPT {
                    APPROVE_ALL
                } else {
                    PROMPT
                };
                self.runner(other)
            }
        }
    }

    async fn send(
        &self,
        actor: Actor,
        install: &str,
        method: &str,
        path: &str,
        media: &str,
        body: Value,
    ) -> Reply {
        // JSON is YAML too, for apply bodies.
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        self.cp
            .raw(
                Some(self.token(actor, install)),
                method,
                path,
                &[("content-type", media)],
                body,
            )
            .await
    }

    /// The stored Plan (as the admin), `Null` when there is none.
    async fn get(&self, name: &str) -> Value {
        let reply = self
            .cp
            .raw(
                Some(&self.cp.admin_token),
                "GET",
                &format!("{API}/plans/{name}"),
                &[],
                Vec::new(),
            )
            .await;
        match reply.status {
            200 => reply.json,
            404 => Value::Null,
            other => panic!("get plan {name}: {other} {}", reply.text),
        }
    }

    /// `POST`s a Plan of [`PROMPT`] as `actor`.
    async fn post(&self, actor: Actor, plan: Value) -> Reply {
        self.send(actor, PROMPT, "POST", &format!("{API}/plans"), JSON, plan)
            .await
    }

    async fn create(&self, name: &str, install: &str, labels: Value) {
        let reply = self
            .send(
                Admin,
                install,
                "POST",
                &format!("{API}/plans"),
                JSON,
                plan(name, install, labels),
            )
            .await;
        assert_eq!(reply.status, 201, "create {name}: {}", reply.text);
    }

    /// Merge-patches `plans/NAME/status` as `actor`.
    async fn status(&self, actor: Actor, name: &str, install: &str, status: Value) -> Reply {
        self.send(
            actor,
            install,
            "PATCH",
            &format!("{API}/plans/{name}/status"),
            MERGE,
            json!({"status": status}),
        )
        .await
    }

    async fn decide(&self, actor: Actor, name: &str, install: &str, body: Value) -> Reply {
        self.send(
            actor,
            install,
            "PATCH",
            &format!("{API}/plans/{name}/approval"),
            MERGE,
            body,
        )
        .await
    }

    /// Makes Plan `name` of `install` and moves it, as the gate, the runner and an
    /// approver would, up to `to` (a phase on the path Pending → Ready → Claimed →
    /// Planning → Planned → AwaitingApproval → Approved → Applying).
    async fn drive(&self, name: &str, install: &str, to: &str, diff: &Value) {
        self.create(name, install, json!({})).await;
        let path: &[(&str, Actor, Value)] = &[
            ("Ready", Admin, json!({"phase": "Ready"})),
            (
                "Claimed",
                OwnRunner,
                json!({"phase": "Claimed", "claimedBy": install}),
            ),
            ("Planning", OwnRunner, json!({"phase": "Planning"})),
            (
                "Planned",
                OwnRunner,
                json!({"phase": "Planned", "diff": diff}),
            ),
            (
                "AwaitingApproval",
                OwnRunner,
                json!({"phase": "AwaitingApproval", "diff": diff}),
            ),
        ];
        if to == "Pending" {
            return;
        }
        for (phase, actor, status) in path {
            let reply = self.status(*actor, name, install, status.clone()).await;
            assert_eq!(reply.status, 200, "{name} → {phase}: {}", reply.text);
            if *phase == to {
                return;
            }
        }
        let hash = diff["hash"].clone();
        let reply = self
            .decide(
                Approver,
                name,
                install,
                json!({"decision": "approve", "diffHash": hash}),
            )
            .await;
        assert_eq!(reply.status, 200, "{name} → Approved: {}", reply.text);
        if to == "Approved" {
            return;
        }
        let reply = self
            .status(OwnRunner, name, install, json!({"phase": "Applying"}))
            .await;
        assert_eq!(reply.status, 200, "{name} → Applying: {}", reply.text);
        assert_eq!(to, "Applying", "drive goes up to Applying");
    }
}

fn plan(name: &str, install: &str, labels: Value) -> Value {
    let mut plan = deploy_plan(name, install, "web", json!({"note": name}));
    let mut labels = labels;
    labels["outpost.dev/install"] = json!(install);
    plan["metadata"]["labels"] = labels;
    plan
}

/// [`plan`] created with `status`.
fn plan_with(name: &str, install: &str, status: Value) -> Value {
    let mut plan = plan(name, install, json!({}));
    plan["status"] = status;
    plan
}

/// A diff with `add` creations and one change, under hash `sha256:<seed repeated>`.
fn diff(seed: char, add: u32) -> Value {
    let hash = format!("sha256:{}", seed.to_string().repeat(64));
    let mut diff = PlanDiff::new(hash, add, 1, 0);
    diff.resources = vec![
        ResourceChange {
            address: "terraform_data.network".into(),
            action: ChangeAction::Create,
            fields: vec![],
            note: None,
        },
        ResourceChange {
            address: "Deployment/shop/web".into(),
            action: ChangeAction::Update,
            fields: vec![FieldChange {
                path: "spec.replicas".into(),
                before: Some("2".into()),
                after: Some("3".into()),
            }],
            note: None,
        },
    ];
    serde_json::to_value(diff).unwrap()
}

fn no_changes() -> Value {
    serde_json::to_value(PlanDiff::new(format!("sha256:{}", "0".repeat(64)), 0, 0, 0)).unwrap()
}

/// Asserts a refusal: the status code, a Kubernetes `Status`, and the stored Plan
/// unchanged (resourceVersion and status) or still absent.
async fn refused(w: &World, reply: &Reply, code: u16, name: &str, before: &Value, what: &str) {
    assert_eq!(reply.status, code, "{what}: {}", reply.text);
    assert_eq!(reply.json["kind"], "Status", "{what}: {}", reply.text);
    assert_eq!(reply.json["code"], code, "{what}: {}", reply.text);
    let after = w.get(name).await;
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "{what}: the Plan was written"
    );
    assert_eq!(
        after.get("status"),
        before.get("status"),
        "{what}: the status changed"
    );
}

/// One status write tried by each actor in turn: the codes expected (2xx last).
struct Move {
    what: &'static str,
    install: &'static str,
    /// The phase the Plan is driven to first.
    from: &'static str,
    status: Value,
    codes: Vec<(Actor, u16)>,
    /// The phase after the allowed write.
    lands: Option<&'static str>,
}

mod approvals;
mod lifecycle;
