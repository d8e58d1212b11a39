//! etcd backups for dkv, with no knowledge of Kubernetes: the data path the
//! backup Job, the restore init step and the operator's backup controller
//! share.
//!
//! - [`take_backup`]: a snapshot from a healthy member (a follower when
//!   there is one) streamed into a multipart upload, in constant memory,
//!   with its sha256 and size computed on the way; the result is an
//!   [`Artifact`]. Nothing is left in the store when it fails.
//! - [`fetch_artifact`]: an artifact downloaded to a local file and
//!   verified against its recorded sha256 before it is put in place.
//! - [`restore_member`]: one member's data directory from a snapshot, with
//!   the restore tool of its etcd version.
//! - [`continuous`]: segments of a continuous backup and the chains they
//!   form: the recoverable window and the plan of a point-in-time restore.
//! - [`select_for_pruning`]: which backups retention removes (pure);
//!   [`delete_artifact`] removes one.
//!
//! Object storage is reached through the `object_store` crate: `s3://`
//! (AWS and S3-compatible servers), `gs://`, `az://` and `file://`
//! ([`Location`]). Credentials ([`Credentials`]) never appear in logs or
//! error messages.
//!
//! # For the operator
//!
//! - The backup Job runs `dkv backup`; its termination message is an
//!   [`Artifact`] as JSON (`serde_json::from_str::<Artifact>`), copied into
//!   the `DistributedKVBackup` status (`size_bytes` is `u64` here, `i64`
//!   in the API type). A failed Job's message is the error text.
//! - Retention: build a [`BackupRecord`] per `DistributedKVBackup`
//!   (`Outcome` from its phase), call [`select_for_pruning`] with
//!   [`RetentionPolicy::from_retention_days`] (v1alpha1) or the v1beta1
//!   `retention`, then for each [`Prune`]: [`delete_artifact`] (idempotent)
//!   and delete the record.
//! - Restore: `dkv restore-fetch --uri <artifact> [--sha256 <hex>] --output
//!   <file>` then `dkv restore-member ...` (or [`fetch_artifact`] and
//!   [`restore_member`]); the new cluster needs its own token.
//! - [`Error::category`] tells transient failures (retry) from
//!   configuration and integrity ones (report, do not retry blindly).

#![forbid(unsafe_code)]

mod artifact;
mod backup;
pub mod continuous;
pub mod credentials;
pub mod encoding;
pub mod encryption;
mod error;
mod fetch;
mod location;
mod restore;
pub mod retention;
mod snapshot_check;
mod source;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use artifact::{
    Artifact, Content, SIDECAR_SUFFIX, artifact_file_name, artifact_location, delete_artifact,
    is_snapshot_uri, read_sidecar, sidecar_location,
};
pub use backup::{
    BackupRequest, MIN_PART_SIZE, UploadOptions, Uploaded, take_backup, take_backup_until,
    upload_snapshot,
};
pub use credentials::{
    AwsCredentials, AzureCredentials, AzureKey, Credentials, GcpCredentials, Secret,
};
pub use encoding::Encoding;
pub use encryption::{Key, Keyring};
pub use error::{Category, Error, Result, StoreErrorKind};
pub use fetch::{Fetched, fetch_artifact};
pub use location::{Location, Scheme};
pub use restore::{MemberRestore, RestoreTool, restore_member};
pub use retention::{
    BackupRecord, Outcome, Prune, PruneReason, RetentionPolicy, select_for_pruning,
};
pub use source::{SnapshotSource, choose_snapshot_source, pick_source};
pub use store::{
    AZURE_STORAGE_ENDPOINT, AzureOptions, FileOwner, GcsOptions, S3Options, STORAGE_EMULATOR_HOST,
    Store, StoreConfig, checksums_requested, own_created_files_as,
};
