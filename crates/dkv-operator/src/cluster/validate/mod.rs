//! The pure work of stage 2 (validated, [`super::stage`]): turn the raw `DistributedKV` plus the facts
//! dereference gathered into a [`ValidatedCluster`], or an [`InvalidSpec`]
//! listing every problem with the field and the fix.
//!
//! Nothing after this step reads the raw custom resource: builders take the
//! validated model, so a value that was never checked cannot reach a child.
//!
//! This module holds the validated model and the checks of the spec as a
//! whole; the sections with rules of their own are checked in `version`,
//! `tls`, `backup` and `etcd`.

mod backup;
mod etcd;
mod join;
mod rollout;
mod standby;
mod tls;
mod version;

use std::collections::BTreeMap;
use std::fmt;

use dkv_api::distributedkv::v1beta1::{
    BackupSpec, Compression, CorruptMemberPolicy, KeySecretReference, LostNodeRecovery,
    PodOverrides, ReclaimPolicy, RecoveryPolicy, RestoreSource, RolledBack, RunningSpec,
    StorageSpec,
};
use dkv_api::{DistributedKV, DistributedKVSpec, labels};
use dkv_backup::RetentionPolicy;
use dkv_backup::continuous::chain::Target;
use dkv_backup::continuous::cutter::CutSettings;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::etcd_version::EtcdVersion;
use crate::parts::naming::MAX_CLUSTER_NAME_LEN;
use crate::parts::tls::{Sources, TlsSettings};
use crate::quantity::StorageSize;
pub use backup::StoreUri;
use backup::{check_destination, retention_policy};
use dkv_api::schedule::Schedule;
use etcd::etcd_settings;
pub use etcd::{DEFAULT_QUOTA_BACKEND_BYTES, MAX_QUOTA_BACKEND_BYTES, etcd_tuning_with_defaults};
use join::check_join;
pub use join::{DEFAULT_CATCH_UP_LIMIT, ValidatedJoin};
pub use rollout::{RolloutPolicy, running_spec, same_template};
use rollout::{last_good, rollback_in_effect, rollout_policy, with_running_spec};
pub use standby::ValidatedStandby;
use standby::check_standby;
use tls::check_tls;
use version::resolve_version;
pub use version::{RefusedMove, RunningVersions};

/// What dereference learned that validation needs, beyond the CR itself.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Names of the StorageClasses that exist; `None` when not known (the
    /// check is then skipped rather than failing a valid spec).
    pub storage_classes: Option<Vec<String>>,
    /// The etcd versions the members run, as status records them: what a
    /// version change is checked from.
    pub running: RunningVersions,
    /// The volume size in the running StatefulSet's claim template, if it
    /// exists (the template is immutable: member volumes grow one by one).
    pub deployed_storage_size: Option<String>,
    /// The largest size a member's volume claim asked for and reached
    /// (see [`crate::cluster::dereference::largest_reached`]), if known:
    /// what the volumes were given, whatever a spec asked for since.
    pub volume_capacity: Option<String>,
}

/// Operator-wide settings that fill in what the spec leaves out.
#[derive(Debug, Clone)]
pub struct Defaults {
    /// The operator's own image, which also runs `member-init` and backups.
    pub operator_image: String,
}

