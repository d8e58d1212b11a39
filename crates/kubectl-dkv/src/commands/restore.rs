//! `restore`: a new cluster bootstrapped from a backup of an existing one.
//!
//! The new cluster is a plain DistributedKV with `spec.bootstrap.restore`,
//! so admission checks it and the operator restores it as it would one
//! written by hand. It takes the source's spec (size, version, storage,
//! TLS, auth, tuning, pod settings) but not its backup settings: whether
//! and where the copy is backed up is the user's next decision, and a copy
//! that silently started writing backups is a surprise.

use dkv_api::backup::v1alpha1::BackupPhase;
use dkv_api::distributedkv::v1beta1::{BootstrapSpec, PointInTime, RestoreSource};
use dkv_api::{DistributedKV, DistributedKVBackup};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{ObjectMeta, PostParams};

use crate::client::Target;
use crate::error::{Error, Result};
use crate::output::{self, Format};

/// Where the restored data comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A DistributedKVBackup of the source cluster.
    Backup(String),
    /// A point of the source's continuous backup.
    Revision(i64),
    Time(jiff::Timestamp),
    /// The newest point there is.
    Newest,
}

impl Source {
    pub fn from_flags(
        from: Option<String>,
        revision: Option<i64>,
        time: Option<jiff::Timestamp>,
    ) -> Self {
        match (from, revision, time) {
            (Some(backup), _, _) => Source::Backup(backup),
            (None, Some(revision), _) => Source::Revision(revision),
            (None, None, Some(time)) => Source::Time(time),
            (None, None, None) => Source::Newest,
        }
    }
}

