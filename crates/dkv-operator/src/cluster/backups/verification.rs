//! The cluster's side of a backup verification
//! ([`crate::backup::verify`]): a scratch cluster (label
//! `dkv.io/verifies`) that has formed from the backup is compared with what
//! the source held at the backup's revision — the key count and etcd's
//! `HashKV` — or, when its restore failed, reports that; either way the
//! result goes into the backup's `status.verification` (with an Event on
//! the backup) and the scratch cluster is deleted.

use crate::events::{Event, EventType};
use dkv_api::backup::v1alpha1::{BackupContent, BackupVerification, VerificationPhase};
use dkv_api::{DistributedKV, DistributedKVBackup};
use dkv_etcd::{ContentDigest, EtcdAdmin};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::api::{Api, DeleteParams};
use tracing::{info, warn};

use crate::cluster::backups::BackupsReach;
use crate::cluster::error::{Error, Result};
use crate::cluster::validate::ValidatedCluster;

/// Checks the scratch cluster `cluster` if it is one. `restore_failed`:
/// why its restore failed, if it did; `formed`: it has formed and holds all
/// its data; `admin` reaches its members at `endpoints`.
pub async fn check(
    cluster: &ValidatedCluster,
    restore_failed: Option<&str>,
    formed: bool,
    admin: Option<&dyn EtcdAdmin>,
    endpoints: &[String],
    reach: &BackupsReach<'_>,
) -> Result<()> {
    let Some(backup_name) = &cluster.verifies else {
        return Ok(());
    };
    let ns = cluster.namespace.clone();
    let name = cluster.name.clone();
    let backups: Api<DistributedKVBackup> = Api::namespaced(reach.client.clone(), &ns);
    let backup = backups
        .get_opt(backup_name)
        .await
        .map_err(|source| Error::Read {
            kind: "DistributedKVBackup",
            name: backup_name.clone(),
            source,
        })?;
    let verification = backup
        .as_ref()
        .and_then(|b| b.status.as_ref())
        .and_then(|s| s.verification.clone());
    let running = verification.as_ref().is_some_and(|v| {
        v.phase == Some(VerificationPhase::Running) && v.cluster.as_deref() == Some(name.as_str())
    });
    let (Some(backup), Some(verification), true) = (backup, verification, running) else {
        // Nobody waits for this one any more.
        delete_self(cluster, reach).await;
        return Ok(());
    };
    let recorded = backup
        .status
        .as_ref()
        .and_then(|s| s.artifact.as_ref())
        .and_then(|a| a.content);
    let outcome = if let Some(why) = restore_failed {
        Some(Err(format!("the restore failed: {why}")))
    } else {
        match (formed, admin) {
            (true, Some(admin)) => compare(admin, endpoints, recorded).await,
            _ => None,
        }
    };
    let Some(outcome) = outcome else {
        return Ok(());
    };
    let (phase, message, type_, reason) = match outcome {
        Ok(message) => (
            VerificationPhase::Verified,
            message,
            EventType::Normal,
            "BackupVerified",
        ),
        Err(message) => (
            VerificationPhase::Failed,
            message,
            EventType::Warning,
            "BackupVerificationFailed",
        ),
    };
    info!(backup = %backup_name, scratch = %name, ?phase, %message, "backup verification finished");
    let done = BackupVerification {
        phase: Some(phase),
        completion_time: Some(Time(jiff::Timestamp::now())),
        message: Some(message.clone()),
        ..verification
    };
    crate::parts::backup_status::write_verification(reach.client, &backup, done)
        .await
        .map_err(|e| Error::Verification(e.to_string()))?;
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(format!("backup {backup_name}: {message}")),
        action: "Verify".to_owned(),
        secondary: None,
    };
    reach
        .recorder
        .publish_or_warn(&event, &backup.object_ref(&()))
        .await;
    delete_self(cluster, reach).await;
    Ok(())
}

