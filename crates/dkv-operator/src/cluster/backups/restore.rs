//! `spec.bootstrap.restore`: a new cluster whose members start from a
//! backup instead of empty.
//!
//! While such a cluster is being created, every member pod runs two more
//! init containers before `member-init`:
//! 1. `restore-fetch` (the dkv image) downloads the artifact into the
//!    member's volume and verifies its sha256 — only a verified snapshot is
//!    ever written — after clearing what an earlier attempt left;
//! 2. `restore` (the cluster's etcd image, so the restore tool matches the
//!    version: `etcdutl` from 3.5, `etcdctl` for 3.4) turns it into a data
//!    directory for this member, with its own name and the new cluster's
//!    `--initial-cluster` and token (a new cluster ID), in a staging
//!    directory beside the real one.
//!
//! `member-init` then moves the staged directory into place only if the
//! member has no data yet, so a pod that restarts after its member started
//! keeps what it has. A failed fetch (a checksum mismatch, credentials)
//! stops the pod before etcd: nothing is ever started from a bad artifact,
//! and the cluster reports `Degraded/RestoreFailed` with the reason.
//!
//! The containers themselves are built with the StatefulSet
//! ([`crate::cluster::build::statefulset`]); this module resolves the source.
//!
//! The source is resolved once, when the StatefulSet is first created, and
//! kept in an annotation on it; once every member has started, the
//! template drops the restore steps (pods are replaced only by the
//! operator, `OnDelete`, so running members are not disturbed).

use dkv_api::backup::v1alpha1::BackupPhase;
use dkv_api::distributedkv::v1beta1::{BackupArtifactRef, KeySecretReference};
use dkv_api::{DistributedKV, DistributedKVBackup};
use dkv_backup::continuous::archive::{
    chain_location, continuous_location, plan_restore, read_bases, read_chain,
};
use dkv_backup::continuous::chain::{PlanError, Target, chains, plan};
use dkv_backup::continuous::replay::Replayed;
use dkv_backup::{Keyring, Location, Store, StoreConfig};
use dkv_etcd::EtcdData;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::Client;
use serde::{Deserialize, Serialize};

use crate::cluster::error::{Error, Result};
use crate::cluster::validate::{
    ContinuousSource, RestoreFields, RestoreRef, ValidatedCluster, ValidatedRestore,
};

/// Annotation on the StatefulSet of a cluster being restored: the resolved
/// source (JSON of [`ResolvedRestore`]).
pub const SOURCE_ANNOTATION: &str = "dkv.io/restore-source";

pub use dkv_member::layout::{RESTORE_DIR, SNAPSHOT_FILE, STAGING_DIR};

/// A restore source with everything the member pods need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRestore {
    /// The `DistributedKVBackup` it came from, when one was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    pub uri: String,
    /// The expected sha256; `None`: the record beside the artifact says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// Set when an existing cluster is recreated from its newest backup
    /// after losing quorum (`RestoreFromBackup`): the epoch of that
    /// recovery, which also goes into the new cluster's token so that no
    /// member of the lost cluster can ever talk to the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// Set for a restore from continuous backup: the changes to replay
    /// once the members have formed from the base snapshot (`uri`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Replay>,
    /// The Secret (and entry, or every entry) with the keys of an
    /// encrypted backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption_keys: Option<KeySecretReference>,
    /// How many revisions above the snapshot's the restored members start
    /// ([`revision_bump`]), fixed when the restore is resolved so that
    /// every pass builds the same members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_bump: Option<i64>,
}

impl ResolvedRestore {
    /// The revisions the members of `cluster` start above the snapshot's:
    /// the bump, where etcdutl can apply it (3.5.10 and later) and the
    /// cluster is not a scratch copy verifying a backup (that one is
    /// compared with the source at the snapshot's revisions, and no client
    /// of the source ever reads it).
    pub fn applied_revision_bump(&self, cluster: &ValidatedCluster) -> Option<i64> {
        self.revision_bump.filter(|_| {
            cluster.version >= crate::etcd_version::EtcdVersion::new(3, 5, 10)
                && cluster.verifies.is_none()
        })
    }
}

/// The least a restored cluster's revisions start above its snapshot's.
pub const MIN_REVISION_BUMP: i64 = 1_000_000_000;

/// More revisions a second than any etcd commits (it manages tens of
/// thousands at most): the bound of what a source can have served.
const REVISIONS_PER_SECOND_BOUND: i64 = 100_000;

