//! The PodDisruptionBudget that keeps voluntary evictions (node drains,
//! cluster autoscaler) from taking a cluster below quorum.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::child_meta;
use crate::cluster::naming;
use crate::cluster::plan::Plan;
use crate::cluster::validate::ValidatedCluster;

/// Majority of `voters`: the fewest members that can still commit writes.
pub fn quorum(voters: i32) -> i32 {
    voters / 2 + 1
}

pub fn build(cluster: &ValidatedCluster, plan: &Plan) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: child_meta(cluster, naming::pdb(&cluster.name), "etcd"),
        spec: Some(PodDisruptionBudgetSpec {
            // Quorum of the members that actually run, not of the requested
            // size: while a resize is held back the running set is what must
            // stay available.
            min_available: Some(IntOrString::Int(quorum(plan.replicas))),
            selector: Some(LabelSelector {
                match_labels: Some(dkv_api::labels::selector_labels(&cluster.name)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::quorum;

    #[test]
    fn quorum_is_a_strict_majority() {
        let table = [
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 3),
            (5, 3),
            (6, 4),
            (7, 4),
            (8, 5),
            (9, 5),
        ];
        for (voters, expected) in table {
            assert_eq!(quorum(voters), expected, "quorum of {voters}");
        }
    }
}
