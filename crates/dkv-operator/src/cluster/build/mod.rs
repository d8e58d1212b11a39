//! Stage 5 of a reconcile, built ([`super::stage`]; pure): the desired child objects of a cluster.
//!
//! Builders take only the [`ValidatedCluster`] and the [`Plan`]; they never
//! read the API, so tests can assert every field from a YAML fixture. The
//! result is [`DesiredChildren`]: objects nobody has applied yet.

pub mod cronjob;
#[cfg(test)]
mod member_contract;
pub mod members;
pub mod pdb;
pub mod services;
pub mod statefulset;

use std::collections::BTreeMap;

use dkv_api::labels;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ObjectMeta;

use super::plan::Plan;
use super::validate::ValidatedCluster;

/// Every child object a cluster should have, not yet applied.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredChildren {
    /// Applied first: pods read it when they start (membership first).
    pub members: k8s_openapi::api::core::v1::ConfigMap,
    pub statefulset: StatefulSet,
    pub peer_service: Service,
    /// `None` while a restore from continuous backup replays (see
    /// [`super::plan::Plan::replay`]): clients are let in after it.
    pub client_service: Option<Service>,
    pub pdb: PodDisruptionBudget,
    /// `None` when backups are off: an existing CronJob is then deleted.
    pub backup_cronjob: Option<CronJob>,
}

/// Builds all children of `cluster` for this pass.
pub fn build(cluster: &ValidatedCluster, plan: &Plan) -> DesiredChildren {
    DesiredChildren {
        members: members::build(cluster, plan),
        statefulset: statefulset::build(cluster, plan),
        peer_service: services::peer(cluster),
        client_service: plan
            .replay_pending()
            .is_none()
            .then(|| services::client(cluster)),
        pdb: pdb::build(cluster, plan),
        backup_cronjob: cronjob::build(cluster, plan.hibernated),
    }
}

/// Metadata every child carries: its name, the cluster's namespace, the
/// standard labels and the controller owner reference (so deleting the
/// cluster garbage-collects it and its changes re-trigger the cluster).
pub(crate) fn child_meta(cluster: &ValidatedCluster, name: String, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(cluster.namespace.clone()),
        labels: Some(child_labels(cluster, component)),
        owner_references: Some(vec![cluster.owner.clone()]),
        ..ObjectMeta::default()
    }
}

pub(crate) fn child_labels(
    cluster: &ValidatedCluster,
    component: &str,
) -> BTreeMap<String, String> {
    let mut labels = labels::cluster_labels(&cluster.name);
    labels.insert(labels::COMPONENT_KEY.to_owned(), component.to_owned());
    labels
}
