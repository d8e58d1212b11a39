//! The PodDisruptionBudget that keeps voluntary evictions (node drains,
//! cluster autoscaler) from taking a cluster below quorum.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::child_meta;
use crate::cluster::membership::quorum;
use crate::cluster::plan::Plan;
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming;

pub fn build(cluster: &ValidatedCluster, plan: &Plan) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: child_meta(cluster, naming::pdb(&cluster.name), "etcd"),
        spec: Some(PodDisruptionBudgetSpec {
            // Quorum of the members that actually run, not of the requested
            // size: while a resize is held back the running set is what must
            // stay available. A hibernated cluster keeps the budget of its
            // members, which come back on waking.
            min_available: Some(IntOrString::Int(quorum(if plan.hibernated {
                i32::try_from(plan.record.members.len()).unwrap_or(plan.replicas)
            } else {
                plan.replicas
            }))),
            selector: Some(LabelSelector {
                match_labels: Some(dkv_api::labels::selector_labels(&cluster.name)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}
