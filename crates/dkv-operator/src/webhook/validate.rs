//! The validating webhook's decisions (pure): what the schema and CEL cannot
//! express about a `DistributedKV` or `DistributedKVBackup` write.
//!
//! The spec checks are the reconcile's own ([`cluster::validate`]), so an
//! object admitted here is one the controller accepts; this module adds the
//! rules that only make sense against the previous object (one-step quorum
//! loss, version moves) or against other objects (the restore source).

use dkv_api::distributedkv::v1beta1::{CorruptMemberPolicy, LostNodePolicy};
use dkv_api::{DistributedKV, DistributedKVBackup};
use kube::ResourceExt;

use crate::cluster::dereference::formed_before;
use crate::cluster::validate::{self as cluster, Defaults, Facts, FieldError, RunningVersions};

/// The answer to one admission request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AdmissionVerdict {
    /// Why the write is refused; empty when it is allowed.
    pub denials: Vec<FieldError>,
    /// Shown to the client whether or not the write is allowed.
    pub warnings: Vec<String>,
}

impl AdmissionVerdict {
    pub fn allowed(&self) -> bool {
        self.denials.is_empty()
    }

    /// One line naming every refused field and its fix.
    pub fn message(&self) -> String {
        cluster::InvalidSpec(self.denials.clone()).to_string()
    }

    /// The verdict as told to a client that wrote `api_version`. Decisions
    /// are made on the v1beta1 form of the object, so a v1alpha1 writer is
    /// told the v1alpha1 names of the backup fields.
    pub fn for_written_version(mut self, api_version: &str) -> Self {
        if api_version == dkv_api::distributedkv::convert::V1ALPHA1 {
            for denial in &mut self.denials {
                let renamed = match denial.field.as_str() {
                    "spec.backup.destination.uri" => "spec.backup.s3Path",
                    "spec.backup.destination.credentialsSecret" => "spec.backup.credentialsSecret",
                    "spec.backup.retention.maxAge" => "spec.backup.retentionDays",
                    _ => continue,
                };
                denial.field = renamed.to_owned();
            }
        }
        self
    }

    fn deny(&mut self, field: &str, message: impl Into<String>) {
        self.denials.push(FieldError {
            field: field.to_owned(),
            message: message.into(),
        });
    }
}

/// A write of a `DistributedKV`, as admission sees it.
#[derive(Debug, Clone, Copy)]
pub enum ClusterWrite<'a> {
    Create(&'a DistributedKV),
    Update {
        old: &'a DistributedKV,
        new: &'a DistributedKV,
        /// When the write grows `spec.storage.size`: whether its
        /// StorageClass allows volume expansion (`None`: not growing, or
        /// not known).
        expandable: Option<bool>,
        /// When the write turns `spec.auth.enabled` off: whether dkv had
        /// turned etcd's authentication on (`None`: not turning it off).
        auth_on: Option<bool>,
        /// When the write lowers `spec.storage.size`: the largest capacity
        /// of the members' volume claims (`None`: not lowering, or no claim
        /// reports one).
        volume_capacity: Option<&'a str>,
    },
    /// A write through the `scale` subresource: only the member count moves.
    Scale {
        old: i32,
        new: i32,
        /// `namespace/name` of the cluster when its `spec.hibernation` is
        /// on (the scale object does not say; the webhook looks it up).
        hibernated: Option<&'a str>,
        /// The members the cluster has (see [`members_now`]), when the
        /// webhook looked the cluster up.
        members: Option<i32>,
    },
}

/// What the webhook looked up for a restore from a `DistributedKVBackup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreSource {
    /// No `spec.bootstrap.restore.backupName` to look up.
    NotAsked,
    /// The named backup exists; `completed` tells whether it has an artifact yet.
    Found {
        completed: bool,
    },
    Missing,
}

