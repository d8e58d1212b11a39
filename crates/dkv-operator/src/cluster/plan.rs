//! Step 3 of a reconcile (pure): compare the validated spec with what exists
//! and decide what this pass may change.
//!
//! Today the plan knows two situations: a cluster that does not exist yet is
//! bootstrapped with all members at once, and an existing cluster keeps its
//! member count. Changing the member count of a running etcd cluster is only
//! safe through membership operations (add a learner before its pod exists,
//! remove a member before its pod goes — `design/ETCD.md`); until those steps
//! exist, the plan refuses to resize rather than letting the StatefulSet add or
//! drop pods behind etcd's back, which could lose quorum.

use k8s_openapi::api::apps::v1::StatefulSet;

use super::build::statefulset::BOOTSTRAP_SIZE_ANNOTATION;
use super::membership_record::{ClusterState, MembershipRecord, RecordedMember};
use super::naming;
use super::validate::ValidatedCluster;

/// What this reconcile pass will do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Members the StatefulSet runs after this pass.
    pub replicas: i32,
    /// Size of the initial member set (`--initial-cluster`); fixed for the
    /// life of the cluster because every member's bootstrap config names it.
    pub bootstrap_size: i32,
    /// Whether the cluster is being created in this or an earlier pass and
    /// has not yet been seen whole.
    pub creating: bool,
    /// A change the spec asks for that this pass does not carry out.
    pub held_back: Option<HeldBack>,
    /// The membership record every member pod reads (see
    /// [`super::membership_record`]); applied before the StatefulSet.
    pub record: MembershipRecord,
}

/// A requested change the operator is deliberately not making.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldBack {
    Resize { current: i32, requested: i32 },
}

impl HeldBack {
    pub fn message(&self) -> String {
        match self {
            HeldBack::Resize { current, requested } => format!(
                "spec.size asks for {requested} members but the cluster has {current}; changing the member count of a running cluster is not supported by this operator version, so it keeps {current} members (set spec.size back to {current} to clear this)"
            ),
        }
    }
}

/// Plans one reconcile pass of `cluster`, given the StatefulSet that exists.
/// The record of a cluster being created: its initial members bootstrap
/// together.
pub fn bootstrap_record(cluster: &ValidatedCluster, size: i32) -> MembershipRecord {
    MembershipRecord {
        state: ClusterState::New,
        members: (0..size)
            .map(|i| RecordedMember {
                name: naming::member(&cluster.name, i),
                peer_url: naming::member_peer_url(&cluster.name, &cluster.namespace, i),
                started: false,
            })
            .collect(),
    }
}

/// Plans one reconcile pass of `cluster`, given the StatefulSet and the
/// membership record that exist.
pub fn plan(
    cluster: &ValidatedCluster,
    existing: Option<&StatefulSet>,
    record: Option<&MembershipRecord>,
) -> Plan {
    let Some(sts) = existing else {
        return Plan {
            replicas: cluster.size,
            bootstrap_size: cluster.size,
            creating: true,
            held_back: None,
            record: bootstrap_record(cluster, cluster.size),
        };
    };
    // The member count is the operator's own record, never the StatefulSet's
    // `replicas`: that field is what drift repair restores if someone edits
    // it, so it cannot also be the truth. Membership never changes in this
    // version, so the record is the bootstrap size.
    let recorded = sts
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BOOTSTRAP_SIZE_ANNOTATION))
        .and_then(|v| v.parse().ok());
    let bootstrap_size = recorded.or(sts.spec.replicas).unwrap_or(cluster.size);
    let current = bootstrap_size;
    let ready = sts
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    Plan {
        replicas: current,
        bootstrap_size,
        record: record
            .cloned()
            .unwrap_or_else(|| bootstrap_record(cluster, bootstrap_size)),
        creating: ready < current,
        held_back: (cluster.size != current).then_some(HeldBack::Resize {
            current,
            requested: cluster.size,
        }),
    }
}