/// How far above its snapshot's revision a restored cluster starts, so that
/// its revisions never go back for a client of the source: past every
/// revision the source can have served since the snapshot was taken
/// (`taken_at`; unknown for a bare artifact URI), and never less than
/// [`MIN_REVISION_BUMP`]. Everything below is marked compacted.
pub fn revision_bump(taken_at: Option<jiff::Timestamp>, now: jiff::Timestamp) -> i64 {
    let age = taken_at.map_or(0, |taken| now.duration_since(taken).as_secs().max(0));
    MIN_REVISION_BUMP.max(age.saturating_mul(REVISIONS_PER_SECOND_BOUND))
}

/// The second half of a restore from continuous backup: the changes the
/// source recorded after the base snapshot, up to the target, replayed into
/// the members once they have formed from that snapshot. Clients are let
/// in (the client Service is created) only after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    /// The source cluster's backup destination, namespace and name.
    pub destination: String,
    pub namespace: String,
    pub cluster: String,
    /// The chain the base snapshot starts.
    pub chain: String,
    /// The source revision the restored state ends at, for a revision
    /// target and for the newest point (fixed when the restore began, so
    /// every pass replays to the same point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_revision: Option<i64>,
    /// For a time target: every change received at or before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_time: Option<jiff::Timestamp>,
}

/// Looks up what `restore` names: a completed `DistributedKVBackup` (its
/// artifact and digest), or an artifact URI as given.
pub async fn resolve(
    client: &Client,
    namespace: &str,
    restore: &ValidatedRestore,
) -> Result<ResolvedRestore> {
    let name = match &restore.source {
        RestoreRef::Uri(uri) => {
            return Ok(ResolvedRestore {
                backup: None,
                uri: uri.as_str().to_owned(),
                sha256: None,
                credentials_secret: restore.credentials_secret.clone(),
                epoch: None,
                replay: None,
                decryption_keys: None,
                revision_bump: Some(revision_bump(None, jiff::Timestamp::now())),
            });
        }
        RestoreRef::Continuous(source) => {
            return resolve_continuous(client, namespace, source, restore).await;
        }
        RestoreRef::Backup(name) => name,
    };
    let api: Api<DistributedKVBackup> = Api::namespaced(client.clone(), namespace);
    let backup = api.get_opt(name).await.map_err(|source| Error::Read {
        kind: "DistributedKVBackup",
        name: name.clone(),
        source,
    })?;
    let mut resolved = resolve_backup(name, backup.as_ref(), restore)?;
    resolved.revision_bump = Some(revision_bump(
        backup.as_ref().and_then(completed_at),
        jiff::Timestamp::now(),
    ));
    if resolved.credentials_secret.is_none()
        && let Some(backup) = &backup
    {
        // A backup taken to its cluster's own destination (a record with
        // `spec.cluster` only, as scheduled runs make them) used
        // the cluster's credentials: so does its restore, while that
        // cluster exists.
        resolved.credentials_secret = source_cluster_credentials(client, namespace, backup).await?;
    }
    Ok(resolved)
}

/// A restore from `source`'s continuous backup: plans it over the chains
/// stored in its destination (the base snapshot to start the members from,
/// the point to replay to), so that a target outside the recoverable window
/// is refused before anything starts.
async fn resolve_continuous(
    client: &Client,
    namespace: &str,
    source: &ContinuousSource,
    restore: &ValidatedRestore,
) -> Result<ResolvedRestore> {
    let destination = source.destination.location();
    let fields = restore.fields;
    let store = open_store(
        client,
        namespace,
        destination,
        (restore.credentials_secret.as_deref(), fields),
    )
    .await?;
    let continuous = continuous_location(destination, &source.namespace, &source.cluster);
    let keys = restore_keys(client, namespace, restore.decryption_keys.as_ref(), fields).await?;
    let planned = plan_restore(&store, &continuous, &keys, source.target)
        .await
        .map_err(|e| store_failure(source.destination.as_str(), &e))?;
    let planned = planned.map_err(|err| {
        let hint = match err {
            PlanError::NoBase => format!(
                "; is {}/{} the cluster whose backup this is ({}), and {} its spec.backup.destination.uri?",
                source.namespace,
                source.cluster,
                fields.field("sourceCluster"),
                source.destination
            ),
            _ => String::new(),
        };
        Error::RestoreSource {
            message: format!(
                "{}: continuous backup of {}/{} in {}: {err}{hint}",
                fields.whole(),
                source.namespace,
                source.cluster,
                source.destination
            ),
            waiting: false,
        }
    })?;
    let until_revision = match source.target {
        Target::Time(_) => None,
        Target::Revision(revision) => Some(revision),
        Target::Latest => Some(
            planned
                .segments
                .last()
                .map_or(planned.base.revision, |s| s.header.last_revision),
        ),
    };
    Ok(ResolvedRestore {
        backup: None,
        uri: planned.base.uri.clone(),
        sha256: None,
        credentials_secret: restore.credentials_secret.clone(),
        epoch: None,
        replay: Some(Replay {
            destination: source.destination.as_str().to_owned(),
            namespace: source.namespace.clone(),
            cluster: source.cluster.clone(),
            chain: planned.base.chain.clone(),
            until_revision,
            until_time: match source.target {
                Target::Time(time) => Some(time),
                _ => None,
            },
        }),
        decryption_keys: restore.decryption_keys.clone(),
        // The source may have served revisions past the replay's target:
        // counted from the base snapshot.
        revision_bump: Some(revision_bump(
            Some(planned.base.taken_at),
            jiff::Timestamp::now(),
        )),
    })
}

