//! Kubernetes applies cut by a kill resume.

use super::*;

/// Kubernetes components (a stand-in cluster): the runner is killed a random moment
/// (up to 150 ms) after it journals `applying` for each of 6 Plans, each applying
/// [`CONFIG_MAPS`] ConfigMaps, and restarted. A Plan whose apply the kill cut (the
/// journal still says `applying`) re-plans — the objects already written show no change,
/// the rest are still created — and finishes: `Succeeded`, reason `Resumed`, one
/// `apply` event saying `resumed: true`; every ConfigMap of every component is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_applies_cut_by_a_kill_resume() {
    let cp = Arc::new(ControlPlane::start(Backend::Embedded).await);
    let cluster = ControlPlane::start_standin_cluster().await;
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let dir = tempfile::tempdir().unwrap();
    create_app(&cp).await;
    let site = Site {
        install: "k0".into(),
        prompt: false,
        token: install(&cp, "k0", false).await,
        state: dir.path().join("state"),
        log: dir.path().join("runner.log"),
        plans: (0..6)
            .map(|p| (format!("k0-deploy-m{p}"), format!("m{p}")))
            .collect(),
        kubeconfig: Some(cluster.kubeconfig(&cluster.admin_token)),
    };
    for (name, component) in &site.plans {
        let content: String = (0..CONFIG_MAPS)
            .map(|i| {
                format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {component}-{i}\ndata:\n  n: \"{i}\"\n")
            })
            .collect();
        let desired = json!({"app": "shop", "type": "kubernetes_manifest",
            "manifest": {"namespace": "shop", "content": content}});
        ready_plan(&plans, &site.install, name, component, desired, json!([])).await;
    }
    let mut runner = site.start(&cp);
    let mut cut = BTreeMap::new();
    for name in site.plans.keys() {
        let applying = async || matches!(site.stage(name), Some(Stage::Applying { .. }));
        eventually(120, &format!("{name} to be applying"), async || {
            applying().await.then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 150)).await;
        runner.kill();
        // Cut: the journal still says `applying`, the runner had not audited the apply as
        // done, and the control plane has not been told the result (a runner killed after
        // auditing or reporting, before journaling it, has nothing to resume: it reports
        // what it audited). A report the runner sent just before it was killed may still
        // be landing: look after it has.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let reported = plans
            .get(name)
            .await
            .ok()
            .and_then(|p| phase(&p))
            .is_some_and(PlanPhase::is_terminal);
        cut.insert(
            name.clone(),
            applying().await && !reported && !site.apply_audited(name),
        );
        runner = site.start(&cp);
    }
    eventually(120, "every plan to be final", async || {
        let items = plans.list(&ListParams::default()).await.ok()?.items;
        items
            .iter()
            .all(|p| phase(p).is_some_and(PlanPhase::is_terminal))
            .then_some(())
    })
    .await;
    eventually(60, "every audit event to be shipped", async || {
        let shipped = std::fs::read_to_string(site.state.join("audit.shipped")).ok()?;
        (shipped.trim() == local_events(&site.state).to_string()).then_some(())
    })
    .await;
    let applies = audited_applies(&cp).await;
    let kubectl = cluster.kubectl();
    for (name, component) in &site.plans {
        let status = plans.get(name).await.unwrap().status.unwrap();
        assert_eq!(
            status.phase,
            Some(PlanPhase::Succeeded),
            "{name}: {status:?}"
        );
        let events = applies.get(name).cloned().unwrap_or_default();
        assert_eq!(
            events.len(),
            1,
            "{name}: one apply in the audit log: {events:?}"
        );
        if cut[name] {
            assert_eq!(
                status.reason.as_deref(),
                Some("Resumed"),
                "{name}: {status:?}"
            );
            assert_eq!(events[0]["resumed"], true, "{name}: {}", events[0]);
        }
        let names = kubectl.ok(&["get", "configmaps", "-n", "shop", "-o", "name"]);
        let mine = names
            .lines()
            .filter(|l| l.starts_with(&format!("configmap/{component}-")))
            .count();
        assert_eq!(mine, CONFIG_MAPS, "{name}: its ConfigMaps");
    }
    let resumed = cut.values().filter(|c| **c).count();
    println!(
        "{resumed} of {} kubernetes applies cut and resumed",
        cut.len()
    );
    assert!(resumed > 0, "no kill landed during an apply");
}