/// A `file://` backup destination is a directory on whichever node the
/// backup pod lands on (mounted from the node): on a cluster of several
/// nodes, backups scatter and a restore may not find them. Allowed (with
/// `dkv local` the node is this machine), but said once, when the
/// destination is set.
fn warn_file_destination(
    new: &DistributedKV,
    old: Option<&DistributedKV>,
    verdict: &mut AdmissionVerdict,
) {
    let uri = |d: &DistributedKV| d.spec.backup.as_ref().map(|b| b.destination.uri.clone());
    let Some(new_uri) = uri(new) else { return };
    if new_uri.trim().starts_with("file://") && old.and_then(uri) != Some(new_uri) {
        verdict.warnings.push(
            "spec.backup.destination.uri: a file:// destination is a directory on the node each backup pod runs on (writable by user 65532); \
             use it with dkv local or a single-node cluster, and s3://, gs:// or az:// on a real cluster"
                .to_owned(),
        );
    }
}

/// Decides a `DistributedKV` write.
pub fn review_cluster(
    write: ClusterWrite<'_>,
    restore: &RestoreSource,
    defaults: &Defaults,
) -> AdmissionVerdict {
    let mut verdict = AdmissionVerdict::default();
    match write {
        ClusterWrite::Create(new) => {
            verdict.denials = cluster::spec_problems(new, &Facts::default(), defaults);
            check_restore_source(new, restore, &mut verdict);
            warn_even_size(new.spec.size, &mut verdict);
            warn_file_destination(new, None, &mut verdict);
            warn_lost_node_replacement(new, &mut verdict);
            check_corrupt_member_replacement(new, &mut verdict);
        }
        ClusterWrite::Update {
            old,
            new,
            expandable,
            auth_on,
            volume_capacity,
        } => {
            // Metadata-only writes (finalizers, labels, the deletion itself)
            // must go through even for an object stored before a rule existed.
            if old.spec == new.spec {
                return verdict;
            }
            // Version rules compare with what the members run, never with
            // a spec that may not have run anywhere (an image that cannot
            // be pulled must not lock the user in).
            let facts = Facts {
                running: RunningVersions::of(
                    old,
                    cluster::spec_version(&old.spec),
                    formed_before(old),
                ),
                volume_capacity: volume_capacity.map(str::to_owned),
                ..Facts::default()
            };
            verdict.denials = cluster::spec_problems(new, &facts, defaults);
            check_hibernation(old, new, &mut verdict);
            check_join_kept(old, new, &mut verdict);
            check_demotion(old, new, &mut verdict);
            check_scale_down(members_now(old), new.spec.size, &mut verdict);
            if expandable == Some(false)
                && let Some(storage) = &new.spec.storage
            {
                verdict.deny(
                    "spec.storage.size",
                    format!(
                        "StorageClass {:?} does not allow volume expansion (allowVolumeExpansion is not true), so the members' volumes cannot grow to {}; keep the size they have{}",
                        storage.storage_class_name,
                        storage.size.0,
                        old.spec
                            .storage
                            .as_ref()
                            .map(|s| format!(" ({})", s.size.0))
                            .unwrap_or_default()
                    ),
                );
            }
            if auth_on == Some(true) {
                verdict.deny(
                    "spec.auth.enabled",
                    crate::cluster::security::auth::CANNOT_TURN_OFF,
                );
            }
            if old.spec.size != new.spec.size {
                warn_even_size(new.spec.size, &mut verdict);
            }
            warn_file_destination(new, Some(old), &mut verdict);
            warn_lost_node_replacement(new, &mut verdict);
            check_corrupt_member_replacement(new, &mut verdict);
        }
        ClusterWrite::Scale {
            old,
            new,
            hibernated,
            members,
        } => {
            if let (Some(name), true) = (hibernated, old != new) {
                verdict.deny("spec.size", hibernated_message(name, "scale"));
            }
            if !(1..=9).contains(&new) {
                verdict.deny(
                    "spec.size",
                    format!("must be between 1 and 9 (got {new}); 3 or 5 suit most clusters"),
                );
            }
            check_scale_down(members.unwrap_or(old), new, &mut verdict);
            if old != new {
                warn_even_size(new, &mut verdict);
            }
        }
    }
    verdict
}