/// Replays `replay` into the restored cluster `etcd` reaches: plans again
/// over the same chain to the same point, then applies the changes the
/// restored members do not hold yet (a replay cut short by a restart goes
/// on from at most where it stopped: applying a change again leaves the
/// same keys and values).
pub async fn apply_recorded_changes(
    client: &Client,
    namespace: &str,
    replay: &Replay,
    (credentials_secret, decryption_keys, fields): (
        Option<&str>,
        Option<&KeySecretReference>,
        RestoreFields,
    ),
    etcd: &dyn EtcdData,
    revision_offset: i64,
) -> Result<Replayed> {
    // Read back from the StatefulSet's annotation: parsed here, where it
    // enters again.
    let destination = parse_destination(&replay.destination)?;
    let store = open_store(
        client,
        namespace,
        &destination,
        (credentials_secret, fields),
    )
    .await?;
    let keys = restore_keys(client, namespace, decryption_keys, fields).await?;
    let continuous = continuous_location(&destination, &replay.namespace, &replay.cluster);
    let failed = |e: &dkv_backup::Error| store_failure(&replay.destination, e);
    let base = read_bases(&store, &continuous)
        .await
        .map_err(|e| failed(&e))?
        .into_iter()
        .find(|b| b.chain == replay.chain)
        .ok_or_else(|| Error::RestoreSource {
            message: format!(
                "the continuous backup chain {} of {}/{} is no longer in {}; it was there when the restore began",
                replay.chain, replay.namespace, replay.cluster, replay.destination
            ),
            waiting: false,
        })?;
    let segments = read_chain(&store, &chain_location(&continuous, &base.chain), &keys)
        .await
        .map_err(|e| failed(&e))?;
    let target = match (replay.until_revision, replay.until_time) {
        (Some(revision), _) => Target::Revision(revision),
        (None, Some(time)) => Target::Time(time),
        (None, None) => Target::Latest,
    };
    let planned =
        plan(&chains(&[base], &segments), target).map_err(|err| Error::RestoreSource {
            message: format!(
                "continuous backup of {}/{}: {err}",
                replay.namespace, replay.cluster
            ),
            waiting: false,
        })?;
    dkv_backup::continuous::replay::replay_plan(etcd, &store, &planned, &keys, revision_offset)
        .await
        .map_err(|e| failed(&e))
}

/// The keys of an encrypted backup, from the Secret `reference` names
/// (none without one: an encrypted segment is then refused, naming its
/// key's id).
async fn restore_keys(
    client: &Client,
    namespace: &str,
    reference: Option<&KeySecretReference>,
    fields: RestoreFields,
) -> Result<Keyring> {
    let Some(reference) = reference else {
        return Ok(Keyring::default());
    };
    let keys = crate::parts::backup_keys::read_keys(
        client,
        namespace,
        reference,
        reference.key.as_deref(),
    )
    .await
    .map_err(|source| Error::Read {
        kind: "Secret",
        name: reference.name.clone(),
        source,
    })?;
    keys.map_err(|message| Error::RestoreSource {
        message: format!("{}: {message}", fields.field("encryption")),
        waiting: true,
    })
}

