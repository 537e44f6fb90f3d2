//! Leader election on a `coordination.k8s.io/v1` Lease in the store: the holder renews
//! it with optimistic concurrency (its resourceVersion), so of several replicas exactly
//! one acts; a replica whose renewal fails, or whose lease expired, stops acting.
//!
//! The leader's writes are fenced: a client from [`Election::fenced`] sends the
//! Lease's resourceVersion after the leader's last renewal ([`outpost_api::fence`]) and
//! the API server refuses its writes (409) once another replica has taken the Lease, so
//! a deposed leader cannot write in the time it takes it to notice.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube_client::Client;
use kube_client::api::{Api, ObjectMeta, PostParams};
use outpost_api::fence::{FENCE_HEADER, FenceToken};

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
    /// This replica's fencing token (shared with its fenced clients).
    fence: Fence,
}

/// The fencing token of this replica's latest term, `None` before it first leads. It is
/// kept after the term ends: the API server refuses it once another replica takes the
/// Lease, so a deposed leader's late writes fail rather than go unfenced.
///
/// A renewal changes the Lease's revision, so it takes the lock for writing: fenced
/// writes in flight finish first and new ones wait for the new token, and a leader
/// never fences out its own writes.
#[derive(Clone, Debug, Default)]
struct Fence(Arc<tokio::sync::RwLock<Option<FenceToken>>>);

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
            fence: Fence::default(),
        }
    }

    /// `client`, sending the fencing token of this replica's latest term with every
    /// request: the API server refuses its writes with 409 once the Lease has been
    /// written since (another replica took it). Give the controllers this client, and run
    /// the election itself on the plain one.
    pub fn fenced(&self, client: Client) -> Client {
        let fence = self.fence.clone();
        let namespace = client.default_namespace().to_owned();
        let service = tower::service_fn(
            move |mut request: http::Request<kube_client::client::Body>| {
                let (client, fence) = (client.clone(), fence.clone());
                async move {
                    // Reads are not fenced, and a watch must not hold up renewals.
                    if request.method() == http::Method::GET {
                        return client.send(request).await;
                    }
                    let token = fence.0.read().await;
                    if let Some(value) = token
                        .as_ref()
                        .and_then(|t| http::HeaderValue::from_str(&t.to_string()).ok())
                    {
                        request.headers_mut().insert(FENCE_HEADER, value);
                    }
                    // Held until the answer: the write is done by then.
                    client.send(request).await
                }
            },
        );
        Client::new(service, namespace)
    }

    /// Records the term's fencing token from the Lease this replica just wrote.
    fn lead(&self, token: &mut Option<FenceToken>, lease: &Lease) -> Role {
        if let Some(revision) = lease
            .metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok())
        {
            *token = Some(FenceToken {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                revision,
            });
        }
        Role::Leader
    }

    /// One round: take the lease if it is free or expired, renew it if ours.
    /// A write that loses a race (409) makes this replica a follower for the round.
    /// Winning it (taking or renewing the lease) makes the Lease's new resourceVersion
    /// this replica's fencing token.
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
            let mut token = self.fence.0.write().await;
            return match api.create(&PostParams::default(), &lease).await {
                Ok(created) => Ok(self.lead(&mut token, &created)),
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
        let mut token = self.fence.0.write().await;
        match api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(replaced) => Ok(self.lead(&mut token, &replaced)),
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
