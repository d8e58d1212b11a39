//! The one writer of a `DistributedKVBackup`'s status. Two controllers
//! write it: the backup controller ([`crate::backup`]: phase, times,
//! artifact, message, and `verification` while a verification starts or
//! times out) and the cluster controller (the `verification` a scratch
//! cluster settles). Both go through [`write`], so a field either of them
//! leaves out means the same thing.
//!
//! A shared part rather than a module of `backup`: the cluster controller's
//! verification writes through it too, and neither controller imports the
//! other.

use dkv_api::DistributedKVBackup;
use dkv_api::backup::v1alpha1::{BackupVerification, DistributedKVBackupStatus};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value, json};

/// A status that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StatusWriteError {
    #[error("updating the status of DistributedKVBackup {backup}: {source}")]
    Patch {
        /// `namespace/name`.
        backup: String,
        #[source]
        source: kube::Error,
    },
    #[error("encoding the status of DistributedKVBackup {backup}: {source}")]
    Encode {
        backup: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Makes `new` the status of `backup`, whose status was read as
/// `backup.status`; sends nothing when they are equal.
///
/// The patch is [`merge_patch`] of the two: a field `new` leaves out that
/// the read status has is removed.
pub async fn write(
    client: &kube::Client,
    backup: &DistributedKVBackup,
    new: &DistributedKVBackupStatus,
) -> Result<(), StatusWriteError> {
    let ns = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let old = backup.status.clone().unwrap_or_default();
    let patch = merge_patch(&old, new).map_err(|source| StatusWriteError::Encode {
        backup: format!("{ns}/{name}"),
        source,
    })?;
    let Some(patch) = patch else {
        return Ok(());
    };
    let api: Api<DistributedKVBackup> = Api::namespaced(client.clone(), &ns);
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": patch })),
    )
    .await
    .map_err(|source| StatusWriteError::Patch {
        backup: format!("{ns}/{name}"),
        source,
    })?;
    Ok(())
}

/// Makes `verification` the backup's `status.verification`, whole: the
/// rest of its status as read.
pub async fn write_verification(
    client: &kube::Client,
    backup: &DistributedKVBackup,
    verification: BackupVerification,
) -> Result<(), StatusWriteError> {
    let new = DistributedKVBackupStatus {
        verification: Some(verification),
        ..backup.status.clone().unwrap_or_default()
    };
    write(client, backup, &new).await
}

/// The JSON merge patch (RFC 7386) that turns status `old` into `new`, or
/// `None` when they are the same. One rule for absent fields: **a field
/// `new` does not have is sent as `null` when `old` has it, at every
/// depth; a field neither has, or both have alike, is not sent.**
///
/// Why: a merge patch keeps every field it does not name, and merges a
/// nested object (`verification`, `artifact`) field by field instead of
/// replacing it. Both writers compute the whole status they want, so a
/// field they leave out must go — left out of the patch, a new
/// verification's record would keep the old one's `completionTime` and
/// `message`, or a completed backup the message of its running phase.
/// Sending `null` for every field the type has instead would also wipe
/// what the other controller wrote since this one read the object (its
/// cache may lag behind); a null only for what was read, and nothing for
/// what did not change, removes only what this writer saw and dropped.
pub fn merge_patch(
    old: &DistributedKVBackupStatus,
    new: &DistributedKVBackupStatus,
) -> Result<Option<Value>, serde_json::Error> {
    Ok(diff(
        &serde_json::to_value(old)?,
        &serde_json::to_value(new)?,
    ))
}

/// `new` as a merge patch over `old`; `None` when they are equal.
fn diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return Some(new.clone());
    };
    let mut patch = Map::new();
    for (key, value) in new {
        let change = match old.get(key) {
            Some(was) => diff(was, value),
            None => Some(value.clone()),
        };
        if let Some(change) = change {
            patch.insert(key.clone(), change);
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(*k)) {
        patch.insert(key.clone(), Value::Null);
    }
    Some(Value::Object(patch))
}

#[cfg(test)]
mod tests {
    use dkv_api::backup::v1alpha1::{BackupArtifact, BackupPhase, VerificationPhase};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn at(text: &str) -> Time {
        Time(text.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH))
    }

    fn verified() -> DistributedKVBackupStatus {
        DistributedKVBackupStatus {
            phase: Some(BackupPhase::Completed),
            start_time: Some(at("2026-11-26T03:00:00Z")),
            completion_time: Some(at("2026-11-26T03:01:00Z")),
            artifact: Some(BackupArtifact {
                uri: "s3://b/orders.db.zst".to_owned(),
                size_bytes: 2048,
                ..BackupArtifact::default()
            }),
            message: None,
            verification: Some(BackupVerification {
                phase: Some(VerificationPhase::Verified),
                cluster: Some("nightly-verify".to_owned()),
                request: None,
                start_time: Some(at("2026-11-26T03:02:00Z")),
                completion_time: Some(at("2026-11-26T03:05:00Z")),
                message: Some("100 keys".to_owned()),
            }),
        }
    }

    fn patch(old: &DistributedKVBackupStatus, new: &DistributedKVBackupStatus) -> Option<Value> {
        merge_patch(old, new).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_field_left_out_is_removed_at_every_depth_and_only_changes_are_sent() {
        let old = verified();
        let again = DistributedKVBackupStatus {
            verification: Some(BackupVerification {
                phase: Some(VerificationPhase::Running),
                request: Some("2".to_owned()),
                start_time: Some(at("2026-11-27T00:00:00Z")),
                completion_time: None,
                message: None,
                ..old.verification.clone().unwrap_or_default()
            }),
            ..old.clone()
        };
        assert_eq!(
            patch(&old, &again),
            Some(json!({"verification": {
                "phase": "Running",
                "request": "2",
                "startTime": "2026-11-27T00:00:00Z",
                "completionTime": null,
                "message": null,
            }}))
        );
    }

    #[test]
    fn a_field_the_writer_never_read_is_not_touched() {
        // Read before the other controller recorded a verification: the
        // patch says nothing of it, so it stays.
        let read = DistributedKVBackupStatus {
            verification: None,
            ..verified()
        };
        let new = DistributedKVBackupStatus {
            message: Some("noted".to_owned()),
            ..read.clone()
        };
        assert_eq!(patch(&read, &new), Some(json!({"message": "noted"})));
    }

    #[test]
    fn a_top_level_field_left_out_is_removed() {
        let old = verified();
        let new = DistributedKVBackupStatus {
            artifact: None,
            verification: None,
            ..old.clone()
        };
        assert_eq!(
            patch(&old, &new),
            Some(json!({"artifact": null, "verification": null}))
        );
    }

    #[test]
    fn an_unchanged_status_is_not_written() {
        assert_eq!(patch(&verified(), &verified()), None);
        let empty = DistributedKVBackupStatus::default();
        assert_eq!(patch(&empty, &empty), None);
    }
}
