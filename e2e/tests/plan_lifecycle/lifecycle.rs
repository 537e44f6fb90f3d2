//! Every actor against every Plan move, on both stores (the table of moves is `moves()`).

use super::*;

on_both_backends!(
    every_actor_meets_the_lifecycle,
    a_plan_is_created_with_its_gates_decision_only,
    finished_plans_read_back_as_written,
    installs_read_back_as_written_and_still_check_runner_tokens
);

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

    // Creating a Plan: admins only (with a status: `a_plan_is_created_with_its_gates_decision_only`).
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

/// A Plan may be created with its gate's decision, as the install controller creates
/// its Plans (one write where a create and the gate's status write were two): `Ready` or
/// `Denied` with the gate's fields (role, verdicts, message), by admins only — what an
/// admin could write with one status write right after creating it. Nobody creates a
/// Plan further along: approved, claimed, with a diff or finished (403, nothing stored),
/// by any kind of create (POST, server-side apply).
async fn a_plan_is_created_with_its_gates_decision_only(backend: Backend) {
    let w = World::start(backend).await;
    let role = json!({"name": "deploy", "level": "default"});
    let verdicts = json!([{"policy": "p", "enforcement": "warn", "denied": false}]);
    let gated = json!({"phase": "Ready", "role": role, "verdicts": verdicts});

    // Only an admin creates a Plan, with a decision or without.
    for actor in [Viewer, Approver, OtherRunner, OwnRunner] {
        for (i, status) in [gated.clone(), json!({"phase": "Approved"})]
            .into_iter()
            .enumerate()
        {
            let name = format!("by-{}-{i}", format!("{actor:?}").to_lowercase());
            let reply = w.post(actor, plan_with(&name, PROMPT, status)).await;
            refused(
                &w,
                &reply,
                403,
                &name,
                &Value::Null,
                &format!("{actor:?} creates a Plan with a status"),
            )
            .await;
        }
    }

    // Beyond the gate's decision, nothing: not even an admin's.
    let d = diff('a', 1);
    let approval = json!({"decision": "approve", "by": "mallory", "at": "2025-01-01T00:00:00Z", "contentHash": "x", "diffHash": d["hash"]});
    for (what, status) in [
        ("Approved", json!({"phase": "Approved"})),
        (
            "Approved with an approval",
            json!({"phase": "Approved", "approval": approval, "diff": d}),
        ),
        (
            "Ready with an approval",
            json!({"phase": "Ready", "approval": approval}),
        ),
        ("Ready with a diff", json!({"phase": "Ready", "diff": d})),
        ("Claimed", json!({"phase": "Claimed", "claimedBy": PROMPT})),
        ("Applying", json!({"phase": "Applying"})),
        (
            "Succeeded",
            json!({"phase": "Succeeded", "diff": no_changes()}),
        ),
        (
            "Ready with outputs",
            json!({"phase": "Ready", "outputs": {"ok": true}}),
        ),
        ("Pending with a log", json!({"log": "done"})),
    ] {
        // POST, and server-side apply, which creates the same way.
        let applied = plan_with("beyond", PROMPT, status.clone());
        let posted = w.post(Admin, plan_with("beyond", PROMPT, status)).await;
        let path = format!("{API}/plans/beyond?fieldManager=t");
        let applied = w.send(Admin, PROMPT, "PATCH", &path, APPLY, applied).await;
        for (how, reply) in [("creates", posted), ("applies", applied)] {
            let what = format!("an admin {how} a new Plan {what}");
            refused(&w, &reply, 403, "beyond", &Value::Null, &what).await;
        }
    }

    // The gate's decision lands as sent; the Plan's runner claims a Plan created
    // `Ready`, and not one created `Denied` (it is finished).
    let denied = json!({"phase": "Denied", "role": role, "message": "denied by policy: p: no"});
    for (name, decision, claim) in [("gated", gated, 200), ("denied", denied, 409)] {
        let reply = w
            .post(Admin, plan_with(name, PROMPT, decision.clone()))
            .await;
        assert_eq!(reply.status, 201, "{name}: {}", reply.text);
        let stored = w.get(name).await;
        assert_eq!(stored["status"], decision, "{name}: stored as sent");
        let claimed = json!({"phase": "Claimed", "claimedBy": PROMPT});
        let reply = w.status(OwnRunner, name, PROMPT, claimed).await;
        let what = format!("the runner claims a Plan created {}", decision["phase"]);
        if claim == 200 {
            assert_eq!(reply.status, 200, "{what}: {}", reply.text);
        } else {
            refused(&w, &reply, claim, name, &stored, &what).await;
        }
    }
}

