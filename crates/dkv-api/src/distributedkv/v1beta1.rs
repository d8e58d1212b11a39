//! `dkv.io/v1beta1` `DistributedKV`: the storage version.
//!
//! The same as [`super::v1alpha1`] except `spec.backup`: a
//! [`BackupDestination`] URI of any supported scheme replaces `s3Path` and
//! `credentialsSecret`, and [`BackupRetention`] (`maxBackups`, `maxAge`)
//! replaces `retentionDays`. Every other type is v1alpha1's, re-exported, so
//! the two versions cannot drift apart; [`super::convert`] converts between
//! them without loss.

// Several `printcolumn(...)` entries repeat the same keys (`type_`,
// `json_path`), which clippy mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1alpha1::{AdoptionPhase, AdoptionStatus, JoinSource, OldMemberStatus, OldMembers};
pub use super::v1alpha1::{
    AuthSpec, AutoCompactionMode, BackupArtifactRef, BackupEncryption, BootstrapSpec,
    ContinuousBackupStatus, CorruptMemberPolicy, DefragSpec, DistributedKVStatus, EtcdLogLevel,
    EtcdTuning, IssuerReference, KeySecretReference, LostNodePolicy, LostNodeRecovery,
    MaintenanceSpec, MemberStatus, Operation, OperationKind, Phase, PodOverrides, PointInTime,
    ReclaimPolicy, RecoveryPoint, RecoveryPolicy, RecoverySpec, RestoreSource, RevisionGap,
    SecretReference, StorageSpec, TlsMode, TlsSpec, TlsTransport,
};
pub use super::v1alpha1::{
    Etcd35Log, RolledBack, RolloutFailurePolicy, RolloutSpec, RolloutStatus, RunningSpec,
};
pub use super::v1alpha1::{StandbyPhase, StandbySource, StandbySpec, StandbyStatus};

distributedkv_spec!("v1beta1", BackupSpec);

/// Scheduled backups.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// Where snapshots go.
    pub destination: BackupDestination,

    /// When to take a backup, in cron syntax (five fields, or a macro such
    /// as `@daily`), in UTC. Runs never overlap.
    #[schemars(length(min = 1))]
    pub schedule: String,

    /// The image that runs the backup agent; defaults to the operator's own image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_image: Option<String>,

    /// Which of the cluster's backups to delete (the record and its
    /// artifact); without it every backup is kept. Both limits apply; the
    /// newest successful backup is always kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<BackupRetention>,

    /// Take one last backup before the cluster is deleted. Deletion waits
    /// for it; if it fails, deletion is blocked (`Degraded/BackupFailed`)
    /// until a retry succeeds or the annotation
    /// `dkv.io/skip-final-backup: "true"` waives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_backup_on_delete: Option<bool>,

    /// Continuous backup: besides the scheduled snapshots, every change is
    /// recorded to the destination as it happens, so that a new cluster
    /// can be restored to any revision or time since the oldest recorded
    /// snapshot (`spec.bootstrap.restore.pointInTime`). Without it a
    /// restore can only go back to a snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous: Option<ContinuousBackup>,

    /// How snapshots and continuous backup segments are compressed:
    /// `Zstd` (the default) or `None`. Restores read either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,

    /// Encrypt snapshots and continuous backup segments before they leave
    /// the cluster (AES-256-GCM), with the key in a Secret. Without it they
    /// are stored as they are (the store's own encryption at rest aside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<BackupEncryption>,

    /// Verify every scheduled backup once it completes (its
    /// `DistributedKVBackup` gets `spec.verify: true`): restored into a
    /// scratch one-member cluster, compared by key count and hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<bool>,
}

/// Compression of stored backups.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Compression {
    /// zstd, level 1: etcd's pages shrink several times, at several
    /// hundred MB/s per core.
    #[default]
    Zstd,
    /// Stored as etcd produced it.
    None,
}

/// How changes are recorded between snapshots.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContinuousBackup {
    /// Record every change. Turning it off stops recording; what was
    /// recorded stays restorable.
    pub enabled: bool,

    /// How long changes wait before they are stored, at most: the recovery
    /// point objective. Seconds or minutes, `10s` (the default) to `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([1-9][0-9]{0,2}s|([1-9]|10)m)$"))]
    pub interval: Option<String>,

    /// A segment of changes is stored early once it holds this much data
    /// (a quantity: `16Mi`, the default, from `64Ki` to `256Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_segment_bytes: Option<Quantity>,

    /// When recording ends a chain and starts the next from a fresh full
    /// snapshot. A point-in-time restore replays the changes of one chain
    /// at most, so this bounds restore time; retention deletes whole
    /// chains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_chain: Option<NewChain>,
}

