//! Leader election on a `coordination.k8s.io/v1` Lease, so that two operator
//! replicas never reconcile at once.
//!
//! Expiry is judged by *observation*, not by comparing the holder's
//! `renewTime` with our clock: a candidate takes over only after it has seen
//! the lease's resourceVersion stay unchanged for a whole lease duration.
//! Clock skew between nodes therefore cannot make two replicas leaders.
//! Writes use optimistic concurrency (the resourceVersion of the read), so
//! of two candidates racing for an expired lease exactly one wins.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

/// Timing and identity of one candidate.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// Unique per replica (the pod name).
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How often the leader renews (well under `lease_duration`).
    pub renew_interval: Duration,
    /// How often a standby checks whether the lease expired.
    pub retry_interval: Duration,
}

impl LeaseConfig {
    pub fn new(name: String, namespace: String, identity: String) -> Self {
        Self {
            name,
            namespace,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
            retry_interval: Duration::from_secs(2),
        }
    }

    /// The leader steps down when it could not renew for this long: before
    /// the lease expires for others, so there is never an overlap.
    fn renew_deadline(&self) -> Duration {
        self.lease_duration.mul_f64(2.0 / 3.0)
    }
}

/// One candidate for the lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// resourceVersion of the lease when last seen held by someone else,
    /// and when it was first seen at that version.
    observed: Option<(String, Instant)>,
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    fn now() -> MicroTime {
        MicroTime(jiff::Timestamp::now())
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// Takes or renews the lease. `Ok(true)` when this candidate holds it
    /// afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return self.create().await;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder == self.config.identity {
            spec.renew_time = Some(Self::now());
            spec.lease_duration_seconds = Some(self.lease_seconds());
            return self.replace(&lease).await;
        }

        let version = lease.resource_version().unwrap_or_default();
        let expired = if holder.is_empty() {
            // Released by its last holder: free to take at once.
            true
        } else {
            match &self.observed {
                Some((seen, since)) if *seen == version => {
                    since.elapsed() >= self.config.lease_duration
                }
                _ => {
                    self.observed = Some((version, Instant::now()));
                    false
                }
            }
        };
        if !expired {
            return Ok(false);
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.config.identity.clone());
        spec.acquire_time = Some(Self::now());
        spec.renew_time = Some(Self::now());
        spec.lease_duration_seconds = Some(self.lease_seconds());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        let won = self.replace(&lease).await?;
        if won {
            info!(previous = %holder, "took over the leader lease");
        }
        Ok(won)
    }

    async fn create(&mut self) -> Result<bool, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.lease_seconds()),
                acquire_time: Some(Self::now()),
                renew_time: Some(Self::now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            // Another candidate created it first.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Writes `lease` if nobody changed it since it was read.
    async fn replace(&self, lease: &Lease) -> Result<bool, kube::Error> {
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Gives the lease up so a standby takes over without waiting for expiry.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        self.replace(&lease).await.map(|_| ())
    }

    /// Waits until this candidate holds the lease; `None` if `stop` fired first.
    pub async fn acquire(&mut self, stop: &mut tokio::sync::watch::Receiver<bool>) -> Option<()> {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return Some(()),
                Ok(false) => {}
                Err(err) => warn!(error = %err, "leader election: cannot read or write the lease"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_interval) => {}
                _ = stop.wait_for(|stopped| *stopped) => return None,
            }
        }
    }

    /// Renews the lease until it is lost or `stop` fires. Returns `true` when
    /// leadership was lost (the caller must stop reconciling at once).
    pub async fn hold(&mut self, stop: &mut tokio::sync::watch::Receiver<bool>) -> bool {
        let mut last_renewed = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.config.renew_interval) => {}
                _ = stop.wait_for(|stopped| *stopped) => return false,
            }
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewed = Instant::now(),
                Ok(false) => {
                    warn!("leader lease taken by another replica");
                    return true;
                }
                Err(err) => {
                    warn!(error = %err, "failed to renew the leader lease");
                    if last_renewed.elapsed() >= self.config.renew_deadline() {
                        return true;
                    }
                }
            }
        }
    }
}
