//! A cluster's side of its backups: what its `DistributedKVBackup` records
//! say ([`catalogue`]), the encryption keys its pods read ([`keys`]),
//! continuous backup ([`continuous`]), restoring a new cluster from a
//! backup or a continuous backup's history ([`restore`]) and the scratch
//! clusters that verify a backup ([`verification`]), the continuous
//! backup agents the operator runs ([`agents`]), and what a standby that
//! follows another cluster's continuous backup does ([`standby`]).
//!
//! The feature reaches the operator through [`BackupsReach`] (the API, the
//! caches, the Event recorder and the agents), not the cluster
//! controller's whole context: the context holds the agents, so the
//! feature depending on it back would be a cycle.

pub mod agents;
pub mod catalogue;
pub(crate) mod continuous;
pub mod restore;
pub mod standby;
mod supervise;
pub(crate) mod verification;

use dkv_api::DistributedKV;
use dkv_backup::StoreConfig;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};

use self::agents::{Agents, Report};
use self::catalogue::BackupSummary;
use self::standby::followers::FollowReport;
use super::validate::ValidatedCluster;
use crate::cluster::error::{Error, Result};
use crate::cluster::watches::Stores;
use crate::events::Recorder;

/// What the backup features reach of the operator (from
/// `Context::backups`).
pub struct BackupsReach<'a> {
    pub client: &'a Client,
    pub stores: &'a Stores,
    pub recorder: &'a Recorder,
    pub agents: &'a Agents,
    pub followers: &'a standby::followers::Followers,
}

/// What status says of the cluster's backups after a pass: what the
/// records say, and where continuous backup stands — from the agent's
/// report of this pass (`reported`) or, when the pass did not get that
/// far, its last one. `cluster`: the spec, when the pass validated it. A
/// new gap in the recorded history is reported as an Event.
pub async fn observe(
    dkv: &DistributedKV,
    cluster: Option<&ValidatedCluster>,
    (reported, followed): (Option<&Report>, Option<&FollowReport>),
    reach: &BackupsReach<'_>,
    now: jiff::Timestamp,
) -> BackupSummary {
    let mut backups = catalogue::observe(dkv, reach.stores);
    let report = reported.cloned().or_else(|| {
        reach
            .agents
            .report(&dkv.namespace().unwrap_or_default(), &dkv.name_any())
    });
    (backups.continuous, backups.continuous_failing) =
        continuous::observe(dkv, report.as_ref(), continuous::interval(cluster), now);
    continuous::report_new_gaps(dkv, backups.continuous.as_ref(), reach).await;
    let followed = followed.cloned().or_else(|| {
        reach
            .followers
            .report(&dkv.namespace().unwrap_or_default(), &dkv.name_any())
    });
    backups.standby = standby::status(dkv, cluster, followed.as_ref(), now);
    standby::announce(dkv, backups.standby.as_ref(), reach).await;
    backups
}

/// The object store settings the Secret `secret` of `namespace` holds
/// (the operator's own, from its environment, when none is named); `None`
/// when the named Secret does not exist.
pub async fn store_config(
    reach: &BackupsReach<'_>,
    namespace: &str,
    secret: Option<&str>,
) -> Result<Option<StoreConfig>> {
    let Some(name) = secret else {
        return Ok(Some(StoreConfig::default()));
    };
    let secrets: Api<Secret> = Api::namespaced(reach.client.clone(), namespace);
    let found = secrets.get_opt(name).await.map_err(|source| Error::Read {
        kind: "Secret",
        name: name.to_owned(),
        source,
    })?;
    Ok(found.map(|secret| crate::secret_store::store_config(&secret)))
}

/// Sets `annotations` on the StatefulSet `statefulset` in one write.
pub async fn annotate(
    client: &Client,
    namespace: &str,
    statefulset: &str,
    annotations: serde_json::Map<String, serde_json::Value>,
) -> Result<()> {
    let api: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    api.patch(
        statefulset,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .map(drop)
    .map_err(|source| Error::Apply {
        kind: "StatefulSet".to_owned(),
        name: statefulset.to_owned(),
        source,
    })
}