/// The store a restore reads, with the credentials `secret` holds (a
/// missing one named as `fields` spell it).
async fn open_store(
    client: &Client,
    namespace: &str,
    destination: &Location,
    (secret, fields): (Option<&str>, RestoreFields),
) -> Result<Store> {
    let config = match secret {
        None => StoreConfig::default(),
        Some(name) => {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
            let found = secrets.get_opt(name).await.map_err(|source| Error::Read {
                kind: "Secret",
                name: name.to_owned(),
                source,
            })?;
            let Some(found) = found else {
                return Err(Error::RestoreSource {
                    message: format!(
                        "{}: Secret {name:?} does not exist; create it with the source store's credentials",
                        fields.field("credentialsSecret")
                    ),
                    waiting: true,
                });
            };
            crate::secret_store::store_config(&found)
        }
    };
    Store::open(destination, &config).map_err(|e| store_failure(&destination.to_string(), &e))
}

fn parse_destination(uri: &str) -> Result<Location> {
    Location::parse(uri).map_err(|e| Error::RestoreSource {
        message: format!("spec.bootstrap.restore.uri: {e}"),
        waiting: false,
    })
}

/// A store or data failure while restoring: retried when it may pass,
/// else shown as it is (a corrupted segment names itself).
fn store_failure(uri: &str, err: &dkv_backup::Error) -> Error {
    Error::RestoreSource {
        message: format!("reading the continuous backup in {uri}: {err}"),
        waiting: err.category() == dkv_backup::Category::Transient,
    }
}

/// The credentials Secret of the backup destination of the cluster a backup
/// was taken of, when that cluster still exists and names one.
async fn source_cluster_credentials(
    client: &Client,
    namespace: &str,
    backup: &DistributedKVBackup,
) -> Result<Option<String>> {
    let cluster = backup.spec.cluster.trim();
    if backup.spec.destination.is_some() || cluster.is_empty() {
        return Ok(None);
    }
    let api: Api<DistributedKV> = Api::namespaced(client.clone(), namespace);
    let source = api.get_opt(cluster).await.map_err(|source| Error::Read {
        kind: "DistributedKV",
        name: cluster.to_owned(),
        source,
    })?;
    Ok(source
        .and_then(|c| c.spec.backup)
        .and_then(|b| b.destination.credentials_secret))
}

/// The pure half of [`resolve`] for a named backup.
pub fn resolve_backup(
    name: &str,
    backup: Option<&DistributedKVBackup>,
    restore: &ValidatedRestore,
) -> Result<ResolvedRestore> {
    let unavailable = |message: String, waiting: bool| Error::RestoreSource { message, waiting };
    let Some(backup) = backup else {
        return Err(unavailable(
            format!(
                "spec.bootstrap.restore.backupName: DistributedKVBackup {name:?} does not exist in this namespace; create it or delete this cluster and name an existing one (kubectl get dkvbackup)"
            ),
            false,
        ));
    };
    let status = backup.status.as_ref();
    match status.and_then(|s| s.phase) {
        Some(BackupPhase::Completed) => {}
        Some(BackupPhase::Failed) => {
            return Err(unavailable(
                format!(
                    "spec.bootstrap.restore.backupName: backup {name:?} failed and has no artifact; delete this cluster and restore from a completed backup"
                ),
                false,
            ));
        }
        phase => {
            return Err(unavailable(
                format!(
                    "spec.bootstrap.restore.backupName: backup {name:?} is {}; the restore starts once it is Completed",
                    phase.map_or("not started yet".to_owned(), |p| p.to_string())
                ),
                true,
            ));
        }
    }
    let Some(artifact) = status.and_then(|s| s.artifact.as_ref()) else {
        return Err(unavailable(
            format!(
                "spec.bootstrap.restore.backupName: backup {name:?} is Completed but records no artifact; restore from its uri instead"
            ),
            false,
        ));
    };
    let credentials_secret = restore.credentials_secret.clone().or_else(|| {
        backup
            .spec
            .destination
            .as_ref()
            .and_then(|d| d.credentials_secret.clone())
    });
    Ok(ResolvedRestore {
        backup: Some(name.to_owned()),
        uri: artifact.uri.clone(),
        sha256: (!artifact.sha256.is_empty()).then(|| artifact.sha256.clone()),
        credentials_secret,
        epoch: None,
        replay: None,
        decryption_keys: None,
        revision_bump: None,
    })
}

/// When a backup completed, as its record says.
fn completed_at(backup: &DistributedKVBackup) -> Option<jiff::Timestamp> {
    backup
        .status
        .as_ref()?
        .completion_time
        .as_ref()
        .map(|t| t.0)
}

