//! The pure work of stage 4 (planned, [`super::stage`]): compare the validated spec with what exists
//! and decide what this pass does.
//!
//! A cluster that does not exist yet is bootstrapped with all members at
//! once. An existing cluster changes only through the membership planner
//! ([`super::membership`]): one pinned step at a time, membership before
//! pods. The StatefulSet's `replicas` always follows etcd's member list (or,
//! when etcd cannot be seen, the operator's own membership record) — never
//! the spec directly, and never a value someone edited into the StatefulSet.

use dkv_api::distributedkv::v1beta1::OperationKind;
use k8s_openapi::api::apps::v1::StatefulSet;

use super::membership::{self, Observation, ObservedMember, Pinned, Step};
use super::validate::ValidatedCluster;
use crate::cluster::membership::etcd35_log;
use crate::cluster::membership::observe::MemberPod;
use crate::parts::naming;
use dkv_member::record::{ClusterState, MembershipRecord, RecordedMember};

/// Annotation on the StatefulSet recording the initial member count, which
/// every member's bootstrap configuration names.
pub const BOOTSTRAP_SIZE_ANNOTATION: &str = "dkv.io/bootstrap-size";

/// What this reconcile pass will do.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Members the StatefulSet runs after this pass.
    pub replicas: i32,
    /// Size of the initial member set (`--initial-cluster` of the bootstrap).
    pub bootstrap_size: i32,
    /// Whether the cluster has not yet formed (never had all members up).
    pub creating: bool,
    /// The membership record every member pod reads (see
    /// [`dkv_member::record`]); applied before the StatefulSet.
    pub record: MembershipRecord,
    /// The membership step of this pass.
    pub step: Step,
    /// The backup the members of a cluster being created start from
    /// (`spec.bootstrap.restore`, resolved by the reconcile; see
    /// [`crate::cluster::backups::restore`]).
    pub restore: Option<crate::cluster::backups::restore::ResolvedRestore>,
    /// A restore from continuous backup whose members have started from
    /// the base snapshot and whose recorded changes are not replayed yet
    /// (read back from the StatefulSet). Until the replay is done the
    /// client Service does not exist: clients never see a partial state.
    pub replay: Option<crate::cluster::backups::restore::ResolvedRestore>,
    /// The source revision a finished replay reached, kept on the
    /// StatefulSet for good (see [`crate::cluster::backups::restore::REPLAYED_ANNOTATION`]).
    pub replayed: Option<String>,
    /// A standby's revision offset, kept on the StatefulSet for good (see
    /// [`crate::cluster::backups::standby::OFFSET_ANNOTATION`]).
    pub standby_offset: Option<i64>,
    /// The serial of the current member certificate (`spec.tls`), carried
    /// by the pod template: pods started with another restart onto it.
    pub tls_serial: Option<String>,
    /// The members are stopped or stopping for `spec.hibernation` (see
    /// [`crate::cluster::lifecycle::hibernation`]): `replicas` is 0, backups are suspended.
    pub hibernated: bool,
    /// The image the member pods' dkv containers run (see
    /// [`crate::cluster::upgrade::member_side`]); decided after the plan, in the planned stage.
    pub member_side: crate::cluster::upgrade::member_side::MemberSide,
}

impl Plan {
    /// A plan that keeps `replicas` members as `record` states them and
    /// takes `step`: nothing restored or replayed, not hibernated, the
    /// member side decided later.
    pub fn new(
        replicas: i32,
        bootstrap_size: i32,
        record: MembershipRecord,
        step: Step,
        tls_serial: Option<String>,
    ) -> Self {
        Self {
            replicas,
            bootstrap_size,
            creating: record.state == ClusterState::New,
            record,
            step,
            restore: None,
            replay: None,
            replayed: None,
            standby_offset: None,
            tls_serial,
            hibernated: false,
            member_side: crate::cluster::upgrade::member_side::MemberSide::default(),
        }
    }

    /// The replay a restore from continuous backup still owes: the one
    /// being created (`restore`) or the one read back from the StatefulSet.
    pub fn replay_pending(&self) -> Option<&crate::cluster::backups::restore::Replay> {
        self.restore
            .as_ref()
            .and_then(|r| r.replay.as_ref())
            .or_else(|| self.replay.as_ref().and_then(|r| r.replay.as_ref()))
    }
}

