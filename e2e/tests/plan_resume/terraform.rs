//! Terraform applies cut by kills resume; a resumed apply beyond the approval asks again.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_killed_mid_apply_resume_every_plan_to_succeeded_applied_once() {
    let started = Instant::now();
    let cp = Arc::new(ControlPlane::start(Backend::Embedded).await);
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let dir = tempfile::tempdir().unwrap();
    let source = module(dir.path());
    let mut sites = Vec::new();
    for i in 0..INSTALLS {
        let name = format!("r{i}");
        let prompt = i % 2 == 1;
        if i == 0 {
            create_app(&cp).await;
        }
        let token = install(&cp, &name, prompt).await;
        let site = Site {
            state: dir.path().join(format!("{name}-state")),
            log: dir.path().join(format!("{name}.log")),
            plans: (0..PLANS)
                .map(|p| (format!("{name}-deploy-c{p}"), format!("c{p}")))
                .collect(),
            install: name,
            prompt,
            token,
            kubeconfig: None,
        };
        for (plan, component) in &site.plans {
            ready(&plans, &site.install, plan, component, &source).await;
        }
        sites.push(Arc::new(site));
    }
    let drivers: Vec<_> = sites
        .iter()
        .map(|site| tokio::spawn(drive(cp.clone(), site.clone(), plans.clone())))
        .collect();
    let mut kills = Vec::new();
    for (site, driver) in sites.iter().zip(drivers) {
        match driver.await {
            Ok(k) => kills.push(k),
            Err(e) => panic!(
                "{}: {e}\nrunner log:\n{}",
                site.install,
                std::fs::read_to_string(&site.log).unwrap_or_default()
            ),
        }
    }

    let applies = audited_applies(&cp).await;
    let (mut total_kills, mut redone) = (0, 0);
    for (site, kills) in sites.iter().zip(&kills) {
        for (name, component) in &site.plans {
            let plan = plans.get(name).await.unwrap();
            let status = plan.status.clone().unwrap();
            assert_eq!(
                status.phase,
                Some(PlanPhase::Succeeded),
                "{name}: {status:?}"
            );
            assert_eq!(
                status.reason.as_deref(),
                Some("Resumed"),
                "{name}: {status:?}"
            );
            let killed = kills.mid_apply.get(name).copied().unwrap_or(0);
            assert!(killed >= 1, "{name} was never killed mid-apply");
            total_kills += killed;
            if site.prompt {
                let approval = status.approval.as_ref().expect("approved once");
                let shown = status.diff.as_ref().expect("the approved diff");
                assert_eq!(
                    approval.diff_hash.as_deref(),
                    Some(shown.hash.as_str()),
                    "{name}"
                );
            }
            // One apply in the audit log, the resumed one, naming what was cleared.
            let events = applies.get(name).cloned().unwrap_or_default();
            assert_eq!(
                events.len(),
                1,
                "{name}: one apply in the audit log: {events:?}"
            );
            assert_eq!(events[0]["resumed"], true, "{name}: {}", events[0]);
            assert_eq!(events[0]["approved"], site.prompt, "{name}: {}", events[0]);
            assert_eq!(
                events[0]["cut"]["summary"], "3 to add, 0 to change, 0 to destroy",
                "{name}: {}",
                events[0]
            );
            if site.prompt {
                let shown = status.diff.as_ref().unwrap();
                assert_eq!(events[0]["cut"]["diffHash"], shown.hash.as_str(), "{name}");
            }
            // Each resource once in terraform's state, untainted, chained to the others.
            let state = resources(&site.module_dir(component));
            assert_eq!(
                state.keys().collect::<Vec<_>>(),
                ["a", "b", "c"],
                "{name}: {state:?}"
            );
            for (resource, (instances, _, _, tainted)) in &state {
                assert_eq!(*instances, 1, "{name}: {resource} {state:?}");
                assert!(!tainted, "{name}: {resource} is tainted");
            }
            assert_eq!(state["a"].2, *component, "{name}: {state:?}");
            assert_eq!(state["b"].2, state["a"].1, "{name}: b takes a's id");
            assert_eq!(state["c"].2, state["b"].1, "{name}: c takes b's id");
            assert_eq!(
                status.outputs.get("last"),
                Some(&json!(state["c"].1)),
                "{name}: the outputs are the live ones"
            );
            redone += lines(&site.created_log(component)) - 3;
        }
    }
    println!(
        "{} plans, {total_kills} kills mid-apply, {redone} resource creations redone \
         (cut before terraform recorded them), {:.0?}",
        INSTALLS * PLANS,
        started.elapsed()
    );
}