/// The newest completed backup of an existing cluster (its
/// `status.lastBackup`), for recreating it under `epoch`. The backup's
/// record supplies the digest and credentials when it still exists; else
/// what the status recorded, with the cluster's backup credentials.
pub async fn resolve_latest(
    client: &Client,
    cluster: &ValidatedCluster,
    last: Option<&BackupArtifactRef>,
    epoch: String,
) -> Result<ResolvedRestore> {
    let Some(last) = last else {
        return Err(Error::RestoreSource {
            message: "spec.recovery.policy RestoreFromBackup: the cluster has no completed backup to restore from; restore one by hand or choose another policy".to_owned(),
            waiting: false,
        });
    };
    let credentials_secret = cluster
        .backup
        .as_ref()
        .and_then(|b| b.credentials_secret.clone());
    let api: Api<DistributedKVBackup> = Api::namespaced(client.clone(), &cluster.namespace);
    let record = api
        .get_opt(&last.name)
        .await
        .map_err(|source| Error::Read {
            kind: "DistributedKVBackup",
            name: last.name.clone(),
            source,
        })?;
    let wanted = ValidatedRestore {
        fields: RestoreFields::Bootstrap,
        source: RestoreRef::Backup(last.name.clone()),
        credentials_secret: credentials_secret.clone(),
        decryption_keys: None,
    };
    let mut source =
        resolve_backup(&last.name, record.as_ref(), &wanted).unwrap_or_else(|_| ResolvedRestore {
            backup: Some(last.name.clone()),
            uri: last.uri.clone(),
            sha256: (!last.sha256.is_empty()).then(|| last.sha256.clone()),
            credentials_secret,
            epoch: None,
            replay: None,
            decryption_keys: None,
            revision_bump: None,
        });
    source.epoch = Some(epoch);
    source.revision_bump = Some(revision_bump(
        record.as_ref().and_then(completed_at),
        jiff::Timestamp::now(),
    ));
    Ok(source)
}

/// Annotation on the StatefulSet of a cluster restored from continuous
/// backup: the source revision the replay reached. Once set, the replay is
/// done and clients are let in.
pub const REPLAYED_ANNOTATION: &str = "dkv.io/restore-replayed";

/// The restore of `sts` whose replay is still to be done, if any.
pub fn pending_replay(sts: &StatefulSet) -> Option<ResolvedRestore> {
    if replayed(sts).is_some() {
        return None;
    }
    from_statefulset(sts).filter(|s| s.replay.is_some())
}

/// What [`REPLAYED_ANNOTATION`] on `sts` says.
pub fn replayed(sts: &StatefulSet) -> Option<String> {
    sts.metadata
        .annotations
        .as_ref()?
        .get(REPLAYED_ANNOTATION)
        .cloned()
}

/// Records on the StatefulSet that the replay reached `source_revision`
/// and, for a standby, its revision offset then (see
/// [`crate::cluster::backups::standby::OFFSET_ANNOTATION`]), in one write.
pub async fn mark_replayed(
    client: &Client,
    namespace: &str,
    statefulset: &str,
    (source_revision, standby_offset): (i64, Option<i64>),
) -> Result<()> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(
        REPLAYED_ANNOTATION.to_owned(),
        source_revision.to_string().into(),
    );
    if let Some(offset) = standby_offset {
        annotations.insert(
            crate::cluster::backups::standby::OFFSET_ANNOTATION.to_owned(),
            offset.to_string().into(),
        );
    }
    super::annotate(client, namespace, statefulset, annotations).await
}

/// The source recorded on a StatefulSet created for a restore.
pub fn from_statefulset(sts: &StatefulSet) -> Option<ResolvedRestore> {
    let text = sts.metadata.annotations.as_ref()?.get(SOURCE_ANNOTATION)?;
    serde_json::from_str(text).ok()
}

