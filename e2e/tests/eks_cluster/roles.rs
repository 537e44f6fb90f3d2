//! EKS tokens: each role gets what the cluster's RBAC grants its group; foreign tokens are refused.

use super::*;

#[tokio::test]
async fn each_role_gets_what_the_clusters_rbac_grants_its_group() {
    let s = setup().await;
    let provision = s.config_maps(&s.token(&s.provision)).await;
    provision
        .create(&PostParams::default(), &config_map("by-provision"))
        .await
        .expect("the provision role may create a ConfigMap");
    assert!(s.stored("by-provision").await);

    let maintenance = s.config_maps(&s.token(&s.maintenance)).await;
    let refused = maintenance
        .create(&PostParams::default(), &config_map("by-maintenance"))
        .await;
    let Err(kube_client::Error::Api(status)) = refused else {
        panic!("the maintenance role created a ConfigMap: {refused:?}");
    };
    assert_eq!(status.code, 403);
    assert!(
        status
            .message
            .contains("User \"maintenance:plan-1\" cannot create resource \"configmaps\""),
        "{}",
        status.message
    );
    assert!(!s.stored("by-maintenance").await);
    // It may read what it is granted to.
    let read = maintenance.get("by-provision").await.unwrap();
    assert_eq!(read.data.unwrap()["k"], "v");
    assert_eq!(
        code(
            maintenance
                .delete("by-provision", &Default::default())
                .await
        ),
        403
    );
    assert!(s.stored("by-provision").await);
}

#[tokio::test]
async fn tokens_for_another_host_time_or_role_are_refused() {
    let s = setup().await;
    let expired = s.token_at(
        &s.provision,
        SystemTime::now() - Duration::from_secs(20 * 60),
    );
    let elsewhere = eks::token(
        &s.provision,
        REGION,
        Some("http://127.0.0.2:1"),
        CLUSTER,
        SystemTime::now(),
    )
    .unwrap();
    let real_sts = eks::token(&s.provision, REGION, None, CLUSTER, SystemTime::now()).unwrap();
    let unmapped = s.token(&s.other);
    for (what, token) in [
        ("an expired", expired),
        ("another host's", elsewhere),
        ("real STS's (not this cluster's)", real_sts),
        ("an unmapped role's", unmapped),
    ] {
        let api = s.config_maps(&token).await;
        let name = "forged";
        assert_eq!(
            code(api.create(&PostParams::default(), &config_map(name)).await),
            401,
            "{what} token"
        );
        assert_eq!(
            code(api.list(&Default::default()).await),
            401,
            "{what} token"
        );
        assert!(!s.stored(name).await, "{what} token stored an object");
    }
    // The same role's fresh token for this cluster is taken.
    let api = s.config_maps(&s.token(&s.provision)).await;
    api.list(&Default::default()).await.unwrap();
}

/// A role the customer did not allow `eks:DescribeCluster` (moto enforcing IAM) cannot
/// learn where the cluster is: its Plan fails with EKS's refusal, no token is minted,
/// and the cluster (behind a recording proxy, the endpoint EKS reports) sees nothing.
#[tokio::test]
async fn a_role_that_may_not_describe_the_cluster_fails_closed() {
    // IAM is enforced after the setup's three calls: creating and assuming the role,
    // creating the cluster.
    let moto = Moto::start_with_eks_endpoints(&[("INITIAL_NO_AUTH_ACTION_COUNT", "3")]);
    let maintenance = assume(&sdk(&moto), "u-maintenance").await;
    let cluster = ControlPlane::start_standin_cluster().await;
    let proxy = RecordingProxy::start(&cluster.url, &cluster.tls).await;
    moto.create_eks_cluster(REGION, CLUSTER, &proxy.url, &ca_of(&cluster))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = step(
        &moto,
        &maintenance,
        dir.path(),
        "undescribed",
        json!({"name": CLUSTER}),
    );
    let error = PlanRoleClusterExecutor::manifests()
        .plan(&ctx)
        .await
        .expect_err("a role that may not describe the cluster has no way in");
    let message = format!("{error:#}");
    assert!(
        message.contains(&format!(
            "eks:DescribeCluster of cluster {CLUSTER} under the Plan's role failed"
        )) && message.contains("403"),
        "{message}"
    );
    assert_eq!(proxy.connections(), 0, "the cluster was reached");
    let admin: Api<ConfigMap> = Api::namespaced(cluster.client().await, "shop");
    assert!(admin.get_opt("undescribed").await.unwrap().is_none());
}