/// A `prompt` install's approved apply, cut after its first resource was made; while the
/// runner is down that resource is changed out of band, so the restarted runner's re-plan
/// updates it where the approval only created it: outside the approval. The runner asks
/// again (`AwaitingApproval`, reason `Resumed`, a new diff, the old approval dropped,
/// nothing applied and no `apply` event), and applies once a person approves that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_apply_beyond_the_approval_asks_again() {
    let cp = Arc::new(ControlPlane::start(Backend::Embedded).await);
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let dir = tempfile::tempdir().unwrap();
    let source = module(dir.path());
    let site = Site {
        install: "r0".into(),
        prompt: true,
        token: {
            create_app(&cp).await;
            install(&cp, "r0", true).await
        },
        state: dir.path().join("state"),
        log: dir.path().join("runner.log"),
        plans: BTreeMap::from([("r0-deploy-c0".to_owned(), "c0".to_owned())]),
        kubeconfig: None,
    };
    let name = "r0-deploy-c0";
    ready(&plans, &site.install, name, "c0", &source).await;
    let mut runner = site.start(&cp);
    let reaches = async |check: &dyn Fn(&Plan) -> bool| {
        eventually(120, &format!("{name} to move on"), async || {
            let plan = plans.get(name).await.ok()?;
            check(&plan).then_some(plan)
        })
        .await
    };
    let waiting = reaches(&|p| phase(p) == Some(PlanPhase::AwaitingApproval)).await;
    let approved_diff = waiting.status.clone().unwrap().diff.unwrap();
    approve(&plans, &waiting).await.unwrap();

    // b's provisioner runs: a is in terraform's state. Kill the runner there.
    let created = site.created_log("c0");
    eventually(60, "the apply to reach b", async || {
        (lines(&created) >= 2).then_some(())
    })
    .await;
    runner.kill();
    assert!(matches!(site.stage(name), Some(Stage::Applying { .. })));
    // Out of band, a's input changes (terraform waits for the killed runner's terraform
    // to let go of the state lock).
    let out_of_band = std::process::Command::new(on_path("terraform"))
        .current_dir(site.module_dir("c0"))
        .args([
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-lock-timeout=60s",
            "-target=terraform_data.a",
            "-var",
            "note=moved",
        ])
        .output()
        .unwrap();
    assert!(
        out_of_band.status.success(),
        "{}",
        String::from_utf8_lossy(&out_of_band.stdout)
    );

    let _runner = site.start(&cp);
    let asked = reaches(&|p| {
        p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Resumed")
            && phase(p) == Some(PlanPhase::AwaitingApproval)
    })
    .await;
    let status = asked.status.clone().unwrap();
    assert!(status.approval.is_none(), "the old approval is dropped");
    let diff = status.diff.clone().unwrap();
    assert_ne!(diff.hash, approved_diff.hash);
    let a = diff
        .resources
        .iter()
        .find(|r| r.address == "terraform_data.a")
        .expect("the re-plan changes a");
    assert_eq!(a.action, outpost_api::ChangeAction::Update, "{diff:?}");
    assert_eq!(resources(&site.module_dir("c0"))["a"].2, "moved");
    eventually(30, "the audit log to be shipped", async || {
        let shipped = std::fs::read_to_string(site.state.join("audit.shipped")).ok()?;
        (shipped.trim() == local_events(&site.state).to_string()).then_some(())
    })
    .await;
    assert_eq!(
        audited_applies(&cp).await.get(name),
        None,
        "nothing applied yet"
    );

    approve(&plans, &asked).await.unwrap();
    let done = reaches(&|p| phase(p).is_some_and(PlanPhase::is_terminal)).await;
    let status = done.status.unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Succeeded), "{status:?}");
    assert_eq!(status.diff.unwrap().hash, diff.hash);
    let state = resources(&site.module_dir("c0"));
    assert_eq!(state["a"].2, "c0");
    assert_eq!(state["c"].2, state["b"].1);
    eventually(30, "one apply in the audit log", async || {
        let applies = audited_applies(&cp).await;
        (applies.get(name).map(Vec::len) == Some(1)).then_some(())
    })
    .await;
}
