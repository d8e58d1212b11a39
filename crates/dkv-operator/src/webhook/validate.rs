//! The validating webhook's decisions (pure): what the schema and CEL cannot
//! express about a `DistributedKV` or `DistributedKVBackup` write.
//!
//! The spec checks are the reconcile's own ([`cluster::validate`]), so an
//! object admitted here is one the controller accepts; this module adds the
//! rules that only make sense against the previous object (one-step quorum
//! loss, version moves) or against other objects (the restore source).

use dkv_api::distributedkv::v1beta1::LostNodePolicy;
use dkv_api::{DistributedKV, DistributedKVBackup};
use kube::ResourceExt;

use crate::cluster::validate::{self as cluster, Defaults, Facts, FieldError};

/// The answer to one admission request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Why the write is refused; empty when it is allowed.
    pub denials: Vec<FieldError>,
    /// Shown to the client whether or not the write is allowed.
    pub warnings: Vec<String>,
}

impl Verdict {
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
    },
    /// A write through the `scale` subresource: only the member count moves.
    Scale {
        old: i32,
        new: i32,
        /// `namespace/name` of the cluster when its `spec.hibernation` is
        /// on (the scale object does not say; the webhook looks it up).
        hibernated: Option<&'a str>,
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
fn warn_file_destination(new: &DistributedKV, old: Option<&DistributedKV>, verdict: &mut Verdict) {
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
) -> Verdict {
    let mut verdict = Verdict::default();
    match write {
        ClusterWrite::Create(new) => {
            verdict.denials = cluster::spec_problems(new, &Facts::default(), defaults);
            check_restore_source(new, restore, &mut verdict);
            warn_even_size(new.spec.size, &mut verdict);
            warn_file_destination(new, None, &mut verdict);
            warn_lost_node_replacement(new, &mut verdict);
        }
        ClusterWrite::Update {
            old,
            new,
            expandable,
        } => {
            // Metadata-only writes (finalizers, labels, the deletion itself)
            // must go through even for an object stored before a rule existed.
            if old.spec == new.spec {
                return verdict;
            }
            let facts = Facts {
                deployed_version: cluster::spec_version(&old.spec),
                ..Facts::default()
            };
            verdict.denials = cluster::spec_problems(new, &facts, defaults);
            check_hibernation(old, new, &mut verdict);
            check_scale_down(old.spec.size, new.spec.size, &mut verdict);
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
            if old.spec.size != new.spec.size {
                warn_even_size(new.spec.size, &mut verdict);
            }
            warn_file_destination(new, Some(old), &mut verdict);
            warn_lost_node_replacement(new, &mut verdict);
        }
        ClusterWrite::Scale {
            old,
            new,
            hibernated,
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
            check_scale_down(old, new, &mut verdict);
            if old != new {
                warn_even_size(new, &mut verdict);
            }
        }
    }
    verdict
}

/// A hibernated cluster's members are stopped: a change to what they run
/// or keep could not be carried out, and one made in the same edit as
/// hibernating would be left half-done. Refused, naming the way out.
/// Waking (alone or with any edit) and metadata edits go through.
fn check_hibernation(old: &DistributedKV, new: &DistributedKV, verdict: &mut Verdict) {
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

/// Removing more than a quorum's worth of members at once leaves a cluster
/// that may not be able to agree on the removals themselves; dkv removes one
/// member at a time, so the request is refused rather than executed unsafely.
fn check_scale_down(old: i32, new: i32, verdict: &mut Verdict) {
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
fn warn_lost_node_replacement(dkv: &DistributedKV, verdict: &mut Verdict) {
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

fn warn_even_size(size: i32, verdict: &mut Verdict) {
    if size > 0 && size % 2 == 0 {
        verdict.warnings.push(format!(
            "spec.size: {size} members tolerate no more failures than {}; an odd size ({} or {}) is recommended",
            size - 1,
            size - 1,
            size + 1
        ));
    }
}

fn check_restore_source(dkv: &DistributedKV, restore: &RestoreSource, verdict: &mut Verdict) {
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
pub fn review_backup(backup: &DistributedKVBackup, target: &BackupTarget) -> Verdict {
    let mut verdict = Verdict::default();
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
mod tests {
    use super::*;

    fn dkv(size: i32, image: &str, extra: serde_json::Value) -> DistributedKV {
        let mut spec = serde_json::json!({"size": size, "image": image});
        if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra) {
            spec.extend(extra);
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": spec,
        }))
        .unwrap_or_else(|e| panic!("test object: {e}"))
    }

    fn defaults() -> Defaults {
        Defaults {
            operator_image: "ghcr.io/dkv-io/dkv:test".into(),
        }
    }

    const ETCD_35: &str = "registry.k8s.io/etcd:3.5.16-0";

    #[test]
    fn a_v1alpha1_writer_is_told_the_v1alpha1_field_names() {
        let bad_bucket = dkv(
            3,
            ETCD_35,
            serde_json::json!({"backup": {"destination": {"uri": "s3://Bad_Bucket/dkv/"}, "schedule": "@daily"}}),
        );
        let verdict = review_cluster(
            ClusterWrite::Create(&bad_bucket),
            &RestoreSource::NotAsked,
            &defaults(),
        );
        assert!(
            verdict.message().contains("spec.backup.destination.uri"),
            "{}",
            verdict.message()
        );
        let v1alpha1 = verdict.clone().for_written_version("dkv.io/v1alpha1");
        assert!(
            v1alpha1.message().contains("spec.backup.s3Path")
                && !v1alpha1.message().contains("destination"),
            "{}",
            v1alpha1.message()
        );
        assert_eq!(
            verdict
                .clone()
                .for_written_version("dkv.io/v1beta1")
                .message(),
            verdict.message()
        );
    }

    #[test]
    fn every_destination_scheme_and_retention_limit_is_checked() {
        let verdict_for = |backup: serde_json::Value| {
            let cluster = dkv(3, ETCD_35, serde_json::json!({ "backup": backup }));
            review_cluster(
                ClusterWrite::Create(&cluster),
                &RestoreSource::NotAsked,
                &defaults(),
            )
        };
        for uri in [
            "s3://bucket/dkv/",
            "gs://bucket/dkv/",
            "az://container/dkv/",
            "file:///var/backups/dkv/",
        ] {
            let verdict = verdict_for(serde_json::json!({
                "destination": {"uri": uri}, "schedule": "@daily",
                "retention": {"maxBackups": 5, "maxAge": "36h"}
            }));
            assert!(verdict.allowed(), "{uri}: {}", verdict.message());
            assert_eq!(
                verdict.warnings.len(),
                usize::from(uri.starts_with("file:")),
                "{uri}: {:?}",
                verdict.warnings
            );
        }
        for (backup, field) in [
            (
                serde_json::json!({"destination": {"uri": "ftp://host/dkv/"}, "schedule": "@daily"}),
                "spec.backup.destination.uri",
            ),
            (
                serde_json::json!({"destination": {"uri": "file://relative/dkv/"}, "schedule": "@daily"}),
                "spec.backup.destination.uri",
            ),
            (
                serde_json::json!({"destination": {"uri": "s3://b/"}, "schedule": "@daily",
                                   "retention": {"maxBackups": 0}}),
                "spec.backup.retention.maxBackups",
            ),
            (
                serde_json::json!({"destination": {"uri": "s3://bucket/"}, "schedule": "@daily",
                                   "retention": {"maxAge": "30m"}}),
                "spec.backup.retention.maxAge",
            ),
        ] {
            let verdict = verdict_for(backup.clone());
            assert!(
                verdict.denials.iter().any(|d| d.field == field),
                "{backup}: {}",
                verdict.message()
            );
        }
    }

    const STORAGE: &str = r#"{"storageClassName": "standard", "size": "1Gi"}"#;

    fn hibernating(size: i32, image: &str, on: bool, extra: serde_json::Value) -> DistributedKV {
        let mut spec = serde_json::json!({
            "hibernation": on,
            "storage": serde_json::from_str::<serde_json::Value>(STORAGE).unwrap_or_default(),
            "backup": {"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "@daily"},
        });
        if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra) {
            spec.extend(extra);
        }
        dkv(size, image, spec)
    }

    fn update(old: &DistributedKV, new: &DistributedKV) -> Verdict {
        review_cluster(
            ClusterWrite::Update {
                old,
                new,
                expandable: None,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        )
    }

    #[test]
    fn a_hibernated_cluster_refuses_scale_upgrade_backup_and_storage_edits() {
        let old = hibernating(3, ETCD_35, true, serde_json::json!({}));
        for (new, field, then) in [
            (
                hibernating(5, ETCD_35, true, serde_json::json!({})),
                "spec.size",
                "then scale",
            ),
            (
                hibernating(
                    3,
                    "registry.k8s.io/etcd:3.5.17-0",
                    true,
                    serde_json::json!({}),
                ),
                "spec.image",
                "then upgrade",
            ),
            (
                hibernating(3, ETCD_35, true, serde_json::json!({"version": "3.5.17"})),
                "spec.version",
                "then upgrade",
            ),
            (
                hibernating(
                    3,
                    ETCD_35,
                    true,
                    serde_json::json!({"backup": {"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "@hourly"}}),
                ),
                "spec.backup",
                "then change the backup",
            ),
            (
                hibernating(
                    3,
                    ETCD_35,
                    true,
                    serde_json::json!({"storage": {"storageClassName": "standard", "size": "2Gi"}}),
                ),
                "spec.storage",
                "then change the storage",
            ),
        ] {
            let verdict = update(&old, &new);
            assert!(!verdict.allowed(), "{field}: allowed");
            let message = verdict.message();
            assert!(
                message.contains(&format!(
                    "{field}: cluster shop/orders is hibernated; wake it first (spec.hibernation: false), {then}"
                )),
                "{message}"
            );
        }
        let through_scale = review_cluster(
            ClusterWrite::Scale {
                old: 3,
                new: 5,
                hibernated: Some("shop/orders"),
            },
            &RestoreSource::NotAsked,
            &defaults(),
        );
        assert!(
            through_scale
                .message()
                .contains("spec.size: cluster shop/orders is hibernated; wake it first"),
            "{}",
            through_scale.message()
        );
    }

    #[test]
    fn waking_and_metadata_edits_of_a_hibernated_cluster_go_through() {
        let old = hibernating(3, ETCD_35, true, serde_json::json!({}));
        let mut labelled = old.clone();
        labelled
            .metadata
            .labels
            .get_or_insert_default()
            .insert("team".into(), "shop".into());
        assert!(update(&old, &labelled).allowed());
        let awake = hibernating(3, ETCD_35, false, serde_json::json!({}));
        let verdict = update(&old, &awake);
        assert!(verdict.allowed(), "{}", verdict.message());
        // Waking and scaling at once: the cluster wakes, then scales.
        let verdict = update(&old, &hibernating(5, ETCD_35, false, serde_json::json!({})));
        assert!(verdict.allowed(), "{}", verdict.message());
        // An unchanged size through the scale subresource is no edit.
        let same = review_cluster(
            ClusterWrite::Scale {
                old: 3,
                new: 3,
                hibernated: Some("shop/orders"),
            },
            &RestoreSource::NotAsked,
            &defaults(),
        );
        assert!(same.allowed());
    }

    #[test]
    fn hibernating_and_scaling_in_one_edit_is_refused() {
        let old = hibernating(3, ETCD_35, false, serde_json::json!({}));
        let verdict = update(&old, &hibernating(5, ETCD_35, true, serde_json::json!({})));
        assert!(
            verdict
                .message()
                .contains("spec.size: cluster shop/orders cannot hibernate and scale in one edit"),
            "{}",
            verdict.message()
        );
        let verdict = update(&old, &hibernating(3, ETCD_35, true, serde_json::json!({})));
        assert!(verdict.allowed(), "{}", verdict.message());
    }

    #[test]
    fn a_hibernated_cluster_takes_no_on_demand_backup() {
        let backup: DistributedKVBackup = serde_json::from_value(serde_json::json!({
            "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
            "metadata": {"name": "orders-now", "namespace": "shop"},
            "spec": {"cluster": "orders"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let verdict = review_backup(
            &backup,
            &BackupTarget::Found {
                has_destination: true,
                hibernated: true,
            },
        );
        assert!(
            verdict.message().contains(
                "spec.cluster: cluster shop/orders is hibernated; wake it first (spec.hibernation: false), then back it up"
            ),
            "{}",
            verdict.message()
        );
        let awake = review_backup(
            &backup,
            &BackupTarget::Found {
                has_destination: true,
                hibernated: false,
            },
        );
        assert!(awake.allowed(), "{}", awake.message());
    }

    #[test]
    fn only_a_cluster_with_persistent_storage_can_hibernate() {
        let old = dkv(3, ETCD_35, serde_json::json!({}));
        let new = dkv(3, ETCD_35, serde_json::json!({"hibernation": true}));
        let verdict = update(&old, &new);
        assert!(
            verdict
                .message()
                .contains("spec.hibernation: the cluster has no spec.storage"),
            "{}",
            verdict.message()
        );
    }

    #[test]
    fn scale_down_keeps_a_quorum_of_the_old_size() {
        let old = dkv(5, ETCD_35, serde_json::json!({}));
        for (new, allowed) in [(4, true), (3, true), (2, false), (1, false), (7, true)] {
            let verdict = review_cluster(
                ClusterWrite::Update {
                    old: &old,
                    new: &dkv(new, ETCD_35, serde_json::json!({})),
                    expandable: None,
                },
                &RestoreSource::NotAsked,
                &defaults(),
            );
            assert_eq!(verdict.allowed(), allowed, "5 -> {new}: {verdict:?}");
            if !allowed {
                assert!(verdict.message().contains("spec.size"), "{verdict:?}");
                assert!(verdict.message().contains("quorum of 3"), "{verdict:?}");
            }
        }
        let scale = review_cluster(
            ClusterWrite::Scale {
                old: 5,
                new: 1,
                hibernated: None,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        );
        assert!(
            scale.message().contains("scale down to 3 first"),
            "{scale:?}"
        );
    }

    #[test]
    fn even_sizes_are_warned_about_not_refused() {
        let verdict = review_cluster(
            ClusterWrite::Create(&dkv(4, ETCD_35, serde_json::json!({}))),
            &RestoreSource::NotAsked,
            &defaults(),
        );
        assert!(verdict.allowed(), "{verdict:?}");
        assert_eq!(verdict.warnings.len(), 1);
        assert!(verdict.warnings[0].starts_with("spec.size: 4 members"));
    }

    #[test]
    fn lost_node_replacement_is_bounded_and_warned_about_where_it_cannot_help() {
        let create = |size, lost_node| {
            review_cluster(
                ClusterWrite::Create(&dkv(
                    size,
                    ETCD_35,
                    serde_json::json!({"recovery": {"lostNode": lost_node}}),
                )),
                &RestoreSource::NotAsked,
                &defaults(),
            )
        };
        let fine = create(
            3,
            serde_json::json!({"policy": "Replace", "afterSeconds": 120}),
        );
        assert!(fine.allowed() && fine.warnings.is_empty(), "{fine:?}");
        let waiting = create(1, serde_json::json!({"policy": "Wait", "afterSeconds": 0}));
        assert!(
            waiting.allowed() && waiting.warnings.is_empty(),
            "{waiting:?}"
        );
        let small = create(1, serde_json::json!({"policy": "Replace"}));
        assert!(small.allowed(), "{small:?}");
        assert_eq!(small.warnings.len(), 1, "{small:?}");
        assert!(small.warnings[0].contains("too few for quorum"));
        let hasty = create(
            3,
            serde_json::json!({"policy": "Replace", "afterSeconds": 10}),
        );
        assert!(hasty.allowed(), "{hasty:?}");
        assert!(hasty.warnings[0].contains("reboot"), "{hasty:?}");
        let negative = create(
            3,
            serde_json::json!({"policy": "Replace", "afterSeconds": -1}),
        );
        assert!(!negative.allowed());
        assert!(
            negative
                .message()
                .contains("spec.recovery.lostNode.afterSeconds"),
            "{}",
            negative.message()
        );
    }

    #[test]
    fn version_moves_one_minor_up_never_down() {
        let old = dkv(3, "registry.k8s.io/etcd:3.4.23-0", serde_json::json!({}));
        let to = |image| {
            review_cluster(
                ClusterWrite::Update {
                    old: &old,
                    new: &dkv(3, image, serde_json::json!({})),
                    expandable: None,
                },
                &RestoreSource::NotAsked,
                &defaults(),
            )
        };
        assert!(to(ETCD_35).allowed());
        let skip = to("registry.k8s.io/etcd:3.6.1-0");
        assert!(
            skip.message()
                .starts_with("spec.image: etcd upgrades move one minor"),
            "{skip:?}"
        );
        let down = to("registry.k8s.io/etcd:3.4.1-0");
        assert!(
            down.message()
                .starts_with("spec.image: etcd cannot be downgraded"),
            "{down:?}"
        );
    }

    #[test]
    fn metadata_only_updates_pass_even_when_the_spec_is_invalid() {
        let stored = dkv(
            3,
            ETCD_35,
            serde_json::json!({"backup": {"destination": {"uri": "s3://bucket/"}, "schedule": "never"}}),
        );
        let mut deleting = stored.clone();
        deleting.metadata.finalizers = Some(vec![]);
        let verdict = review_cluster(
            ClusterWrite::Update {
                old: &stored,
                new: &deleting,
                expandable: None,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        );
        assert!(verdict.allowed(), "{verdict:?}");
    }

    #[test]
    fn restore_source_must_exist() {
        let new = dkv(
            3,
            ETCD_35,
            serde_json::json!({"bootstrap": {"restore": {"backupName": "nightly"}}}),
        );
        let verdict = review_cluster(
            ClusterWrite::Create(&new),
            &RestoreSource::Missing,
            &defaults(),
        );
        assert!(
            verdict.message().starts_with(
                "spec.bootstrap.restore.backupName: DistributedKVBackup \"nightly\" does not exist"
            ),
            "{verdict:?}"
        );
        assert!(
            review_cluster(
                ClusterWrite::Create(&new),
                &RestoreSource::Found { completed: true },
                &defaults()
            )
            .allowed()
        );
    }
}
