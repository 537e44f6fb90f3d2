//! Two controller replicas elect one leader through a Lease in the store, and a
//! deposed leader's writes are fenced out.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube_client::api::{Api, ObjectMeta, PostParams};
use outpost_controllers::leader::{Election, Role};
use outpost_testing::{Backend, ControlPlane, on_both_backends};

on_both_backends!(
    one_leader_and_failover_after_the_lease_expires,
    a_deposed_leaders_writes_are_refused,
);

/// A replica's election for the controllers' Lease, with a 2 s lease so the test
/// sees it expire.
fn replica(identity: &str) -> Election {
    let mut election = Election::new("default", "outpost-controllers", identity);
    election.lease_duration = Duration::from_secs(2);
    election
}

async fn one_leader_and_failover_after_the_lease_expires(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let client = cp.client().await;
    let (a, b) = (replica("replica-a"), replica("replica-b"));

    assert_eq!(a.round(&client).await.unwrap(), Role::Leader);
    assert_eq!(b.round(&client).await.unwrap(), Role::Follower);
    assert_eq!(
        a.round(&client).await.unwrap(),
        Role::Leader,
        "the holder renews"
    );
    assert_eq!(b.round(&client).await.unwrap(), Role::Follower);

    // A stops renewing (say it was killed): once the lease expires, B takes over.
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    assert_eq!(b.round(&client).await.unwrap(), Role::Leader);
    assert_eq!(
        a.round(&client).await.unwrap(),
        Role::Follower,
        "the old leader stands down"
    );
    let holder = || {
        cp.kubectl().ok(&[
            "get",
            "leases.coordination.k8s.io",
            "outpost-controllers",
            "-o",
            "jsonpath={.spec.holderIdentity} {.spec.leaseTransitions}",
        ])
    };
    assert_eq!(holder(), "replica-b 1");

    // Both race for an expired lease: exactly one wins, and the lease names it.
    for round in 0..2 {
        tokio::time::sleep(Duration::from_millis(3_100)).await;
        let (ra, rb) = tokio::join!(a.round(&client), b.round(&client));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert!(
            ra != rb,
            "round {round}: exactly one leader, got {ra:?} and {rb:?}"
        );
        let winner = if ra == Role::Leader {
            "replica-a"
        } else {
            "replica-b"
        };
        assert!(
            holder().starts_with(winner),
            "round {round}: the lease names the winner"
        );
    }
}

/// A write by the controllers' client of `election` (any object will do: a Lease).
async fn write(
    election: &Election,
    client: &kube_client::Client,
    name: &str,
) -> Result<(), kube_client::Error> {
    let api: Api<Lease> = Api::namespaced(election.fenced(client.clone()), "default");
    let object = Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: None,
    };
    api.create(&PostParams::default(), &object).await.map(drop)
}

async fn a_deposed_leaders_writes_are_refused(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let client = cp.client().await;
    let (a, b) = (replica("replica-a"), replica("replica-b"));

    assert_eq!(a.round(&client).await.unwrap(), Role::Leader);
    write(&a, &client, "by-a").await.expect("the leader writes");
    assert_eq!(a.round(&client).await.unwrap(), Role::Leader, "renews");
    write(&a, &client, "by-a-after-renewal")
        .await
        .expect("a renewal does not fence the leader out");

    // A stops renewing (paused, say) and B takes the lease once it expires. A has not
    // run a round since, so it still acts as leader: its writes are refused.
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    assert_eq!(b.round(&client).await.unwrap(), Role::Leader);
    let refused = |result: Result<(), kube_client::Error>| match result {
        Err(kube_client::Error::Api(status)) => status,
        other => panic!("the deposed leader's write was not refused: {other:?}"),
    };
    let status = refused(write(&a, &client, "by-deposed-a").await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("fenced out") && status.message.contains("\"replica-b\""),
        "{}",
        status.message
    );
    write(&b, &client, "by-b")
        .await
        .expect("the new leader writes");

    // A's next round tells it that it follows; its late writes stay refused.
    assert_eq!(a.round(&client).await.unwrap(), Role::Follower);
    refused(write(&a, &client, "by-follower-a").await);

    let names: Vec<String> = Api::<Lease>::namespaced(client, "default")
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| l.metadata.name)
        .collect();
    assert_eq!(
        names,
        ["by-a", "by-a-after-renewal", "by-b", "outpost-controllers"],
        "only the fenced-out writes are missing"
    );
}