/// `spec.bootstrap.join` is how a cluster began: it cannot be added to a
/// cluster that formed its own, nor taken away from one whose take-over
/// counts the members that were there before (only its `oldMembers` and
/// how dkv reaches them may change).
fn check_join_kept(old: &DistributedKV, new: &DistributedKV, verdict: &mut AdmissionVerdict) {
    let joins = |d: &DistributedKV| d.spec.bootstrap.as_ref().is_some_and(|b| b.join.is_some());
    match (joins(old), joins(new)) {
        (false, true) => verdict.deny(
            "spec.bootstrap.join",
            "this cluster formed on its own; only a new DistributedKV can join a running cluster",
        ),
        (true, false) => verdict.deny(
            "spec.bootstrap.join",
            "the cluster was created to join a running one and stays so; to let the members that were there leave, set spec.bootstrap.join.oldMembers: Leave",
        ),
        _ => {}
    }
}

/// A running cluster given `spec.standby.enabled: true` is demoted (a
/// switchover): it makes its last changes durable through its own
/// continuous backup, which the standby to be promoted reads; without it
/// it cannot be demoted.
fn check_demotion(old: &DistributedKV, new: &DistributedKV, verdict: &mut AdmissionVerdict) {
    let following = |d: &DistributedKV| d.spec.standby.as_ref().is_some_and(|s| s.enabled);
    let continuous = new
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.continuous.as_ref())
        .is_some_and(|c| c.enabled);
    if !following(old) && following(new) && !continuous {
        verdict.deny(
            "spec.standby.enabled",
            "a demoted cluster makes its last changes durable through its own continuous backup, which the standby to be promoted reads: set spec.backup.continuous.enabled: true before demoting it",
        );
    }
    // A new source is for a cluster whose promotion is recorded: one still
    // applying what its old source stored would follow the new one from
    // the wrong place.
    let source = |d: &DistributedKV| d.spec.standby.as_ref().map(|s| s.source.clone());
    let promoted = old
        .status
        .as_ref()
        .and_then(|s| s.standby.as_ref())
        .and_then(|s| s.phase)
        == Some(dkv_api::distributedkv::v1beta1::StandbyPhase::Promoted);
    if source(old).is_some() && source(old) != source(new) && !promoted {
        verdict.deny(
            "spec.standby.source",
            "the source can change only once the promotion is recorded (status.standby.phase: Promoted); wait for it, then demote the cluster with the new source",
        );
    }
}

/// A hibernated cluster's members are stopped: a change to what they run
/// or keep could not be carried out, and one made in the same edit as
/// hibernating would be left half-done. Refused, naming the way out.
/// Waking (alone or with any edit) and metadata edits go through.
fn check_hibernation(old: &DistributedKV, new: &DistributedKV, verdict: &mut AdmissionVerdict) {
    let name = format!("{}/{}", new.namespace().unwrap_or_default(), new.name_any());
    if !old.spec.hibernation && new.spec.hibernation && old.spec.size != new.spec.size {
        verdict.deny(
            "spec.size",
            format!(
                "cluster {name} cannot hibernate and scale in one edit; scale it and hibernate once it is Available again, or hibernate it alone"
            ),
        );
    }
    if !(old.spec.hibernation && new.spec.hibernation) {
        return;
    }
    if old.spec.size != new.spec.size {
        verdict.deny("spec.size", hibernated_message(&name, "scale"));
    }
    if old.spec.version != new.spec.version {
        verdict.deny("spec.version", hibernated_message(&name, "upgrade"));
    } else if old.spec.image != new.spec.image {
        verdict.deny("spec.image", hibernated_message(&name, "upgrade"));
    }
    if old.spec.backup != new.spec.backup {
        verdict.deny(
            "spec.backup",
            hibernated_message(&name, "change the backup"),
        );
    }
    if old.spec.storage != new.spec.storage {
        verdict.deny(
            "spec.storage",
            hibernated_message(&name, "change the storage"),
        );
    }
}

