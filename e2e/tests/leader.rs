//! Two controller replicas elect one leader through a Lease in the store.

use std::time::Duration;

use outpost_controllers::leader::{Election, Role};
use outpost_e2e::{Backend, ControlPlane, on_both_backends};

on_both_backends!(one_leader_and_failover_after_the_lease_expires);

async fn one_leader_and_failover_after_the_lease_expires(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let client = cp.client().await;
    let mut a = Election::new("default", "outpost-controllers", "replica-a");
    let mut b = Election::new("default", "outpost-controllers", "replica-b");
    a.lease_duration = Duration::from_secs(2);
    b.lease_duration = Duration::from_secs(2);

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