/// Finished Plans, which the watch cache holds compressed against a dictionary of the
/// first ones (most of a fleet's objects), are served exactly as they were written: a
/// watch's events of their moves, lists (consistent, `resourceVersion=0`, the runner's
/// own), a watch's initial events, before and after a restart, all answer what a GET
/// answers. And they are held compressed: the server's cached bytes of Plans are under
/// half their JSON.
async fn finished_plans_read_back_as_written(backend: Backend) {
    use futures::StreamExt as _;
    let mut w = World::start(backend).await;
    let plans = format!("{API}/plans");
    let (status, mut watch) = w.cp.stream_lines(&format!("{plans}?watch=true"), &[]).await;
    assert_eq!(status, 200);
    let mut names = Vec::new();
    for i in 0..80 {
        let name = format!("done-{i:02}");
        match i % 5 {
            // Denied by the gate.
            4 => {
                w.create(&name, PROMPT, json!({})).await;
                let denied = json!({"phase": "Denied", "message": format!("denied by policy: p{i}: no"),
                                    "role": {"name": "deploy", "level": "default"}});
                let reply = w.status(Admin, &name, PROMPT, denied).await;
                assert_eq!(reply.status, 200, "{name}: {}", reply.text);
            }
            // Left applying: not settled.
            3 if i < 10 => w.drive(&name, PROMPT, "Applying", &diff('b', 2)).await,
            _ => {
                let d = diff(char::from(b'a' + (i % 6) as u8), i as u32 % 4 + 1);
                w.drive(&name, PROMPT, "Applying", &d).await;
                let end = if i % 5 == 2 {
                    json!({"phase": "Failed", "message": "apply failed", "log": format!("step {i}: exit 1")})
                } else {
                    json!({"phase": "Succeeded", "outputs": {"endpoint": format!("https://{name}.example.com")},
                           "log": format!("applied {i} resources")})
                };
                let reply = w.status(OwnRunner, &name, PROMPT, end).await;
                assert_eq!(reply.status, 200, "{name}: {}", reply.text);
            }
        }
        names.push(name);
    }
    let mut stored = Vec::new();
    for name in &names {
        stored.push(w.get(name).await);
    }
    // The watch's last event of each Plan is its final state (the events of every move
    // are served from the cache; the last ones of the finished Plans compressed).
    let mut last = std::collections::BTreeMap::new();
    while last.len() < names.len()
        || names
            .iter()
            .zip(&stored)
            .any(|(name, plan)| last.get(name) != Some(plan))
    {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), watch.next())
            .await
            .expect("an event within 10 s")
            .expect("the watch is open");
        let name = event["object"]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        last.insert(name, event["object"].clone());
    }
    /// The Plans listed with `query`, as `actor`.
    async fn list(w: &World, query: &str, actor: Actor) -> Value {
        let path = format!("{API}/plans{query}");
        let reply = w.send(actor, PROMPT, "GET", &path, JSON, Value::Null).await;
        assert_eq!(reply.status, 200, "{query}: {}", reply.text);
        reply.json["items"].clone()
    }
    for restarted in [false, true] {
        if restarted {
            w.cp.restart().await;
        }
        let what = format!("restarted {restarted}");
        assert_eq!(list(&w, "", Admin).await, json!(stored), "{what}");
        assert_eq!(
            list(&w, "?resourceVersion=0", Admin).await,
            json!(stored),
            "{what}"
        );
        let own = list(&w, "?labelSelector=outpost.dev%2Finstall%3Dacme", OwnRunner).await;
        assert_eq!(own, json!(stored), "{what}: the runner's own list");
        initial_events_are(&w, &plans, &stored, &what).await;
        let (held, json) = cached_bytes(&w, "plans", &stored).await;
        assert!(
            held * 2 < json,
            "{what}: {held} bytes held for {json} of Plans"
        );
    }
}

