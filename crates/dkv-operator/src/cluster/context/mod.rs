//! What every reconcile shares: the client, the caches, operator defaults,
//! metrics, the event recorder (Events go out through [`publish`]),
//! per-object retry state, what the operator remembers between passes
//! (verified templates, the member-side upgrade budget) and how it reaches
//! a cluster's etcd ([`etcd_access`]).

pub mod etcd_access;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::events::{Event, Recorder, Reporter};
use dkv_api::DistributedKV;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};

use crate::cluster::backups::BackupsReach;
use crate::cluster::backups::agents::Agents;
use crate::cluster::backups::standby::followers::Followers;
use crate::cluster::context::etcd_access::{EtcdConnector, GrpcConnector};
use crate::cluster::security::certificates::CertificateLifetime;
use crate::cluster::validate::{Defaults, ValidatedCluster};
use crate::cluster::watches::Stores;
use crate::metrics::Metrics;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::mpsc::UnboundedReceiver;

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub defaults: Defaults,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Reaches the clusters' etcd members.
    pub etcd: Arc<dyn EtcdConnector>,
    /// Validity of the TLS certificates issued for clusters.
    pub certificate_lifetime: CertificateLifetime,
    /// StatefulSets whose pod template was checked (see
    /// [`crate::cluster::context::VerifiedTemplates`]).
    pub verified_templates: VerifiedTemplates,
    /// The continuous backup agents this operator runs.
    pub agents: Agents,
    /// The standby followers this operator runs.
    pub followers: Followers,
    /// Turns for rollouts only an operator upgrade asks for, shared by
    /// every cluster (see [`crate::cluster::upgrade::member_side`]).
    pub member_upgrades: crate::cluster::upgrade::member_side::UpgradeBudget,
    /// The member-side code this operator runs ([`crate::cluster::upgrade::member_side::code`]).
    pub member_side_code: String,
    /// Clusters whose agent report changed (taken once by the controller,
    /// which reconciles them).
    agent_changes: Mutex<Option<UnboundedReceiver<(String, String)>>>,
    /// Consecutive transient failures per cluster, for exponential backoff;
    /// cleared by a successful reconcile.
    failures: Mutex<HashMap<ObjectRef<DistributedKV>, u32>>,
    /// When each cluster last recovered from NOSPACE (this process's
    /// memory: a restart allows one more recovery at once).
    space_reclaimed: Mutex<HashMap<ObjectRef<DistributedKV>, jiff::Timestamp>>,
}

impl Context {
    pub fn new(
        client: Client,
        stores: Stores,
        defaults: Defaults,
        metrics: Arc<Metrics>,
        reporter: Reporter,
    ) -> Self {
        let (agents, agent_changes) = Agents::new(metrics.clone());
        Self {
            followers: Followers::new(agents.notifier()),
            agents,
            agent_changes: Mutex::new(Some(agent_changes)),
            recorder: Recorder::new(client.clone(), reporter),
            client,
            stores,
            defaults,
            metrics,
            etcd: Arc::new(GrpcConnector::default()),
            certificate_lifetime: CertificateLifetime::default(),
            verified_templates: VerifiedTemplates::default(),
            member_upgrades: crate::cluster::upgrade::member_side::UpgradeBudget::default(),
            member_side_code: crate::cluster::upgrade::member_side::code(0),
            failures: Mutex::default(),
            space_reclaimed: Mutex::default(),
        }
    }

    /// What the backup features reach of the operator.
    pub fn backups(&self) -> BackupsReach<'_> {
        BackupsReach {
            client: &self.client,
            stores: &self.stores,
            recorder: &self.recorder,
            agents: &self.agents,
            followers: &self.followers,
        }
    }

    /// At most `per_minute` clusters start an operator-only rollout a
    /// minute (`--member-upgrades-per-minute`).
    pub fn with_member_upgrades_per_minute(mut self, per_minute: u32) -> Self {
        self.member_upgrades = crate::cluster::upgrade::member_side::UpgradeBudget::new(per_minute);
        self
    }

    /// Adds `--member-side-epoch` to the member-side code.
    pub fn with_member_side_epoch(mut self, epoch: u32) -> Self {
        self.member_side_code = crate::cluster::upgrade::member_side::code(epoch);
        self
    }

    pub fn with_certificate_lifetime(mut self, lifetime: CertificateLifetime) -> Self {
        self.certificate_lifetime = lifetime;
        self
    }

    /// Uses `etcd` instead of gRPC connections (tests).
    pub fn with_etcd(mut self, etcd: Arc<dyn EtcdConnector>) -> Self {
        self.etcd = etcd;
        self
    }

    /// The clusters whose continuous backup report changed, as a stream of
    /// references to reconcile; `None` after the first call.
    pub fn take_agent_changes(&self) -> Option<UnboundedReceiver<(String, String)>> {
        self.agent_changes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    /// Records one more consecutive failure of `obj` and returns the count.
    pub fn record_failure(&self, obj: &ObjectRef<DistributedKV>) -> u32 {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = failures.entry(obj.clone()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    pub fn clear_failures(&self, obj: &ObjectRef<DistributedKV>) {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(obj);
    }

    pub fn record_space_reclaimed(&self, obj: &ObjectRef<DistributedKV>, at: jiff::Timestamp) {
        self.space_reclaimed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(obj.clone(), at);
    }

    /// When the cluster last recovered from NOSPACE, if this process did it.
    pub fn space_reclaimed_at(&self, obj: &ObjectRef<DistributedKV>) -> Option<jiff::Timestamp> {
        self.space_reclaimed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(obj)
            .copied()
    }
}

/// Publishes an Event about `dkv`. Events are best effort: failing to record
/// one must not fail the reconcile that did the work.
pub async fn publish(dkv: &DistributedKV, event: Event, ctx: &Context) {
    publish_to(&dkv.object_ref(&()), event, ctx).await;
}

/// Publishes an Event about the validated `cluster` (the stages after
/// validation know the cluster by its validated spec, not by the object).
pub async fn publish_about(cluster: &ValidatedCluster, event: Event, ctx: &Context) {
    publish_to(&cluster.object_reference(), event, ctx).await;
}

async fn publish_to(reference: &ObjectReference, event: Event, ctx: &Context) {
    ctx.recorder.publish_or_warn(&event, reference).await;
}

/// StatefulSets whose whole object (pod template included) was last seen to
/// hold what the operator applies: uid → (generation, applied hash).
///
/// The StatefulSet cache drops the pod template's spec
/// ([`crate::cluster::watches::trim_statefulset`]), so the cached object alone cannot
/// show that the template is still as applied. A template edit moves the
/// StatefulSet's `metadata.generation`; so once the full object was checked
/// at a generation, the same generation with the same applied hash needs no
/// new check. After a restart the map is empty and each StatefulSet is read
/// once (a GET, not a write).
#[derive(Debug, Default)]
pub struct VerifiedTemplates(Mutex<HashMap<String, (i64, String)>>);

impl VerifiedTemplates {
    pub(crate) fn holds(&self, live: &StatefulSet, hash: &str) -> bool {
        let (Some(uid), Some(generation)) = (live.uid(), live.metadata.generation) else {
            return false;
        };
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&uid)
            .is_some_and(|(g, h)| *g == generation && h == hash)
    }

    pub(crate) fn record(&self, full: &StatefulSet, hash: &str) {
        if let (Some(uid), Some(generation)) = (full.uid(), full.metadata.generation) {
            self.0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(uid, (generation, hash.to_owned()));
        }
    }
}