/// Reads the restored copy at the recorded revision and judges it; `None`
/// to look again later (no member answered).
async fn compare(
    admin: &dyn EtcdAdmin,
    endpoints: &[String],
    recorded: Option<BackupContent>,
) -> Option<Result<String, String>> {
    let Some(recorded) = recorded else {
        return Some(Ok(
            "restored and served by etcd; the backup recorded no key count or hash to compare with (taken by an older dkv, or the source could not be read after the snapshot)".to_owned(),
        ));
    };
    for endpoint in endpoints {
        match admin.content_digest(endpoint, recorded.revision).await {
            Ok(Some(copy)) => return Some(judge(&recorded, &copy)),
            Ok(None) => {
                return Some(Ok(
                    "restored and served by etcd; its content could not be read to compare"
                        .to_owned(),
                ));
            }
            Err(err) if err.to_string().contains("future revision") => {
                return Some(Err(format!(
                    "the restored copy does not reach revision {}, the revision the backup recorded: {err}",
                    recorded.revision
                )));
            }
            Err(err) => {
                warn!(%endpoint, error = %err, "reading a scratch cluster's content");
            }
        }
    }
    None
}

/// Whether the restored copy holds what the source held at the recorded
/// revision.
pub fn judge(recorded: &BackupContent, copy: &ContentDigest) -> Result<String, String> {
    let revision = recorded.revision;
    if copy.keys != recorded.keys {
        return Err(format!(
            "the restored copy holds {} keys at revision {revision}; the source held {}",
            copy.keys, recorded.keys
        ));
    }
    if copy.compact_revision != recorded.compact_revision {
        return Ok(format!(
            "{} keys at revision {revision}, as the source held; the hash was not compared: the source was compacted at revision {} when it was read, the snapshot at {}",
            copy.keys, recorded.compact_revision, copy.compact_revision
        ));
    }
    if copy.hash != recorded.hash_kv {
        return Err(format!(
            "etcd's hash of the restored data at revision {revision} is {}; the source's was {} ({} keys in both)",
            copy.hash, recorded.hash_kv, copy.keys
        ));
    }
    Ok(format!(
        "{} keys and HashKV {} at revision {revision}, as the source held them",
        copy.keys, copy.hash
    ))
}

async fn delete_self(cluster: &ValidatedCluster, reach: &BackupsReach<'_>) {
    let api: Api<DistributedKV> = Api::namespaced(reach.client.clone(), &cluster.namespace);
    if let Err(err) = api.delete(&cluster.name, &DeleteParams::default()).await
        && !matches!(&err, kube::Error::Api(s) if s.code == 404)
    {
        warn!(cluster = %cluster.name, error = %err, "could not delete a scratch cluster");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded() -> BackupContent {
        BackupContent {
            revision: 120,
            keys: 100,
            hash_kv: 0xdead_beef,
            compact_revision: 0,
        }
    }

    fn copy(keys: i64, hash: u32, compact_revision: i64) -> ContentDigest {
        ContentDigest {
            revision: 120,
            keys,
            hash,
            compact_revision,
        }
    }

    #[test]
    fn a_copy_verifies_only_with_the_same_keys_and_hash() {
        let ok = judge(&recorded(), &copy(100, 0xdead_beef, 0)).unwrap();
        assert!(
            ok.contains("100 keys") && ok.contains("revision 120"),
            "{ok}"
        );
        let err = judge(&recorded(), &copy(99, 0xdead_beef, 0)).unwrap_err();
        assert!(err.contains("99 keys") && err.contains("held 100"), "{err}");
        let err = judge(&recorded(), &copy(100, 1, 0)).unwrap_err();
        assert!(err.contains("hash"), "{err}");
        // Compacted differently: the count still has to match, the hash
        // cannot be compared, and the message says so.
        let partial = judge(&recorded(), &copy(100, 1, 50)).unwrap();
        assert!(partial.contains("not compared"), "{partial}");
    }
}
