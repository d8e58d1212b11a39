//! `dkv.io/v1alpha1` `DistributedKVBackup`: one backup of one cluster.
//!
//! Created by a user for an on-demand backup, or by a scheduled run; either
//! way it is the catalogue entry `kubectl get dkvbackup` lists.

// Several `printcolumn(...)` entries repeat the same keys (`type_`,
// `json_path`), which clippy mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One backup of the `DistributedKV` named in `cluster`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "dkv.io",
    version = "v1alpha1",
    kind = "DistributedKVBackup",
    plural = "distributedkvbackups",
    singular = "distributedkvbackup",
    shortname = "dkvbackup",
    category = "dkv-all",
    namespaced,
    status = "DistributedKVBackupStatus",
    derive = "PartialEq",
    doc = "One snapshot of a DistributedKV, streamed to object storage.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".status.artifact.sizeBytes"
    ),
    printcolumn(
        name = "Completed",
        type_ = "date",
        json_path = ".status.completionTime"
    ),
    printcolumn(
        name = "Verification",
        type_ = "string",
        json_path = ".status.verification.phase"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("a backup's spec cannot change; create a new DistributedKVBackup instead"))]
#[serde(rename_all = "camelCase")]
pub struct DistributedKVBackupSpec {
    /// The `DistributedKV` to back up, in the same namespace.
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,

    /// Overrides the cluster's backup destination for this one backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<BackupDestination>,

    /// Once the backup has completed, verify it: restore it into a scratch
    /// one-member cluster and compare its key count and etcd's hash of the
    /// data (`HashKV`) with those the source held when the backup was
    /// taken. The result goes to `status.verification`. An existing backup
    /// is verified (again) by setting the annotation `dkv.io/verify` to a
    /// new value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<bool>,
}

/// Where a snapshot is written.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupDestination {
    /// `s3://bucket/prefix/`, `gs://bucket/prefix/`, `az://container/prefix/`
    /// or `file:///absolute/directory/`.
    #[schemars(regex(pattern = r"^(s3|gs|az|file)://.+$"))]
    pub uri: String,
    /// Secret (same namespace) with the object store's credentials, with
    /// the same keys as the cluster's `spec.backup.destination.credentialsSecret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
}

/// Progress and result of one backup.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DistributedKVBackupStatus {
    /// `Pending`, `Running`, then `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// When the backup started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the backup completed or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The snapshot this backup wrote, once it has completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<BackupArtifact>,
    /// Why the backup failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The last verification of the backup (`spec.verify`, the annotation
    /// `dkv.io/verify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<BackupVerification>,
}

/// Whether a restore of the backup holds what the source held.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupVerification {
    /// `Running`, then `Verified` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<VerificationPhase>,
    /// The scratch cluster the backup is restored into while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The value of the annotation `dkv.io/verify` it answers, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// What was compared, or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A key count and etcd's `HashKV` at one revision.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupContent {
    pub revision: i64,
    pub keys: i64,
    #[serde(rename = "hashKV")]
    pub hash_kv: u32,
    /// The compaction the hash starts after.
    pub compact_revision: i64,
}

/// Progress of one verification.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerificationPhase {
    Running,
    Verified,
    Failed,
}

/// Life-cycle of one backup.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupPhase {
    Pending,
    Running,
    Completed,
    Failed,
}

impl std::fmt::Display for VerificationPhase {
    /// Its value in `status.verification.phase`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VerificationPhase::Running => "Running",
            VerificationPhase::Verified => "Verified",
            VerificationPhase::Failed => "Failed",
        })
    }
}

impl std::fmt::Display for BackupPhase {
    /// Its value in `status.phase`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackupPhase::Pending => "Pending",
            BackupPhase::Running => "Running",
            BackupPhase::Completed => "Completed",
            BackupPhase::Failed => "Failed",
        })
    }
}

/// A snapshot artifact in object storage.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupArtifact {
    /// Where the snapshot is; a restore names it in
    /// `spec.bootstrap.restore.uri`.
    pub uri: String,
    /// Size of the stored object in bytes (compressed, encrypted).
    #[serde(default)]
    pub size_bytes: i64,
    /// Hex sha256 of the stored object, verified before any restore.
    #[serde(default)]
    pub sha256: String,
    /// etcd revision the snapshot was taken at.
    #[serde(default)]
    pub revision: i64,
    /// The etcd version of the member the snapshot was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
    /// What the source held at `revision`, read right after the snapshot:
    /// what a verification compares the restored copy against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<BackupContent>,
    /// `zstd` when the snapshot is stored compressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// The id of the key the snapshot is encrypted with (a fingerprint of
    /// the key, not the key); a restore needs that key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_id: Option<String>,
}