/// Installs, which the watch cache holds compressed against a dictionary of the first
/// ones, are served exactly as written (GET, lists, a watch's initial events, before and
/// after a restart), and the runner-token check, which reads the token's hash out of the
/// cached Install on every runner request, still holds for each actor: the admin, a
/// viewer, an approver and an install's own token read its Install as stored; another
/// install's token is refused (403), a token with the right install and a wrong secret
/// and one naming no install are not authenticated (401); none but the admin may
/// rewrite the Install's token hash, and no refused request changes anything. And they
/// are held compressed: the server's cached bytes of Installs are under half their JSON.
async fn installs_read_back_as_written_and_still_check_runner_tokens(backend: Backend) {
    let mut w = World::start(backend).await;
    let installs = format!("{API}/installs");
    /// `path` read with `token`.
    async fn read(w: &World, path: &str, token: &str) -> outpost_testing::Reply {
        w.cp.raw(Some(token), "GET", path, &[], "").await
    }
    /// Install `name` read with `token`.
    async fn get(w: &World, name: &str, token: &str) -> outpost_testing::Reply {
        read(w, &format!("{API}/installs/{name}"), token).await
    }
    /// A status write on Install `name` with `token`: the runner token hash replaced,
    /// what a token holder would want to write.
    async fn take_over(w: &World, name: &str, token: &str) -> outpost_testing::Reply {
        let path = format!("{API}/installs/{name}/status");
        let body = json!({"status": {"runnerTokenHash": "0".repeat(64)}}).to_string();
        w.cp.raw(
            Some(token),
            "PATCH",
            &path,
            &[("content-type", MERGE)],
            body,
        )
        .await
    }
    let acme = get(&w, PROMPT, &w.cp.admin_token).await;
    assert_eq!(acme.status, 200, "{}", acme.text);
    // 30 more installs like acme, each with a runner token minted (a status write).
    let mut tokens = Vec::new();
    for i in 0..30 {
        let name = format!("shop-{i:02}");
        let mut install = acme.json.clone();
        for server_set in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
        ] {
            install["metadata"]
                .as_object_mut()
                .unwrap()
                .remove(server_set);
        }
        install.as_object_mut().unwrap().remove("status");
        install["metadata"]["name"] = json!(name);
        install["spec"]["inputs"]["domain"] = json!(format!("shop.{name}.example"));
        install["spec"]["cloud"]["accountId"] = json!(format!("{:012}", 100_000_000_000u64 + i));
        let reply =
            w.cp.raw(
                Some(&w.cp.admin_token),
                "POST",
                &installs,
                &[("content-type", JSON)],
                install.to_string(),
            )
            .await;
        assert_eq!(reply.status, 201, "{name}: {}", reply.text);
        tokens.push((
            name.clone(),
            w.cp.mint_runner_token(&format!("default/{name}")),
        ));
    }
    let mut stored = Vec::new();
    for name in [PROMPT, APPROVE_ALL]
        .into_iter()
        .chain(tokens.iter().map(|(n, _)| n.as_str()))
    {
        let reply = get(&w, name, &w.cp.admin_token).await;
        assert_eq!(reply.status, 200, "{name}: {}", reply.text);
        stored.push(reply.json);
    }
    stored.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    for restarted in [false, true] {
        if restarted {
            w.cp.restart().await;
        }
        let what = format!("restarted {restarted}");
        let list = read(&w, &installs, &w.cp.admin_token).await;
        assert_eq!(list.status, 200, "{what}: {}", list.text);
        assert_eq!(list.json["items"], json!(stored), "{what}: the list");
        initial_events_are(&w, &installs, &stored, &what).await;
        for (i, (name, token)) in tokens.iter().enumerate() {
            let own = stored
                .iter()
                .find(|s| s["metadata"]["name"] == json!(name))
                .unwrap();
            let (other, other_token) = &tokens[(i + 1) % tokens.len()];
            // The right install with a wrong secret, and an install that does not exist.
            // (The secret is base64url, which may hold `_`: it is what follows the prefix.)
            let prefix = format!("opr_default_{name}_");
            let secret = token.strip_prefix(&prefix).expect("a runner token");
            let other_secret: String = secret
                .chars()
                .map(|c| if c == 'A' { 'B' } else { 'A' })
                .collect();
            let forged = format!("{prefix}{other_secret}");
            let nobody = token.replace(&format!("_{name}_"), "_nobody_");
            // (who, token, its read's status, its status write's status)
            let actors = [
                ("the admin", w.cp.admin_token.as_str(), 200, None),
                ("a viewer", w.cp.viewer_token.as_str(), 200, Some(403)),
                ("an approver", w.cp.approver_token.as_str(), 200, Some(403)),
                ("its own runner token", token.as_str(), 200, Some(403)),
                (other.as_str(), other_token.as_str(), 403, Some(403)),
                ("a forged token", forged.as_str(), 401, Some(401)),
                ("a token of no install", nobody.as_str(), 401, Some(401)),
            ];
            for (who, token, read_status, write_status) in actors {
                let reply = get(&w, name, token).await;
                assert_eq!(
                    reply.status, read_status,
                    "{what}: {who} reading {name}: {}",
                    reply.text
                );
                if read_status == 200 {
                    assert_eq!(&reply.json, own, "{what}: {who} reads {name} as stored");
                }
                if let Some(expected) = write_status {
                    let reply = take_over(&w, name, token).await;
                    assert_eq!(
                        reply.status, expected,
                        "{what}: {who} writing {name}'s token hash: {}",
                        reply.text
                    );
                }
            }
        }
        // Nothing a refused request sent changed any Install.
        let list = read(&w, &installs, &w.cp.admin_token).await;
        assert_eq!(list.json["items"], json!(stored), "{what}: unchanged");
        let (held, json) = cached_bytes(&w, "installs", &stored).await;
        assert!(
            held * 2 < json,
            "{what}: {held} bytes held for {json} of Installs"
        );
    }
}

/// The bytes the server's watch cache holds of `plural` (its `/metrics`), and the bytes
/// of `stored`'s JSON.
async fn cached_bytes(w: &World, plural: &str, stored: &[Value]) -> (usize, usize) {
    let metrics =
        w.cp.raw(Some(&w.cp.admin_token), "GET", "/metrics", &[], "")
            .await;
    let prefix = format!("apiserver_watch_cache_bytes{{resource=\"{plural}\"}} ");
    let held = metrics
        .text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("the {plural} cache's bytes"))
        .parse()
        .unwrap();
    let json = stored.iter().map(|o| o.to_string().len()).sum();
    (held, json)
}

/// A watch of `path` from now starts with an `ADDED` event of each of `stored`, in order.
async fn initial_events_are(w: &World, path: &str, stored: &[Value], what: &str) {
    use futures::StreamExt as _;
    let (status, mut initial) = w.cp.stream_lines(&format!("{path}?watch=true"), &[]).await;
    assert_eq!(status, 200, "{what}");
    for object in stored {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), initial.next())
            .await
            .expect("an event within 10 s")
            .expect("the watch is open");
        assert_eq!(
            (&event["type"], &event["object"]),
            (&json!("ADDED"), object),
            "{what}"
        );
    }
}