/// A `DistributedKV` whose every field has been checked and defaulted.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedCluster {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub generation: Option<i64>,
    /// Controller owner reference every child carries.
    pub owner: OwnerReference,
    pub size: i32,
    pub image: String,
    pub version: EtcdVersion,
    pub resources: Option<ResourceRequirements>,
    pub storage: Option<ValidatedStorage>,
    pub backup: Option<ValidatedBackup>,
    /// `spec.bootstrap.restore`: create the cluster from this backup.
    pub restore: Option<ValidatedRestore>,
    /// `spec.bootstrap.join`: join and take over this running cluster.
    pub join: Option<ValidatedJoin>,
    /// `spec.standby`: the source it follows, and whether it still does.
    pub standby: Option<ValidatedStandby>,
    pub etcd: EtcdSettings,
    pub pod: PodOverrides,
    pub operator_image: String,
    /// `dkv.io/reconcile-paused: "true"`: report status, change nothing.
    pub paused: bool,
    /// `dkv.io/restartedAt`: carried into the members' pod template, so
    /// that changing it restarts every member (one at a time).
    pub restarted_at: Option<String>,
    /// Which transports use TLS (`spec.tls`).
    pub tls: TlsSettings,
    /// Where their certificates come from.
    pub tls_sources: Sources,
    /// `spec.auth.enabled`: etcd authentication is (to be) on.
    pub auth: bool,
    /// `spec.hibernation`: stop the members once it is safe, keep their data.
    pub hibernation: bool,
    /// `spec.maintenance.defrag`: scheduled defragmentation.
    pub defrag: Option<DefragSettings>,
    /// `spec.recovery.lostNode`: what happens to members on lost nodes.
    pub lost_node: Option<LostNodeRecovery>,
    /// `spec.recovery.corruptMember`: whether a member whose data differs
    /// from its peers' is replaced, or only reported.
    pub corrupt_member: CorruptMemberPolicy,
    /// `spec.recovery`: what dkv may do once quorum is lost, and when.
    pub recovery: Option<(RecoveryPolicy, jiff::SignedDuration)>,
    /// The value of the `dkv.io/rotate-ca` annotation: a new value asks for
    /// a CA rotation.
    pub ca_rotation_request: Option<String>,
    /// The backup this cluster is a scratch copy of, to verify it (the
    /// `dkv.io/verifies` label).
    pub verifies: Option<String>,
    /// `spec.rollout`: what a rollout that misses its deadline leads to.
    pub rollout: RolloutPolicy,
    /// The fields of the spec the members' pod template is built from, as
    /// this pass builds it: the user's, or during a rollback the last good.
    pub running: RunningSpec,
    /// The spec that last ran on every member (`status.rollout.lastGood`).
    pub last_good: Option<RunningSpec>,
    /// The rollback in effect for this generation of the spec: the cluster
    /// is then validated and built from `last_good`.
    pub rolled_back: Option<RolledBack>,
    /// How far etcd 3.5 wrote the log (`status.rollout.etcd35Log`).
    pub etcd35_log: Option<crate::cluster::membership::etcd35_log::Record>,
}

impl ValidatedCluster {
    /// The cluster object, as the key of per-cluster state.
    pub fn object_ref(&self) -> kube::runtime::reflector::ObjectRef<DistributedKV> {
        kube::runtime::reflector::ObjectRef::new(&self.name).within(&self.namespace)
    }

    /// The cluster object, as the subject of an Event.
    pub fn object_reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(DistributedKV::api_version(&()).into_owned()),
            kind: Some(DistributedKV::kind(&()).into_owned()),
            name: Some(self.name.clone()),
            namespace: Some(self.namespace.clone()),
            uid: Some(self.uid.clone()),
            ..Default::default()
        }
    }
}

/// `spec.maintenance.defrag`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefragSettings {
    /// A cron schedule, five fields, UTC.
    pub schedule: Schedule,
    /// Defragment a member when at least this percent of its file is free.
    pub threshold_percent: i32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedStorage {
    pub storage_class_name: String,
    /// The size every member volume must have (`spec.storage.size`).
    pub size: StorageSize,
    /// The size in the StatefulSet's claim template: the one it was created
    /// with (immutable), or `size` for a new StatefulSet. Volumes created
    /// from it are grown to `size` afterwards.
    pub template_size: StorageSize,
    pub reclaim_policy: ReclaimPolicy,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedBackup {
    /// `spec.backup.destination.uri`: `s3://`, `gs://`, `az://` or `file://`.
    pub destination: StoreUri,
    pub schedule: Schedule,
    pub image: String,
    /// `spec.backup.retention`; the default keeps every backup.
    pub retention: RetentionPolicy,
    pub credentials_secret: Option<String>,
    pub final_backup_on_delete: bool,
    /// `spec.backup.continuous` when on: how the agent cuts segments.
    pub continuous: Option<CutSettings>,
    /// `spec.backup.compression` is not `None`.
    pub compress: bool,
    /// `spec.backup.encryption.keySecret`.
    pub encryption: Option<KeySecretReference>,
}

/// Where a cluster created from a backup gets its data.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedRestore {
    /// Which part of the spec asked for it, as its messages name fields.
    pub fields: RestoreFields,
    pub source: RestoreRef,
    /// `spec.bootstrap.restore.credentialsSecret`, else the cluster's
    /// `spec.backup.credentialsSecret`; `None` lets the backup record's own
    /// destination name it.
    pub credentials_secret: Option<String>,
    /// Where the keys of an encrypted backup are:
    /// `spec.bootstrap.restore.encryption.keySecret`, else the cluster's
    /// `spec.backup.encryption.keySecret` (every entry of it).
    pub decryption_keys: Option<KeySecretReference>,
}