fn hibernated_message(cluster: &str, then: &str) -> String {
    format!("cluster {cluster} is hibernated; wake it first (spec.hibernation: false), then {then}")
}

/// The majority of `members`: how many must agree for etcd to make progress.
pub fn quorum(members: i32) -> i32 {
    members / 2 + 1
}

/// Whether `old` -> `new` lowers `spec.storage.size`.
pub fn lowers_storage(old: &DistributedKV, new: &DistributedKV) -> bool {
    let size = |d: &DistributedKV| {
        d.spec
            .storage
            .as_ref()
            .and_then(|s| crate::quantity::parse_quantity(&s.size.0).ok())
    };
    matches!((size(old), size(new)), (Some(old), Some(new)) if new < old)
}

/// Whether `old` -> `new` turns `spec.auth.enabled` off.
pub fn turns_auth_off(old: &DistributedKV, new: &DistributedKV) -> bool {
    let on = |d: &DistributedKV| d.spec.auth.as_ref().is_some_and(|a| a.enabled);
    on(old) && !on(new)
}

/// The members a cluster has: etcd's member list as status last recorded
/// it, else (nothing recorded yet) the size its spec asks for. A size that
/// never ran (members that could not be scheduled) is not what a scale
/// down is measured from.
pub fn members_now(dkv: &DistributedKV) -> i32 {
    dkv.status
        .as_ref()
        .map(|s| s.members.len())
        .filter(|n| *n > 0)
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(dkv.spec.size)
}

/// Removing more than a quorum's worth of members at once leaves a cluster
/// that may not be able to agree on the removals themselves; dkv removes one
/// member at a time, so the request is refused rather than executed unsafely.
/// `old` is the members the cluster has ([`members_now`]).
fn check_scale_down(old: i32, new: i32, verdict: &mut AdmissionVerdict) {
    let floor = quorum(old);
    if new < old && new < floor {
        verdict.deny(
            "spec.size",
            format!(
                "scaling from {old} to {new} members in one step drops below the current quorum of {floor}; \
                 scale down to {floor} first and continue once the cluster is Available again"
            ),
        );
    }
}

/// Below this, `spec.recovery.lostNode.afterSeconds` is shorter than a
/// node takes to reboot, so a routine restart costs a member (and, on a
/// local volume, its copy of the data).
const SHORT_LOST_NODE_GRACE: i32 = 60;

/// `spec.recovery.lostNode: Replace` where it cannot act, or may act on a
/// node that is only rebooting.
fn warn_lost_node_replacement(dkv: &DistributedKV, verdict: &mut AdmissionVerdict) {
    let Some(lost_node) = dkv
        .spec
        .recovery
        .as_ref()
        .and_then(|r| r.lost_node.as_ref())
        .filter(|l| l.policy == LostNodePolicy::Replace)
    else {
        return;
    };
    let size = dkv.spec.size;
    if size < 3 {
        verdict.warnings.push(format!(
            "spec.recovery.lostNode: with spec.size {size}, the members left when one's node is lost are too few for quorum, so none is ever replaced; it takes 3 members or more"
        ));
    }
    if lost_node.after_seconds < SHORT_LOST_NODE_GRACE {
        verdict.warnings.push(format!(
            "spec.recovery.lostNode.afterSeconds: {}s is shorter than most nodes take to reboot; a member whose node only restarts would be replaced (and a local volume's copy of its data given up)",
            lost_node.after_seconds
        ));
    }
}

