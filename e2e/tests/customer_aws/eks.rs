//! Cluster access without a kubeconfig: EKS tokens of each Plan's role.

use super::*;

/// Issue 19, cluster access without a kubeconfig: the stack-booted runner, started
/// without `--kubeconfig`, reaches the install's cluster (the stand-in, named by the
/// sandbox's outputs) with an EKS token minted under each Plan's role. The cluster maps
/// each lifecycle role to its own group: `cache`, deployed with the provision role, is
/// applied; `web`, deployed with the maintenance role, which the cluster lets only
/// read, is refused by the cluster (403) and nothing of it is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_kubeconfig_each_plan_reaches_the_cluster_with_an_eks_token_of_its_role() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    let flow = start_flow(Backend::Embedded, false, ClusterAccess::EksTokens).await;
    let deploy_of = async |entity: &str, wanted: PlanPhase| {
        flow.all_plans().await.into_iter().find(|p| {
            p.spec.entity.name == entity
                && p.spec.operation == Operation::Deploy
                && phase(p) == Some(wanted)
        })
    };
    let cache = eventually(300, "cache's deploy Plan to succeed", async || {
        deploy_of("cache", PlanPhase::Succeeded).await
    })
    .await;
    assert_eq!(
        cache.status.unwrap().role.unwrap().name,
        format!("{}-provision", flow.uid)
    );
    let services: Api<Service> = Api::namespaced(flow.cluster.client().await, "shopfront");
    assert!(services.get_opt("cache").await.unwrap().is_some());

    let web = eventually(300, "web's deploy Plan to fail", async || {
        deploy_of("web", PlanPhase::Failed).await
    })
    .await;
    let status = web.status.unwrap();
    assert_eq!(
        status.role.unwrap().name,
        format!("{}-maintenance", flow.uid)
    );
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&format!(
            "User \"maintenance:{}\" cannot patch resource \"deployments\"",
            web.metadata.uid.clone().unwrap()
        )),
        "{message}"
    );
    let deployments: Api<Deployment> = Api::namespaced(flow.cluster.client().await, "shopfront");
    assert!(deployments.get_opt("web").await.unwrap().is_none());

    // A helm_chart takes the same path: rendered with the cluster's .Capabilities and
    // applied under the provision role; under the maintenance role the cluster refuses.
    let chart = eventually(300, "chart's deploy Plan to succeed", async || {
        deploy_of("chart", PlanPhase::Succeeded).await
    })
    .await;
    assert_eq!(
        chart.status.unwrap().role.unwrap().name,
        format!("{}-provision", flow.uid)
    );
    let configs: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(flow.cluster.client().await, "shopfront");
    let rendered = configs.get("chart-config").await.unwrap().data.unwrap();
    assert!(rendered["kubeVersion"].starts_with("v1."), "{rendered:?}");
    let readonly = eventually(300, "chart-readonly's deploy Plan to fail", async || {
        deploy_of("chart-readonly", PlanPhase::Failed).await
    })
    .await;
    // The cluster refuses the chart's first write: its ConfigMap, or its namespace when
    // this Plan runs before another component has made it.
    let message = readonly.status.unwrap().message.unwrap_or_default();
    let refused = |resource: &str| {
        format!(
            "User \"maintenance:{}\" cannot patch resource \"{resource}\"",
            readonly.metadata.uid.clone().unwrap()
        )
    };
    assert!(
        message.contains(&refused("configmaps")) || message.contains(&refused("namespaces")),
        "{message}"
    );
    assert!(
        configs
            .get_opt("chart-readonly-config")
            .await
            .unwrap()
            .is_none()
    );

    // The customer's own cluster, by the kubeconfig in their Secrets Manager: reached,
    // and the kubeconfig (its token) is in no Plan and no audit event.
    eventually(300, "own-cluster's deploy Plan to succeed", async || {
        deploy_of("own-cluster", PlanPhase::Succeeded).await
    })
    .await;
    let reached = configs.get("own-cluster").await.unwrap().data.unwrap();
    assert_eq!(reached["reached"], "by the customer's kubeconfig");
    let token = &flow.cluster.admin_token;
    let plans = serde_json::to_string(&flow.all_plans().await).unwrap();
    assert!(
        !plans.contains(token.as_str()),
        "a Plan holds the kubeconfig's token"
    );
    let events: Api<AuditEvent> = Api::namespaced(flow.cp.client().await, "default");
    let events =
        serde_json::to_string(&events.list(&Default::default()).await.unwrap().items).unwrap();
    assert!(
        !events.contains(token.as_str()),
        "an audit event holds the kubeconfig's token"
    );
    assert!(
        plans.contains("${outpost-secret:cluster_kubeconfig}"),
        "the Plan names the secret"
    );
}