/// Where in the spec a restore was asked for: what its messages name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreFields {
    /// `spec.bootstrap.restore`.
    Bootstrap,
    /// `spec.standby.source`: a standby's seed.
    Standby,
}

impl RestoreFields {
    /// The restore's field `name` as `spec.bootstrap.restore` spells it
    /// (`uri`, `credentialsSecret`, `encryption`, `sourceCluster`), here.
    pub fn field(self, name: &str) -> String {
        match (self, name) {
            (Self::Bootstrap, _) => format!("spec.bootstrap.restore.{name}"),
            (Self::Standby, "sourceCluster") => "spec.standby.source.cluster".to_owned(),
            (Self::Standby, _) => format!("spec.standby.source.{name}"),
        }
    }

    /// The whole restore's field.
    pub fn whole(self) -> &'static str {
        match self {
            Self::Bootstrap => "spec.bootstrap.restore",
            Self::Standby => "spec.standby.source",
        }
    }
}

/// The backup a restore names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreRef {
    /// A `DistributedKVBackup` in the cluster's namespace.
    Backup(String),
    /// An artifact URI; its sha256 comes from the record beside it.
    Uri(StoreUri),
    /// A cluster's continuous backup, to a point.
    Continuous(ContinuousSource),
}

/// Whose continuous backup a restore reads, from where, to which point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuousSource {
    /// The source cluster's backup destination.
    pub destination: StoreUri,
    pub namespace: String,
    pub cluster: String,
    pub target: Target,
}

/// Whether `restore` reads continuous backup: it names a point or a source
/// cluster, or its `uri` is a destination rather than a snapshot
/// (`.db`, `.db.zst`, with `.enc` when encrypted).
fn continuous_restore(restore: &RestoreSource) -> bool {
    restore.point_in_time.is_some()
        || restore.source_cluster.is_some()
        || restore
            .uri
            .as_deref()
            .is_some_and(|uri| !dkv_backup::is_snapshot_uri(uri))
}

/// etcd flags derived from `spec.etcd`, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdSettings {
    pub quota_backend_bytes: i64,
    pub auto_compaction_mode: &'static str,
    pub auto_compaction_retention: String,
    /// `spec.etcd.corruptCheckInterval`, as written (a Go duration).
    pub corrupt_check_interval: String,
    /// The settings below are etcd's own default when not set, and then
    /// not written at all: a cluster that sets none runs the pod template
    /// it ran before they existed.
    /// `spec.etcd.heartbeatInterval`, whole milliseconds.
    pub heartbeat_interval: Option<std::time::Duration>,
    /// `spec.etcd.electionTimeout`, whole milliseconds.
    pub election_timeout: Option<std::time::Duration>,
    pub snapshot_count: Option<u64>,
    pub max_request_bytes: Option<u64>,
    pub max_txn_ops: Option<u64>,
    /// `spec.etcd.logLevel`, as etcd spells it.
    pub log_level: Option<&'static str>,
    /// `spec.etcd.extraArgs`: none names a flag of `etcd_flags::OWNED`.
    pub extra_args: BTreeMap<String, String>,
}

/// One invalid field and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.storage.storageClassName`.
    pub field: String,
    pub message: String,
}

/// Every problem found in a spec; reported as `Degraded=True, InvalidSpec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSpec(pub Vec<FieldError>);

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for InvalidSpec {}

/// Collects field errors so that one pass reports all of them.
#[derive(Default)]
struct Problems(Vec<FieldError>);

impl Problems {
    /// `field: message` of each problem (tests).
    #[cfg(test)]
    fn into_messages(self) -> Vec<String> {
        self.0
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.to_owned(),
            message: message.into(),
        });
    }
}

