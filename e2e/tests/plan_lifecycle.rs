//! The Plan lifecycle as the API server enforces it (issue 16), for every actor: admin,
//! approver, viewer, the runner token of the Plan's install and another install's. A
//! refused request answers a Kubernetes `Status` (403, 404 or 409) and leaves the stored
//! Plan exactly as it was (same resourceVersion, same status); an allowed move lands.
//! Approvals are made only through `plans/NAME/approval`, by approvers and admins,
//! bound to the diff they reviewed, and recorded with the authenticated user.

use outpost_api::plan_lifecycle::{ChangeAction, FieldChange, PlanDiff, ResourceChange};
use outpost_e2e::job_plans::deploy_plan;
use outpost_e2e::{Backend, ControlPlane, Reply, manifests, on_both_backends};
use serde_json::{Value, json};

on_both_backends!(
    every_actor_meets_the_lifecycle,
    approvals_record_the_authenticated_user,
    fleet_approval_approves_exactly_one_diff,
);

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
    // Dropped on create: a Plan starts without status.
    plan["status"] = json!({"phase": "Approved"});
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

fn moves() -> Vec<Move> {
    let d = diff('a', 1);
    let everyone_but = |allowed: Actor, others: u16, ok: u16| -> Vec<(Actor, u16)> {
        EVERYONE
            .iter()
            .filter(|a| **a != allowed)
            .map(|a| {
                (
                    *a,
                    if matches!(a, Viewer | Approver | OtherRunner) {
                        403
                    } else {
                        others
                    },
                )
            })
            .chain([(allowed, ok)])
            .collect()
    };
    // Admins may make a runner's moves too (as Writer::Operator); the table tries the
    // runner, so the admin's attempt is in `the gate's move` and the refusals.
    let runner_only = || {
        vec![
            (Viewer, 403),
            (Approver, 403),
            (OtherRunner, 403),
            (OwnRunner, 200),
        ]
    };
    let nobody = |own: u16, admin: u16| -> Vec<(Actor, u16)> {
        vec![
            (Viewer, 403),
            (Approver, 403),
            (OtherRunner, 403),
            (OwnRunner, own),
            (Admin, admin),
        ]
    };
    vec![
        Move {
            what: "the gate's move",
            install: PROMPT,
            from: "Pending",
            status: json!({"phase": "Ready"}),
            codes: everyone_but(Admin, 403, 200),
            lands: Some("Ready"),
        },
        Move {
            what: "a claim of a Plan the gate has not passed",
            install: PROMPT,
            from: "Pending",
            status: json!({"phase": "Claimed"}),
            codes: nobody(409, 409),
            lands: None,
        },
        Move {
            what: "a claim",
            install: PROMPT,
            from: "Ready",
            status: json!({"phase": "Claimed", "claimedBy": "acme"}),
            codes: runner_only(),
            lands: Some("Claimed"),
        },
        Move {
            what: "a claim that is also the result, on a prompt install",
            install: PROMPT,
            from: "Ready",
            status: json!({"phase": "Succeeded", "diff": d}),
            codes: nobody(409, 409),
            lands: None,
        },
        Move {
            what: "a claim that is also the result, on an approve-all install",
            install: APPROVE_ALL,
            from: "Ready",
            status: json!({"phase": "Succeeded", "diff": d}),
            codes: runner_only(),
            lands: Some("Succeeded"),
        },
        Move {
            what: "a result without approval on a prompt install",
            install: PROMPT,
            from: "Planning",
            status: json!({"phase": "Succeeded", "diff": d}),
            codes: nobody(409, 409),
            lands: None,
        },
        Move {
            what: "applying without approval on a prompt install",
            install: PROMPT,
            from: "Planned",
            status: json!({"phase": "Applying"}),
            codes: nobody(409, 409),
            lands: None,
        },
        Move {
            what: "a result on an approve-all install",
            install: APPROVE_ALL,
            from: "Planning",
            status: json!({"phase": "Succeeded", "diff": d}),
            codes: runner_only(),
            lands: Some("Succeeded"),
        },
        Move {
            what: "no changes on a prompt install",
            install: PROMPT,
            from: "Claimed",
            status: json!({"phase": "Succeeded", "reason": "NoChanges", "diff": no_changes()}),
            codes: runner_only(),
            lands: Some("Succeeded"),
        },
        Move {
            what: "asking for approval",
            install: PROMPT,
            from: "Planning",
            status: json!({"phase": "AwaitingApproval", "diff": d}),
            codes: runner_only(),
            lands: Some("AwaitingApproval"),
        },
        Move {
            what: "asking for approval without a diff",
            install: PROMPT,
            from: "Planning",
            status: json!({"phase": "AwaitingApproval"}),
            codes: nobody(422, 422),
            lands: None,
        },
        Move {
            what: "approving through status",
            install: PROMPT,
            from: "AwaitingApproval",
            status: json!({"phase": "Approved"}),
            codes: nobody(403, 403),
            lands: None,
        },
        Move {
            what: "denying through status",
            install: PROMPT,
            from: "AwaitingApproval",
            status: json!({"phase": "Denied", "message": "no"}),
            codes: nobody(403, 409),
            lands: None,
        },
        Move {
            what: "applying while awaiting approval",
            install: PROMPT,
            from: "AwaitingApproval",
            status: json!({"phase": "Applying"}),
            codes: nobody(409, 409),
            lands: None,
        },
        Move {
            what: "swapping the diff while awaiting approval",
            install: PROMPT,
            from: "AwaitingApproval",
            status: json!({"diff": diff('b', 1)}),
            codes: nobody(409, 409),
            lands: None,
        },
        Move {
            what: "writing an approval through status",
            install: PROMPT,
            from: "AwaitingApproval",
            status: json!({"phase": "Approved", "approval": {"decision": "approve", "by": "mallory", "at": "2025-01-01T00:00:00Z", "contentHash": "x", "diffHash": d["hash"]}}),
            codes: nobody(403, 403),
            lands: None,
        },
        Move {
            what: "changing the role",
            install: PROMPT,
            from: "Claimed",
            status: json!({"role": {"name": "admin", "level": "override"}}),
            codes: everyone_but(Admin, 403, 200),
            lands: Some("Claimed"),
        },
        Move {
            what: "changing verdicts",
            install: PROMPT,
            from: "Claimed",
            status: json!({"verdicts": [{"policy": "p", "enforcement": "warn", "denied": false}]}),
            codes: everyone_but(Admin, 403, 200),
            lands: Some("Claimed"),
        },
        Move {
            what: "applying another diff than approved",
            install: PROMPT,
            from: "Approved",
            status: json!({"phase": "Applying", "diff": diff('c', 1)}),
            codes: nobody(409, 409),
            lands: None,
        },
        Move {
            what: "applying the approved diff",
            install: PROMPT,
            from: "Approved",
            status: json!({"phase": "Applying"}),
            codes: runner_only(),
            lands: Some("Applying"),
        },
        Move {
            what: "asking again after live state moved",
            install: PROMPT,
            from: "Approved",
            status: json!({"phase": "AwaitingApproval", "reason": "Replanned", "diff": diff('d', 2)}),
            codes: runner_only(),
            lands: Some("AwaitingApproval"),
        },
        Move {
            what: "the result of the approved diff",
            install: PROMPT,
            from: "Applying",
            status: json!({"phase": "Succeeded"}),
            codes: runner_only(),
            lands: Some("Succeeded"),
        },
        Move {
            what: "a failure, then a finished Plan moving again",
            install: PROMPT,
            from: "Applying",
            status: json!({"phase": "Failed"}),
            codes: runner_only(),
            lands: Some("Failed"),
        },
    ]
}

