//! What a pass hands to the per-cluster health series
//! ([`crate::metrics::ClusterView`]): the members as status records them,
//! etcd's alarms, the certificates in use, and the backup cadences.

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::DistributedKVStatus;
use kube::ResourceExt;

use crate::metrics::{ClusterView, MemberView};

use crate::cluster::pass::Pass;

pub fn view(dkv: &DistributedKV, status: Option<&DistributedKVStatus>, pass: &Pass) -> ClusterView {
    let continuous_interval = crate::cluster::backups::continuous::interval(pass.cluster());
    let schedule = pass
        .cluster()
        .and_then(|c| c.backup.as_ref())
        .map(|b| &b.schedule);
    ClusterView {
        namespace: dkv.namespace().unwrap_or_default(),
        cluster: dkv.name_any(),
        desired_members: i64::from(dkv.spec.size),
        members: status
            .map(|s| {
                s.members
                    .iter()
                    .map(|m| MemberView {
                        name: m.name.clone(),
                        healthy: m.healthy,
                        learner: m.learner,
                        node_lost: m
                            .node
                            .clone()
                            .zip(m.node_lost_since.as_ref().map(|t| t.0.as_second())),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        // Stopping or stopped for spec.hibernation: its members are away by
        // design, and the alerts leave it alone.
        hibernated: pass.hibernation().stopped()
            || status.and_then(|s| s.phase)
                == Some(dkv_api::distributedkv::v1beta1::Phase::Hibernated),
        forming: status.and_then(|s| s.phase).is_none_or(|phase| {
            matches!(
                phase,
                dkv_api::distributedkv::v1beta1::Phase::Creating
                    | dkv_api::distributedkv::v1beta1::Phase::Restoring
            )
        }),
        has_backup: pass.cluster().is_some_and(|c| c.backup.is_some()),
        alarms: pass
            .connected
            .as_ref()
            .zip(pass.cluster())
            .map(|(c, cluster)| c.attributed_alarms(&cluster.name))
            .unwrap_or_default(),
        corrupt: pass
            .connected
            .as_ref()
            .zip(pass.cluster())
            .map(|(c, cluster)| c.corrupt_findings(&cluster.name))
            .unwrap_or_default(),
        certificates: pass
            .connected
            .iter()
            .flat_map(|c| c.certificates())
            .map(|(secret, not_after)| (secret, not_after.as_second()))
            .collect(),
        backup_schedule_interval: schedule
            .and_then(|s| s.longest_gap(jiff::Timestamp::now()))
            .map(|gap| gap.as_secs()),
        continuous_interval: continuous_interval
            .map(|i| i64::try_from(i.as_secs()).unwrap_or(i64::MAX)),
        standby: status
            .and_then(|s| s.standby.as_ref())
            .filter(|s| !crate::cluster::backups::standby::is_promoted(Some(s)))
            .map(|s| {
                use dkv_api::distributedkv::v1beta1::StandbyPhase;
                crate::metrics::StandbyView {
                    following: !matches!(
                        s.phase,
                        Some(StandbyPhase::Failing | StandbyPhase::Stopped)
                    ),
                    lag_seconds: s.lag_seconds,
                    lag_revisions: s.lag_revisions,
                }
            }),
    }
}