/// The annotation value recording `source`.
pub fn annotation_value(source: &ResolvedRestore) -> String {
    // A struct of strings always serializes.
    serde_json::to_string(source).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use dkv_api::backup::v1alpha1::{
        BackupArtifact, BackupDestination, DistributedKVBackupSpec, DistributedKVBackupStatus,
    };

    use super::*;

    fn restore(secret: Option<&str>) -> ValidatedRestore {
        ValidatedRestore {
            fields: RestoreFields::Bootstrap,
            source: RestoreRef::Backup("orders-manual".to_owned()),
            credentials_secret: secret.map(str::to_owned),
            decryption_keys: None,
        }
    }

    fn backup(phase: Option<BackupPhase>, artifact: bool) -> DistributedKVBackup {
        let mut b = DistributedKVBackup::new(
            "orders-manual",
            DistributedKVBackupSpec {
                cluster: "orders".to_owned(),
                destination: Some(BackupDestination {
                    uri: "s3://b/prod/".to_owned(),
                    credentials_secret: Some("writer-creds".to_owned()),
                }),
                verify: None,
            },
        );
        b.status = Some(DistributedKVBackupStatus {
            phase,
            artifact: artifact.then(|| BackupArtifact {
                uri: "s3://b/prod/shop/orders/orders-20261122-060012.db".to_owned(),
                size_bytes: 10,
                sha256: "ab".repeat(32),
                revision: 7,
                compression: None,
                encryption_key_id: None,
                content: None,
                etcd_version: Some("3.5.16".to_owned()),
            }),
            ..DistributedKVBackupStatus::default()
        });
        b
    }

    #[test]
    fn a_completed_backup_gives_its_artifact_and_digest() {
        let resolved = resolve_backup(
            "orders-manual",
            Some(&backup(Some(BackupPhase::Completed), true)),
            &restore(None),
        )
        .unwrap();
        assert_eq!(
            resolved,
            ResolvedRestore {
                backup: Some("orders-manual".to_owned()),
                uri: "s3://b/prod/shop/orders/orders-20261122-060012.db".to_owned(),
                sha256: Some("ab".repeat(32)),
                // The record's own destination secret, when none is named.
                credentials_secret: Some("writer-creds".to_owned()),
                epoch: None,
                replay: None,
                decryption_keys: None,
                revision_bump: None,
            }
        );
        let explicit = resolve_backup(
            "orders-manual",
            Some(&backup(Some(BackupPhase::Completed), true)),
            &restore(Some("reader-creds")),
        )
        .unwrap();
        assert_eq!(explicit.credentials_secret.as_deref(), Some("reader-creds"));
    }

    #[test]
    fn missing_failed_or_unfinished_backups_are_refused_with_the_field() {
        let cases = [
            (None, false),
            (Some(backup(Some(BackupPhase::Failed), false)), false),
            (Some(backup(Some(BackupPhase::Completed), false)), false),
            (Some(backup(Some(BackupPhase::Running), false)), true),
            (Some(backup(None, false)), true),
        ];
        for (b, expect_waiting) in cases {
            match resolve_backup("orders-manual", b.as_ref(), &restore(None)) {
                Err(Error::RestoreSource { message, waiting }) => {
                    assert!(
                        message.starts_with("spec.bootstrap.restore.backupName"),
                        "{message}"
                    );
                    assert_eq!(waiting, expect_waiting, "{message}");
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_restore_starts_above_every_revision_the_source_can_have_served() {
        let now: jiff::Timestamp = "2026-11-27T12:00:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let ago = |secs| Some(now - jiff::SignedDuration::from_secs(secs));
        assert_eq!(revision_bump(None, now), MIN_REVISION_BUMP);
        assert_eq!(revision_bump(ago(60), now), MIN_REVISION_BUMP);
        // A week-old snapshot: a week at the bound's rate.
        assert_eq!(revision_bump(ago(7 * 86_400), now), 7 * 86_400 * 100_000);
        // A clock that went back does not lower it.
        assert_eq!(revision_bump(ago(-3_600), now), MIN_REVISION_BUMP);
    }

    #[test]
    fn the_source_survives_the_annotation_round_trip() {
        let source = ResolvedRestore {
            backup: None,
            uri: "s3://b/x.db".to_owned(),
            sha256: None,
            credentials_secret: Some("c".to_owned()),
            epoch: Some("restore-1".to_owned()),
            replay: Some(Replay {
                destination: "s3://b/".to_owned(),
                namespace: "shop".to_owned(),
                cluster: "orders".to_owned(),
                chain: "20261125T200000Z-r00000000000000000042".to_owned(),
                until_revision: None,
                until_time: Some(jiff::Timestamp::UNIX_EPOCH),
            }),
            decryption_keys: Some(KeySecretReference {
                name: "backup-key".to_owned(),
                key: None,
            }),
            revision_bump: Some(MIN_REVISION_BUMP),
        };
        let mut sts = StatefulSet::default();
        sts.metadata.annotations = Some(
            [(SOURCE_ANNOTATION.to_owned(), annotation_value(&source))]
                .into_iter()
                .collect(),
        );
        assert_eq!(from_statefulset(&sts), Some(source));
        assert_eq!(from_statefulset(&StatefulSet::default()), None);
    }
}