async fn every_actor_meets_the_lifecycle(backend: Backend) {
    let w = World::start(backend).await;
    let d = diff('a', 1);

    // Creating a Plan: admins only; the create body's status is dropped.
    for actor in [Viewer, Approver, OtherRunner, OwnRunner] {
        let reply = w
            .send(
                actor,
                PROMPT,
                "POST",
                &format!("{API}/plans"),
                JSON,
                plan("made", PROMPT, json!({})),
            )
            .await;
        refused(
            &w,
            &reply,
            403,
            "made",
            &Value::Null,
            &format!("{actor:?} creates a Plan"),
        )
        .await;
    }
    w.create("made", PROMPT, json!({})).await;
    assert_eq!(
        w.get("made").await.get("status"),
        None,
        "a Plan starts without status"
    );

    // A status write never creates its Plan, whoever sends it, however.
    for actor in EVERYONE {
        for (method, media, body) in [
            ("PATCH", APPLY, plan("ghost", PROMPT, json!({}))),
            ("PATCH", MERGE, json!({"status": {"phase": "Ready"}})),
            ("PUT", JSON, {
                let mut p = plan("ghost", PROMPT, json!({}));
                p["metadata"]["resourceVersion"] = json!("1");
                p
            }),
        ] {
            let reply = w
                .send(
                    actor,
                    PROMPT,
                    method,
                    &format!("{API}/plans/ghost/status?fieldManager=t"),
                    media,
                    body,
                )
                .await;
            let code = if matches!(actor, Viewer | Approver) {
                403
            } else {
                404
            };
            refused(
                &w,
                &reply,
                code,
                "ghost",
                &Value::Null,
                &format!("{actor:?} {method} {media} ghost/status"),
            )
            .await;
        }
    }

    // Each move of the table, by each actor.
    for (i, m) in moves().into_iter().enumerate() {
        let name = format!("move-{i}");
        w.drive(&name, m.install, m.from, &d).await;
        for (actor, code) in &m.codes {
            let before = w.get(&name).await;
            let what = format!("{} ({name}, from {}) by {actor:?}", m.what, m.from);
            let reply = w.status(*actor, &name, m.install, m.status.clone()).await;
            if *code == 200 {
                assert_eq!(reply.status, 200, "{what}: {}", reply.text);
                let after = w.get(&name).await;
                assert_eq!(after["status"]["phase"].as_str(), m.lands, "{what}");
                if m.lands == Some("AwaitingApproval") {
                    assert_eq!(
                        after["status"].get("approval"),
                        None,
                        "{what}: the old approval is dropped"
                    );
                }
                // A finished Plan stays finished.
                if after["status"]["phase"] == "Failed" {
                    let reply = w
                        .status(Admin, &name, m.install, json!({"phase": "Ready"}))
                        .await;
                    refused(
                        &w,
                        &reply,
                        409,
                        &name,
                        &after,
                        "an admin reopening a Failed Plan",
                    )
                    .await;
                }
                break;
            }
            refused(&w, &reply, *code, &name, &before, &what).await;
        }
    }

    // Approving through status is refused by every kind of write.
    w.drive("waits", PROMPT, "AwaitingApproval", &d).await;
    let before = w.get("waits").await;
    let mut whole = before.clone();
    whole["status"]["phase"] = json!("Approved");
    for actor in [OwnRunner, Admin] {
        let path = format!("{API}/plans/waits/status?fieldManager=t&force=true");
        let apply = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Plan", "metadata": {"name": "waits"}, "status": {"phase": "Approved"}});
        let ops = json!([{"op": "replace", "path": "/status/phase", "value": "Approved"}]);
        for (method, media, body) in [
            ("PUT", JSON, whole.clone()),
            ("PATCH", APPLY, apply),
            ("PATCH", JSON_PATCH, ops),
        ] {
            let path = if method == "PATCH" && media != APPLY {
                path.replace("&force=true", "")
            } else {
                path.clone()
            };
            let path = if method == "PUT" {
                path.replace("&force=true", "")
            } else {
                path
            };
            let reply = w.send(actor, PROMPT, method, &path, media, body).await;
            refused(
                &w,
                &reply,
                403,
                "waits",
                &before,
                &format!("{actor:?} approves with {method} {media}"),
            )
            .await;
        }
    }

    // The approval subresource: approvers and admins only, on the diff they saw.
    for actor in [Viewer, OtherRunner, OwnRunner] {
        let reply = w
            .decide(
                actor,
                "waits",
                PROMPT,
                json!({"decision": "approve", "diffHash": d["hash"]}),
            )
            .await;
        refused(
            &w,
            &reply,
            403,
            "waits",
            &before,
            &format!("{actor:?} approves"),
        )
        .await;
    }
    let reply = w
        .decide(
            Approver,
            "waits",
            PROMPT,
            json!({"decision": "approve", "diffHash": diff('z', 1)["hash"]}),
        )
        .await;
    refused(&w, &reply, 409, "waits", &before, "approving another diff").await;
    assert!(
        reply.text.contains(&format!(
            "the diff changed: approve {} after reviewing it",
            d["hash"].as_str().unwrap()
        )),
        "{}",
        reply.text
    );
    let reply = w
        .decide(
            Approver,
            "waits",
            PROMPT,
            json!({"decision": "deny", "diffHash": d["hash"]}),
        )
        .await;
    refused(
        &w,
        &reply,
        422,
        "waits",
        &before,
        "denying without a reason",
    )
    .await;
    let reply = w
        .decide(
            Approver,
            "ghost",
            PROMPT,
            json!({"decision": "approve", "diffHash": d["hash"]}),
        )
        .await;
    refused(
        &w,
        &reply,
        404,
        "ghost",
        &Value::Null,
        "approving a Plan that does not exist",
    )
    .await;
    let reply = w
        .decide(
            Approver,
            "waits",
            PROMPT,
            json!({"decision": "approve", "diffHash": d["hash"]}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["status"]["phase"], "Approved");
    let approved = w.get("waits").await;
    let reply = w
        .decide(
            Admin,
            "waits",
            PROMPT,
            json!({"decision": "deny", "diffHash": d["hash"], "reason": "late"}),
        )
        .await;
    refused(&w, &reply, 409, "waits", &approved, "deciding twice").await;
    let not_yet = w.get("made").await;
    let reply = w
        .decide(
            Admin,
            "made",
            PROMPT,
            json!({"decision": "approve", "diffHash": d["hash"]}),
        )
        .await;
    refused(
        &w,
        &reply,
        409,
        "made",
        &not_yet,
        "approving a Pending Plan",
    )
    .await;

    // An admin denies: Denied, with who and why.
    w.drive("denied", PROMPT, "AwaitingApproval", &d).await;
    let reply = w
        .decide(
            Admin,
            "denied",
            PROMPT,
            json!({"decision": "deny", "diffHash": d["hash"], "reason": "not on a Friday"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let denied = w.get("denied").await;
    assert_eq!(denied["status"]["phase"], "Denied");
    assert_eq!(
        denied["status"]["message"],
        "denied by admin: not on a Friday"
    );
    assert!(denied["status"]["finishedAt"].is_string());

    // kubectl decides through the subresource too, and shows the diff in CHANGES.
    w.drive("by-kubectl", PROMPT, "AwaitingApproval", &d).await;
    let body = json!({"decision": "approve", "diffHash": d["hash"]}).to_string();
    let approver = w.cp.kubectl_as(&w.cp.approver_token);
    approver.ok(&[
        "patch",
        "plan",
        "by-kubectl",
        "--subresource",
        "approval",
        "--type",
        "merge",
        "-p",
        &body,
    ]);
    assert_eq!(w.get("by-kubectl").await["status"]["phase"], "Approved");
    let table = w.cp.kubectl().ok(&["get", "plan", "by-kubectl"]);
    assert!(
        table.contains("CHANGES") && table.contains("+1 ~1 -0"),
        "{table}"
    );
    let viewer = w.cp.kubectl_as(&w.cp.viewer_token);
    let run = viewer.run(&[
        "patch",
        "plan",
        "by-kubectl",
        "--subresource",
        "approval",
        "--type",
        "merge",
        "-p",
        &body,
    ]);
    assert!(!run.ok && run.stderr.contains("forbidden"), "{run:?}");

    // Discovery names the subresource.
    let resources =
        w.cp.kubectl()
            .ok(&["get", "--raw", "/apis/outpost.dev/v1alpha1"]);
    assert!(resources.contains("\"plans/approval\""), "{resources}");
}

async fn approvals_record_the_authenticated_user(backend: Backend) {
    let w = World::start(backend).await;
    let d = diff('a', 1);
    w.drive("claims", PROMPT, "AwaitingApproval", &d).await;
    let started = jiff::Timestamp::now();
    // The body claims someone else, long ago; the server believes neither.
    let body = json!({"decision": "approve", "diffHash": d["hash"], "reason": "reviewed",
                      "by": "mallory", "at": "2000-01-01T00:00:00Z"});
    let reply = w
        .send(
            Approver,
            PROMPT,
            "PATCH",
            &format!("{API}/plans/claims/approval"),
            APPLY,
            body,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let plan = w.get("claims").await;
    let approval = &plan["status"]["approval"];
    assert_eq!(approval["by"], "approver", "{approval}");
    assert_eq!(approval["decision"], "approve");
    assert_eq!(approval["diffHash"], d["hash"]);
    assert_eq!(approval["contentHash"], plan["spec"]["contentHash"]);
    assert_eq!(approval["reason"], "reviewed");
    let at: jiff::Timestamp = approval["at"].as_str().unwrap().parse().unwrap();
    assert!(
        at.as_second() >= started.as_second() - 1
            && at.as_second() <= jiff::Timestamp::now().as_second() + 1,
        "at {at} is the server's clock"
    );
    // The runner applies exactly the approved diff.
    let reply = w
        .status(OwnRunner, "claims", PROMPT, json!({"phase": "Applying"}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

async fn fleet_approval_approves_exactly_one_diff(backend: Backend) {
    let w = World::start(backend).await;
    let reviewed = diff('a', 1);
    let other = diff('b', 3);
    let labels = json!({"outpost.dev/app": "shopfront"});
    let mut names = Vec::new();
    for i in 0..104 {
        let (name, d) = if i < 100 {
            (format!("fleet-{i}"), &reviewed)
        } else {
            (format!("odd-{i}"), &other)
        };
        w.create(&name, PROMPT, labels.clone()).await;
        for (actor, status) in [
            (Admin, json!({"phase": "Ready"})),
            (OwnRunner, json!({"phase": "Claimed"})),
            (OwnRunner, json!({"phase": "AwaitingApproval", "diff": d})),
        ] {
            let reply = w.status(actor, &name, PROMPT, status).await;
            assert_eq!(reply.status, 200, "{name}: {}", reply.text);
        }
        names.push(name);
    }
    // One more with the reviewed diff but not the label: not selected.
    w.drive("unlabelled", PROMPT, "AwaitingApproval", &reviewed)
        .await;

    let out = std::process::Command::new(outpost_e2e::outpost_binary())
        .args([
            "approve",
            "--selector",
            "outpost.dev/app=shopfront",
            "--diff-hash",
            reviewed["hash"].as_str().unwrap(),
            "--kubeconfig",
        ])
        .arg(w.cp.kubeconfig(&w.cp.approver_token))
        .output()
        .expect("outpost approve runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("approved 100 plan(s)")
            && stderr.contains("4 awaiting approval had another diff"),
        "{stderr}"
    );
    for name in &names {
        let plan = w.get(name).await;
        let expected = if name.starts_with("fleet-") {
            "Approved"
        } else {
            "AwaitingApproval"
        };
        assert_eq!(plan["status"]["phase"], expected, "{name}");
        if expected == "Approved" {
            assert_eq!(
                plan["status"]["approval"]["by"], "approver",
                "{name}: each approval is recorded per Plan"
            );
            assert_eq!(plan["status"]["approval"]["diffHash"], reviewed["hash"]);
        }
    }
    assert_eq!(
        w.get("unlabelled").await["status"]["phase"],
        "AwaitingApproval"
    );
}