pub async fn run(
    target: &Target,
    name: &str,
    source: Source,
    new_name: &str,
    format: Format,
) -> Result<()> {
    let ns = &target.namespace;
    let cluster = target.cluster(name).await?;
    let clusters = target.api::<DistributedKV>();
    if clusters
        .get_opt(new_name)
        .await
        .map_err(|source| Error::Api {
            what: format!("checking whether {ns}/{new_name} exists"),
            source,
        })?
        .is_some()
    {
        return Err(Error::Refused(format!(
            "DistributedKV {ns}/{new_name} already exists: a restore creates a new cluster; choose another name with --as"
        )));
    }
    let backup = match &source {
        Source::Backup(backup) => Some(completed_backup(target, name, backup).await?),
        _ => None,
    };
    let restore = restore_source(&cluster, &source, backup.as_ref())?;
    let mut spec = cluster.spec.clone();
    spec.backup = None;
    // A cluster that adopted a running one: its copy starts from the
    // backup, not by joining.
    spec.bootstrap = Some(BootstrapSpec {
        restore: Some(restore),
        join: None,
    });
    let restored = DistributedKV {
        metadata: ObjectMeta {
            name: Some(new_name.to_owned()),
            namespace: Some(ns.clone()),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    };
    let created = clusters
        .create(&PostParams::default(), &restored)
        .await
        .map_err(|source| Error::Api {
            what: format!("creating DistributedKV {ns}/{new_name}"),
            source,
        })?;
    output::print(format, &created, |_| {
        format!(
            "distributedkv.dkv.io/{new_name} created from {} (follow it: kubectl dkv status {new_name})\n",
            describe(name, &source)
        )
    })
}

fn describe(name: &str, source: &Source) -> String {
    match source {
        Source::Backup(backup) => format!("backup {backup} of {name}"),
        Source::Revision(revision) => format!("{name}'s continuous backup at revision {revision}"),
        Source::Time(time) => format!("{name}'s continuous backup as of {time}"),
        Source::Newest => format!("the newest point of {name}'s backups"),
    }
}

/// The backup `backup`, if it is a completed backup of `cluster`.
async fn completed_backup(
    target: &Target,
    cluster: &str,
    backup: &str,
) -> Result<DistributedKVBackup> {
    let ns = &target.namespace;
    let found = target
        .api::<DistributedKVBackup>()
        .get(backup)
        .await
        .map_err(Error::api(
            format!("reading backup {ns}/{backup}"),
            "DistributedKVBackup",
            ns,
            backup,
        ))?;
    if found.spec.cluster != cluster {
        return Err(Error::Refused(format!(
            "backup {ns}/{backup} is a backup of {}, not of {cluster}",
            found.spec.cluster
        )));
    }
    let phase = found.status.as_ref().and_then(|s| s.phase);
    if phase != Some(BackupPhase::Completed) {
        return Err(Error::Refused(format!(
            "backup {ns}/{backup} has not completed (phase {}): only a completed backup can be restored; see kubectl dkv backups {cluster}",
            phase.map_or_else(|| "Pending".to_owned(), |p| p.to_string())
        )));
    }
    Ok(found)
}

/// `spec.bootstrap.restore` for `source`.
fn restore_source(
    cluster: &DistributedKV,
    source: &Source,
    backup: Option<&DistributedKVBackup>,
) -> Result<RestoreSource> {
    let name = cluster.name_any();
    let settings = cluster.spec.backup.as_ref();
    let encryption = settings.and_then(|b| b.encryption.clone());
    let continuous = settings.is_some_and(|b| b.continuous.as_ref().is_some_and(|c| c.enabled));
    let point = match source {
        Source::Backup(_) => {
            return Ok(RestoreSource {
                backup_name: backup.map(ResourceExt::name_any),
                uri: None,
                credentials_secret: None,
                source_cluster: None,
                point_in_time: None,
                encryption,
            });
        }
        Source::Revision(revision) => Some(PointInTime {
            revision: Some(*revision),
            time: None,
        }),
        Source::Time(time) => Some(PointInTime {
            revision: None,
            time: Some(Time(*time)),
        }),
        Source::Newest => None,
    };
    if !continuous {
        if point.is_some() {
            return Err(Error::Refused(format!(
                "DistributedKV {name} has no continuous backup (spec.backup.continuous), so it cannot be restored to a revision or a time; restore one of its backups with --from (kubectl dkv backups {name})"
            )));
        }
        // The newest completed backup, as status records it.
        let last = cluster.status.as_ref().and_then(|s| s.last_backup.as_ref());
        return match last {
            Some(last) => Ok(RestoreSource {
                backup_name: Some(last.name.clone()),
                uri: None,
                credentials_secret: None,
                source_cluster: None,
                point_in_time: None,
                encryption,
            }),
            None => Err(Error::Refused(format!(
                "DistributedKV {name} has no completed backup to restore; take one with kubectl dkv backup {name} --wait"
            ))),
        };
    }
    let destination = settings.map(|b| &b.destination);
    Ok(RestoreSource {
        backup_name: None,
        uri: destination.map(|d| d.uri.clone()),
        credentials_secret: destination.and_then(|d| d.credentials_secret.clone()),
        source_cluster: Some(name),
        point_in_time: point,
        encryption,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(backup: serde_json::Value) -> DistributedKV {
        let value = serde_json::json!({
            "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0", "backup": backup},
            "status": {"lastBackup": {"name": "orders-abcde", "uri": "s3://b/orders.db.zst"}}
        });
        serde_json::from_value(value).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    #[test]
    fn a_point_in_time_restores_the_sources_continuous_backup() {
        let source = cluster(serde_json::json!({
            "destination": {"uri": "s3://b/dkv/", "credentialsSecret": "s3"},
            "schedule": "0 * * * *", "continuous": {"enabled": true}
        }));
        let restore =
            restore_source(&source, &Source::Revision(42), None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(restore.uri.as_deref(), Some("s3://b/dkv/"));
        assert_eq!(restore.credentials_secret.as_deref(), Some("s3"));
        assert_eq!(restore.source_cluster.as_deref(), Some("orders"));
        assert_eq!(restore.point_in_time.and_then(|p| p.revision), Some(42));
        let newest =
            restore_source(&source, &Source::Newest, None).unwrap_or_else(|e| panic!("{e}"));
        assert!(newest.point_in_time.is_none() && newest.uri.is_some());
    }

    #[test]
    fn without_continuous_backup_the_newest_point_is_the_last_backup() {
        let source = cluster(serde_json::json!({
            "destination": {"uri": "s3://b/dkv/"}, "schedule": "0 * * * *"
        }));
        let restore =
            restore_source(&source, &Source::Newest, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(restore.backup_name.as_deref(), Some("orders-abcde"));
        let refused = restore_source(&source, &Source::Revision(42), None);
        assert!(
            matches!(&refused, Err(Error::Refused(m)) if m.contains("no continuous backup")),
            "{refused:?}"
        );
    }
}