/// Validates `dkv` against the facts and fills in defaults. While a
/// rollback is in effect (see [`rollout`]), the fields of the pod template
/// are those of the spec that last ran on every member — a return to them
/// is no version change to check — and the user's spec stays as written.
pub fn validate(
    dkv: &DistributedKV,
    facts: &Facts,
    defaults: &Defaults,
) -> Result<ValidatedCluster, InvalidSpec> {
    let Some((rolled_back, running)) = rollback_in_effect(dkv) else {
        return validate_as_written(dkv, facts, defaults);
    };
    let facts = Facts {
        running: RunningVersions::default(),
        ..facts.clone()
    };
    let mut cluster = validate_as_written(&with_running_spec(dkv, &running), &facts, defaults)?;
    cluster.rolled_back = Some(rolled_back);
    Ok(cluster)
}

fn validate_as_written(
    dkv: &DistributedKV,
    facts: &Facts,
    defaults: &Defaults,
) -> Result<ValidatedCluster, InvalidSpec> {
    let mut problems = Problems::default();
    let name = dkv.name_any();
    let namespace = dkv.namespace().unwrap_or_default();
    let spec = &dkv.spec;
    let CheckedSpec {
        version,
        storage,
        defrag,
        backup,
        restore,
        join,
        standby,
        etcd,
        rollout,
    } = check_spec(dkv, facts, defaults, &mut problems);

    // blockOwnerDeletion: a foreground deletion of the cluster waits until
    // its members are gone.
    let owner = dkv.controller_owner_ref(&()).map(|mut owner| {
        owner.block_owner_deletion = Some(true);
        owner
    });
    let uid = dkv.uid();
    if owner.is_none() || uid.is_none() {
        problems.add(
            "metadata.uid",
            "the object has no uid; it was not read from the API server",
        );
    }

    match (problems.0.is_empty(), owner, uid, version) {
        (true, Some(owner), Some(uid), Some(version)) => Ok(ValidatedCluster {
            name,
            namespace,
            uid,
            generation: dkv.meta().generation,
            owner,
            size: spec.size,
            image: spec.image.trim().to_owned(),
            version,
            resources: spec.resources.clone(),
            storage,
            backup,
            // A standby is created as a restore of its source's newest
            // point.
            restore: restore.or_else(|| standby.as_ref().map(ValidatedStandby::seed)),
            join,
            standby,
            etcd,
            pod: spec.pod.clone().unwrap_or_default(),
            operator_image: defaults.operator_image.clone(),
            paused: is_paused(dkv.annotations()),
            restarted_at: dkv.annotations().get(labels::RESTARTED_AT).cloned(),
            tls: TlsSettings::from_spec(spec.tls.as_ref()),
            tls_sources: Sources::from_spec(spec.tls.as_ref()),
            auth: spec.auth.as_ref().is_some_and(|a| a.enabled),
            hibernation: spec.hibernation,
            defrag,
            lost_node: spec.recovery.as_ref().and_then(|r| r.lost_node.clone()),
            corrupt_member: spec
                .recovery
                .as_ref()
                .and_then(|r| r.corrupt_member)
                .unwrap_or_default(),
            recovery: spec.recovery.as_ref().map(|r| {
                (
                    r.policy,
                    jiff::SignedDuration::from_secs(i64::from(r.after_seconds)),
                )
            }),
            ca_rotation_request: dkv
                .annotations()
                .get(crate::parts::naming::ROTATE_ANNOTATION)
                .cloned(),
            verifies: dkv.labels().get(labels::VERIFIES).cloned(),
            rollout,
            running: running_spec(dkv),
            last_good: last_good(dkv),
            rolled_back: None,
            etcd35_log: dkv
                .status
                .as_ref()
                .and_then(|s| s.rollout.as_ref())
                .and_then(|r| r.etcd35_log.as_ref())
                .and_then(crate::cluster::membership::etcd35_log::Record::from_status),
        }),
        _ => Err(InvalidSpec(problems.0)),
    }
}