/// When continuous backup starts a new chain; whichever limit comes first.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NewChain {
    /// At least this often: minutes, hours or days, `10m` to `30d`; `24h`
    /// by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,5}[mhd]$"))]
    pub every: Option<String>,

    /// ... or once the changes stored in the chain reach this percentage
    /// of its base snapshot's stored size: 1 to 1000, 25 by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub change_percent: Option<i32>,

    /// ... or once the chain recorded this many revisions: a restore
    /// replays them one at a time, a few hundred a second, so this bounds
    /// restore time where writes are small and many. 1,000 to
    /// 100,000,000; 100,000 by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1000, max = 100_000_000))]
    pub max_revisions: Option<i64>,
}

/// An object store location (or a directory) for snapshots.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupDestination {
    /// `s3://bucket/prefix/`, `gs://bucket/prefix/`, `az://container/prefix/`
    /// or `file:///absolute/directory/` (a directory on the node the backup
    /// pod runs on). Snapshots go to
    /// `<prefix>/<namespace>/<cluster>/<cluster>-<YYYYMMDD>-<HHMMSS>.db.zst`
    /// (`.db` uncompressed, `.enc` added when encrypted), each with a
    /// `.json` record beside it.
    #[schemars(regex(
        pattern = r"^((s3|gs|az)://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?|file:///.+)$"
    ))]
    pub uri: String,

    /// Secret (same namespace) with the object store credentials. `s3://`:
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optionally
    /// `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
    /// `AWS_ALLOW_HTTP`. `gs://`: `GOOGLE_SERVICE_ACCOUNT_KEY` (the JSON
    /// key) or `GOOGLE_APPLICATION_CREDENTIALS`; `STORAGE_EMULATOR_HOST` for
    /// an emulator. `az://`: `AZURE_STORAGE_ACCOUNT_NAME` with
    /// `AZURE_STORAGE_ACCOUNT_KEY` or `AZURE_STORAGE_SAS_TOKEN`, optionally
    /// `AZURE_STORAGE_ENDPOINT` (another blob service URL). Without it the
    /// store's ambient identity is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
}

/// Which backups retention deletes. Both limits apply; the newest successful
/// backup is always kept, and final backups are never deleted.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupRetention {
    /// Keep at most this many backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_backups: Option<i32>,

    /// Delete backups older than this: a whole number of hours or days,
    /// `168h` or `7d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,5}[hd]$"))]
    pub max_age: Option<String>,
}

/// A parsed `retention.maxAge`: a positive whole number of hours (`36h`) or
/// days (`7d`, 24 hours each), at most six digits. Minutes and compound
/// durations (`1d12h`) are not accepted: backups run at most every few
/// minutes and are kept for hours or days, and one unit keeps the value
/// readable and its conversion to v1alpha1's `retentionDays` exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxAge {
    hours: u32,
}

impl MaxAge {
    pub fn from_days(days: u32) -> Self {
        Self { hours: days * 24 }
    }

    pub fn hours(self) -> u32 {
        self.hours
    }

    /// Whole days when the age is one, else `None`.
    pub fn whole_days(self) -> Option<u32> {
        self.hours.is_multiple_of(24).then_some(self.hours / 24)
    }
}

impl std::str::FromStr for MaxAge {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || {
            format!(
                "{text:?} is not a duration like 168h or 7d (a whole number of hours or days, 1 to 6 digits)"
            )
        };
        let (digits, unit) = text.split_at(text.len().saturating_sub(1));
        let valid_digits = (1..=6).contains(&digits.len())
            && !digits.starts_with('0')
            && digits.bytes().all(|b| b.is_ascii_digit());
        if !valid_digits {
            return Err(invalid());
        }
        let number: u32 = digits.parse().map_err(|_| invalid())?;
        match unit {
            "h" => Ok(Self { hours: number }),
            "d" => Ok(Self::from_days(number)),
            _ => Err(invalid()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_accepts_hours_and_days_only() {
        let parse = |s: &str| s.parse::<MaxAge>().map(MaxAge::hours);
        assert_eq!(parse("168h"), Ok(168));
        assert_eq!(parse("7d"), Ok(168));
        assert_eq!(parse("999999d"), Ok(999_999 * 24));
        for bad in [
            "", "h", "0h", "07d", "1.5h", "30m", "1d12h", "-1d", "1w", "1234567h", "d7",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!("36h".parse::<MaxAge>().map(MaxAge::whole_days), Ok(None));
        assert_eq!("48h".parse::<MaxAge>().map(MaxAge::whole_days), Ok(Some(2)));
    }
}
