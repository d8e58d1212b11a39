//! `backup` (a new DistributedKVBackup, optionally waited for) and
//! `backups` (a cluster's backups and its continuous backup window).

use std::time::Duration;

use dkv_api::backup::v1alpha1::{BackupDestination, BackupPhase};
use dkv_api::{DistributedKV, DistributedKVBackup, DistributedKVBackupSpec};
use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{ObjectMeta, PostParams};
use serde::Serialize;

use crate::client::Target;
use crate::error::{Error, Result};
use crate::output::{self, Format};
use crate::time;

/// What the new backup asks for beyond the cluster's own settings.
pub struct Request {
    pub verify: bool,
    pub destination: Option<String>,
    pub credentials_secret: Option<String>,
}

/// Creates a backup of `name`; with `wait`, waits for it to finish.
pub async fn take(
    target: &Target,
    name: &str,
    request: Request,
    wait: Option<SignedDuration>,
    format: Format,
) -> Result<()> {
    let cluster = target.cluster(name).await?;
    let has_destination = cluster.spec.backup.is_some();
    if !has_destination && request.destination.is_none() {
        return Err(Error::Refused(format!(
            "DistributedKV {}/{name} has no spec.backup.destination: set one, or pass --destination URI (and --credentials-secret)",
            target.namespace
        )));
    }
    let backup = DistributedKVBackup {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: Some(target.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: DistributedKVBackupSpec {
            cluster: name.to_owned(),
            destination: request.destination.map(|uri| BackupDestination {
                uri,
                credentials_secret: request.credentials_secret,
            }),
            verify: request.verify.then_some(true),
        },
        status: None,
    };
    let api = target.api::<DistributedKVBackup>();
    let created = api
        .create(&PostParams::default(), &backup)
        .await
        .map_err(|source| Error::Api {
            what: format!("creating a backup of {}/{name}", target.namespace),
            source,
        })?;
    let backup_name = created.name_any();
    let Some(timeout) = wait else {
        if format == Format::Text {
            println!(
                "distributedkv.dkv.io/{name}: backup {backup_name} created (follow it: kubectl dkv backups {name})"
            );
            return Ok(());
        }
        return output::print(format, &created, |_| String::new());
    };
    if format == Format::Text {
        eprintln!("backup {backup_name} created; waiting for it to finish ...");
    }
    let done = wait_finished(target, &backup_name, timeout).await?;
    let status = done.status.clone().unwrap_or_default();
    match status.phase {
        Some(BackupPhase::Completed) => {
            output::print(format, &done, |b| {
                let artifact = b.status.as_ref().and_then(|s| s.artifact.as_ref());
                match artifact {
                    Some(a) => format!(
                        "backup {backup_name} completed: {} at revision {}, {}\n",
                        dkv_readouts::size::binary(a.size_bytes),
                        a.revision,
                        a.uri
                    ),
                    None => format!("backup {backup_name} completed\n"),
                }
            })?;
            Ok(())
        }
        _ => Err(Error::Failed(format!(
            "backup {backup_name} failed: {}",
            status.message.as_deref().unwrap_or("no reason given")
        ))),
    }
}

/// Polls the backup until it has completed or failed, or `timeout` passes.
async fn wait_finished(
    target: &Target,
    name: &str,
    timeout: SignedDuration,
) -> Result<DistributedKVBackup> {
    let api = target.api::<DistributedKVBackup>();
    let deadline = Timestamp::now() + timeout;
    loop {
        let backup = api.get(name).await.map_err(Error::api(
            format!("reading backup {}/{name}", target.namespace),
            "DistributedKVBackup",
            &target.namespace,
            name,
        ))?;
        let phase = backup.status.as_ref().and_then(|s| s.phase);
        if matches!(phase, Some(BackupPhase::Completed | BackupPhase::Failed)) {
            return Ok(backup);
        }
        if Timestamp::now() > deadline {
            return Err(Error::Failed(format!(
                "backup {name} has not finished after {} (phase {}); it goes on: kubectl dkv backups {}",
                time::short(timeout),
                phase.map_or_else(|| "Pending".to_owned(), |p| p.to_string()),
                backup.spec.cluster
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What `backups` prints with `-o json|yaml`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Listing {
    cluster: String,
    namespace: String,
    backups: Vec<DistributedKVBackup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    continuous_backup: Option<dkv_api::distributedkv::v1beta1::ContinuousBackupStatus>,
}

pub async fn list(target: &Target, name: &str, format: Format) -> Result<()> {
    let cluster = target.cluster(name).await?;
    let mut backups = crate::lookup::backups_of(target, name).await?;
    backups.sort_by_key(|b| b.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let listing = Listing {
        cluster: name.to_owned(),
        namespace: target.namespace.clone(),
        backups,
        continuous_backup: cluster
            .status
            .as_ref()
            .and_then(|s| s.continuous_backup.clone()),
    };
    output::print(format, &listing, |l| text(l, &cluster))
}

fn text(listing: &Listing, cluster: &DistributedKV) -> String {
    let now = Timestamp::now();
    let rows: Vec<Vec<String>> = listing
        .backups
        .iter()
        .map(|b| {
            let status = b.status.clone().unwrap_or_default();
            let artifact = status.artifact.as_ref();
            vec![
                b.name_any(),
                status
                    .phase
                    .map_or_else(|| "Pending".to_owned(), |p| p.to_string()),
                status
                    .start_time
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |t| time::ago(t, now)),
                match (&status.start_time, &status.completion_time) {
                    (Some(start), Some(end)) => time::short(end.0.duration_since(start.0)),
                    _ => "-".to_owned(),
                },
                artifact.map_or_else(
                    || "-".to_owned(),
                    |a| dkv_readouts::size::binary(a.size_bytes),
                ),
                artifact.map_or_else(|| "-".to_owned(), |a| a.revision.to_string()),
                status
                    .verification
                    .as_ref()
                    .and_then(|v| v.phase)
                    .map_or_else(|| "-".to_owned(), |p| p.to_string()),
                match (artifact, &status.message) {
                    (Some(a), _) => a.uri.clone(),
                    (None, Some(message)) => message.clone(),
                    (None, None) => String::new(),
                },
            ]
        })
        .collect();
    let mut out = if rows.is_empty() {
        format!("No backups of {}/{}.\n", listing.namespace, listing.cluster)
    } else {
        output::table(
            "",
            &[
                "NAME",
                "PHASE",
                "STARTED",
                "TOOK",
                "SIZE",
                "REVISION",
                "VERIFIED",
                "URI / MESSAGE",
            ],
            &rows,
        )
    };
    if let Some(line) = output::continuous_line(listing.continuous_backup.as_ref(), now) {
        out.push_str(&format!("\nContinuous backup: {line}\n"));
    } else if cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.continuous.as_ref())
        .is_some_and(|c| c.enabled)
    {
        out.push_str("\nContinuous backup: enabled, nothing recorded yet\n");
    }
    out
}