/// Every problem [`validate`] finds in the spec and name of `dkv`, without
/// the checks that need an object read from the API server (its uid). The
/// admission webhook runs these on objects that are about to be written.
pub fn spec_problems(dkv: &DistributedKV, facts: &Facts, defaults: &Defaults) -> Vec<FieldError> {
    let mut problems = Problems::default();
    check_spec(dkv, facts, defaults, &mut problems);
    problems.0
}

/// The etcd version a spec asks for: `spec.version`, else the image tag.
/// `None` when neither names one.
pub fn spec_version(spec: &DistributedKVSpec) -> Option<EtcdVersion> {
    match &spec.version {
        Some(text) => EtcdVersion::parse(text),
        None => EtcdVersion::from_image(spec.image.trim()),
    }
}

/// What [`check_spec`] derived from a spec, each part `None`/defaulted when
/// it had problems (which are in the [`Problems`] passed along).
struct CheckedSpec {
    version: Option<EtcdVersion>,
    storage: Option<ValidatedStorage>,
    defrag: Option<DefragSettings>,
    backup: Option<ValidatedBackup>,
    restore: Option<ValidatedRestore>,
    join: Option<ValidatedJoin>,
    standby: Option<ValidatedStandby>,
    etcd: EtcdSettings,
    rollout: RolloutPolicy,
}

fn check_spec(
    dkv: &DistributedKV,
    facts: &Facts,
    defaults: &Defaults,
    problems: &mut Problems,
) -> CheckedSpec {
    let name = dkv.name_any();
    let namespace = dkv.namespace().unwrap_or_default();
    let spec = &dkv.spec;

    check_cluster_name(&name, problems);

    if !(1..=9).contains(&spec.size) {
        problems.add(
            "spec.size",
            format!(
                "must be between 1 and 9 (got {}); 3 or 5 suit most clusters",
                spec.size
            ),
        );
    }

    // Members without persistent storage keep their data in an emptyDir,
    // which goes with the pod: stopping them all would lose every key.
    if spec.hibernation && spec.storage.is_none() {
        problems.add(
            "spec.hibernation",
            "the cluster has no spec.storage: its members keep their data in emptyDir volumes, which stopping them would delete; only clusters with persistent storage can hibernate (take a backup and delete the cluster instead)",
        );
    }

    if let Some(lost_node) = spec.recovery.as_ref().and_then(|r| r.lost_node.as_ref())
        && !(0..=86_400).contains(&lost_node.after_seconds)
    {
        problems.add(
            "spec.recovery.lostNode.afterSeconds",
            format!(
                "must be between 0 and 86400 (got {}): the seconds a member's node must have been lost before it is replaced",
                lost_node.after_seconds
            ),
        );
    }

    let version = resolve_version(spec.image.as_str(), spec.version.as_deref(), problems);
    if let Some(version) = version
        && let Err(refused) = facts.running.check_move(version)
    {
        let field = if spec.version.is_some() {
            "spec.version"
        } else {
            "spec.image"
        };
        problems.add(field, refused.to_string());
    }

    let storage = spec
        .storage
        .as_ref()
        .and_then(|storage| check_storage(storage, facts, problems));

    if let Some(tls) = &spec.tls {
        check_tls(tls, problems);
    }
    let defrag = spec
        .maintenance
        .as_ref()
        .and_then(|m| m.defrag.as_ref())
        .and_then(|defrag| {
            let schedule = Schedule::parse(&defrag.schedule)
                .map_err(|message| problems.add("spec.maintenance.defrag.schedule", message));
            if !(1..=99).contains(&defrag.threshold_percent) {
                problems.add(
                    "spec.maintenance.defrag.thresholdPercent",
                    format!(
                        "must be between 1 and 99 (percent of a member's database file that is free space), got {}",
                        defrag.threshold_percent
                    ),
                );
            }
            Some(DefragSettings {
                schedule: schedule.ok()?,
                threshold_percent: defrag.threshold_percent,
            })
        });

    let backup = spec
        .backup
        .as_ref()
        .and_then(|backup| check_backup(backup, defaults, problems));

    let restore = spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.restore.as_ref())
        .and_then(|restore| check_restore(restore, (&namespace, &name), backup.as_ref(), problems));

    let join = spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.join.as_ref())
        .and_then(|join| {
            let auth = spec.auth.as_ref().is_some_and(|a| a.enabled);
            check_join(join, (spec.tls.as_ref(), auth), problems)
        });

    let standby = spec.standby.as_ref().and_then(|standby| {
        let auth = spec.auth.as_ref().is_some_and(|a| a.enabled);
        let context = (backup.as_ref(), auth, spec.bootstrap.is_some());
        check_standby(standby, (&namespace, &name), context, problems)
    });

    let etcd = etcd_settings(spec.etcd.as_ref(), problems);
    let rollout = rollout_policy(dkv, problems);
    CheckedSpec {
        version,
        storage,
        defrag,
        backup,
        restore,
        join,
        standby,
        etcd,
        rollout,
    }
}

