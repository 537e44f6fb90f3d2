//! Leader election on a `coordination.k8s.io/v1` Lease in the store: the holder renews
//! it with optimistic concurrency (its resourceVersion), so of several replicas exactly
//! one acts; a replica whose renewal fails, or whose lease expired, stops acting.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube_client::Client;
use kube_client::api::{Api, ObjectMeta, PostParams};

/// How a replica takes part in an election.
#[derive(Clone, Debug)]
pub struct Election {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease (one per set of replicas).
    pub name: String,
    /// This replica's identity (host name and process id, say).
    pub identity: String,
    /// How long a lease lasts without renewal.
    pub lease_duration: Duration,
}

/// Whether this replica holds the lease after one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// This replica holds the lease for the next lease duration.
    Leader,
    /// Another replica holds it.
    Follower,
}

/// Why a round of the election could not be decided.
#[derive(Debug, thiserror::Error)]
#[error("leader election on lease {lease} failed")]
pub struct ElectionError {
    lease: String,
    #[source]
    source: kube_client::Error,
}

impl Election {
    /// An election for `name` in `namespace` with a 15 s lease.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Election {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
        }
    }

    /// One round: take the lease if it is free or expired, renew it if ours.
    /// A write that loses a race (409) makes this replica a follower for the round.
    pub async fn round(&self, client: &Client) -> Result<Role, ElectionError> {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let fail = |source| ElectionError {
            lease: format!("{}/{}", self.namespace, self.name),
            source,
        };
        let now = Timestamp::now();
        let Some(mut lease) = api.get_opt(&self.name).await.map_err(fail)? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, 0)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Role::Leader),
                Err(kube_client::Error::Api(e)) if e.code == 409 => Ok(Role::Follower),
                Err(e) => Err(fail(e)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let ours = spec.holder_identity.as_deref() == Some(&self.identity);
        let expired = spec
            .renew_time
            .as_ref()
            .map(|t| {
                let duration = spec.lease_duration_seconds.unwrap_or(15).max(1) as i64;
                t.0.as_second() + duration < now.as_second()
            })
            .unwrap_or(true);
        if !ours && !expired {
            return Ok(Role::Follower);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let mut renewed = self.spec(now, transitions);
        if ours {
            renewed.acquire_time = spec.acquire_time.clone();
        }
        lease.spec = Some(renewed);
        match api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Role::Leader),
            Err(kube_client::Error::Api(e)) if e.code == 409 => Ok(Role::Follower),
            Err(e) => Err(fail(e)),
        }
    }

    fn spec(&self, now: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// How often to run a round: a third of the lease.
    pub fn retry_period(&self) -> Duration {
        self.lease_duration / 3
    }
}