/// `spec.recovery.corruptMember: Replace` needs a majority of members whose
/// data agrees: with one member there is no peer to copy from, and with two
/// etcd's checks cannot tell which copy is the wrong one.
fn check_corrupt_member_replacement(dkv: &DistributedKV, verdict: &mut AdmissionVerdict) {
    let replace = dkv.spec.recovery.as_ref().and_then(|r| r.corrupt_member)
        == Some(CorruptMemberPolicy::Replace);
    let size = dkv.spec.size;
    if replace && size < 3 {
        verdict.deny(
            "spec.recovery.corruptMember",
            format!(
                "Replace needs spec.size 3 or more (it is {size}): a member is replaced from a majority of healthy peers whose data agrees, which {size} member(s) cannot have; use Report, or raise spec.size first"
            ),
        );
    }
}

fn warn_even_size(size: i32, verdict: &mut AdmissionVerdict) {
    if size > 0 && size % 2 == 0 {
        verdict.warnings.push(format!(
            "spec.size: {size} members tolerate no more failures than {}; an odd size ({} or {}) is recommended",
            size - 1,
            size - 1,
            size + 1
        ));
    }
}

fn check_restore_source(
    dkv: &DistributedKV,
    restore: &RestoreSource,
    verdict: &mut AdmissionVerdict,
) {
    let Some(name) = restore_backup_name(dkv) else {
        return;
    };
    match restore {
        RestoreSource::Missing => verdict.deny(
            "spec.bootstrap.restore.backupName",
            format!(
                "DistributedKVBackup {name:?} does not exist in this namespace; name one that `kubectl get dkvbackup` lists, or restore from an artifact with spec.bootstrap.restore.uri"
            ),
        ),
        RestoreSource::Found { completed: false } => verdict.warnings.push(format!(
            "spec.bootstrap.restore.backupName: DistributedKVBackup {name:?} has not completed yet; the restore waits for its artifact"
        )),
        RestoreSource::Found { completed: true } | RestoreSource::NotAsked => {}
    }
}

/// The `DistributedKVBackup` a new cluster restores from, if it names one.
pub fn restore_backup_name(dkv: &DistributedKV) -> Option<&str> {
    dkv.spec
        .bootstrap
        .as_ref()?
        .restore
        .as_ref()?
        .backup_name
        .as_deref()
        .map(str::trim)
        .filter(|name| !name.is_empty())
}

/// What the webhook looked up for a new `DistributedKVBackup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupTarget {
    /// The cluster exists; `has_destination` tells whether its spec.backup
    /// says where backups go.
    Found {
        has_destination: bool,
        /// Its `spec.hibernation` is on: no member runs (or will run) to
        /// take the backup.
        hibernated: bool,
    },
    Missing,
}

/// Decides the creation of a `DistributedKVBackup` (its spec is immutable by CEL).
pub fn review_backup(backup: &DistributedKVBackup, target: &BackupTarget) -> AdmissionVerdict {
    let mut verdict = AdmissionVerdict::default();
    let cluster = backup.spec.cluster.trim();
    if let Some(destination) = &backup.spec.destination
        && let Err(err) = dkv_backup::Location::parse(destination.uri.trim())
    {
        verdict.deny(
            "spec.destination.uri",
            format!("{err}; write e.g. s3://bucket/prefix/"),
        );
    }
    match target {
        BackupTarget::Missing => verdict.deny(
            "spec.cluster",
            format!(
                "DistributedKV {cluster:?} does not exist in this namespace; name one that `kubectl get dkv` lists"
            ),
        ),
        BackupTarget::Found {
            hibernated: true, ..
        } => verdict.deny(
            "spec.cluster",
            hibernated_message(
                &format!(
                    "{}/{cluster}",
                    backup.namespace().unwrap_or_default()
                ),
                "back it up",
            ),
        ),
        BackupTarget::Found {
            has_destination: false,
            ..
        } if backup.spec.destination.is_none() => verdict.deny(
            "spec.destination",
            format!(
                "DistributedKV {cluster:?} has no spec.backup, so nothing says where this backup goes; set spec.destination.uri or configure spec.backup on the cluster"
            ),
        ),
        BackupTarget::Found { .. } => {}
    }
    verdict
}

#[cfg(test)]
mod tests;