/// What the reconcile observed of membership.
#[derive(Debug, Clone, Default)]
pub struct MembershipView {
    /// `None` when no member answered.
    pub members: Option<Vec<ObservedMember>>,
    pub pods: Vec<MemberPod>,
    /// The operation pinned in status.
    pub pinned: Option<Pinned>,
    /// etcd reports a NOSPACE alarm.
    pub space_alarm: bool,
    /// The recovery policy allows forcing a new cluster now.
    pub recovery_allowed: bool,
    /// The recovery policy allows recreating the cluster from its newest
    /// backup now.
    pub restore_allowed: bool,
    /// While a quorum recovery is pinned: its epoch (see
    /// [`MembershipRecord::epoch`]), stable for the whole operation.
    pub recovery_epoch: Option<String>,
    /// The serial of the current member certificate, with `spec.tls`.
    pub tls_serial: Option<String>,
    /// Members to move off a lost node (see [`crate::cluster::recovery::lost_node`]).
    pub stranded: Vec<membership::Stranded>,
    /// Ordinals whose member pod is being deleted.
    pub terminating: Vec<i32>,
    /// Members whose data differs from their peers'.
    pub corrupt: Vec<i32>,
    /// `spec.recovery.corruptMember: Replace`.
    pub replace_corrupt: bool,
    /// Whether members may restart onto an older minor version yet.
    pub downgrade: membership::DowngradeGate,
    /// While a `ReplaceMember` is pinned: its token (see
    /// [`RecordedMember::replacement`]), stable for the whole operation.
    pub replacement: Option<String>,
}

/// Member `ordinal` of `cluster` as the record lists it.
pub fn recorded_member(cluster: &ValidatedCluster, ordinal: i32, started: bool) -> RecordedMember {
    RecordedMember {
        name: naming::member(&cluster.name, ordinal),
        peer_url: naming::member_peer_url(
            cluster.tls.peer_scheme(),
            &cluster.name,
            &cluster.namespace,
            ordinal,
        ),
        started,
        replacement: None,
    }
}

/// The record of a cluster being created: its initial members bootstrap
/// together.
pub fn bootstrap_record(cluster: &ValidatedCluster, size: i32) -> MembershipRecord {
    MembershipRecord {
        contract: dkv_member::contract::VERSION,
        state: ClusterState::New,
        members: (0..size)
            .map(|i| recorded_member(cluster, i, false))
            .collect(),
        epoch: None,
        recover_from: None,
    }
}

/// The record as etcd's member list states it. Once every member has
/// started, the cluster exists: members without data then join, never
/// bootstrap again.
fn record_from_members(
    cluster: &ValidatedCluster,
    members: &[ObservedMember],
    previous: Option<&MembershipRecord>,
) -> MembershipRecord {
    let formed = previous.is_some_and(|r| r.state == ClusterState::Existing)
        || members.iter().all(|m| m.started);
    MembershipRecord {
        contract: dkv_member::contract::VERSION,
        state: if formed {
            ClusterState::Existing
        } else {
            ClusterState::New
        },
        members: members
            .iter()
            .map(|m| recorded_member(cluster, m.ordinal, m.started))
            .collect(),
        epoch: previous.and_then(|r| r.epoch.clone()),
        recover_from: None,
    }
}

/// The revision of the StatefulSet's latest template, once its controller
/// has seen it (`observedGeneration` caught up with `generation`): before
/// that, `updateRevision` may still name the template before an edit.
pub fn update_revision(sts: &StatefulSet) -> Option<String> {
    let status = sts.status.as_ref()?;
    (status.observed_generation.is_some() && status.observed_generation == sts.metadata.generation)
        .then(|| status.update_revision.clone())
        .flatten()
}

/// The member-side hash of the StatefulSet's template, when that template
/// runs no restore steps. The hash leaves the restore steps out
/// ([`super::build::statefulset::member_side_hash`]), so a pod stamped with
/// it was created from this template, or from the same one with the restore
/// steps a new cluster's members start with: either way it runs it (see
/// [`super::membership::ObservedPod::runs_template`]). `None` while the
/// template restores, so that a recovery's restore steps do restart every
/// member.
pub fn settled_template(sts: &StatefulSet) -> Option<String> {
    let template = &sts.spec.template;
    let restores = template
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|containers| {
            containers
                .iter()
                .any(|c| c.name == naming::FETCH_CONTAINER || c.name == naming::RESTORE_CONTAINER)
        });
    if restores {
        return None;
    }
    template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(naming::MEMBER_SIDE_ANNOTATION)
        .cloned()
}

/// The plan of a cluster that exists (its membership record says so) but
/// whose StatefulSet is gone: deleted with its pods orphaned, by dkv
/// re-creating it with a new claim template or by hand. It is re-created as
/// the record and the running pods say — the same replicas, the same
/// initial member count, so the same pod template and no restart — and never
/// bootstrapped as a new cluster. Membership waits until it is back.
fn replace_statefulset(
    cluster: &ValidatedCluster,
    record: &MembershipRecord,
    view: &MembershipView,
) -> Plan {
    let replicas = record
        .members
        .iter()
        .filter_map(|m| naming::ordinal_of(&cluster.name, &m.name))
        .max()
        .map_or(cluster.size, |highest| highest + 1);
    let bootstrap_size = view
        .pods
        .iter()
        .find_map(|p| p.bootstrap_size)
        .unwrap_or(cluster.size);
    // Only a formed cluster's record brings a StatefulSet back.
    Plan::new(
        replicas,
        bootstrap_size,
        record.clone(),
        Step::Converged,
        view.tls_serial.clone(),
    )
}