/// `spec.storage`: the class exists, the size parses, is big enough and
/// is not below what the volumes hold.
fn check_storage(
    storage: &StorageSpec,
    facts: &Facts,
    problems: &mut Problems,
) -> Option<ValidatedStorage> {
    let class = storage.storage_class_name.trim();
    if class.is_empty() {
        problems.add(
            "spec.storage.storageClassName",
            "must name a StorageClass (kubectl get storageclass lists them)",
        );
    } else if let Some(known) = &facts.storage_classes
        && !known.iter().any(|k| k == class)
    {
        problems.add(
            "spec.storage.storageClassName",
            format!(
                "StorageClass {class:?} does not exist; create it or use one of: {}",
                if known.is_empty() {
                    "(none exist)".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        );
    }
    let size = match StorageSize::parse(&storage.size.0) {
        Ok(size) if size.bytes() >= 1024.0 * 1024.0 => Some(size),
        Ok(size) => {
            problems.add(
                "spec.storage.size",
                format!("{:?} is too small for an etcd member; use at least 1Mi (1Gi or more in production)", size.as_str()),
            );
            None
        }
        Err(err) => {
            problems.add("spec.storage.size", err.to_string());
            None
        }
    };
    let parsed = |text: Option<&str>| text.and_then(|t| StorageSize::parse(t).ok());
    let deployed = parsed(facts.deployed_storage_size.as_deref());
    // What the volumes hold: their claims' capacity, or the template
    // they were created from; never a size a spec asked for that was not
    // carried out.
    let held = [deployed.clone(), parsed(facts.volume_capacity.as_deref())]
        .into_iter()
        .flatten()
        .max_by(|a, b| a.bytes().total_cmp(&b.bytes()));
    if let (Some(size), Some(held)) = (&size, &held)
        && size.bytes() < held.bytes()
    {
        problems.add(
            "spec.storage.size",
            format!("{:?} is smaller than the members' volumes ({held}); volumes never shrink: set it to {held} or more", size.as_str()),
        );
    }
    let size = size?;
    Some(ValidatedStorage {
        storage_class_name: class.to_owned(),
        template_size: deployed.unwrap_or_else(|| size.clone()),
        size,
        reclaim_policy: storage.reclaim_policy,
    })
}

/// `spec.backup`: where, when, how long backups are kept, and how.
fn check_backup(
    backup: &BackupSpec,
    defaults: &Defaults,
    problems: &mut Problems,
) -> Option<ValidatedBackup> {
    let destination = check_destination(&backup.destination.uri, problems);
    let schedule = Schedule::parse(&backup.schedule)
        .map_err(|message| problems.add("spec.backup.schedule", message))
        .ok();
    let retention = retention_policy(backup.retention.as_ref(), problems);
    let continuous = backup::continuous_settings(backup.continuous.as_ref(), problems);
    Some(ValidatedBackup {
        destination: destination?,
        schedule: schedule?,
        image: backup
            .backup_image
            .clone()
            .filter(|i| !i.trim().is_empty())
            .unwrap_or_else(|| defaults.operator_image.clone()),
        retention,
        credentials_secret: backup
            .destination
            .credentials_secret
            .clone()
            .filter(|s| !s.is_empty()),
        final_backup_on_delete: backup.final_backup_on_delete.unwrap_or(false),
        continuous,
        compress: backup.compression != Some(Compression::None),
        encryption: backup.encryption.as_ref().map(|e| e.key_secret.clone()),
    })
}

/// `spec.bootstrap.restore`: one source (a backup, an artifact, or a
/// continuous backup's chain up to a point), the Secrets to read it with.
fn check_restore(
    restore: &RestoreSource,
    (namespace, name): (&str, &str),
    backup: Option<&ValidatedBackup>,
    problems: &mut Problems,
) -> Option<ValidatedRestore> {
    let source = match (&restore.backup_name, &restore.uri) {
        (Some(name), None) if !name.trim().is_empty() => RestoreRef::Backup(name.trim().to_owned()),
        (None, Some(uri)) => {
            match StoreUri::parse(uri) {
                Ok(uri) if continuous_restore(restore) => {
                    let (source_namespace, source_cluster) =
                        match restore.source_cluster.as_deref().map(str::trim) {
                            Some(text) => match text.split_once('/') {
                                Some((ns, name)) => (ns.to_owned(), name.to_owned()),
                                None => (namespace.to_owned(), text.to_owned()),
                            },
                            None => (namespace.to_owned(), name.to_owned()),
                        };
                    let target = match &restore.point_in_time {
                        None => Target::Latest,
                        Some(point) => match (point.revision, &point.time) {
                            (Some(revision), None) if revision >= 1 => Target::Revision(revision),
                            (None, Some(time)) => Target::Time(time.0),
                            _ => {
                                problems.add(
                                    "spec.bootstrap.restore.pointInTime",
                                    "set exactly one of revision (at least 1) or time (RFC 3339)",
                                );
                                return None;
                            }
                        },
                    };
                    RestoreRef::Continuous(ContinuousSource {
                        destination: uri,
                        namespace: source_namespace,
                        cluster: source_cluster,
                        target,
                    })
                }
                Ok(uri) => RestoreRef::Uri(uri),
                Err(err) => {
                    problems.add("spec.bootstrap.restore.uri", format!("{err}; write e.g. s3://bucket/prefix/shop/orders/orders-20261122-060012.db"));
                    return None;
                }
            }
        }
        _ => {
            problems.add(
                "spec.bootstrap.restore",
                "set exactly one of backupName (a DistributedKVBackup in this namespace) or uri (an artifact)",
            );
            return None;
        }
    };
    Some(ValidatedRestore {
        fields: RestoreFields::Bootstrap,
        source,
        credentials_secret: restore
            .credentials_secret
            .clone()
            .or_else(|| backup.and_then(|b| b.credentials_secret.clone()))
            .filter(|s| !s.is_empty()),
        decryption_keys: restore
            .encryption
            .as_ref()
            .map(|e| e.key_secret.clone())
            .or_else(|| {
                backup
                    .and_then(|b| b.encryption.clone())
                    .map(|reference| KeySecretReference {
                        key: None,
                        ..reference
                    })
            }),
    })
}

/// Whether the pause annotation is set to a true value.
pub fn is_paused(annotations: &BTreeMap<String, String>) -> bool {
    labels::is_paused(annotations)
}

fn check_cluster_name(name: &str, problems: &mut Problems) {
    // Child Services need a DNS-1035 label: a lowercase letter first.
    let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        problems.add(
            "metadata.name",
            format!("{name:?} must start with a lowercase letter and contain only lowercase letters, digits and '-' (it names Services)"),
        );
    }
    if name.len() > MAX_CLUSTER_NAME_LEN {
        problems.add(
            "metadata.name",
            format!(
                "{name:?} is {} characters; at most {MAX_CLUSTER_NAME_LEN} fit the names of the objects dkv creates",
                name.len()
            ),
        );
    }
}

/// A cluster `orders` in namespace `shop` with `spec`, validated, for the
/// tests of the steps after validation.
#[cfg(test)]
pub(crate) fn validated_for_tests(spec: serde_json::Value) -> ValidatedCluster {
    let dkv: DistributedKV = serde_json::from_value(serde_json::json!({
        "apiVersion": "dkv.io/v1beta1",
        "kind": "DistributedKV",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1"},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("test cluster: {e}"));
    let facts = Facts {
        storage_classes: None,
        running: RunningVersions::default(),
        deployed_storage_size: None,
        volume_capacity: None,
    };
    let defaults = Defaults {
        operator_image: "dkv:test".to_owned(),
    };
    validate(&dkv, &facts, &defaults).unwrap_or_else(|e| panic!("{e}"))
}