/// Plans one reconcile pass of `cluster`, given the StatefulSet and the
/// membership record that exist and what etcd and the pods report.
pub fn plan(
    cluster: &ValidatedCluster,
    existing: Option<&StatefulSet>,
    record: Option<&MembershipRecord>,
    view: &MembershipView,
) -> Plan {
    let Some(sts) = existing else {
        if let Some(record) = record.filter(|r| r.state == ClusterState::Existing) {
            return replace_statefulset(cluster, record, view);
        }
        return Plan::new(
            cluster.size,
            cluster.size,
            bootstrap_record(cluster, cluster.size),
            Step::Converged,
            view.tls_serial.clone(),
        );
    };
    let bootstrap_size = sts
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BOOTSTRAP_SIZE_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .or(sts.spec.replicas)
        .unwrap_or(cluster.size);

    let previous_epoch = record.and_then(|r| r.epoch.clone());
    let mut record = match &view.members {
        Some(members) if !members.is_empty() => record_from_members(cluster, members, record),
        _ => record
            .cloned()
            .unwrap_or_else(|| bootstrap_record(cluster, bootstrap_size)),
    };
    if let (Some(epoch), Some(pinned)) = (&view.recovery_epoch, view.pinned)
        && pinned.kind == OperationKind::RestoreFromBackup
    {
        // Every member starts again from the backup, as the initial members
        // of a new cluster; whatever data they hold predates the epoch.
        record = bootstrap_record(cluster, cluster.size);
        record.epoch = Some(epoch.clone());
    } else if let (Some(epoch), Some(pinned)) = (&view.recovery_epoch, view.pinned) {
        // The survivor restarts alone under a new epoch: until etcd lists it
        // alone, the record names it; every other member's data now
        // predates the epoch and is set aside when it restarts.
        let survivor = naming::member(&cluster.name, pinned.ordinal);
        let first_pass = previous_epoch.as_deref() != Some(epoch.as_str());
        record.epoch = Some(epoch.clone());
        record.recover_from = match &view.members {
            Some(members) if !members.is_empty() => members
                .iter()
                .any(|m| !m.learner && m.ordinal != pinned.ordinal)
                .then_some(survivor),
            // etcd cannot be seen (the survivor is restarting): what the
            // record said stands. Dropping the survivor's name now would make
            // its member-init set its data aside as predating the epoch.
            _ if first_pass => Some(survivor),
            _ => record.recover_from.clone(),
        };
    }
    // The member being replaced sets aside whatever its volume holds from
    // before, once it is listed again.
    if let (Some(token), Some(pinned)) = (&view.replacement, view.pinned)
        && pinned.kind == OperationKind::ReplaceMember
    {
        let name = naming::member(&cluster.name, pinned.ordinal);
        for member in record.members.iter_mut().filter(|m| m.name == name) {
            member.replacement = Some(token.clone());
        }
    }
    // Pods are ordinals 0..replicas: the StatefulSet must reach the highest
    // recorded member. Counting members instead would, while a member in
    // the middle is being replaced (removed, not yet re-added), shrink the
    // StatefulSet and take down the highest member — a healthy voter.
    let replicas = record
        .members
        .iter()
        .filter_map(|m| naming::ordinal_of(&cluster.name, &m.name))
        .max()
        .map_or(bootstrap_size, |highest| highest + 1);
    let pods: Vec<_> = view.pods.iter().map(|p| p.view.clone()).collect();
    let unsnapshotted = etcd35_log::pending(cluster.etcd35_log, view.members.as_deref(), &pods);
    let step = membership::next_step(&Observation {
        desired_size: cluster.size,
        desired_version: cluster.version,
        members: view.members.clone(),
        pods,
        replicas: sts.spec.replicas.unwrap_or(replicas),
        pinned: view.pinned,
        space_alarm: view.space_alarm,
        recovery_allowed: view.recovery_allowed,
        restore_allowed: view.restore_allowed,
        desired_tls_serial: view.tls_serial.clone(),
        update_revision: update_revision(sts),
        settled_template: settled_template(sts),
        stranded: view.stranded.clone(),
        terminating: view.terminating.clone(),
        corrupt: view.corrupt.clone(),
        replace_corrupt: view.replace_corrupt,
        downgrade: view.downgrade.clone(),
        unsnapshotted,
    });
    Plan::new(
        replicas,
        bootstrap_size,
        record,
        step,
        view.tls_serial.clone(),
    )
}
