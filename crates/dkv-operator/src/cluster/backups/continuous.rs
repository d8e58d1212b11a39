//! The cluster's side of continuous backup (`spec.backup.continuous`): runs
//! its agent once the cluster has formed, stops it when the spec turns it
//! off, and turns the agent's report into `status.continuousBackup`; and
//! the last step of a restore from continuous backup, the replay.

use crate::events::{Event, EventType};
use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::{ContinuousBackupStatus, RecoveryPoint, RevisionGap};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use tracing::info;

use crate::cluster::backups::BackupsReach;
use crate::cluster::backups::agents::{AgentSpec, Point, Report};
use crate::cluster::backups::restore::{Replay, ResolvedRestore};
use crate::cluster::error::{Error, Result};
use crate::cluster::security::credentials::Credentials;
use crate::cluster::validate::{RestoreFields, ValidatedCluster};
use crate::parts::naming;

/// The newest point in status moves at most this often (each move is a
/// status write); the operator's metrics carry it without delay.
pub const STATUS_REFRESH: SignedDuration = SignedDuration::from_secs(30);

/// An agent that has stored nothing for this long (and at least three
/// intervals) while failing makes the cluster Degraded: a retry or two
/// after a member restart is expected, a store that stays unreachable is
/// not.
const FAILING_GRACE: SignedDuration = SignedDuration::from_secs(60);

/// Runs or stops the agent of `cluster` and returns its report. `formed`:
/// the cluster has formed and its members' `endpoints` are known; before
/// that the agent waits (a cluster being restored must not be recorded
/// before its data is complete).
pub async fn ensure(
    cluster: &ValidatedCluster,
    endpoints: &[String],
    credentials: &Credentials,
    formed: bool,
    reach: &BackupsReach<'_>,
) -> Result<Option<Report>> {
    let Some((backup, cut)) = cluster
        .backup
        .as_ref()
        .and_then(|b| b.continuous.map(|cut| (b, cut)))
    else {
        reach.agents.stop(&cluster.namespace, &cluster.name);
        return Ok(None);
    };
    if !formed || endpoints.is_empty() {
        return Ok(reach.agents.report(&cluster.namespace, &cluster.name));
    }
    let Some(store) = super::store_config(
        reach,
        &cluster.namespace,
        backup.credentials_secret.as_deref(),
    )
    .await?
    else {
        // Reported like any agent failure: the agent cannot start without
        // the credentials it was told to use.
        reach.agents.stop(&cluster.namespace, &cluster.name);
        return Ok(Some(Report {
            failing: Some((
                format!(
                    "the backup credentials Secret {:?} (spec.backup.destination.credentialsSecret) does not exist; create it",
                    backup.credentials_secret.as_deref().unwrap_or_default()
                ),
                Timestamp::UNIX_EPOCH,
            )),
            ..Report::default()
        }));
    };
    let key = match &backup.encryption {
        None => None,
        Some(reference) => {
            match crate::parts::backup_keys::read_backup_key(
                reach.client,
                &cluster.namespace,
                reference,
            )
            .await
            .map_err(|source| Error::Read {
                kind: "Secret",
                name: reference.name.clone(),
                source,
            })? {
                Ok(key) => Some(key),
                Err(message) => {
                    // Recording unencrypted what the user asked to encrypt
                    // is not an option: the agent waits for the key.
                    reach.agents.stop(&cluster.namespace, &cluster.name);
                    return Ok(Some(Report {
                        failing: Some((
                            format!("spec.backup.encryption: {message}"),
                            Timestamp::UNIX_EPOCH,
                        )),
                        ..Report::default()
                    }));
                }
            }
        }
    };
    if credentials.user().is_some() {
        // What a point-in-time restore needs to open the data, kept before
        // anything is recorded with authentication on.
        crate::parts::credentials::keep_for_continuous(
            reach.client,
            &cluster.namespace,
            &cluster.name,
        )
        .await?;
    }
    let mut endpoints = endpoints.to_vec();
    endpoints.sort();
    Ok(Some(reach.agents.ensure(AgentSpec {
        namespace: cluster.namespace.clone(),
        cluster: cluster.name.clone(),
        destination: backup.destination.as_str().to_owned(),
        store,
        endpoints,
        tls: credentials.client_identity().cloned(),
        user: credentials.user().cloned(),
        cut,
        encoding: dkv_backup::Encoding {
            compress: backup.compress,
            key,
        },
    })))
}

/// Which part of `cluster`'s spec its restore came from: a standby's seed
/// or `spec.bootstrap.restore`.
fn restore_fields(cluster: &ValidatedCluster) -> RestoreFields {
    match cluster.standby {
        Some(_) => RestoreFields::Standby,
        None => RestoreFields::Bootstrap,
    }
}

/// Replays what the source of a restore from continuous backup recorded
/// after the base snapshot into the formed cluster, records that it did
/// (the client Service follows in the next pass) and says so in an Event.
pub async fn replay_restore_and_record(
    cluster: &ValidatedCluster,
    pending: &ResolvedRestore,
    replay: &Replay,
    endpoints: &[String],
    credentials: &Credentials,
    reach: &BackupsReach<'_>,
) -> Result<()> {
    let mut etcd = dkv_etcd::GrpcAdmin::new(endpoints.to_vec(), REPLAY_CALL_TIMEOUT);
    if let Some(tls) = credentials.client_identity() {
        etcd = etcd.with_tls(tls.clone());
    }
    if let Some(user) = credentials.user() {
        etcd = etcd.with_user(user.clone());
    }
    info!(source = %format!("{}/{}", replay.namespace, replay.cluster), chain = %replay.chain, "replaying continuous backup");
    let replayed = crate::cluster::backups::restore::apply_recorded_changes(
        reach.client,
        &cluster.namespace,
        replay,
        (
            pending.credentials_secret.as_deref(),
            pending.decryption_keys.as_ref(),
            restore_fields(cluster),
        ),
        &etcd,
        pending.applied_revision_bump(cluster).unwrap_or(0),
    )
    .await?;
    // A standby's position from now on is its revision less this offset
    // (nothing but its follower writes to it after the replay): before it
    // is taken, the seed's keys are detached from their leases and its
    // roles made read-only (before clients are let in).
    let standby_offset = match &cluster.standby {
        Some(_) => {
            use crate::cluster::backups::standby::{leases, roles};
            let mut direct =
                roles::connect(endpoints, credentials.client_identity(), credentials.user())
                    .await?;
            roles::hold_read_only(reach.client, cluster, &mut direct).await?;
            let detached = leases::detach_all(&mut direct).await?;
            info!(
                keys = detached,
                "standby seed: keys detached from their leases"
            );
            let revision = dkv_etcd::EtcdData::current_revision(&etcd)
                .await
                .map_err(|e| Error::RestoreSource {
                    message: format!("reading the standby's revision after its replay: {e}"),
                    waiting: true,
                })?;
            Some(revision - replayed.source_revision)
        }
        None => None,
    };
    crate::cluster::backups::restore::mark_replayed(
        reach.client,
        &cluster.namespace,
        &naming::statefulset(&cluster.name),
        (replayed.source_revision, standby_offset),
    )
    .await?;
    info!(
        events = replayed.events,
        source_revision = replayed.source_revision,
        "continuous backup replayed"
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "Replayed".to_owned(),
        note: Some(format!(
            "replayed {} changes of {}/{} recorded after the base snapshot, up to its revision {}; clients are let in now",
            replayed.events, replay.namespace, replay.cluster, replayed.source_revision
        )),
        action: "Restore".to_owned(),
        secondary: None,
    };
    reach
        .recorder
        .publish_or_warn(&event, &cluster.object_reference())
        .await;
    Ok(())
}

/// Deadline of each replay call (a transaction of up to 1 MiB).
const REPLAY_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How often the cluster's continuous backup seals a segment, when its
/// spec (validated) asks for continuous backup.
pub fn interval(cluster: Option<&ValidatedCluster>) -> Option<std::time::Duration> {
    cluster
        .and_then(|c| c.backup.as_ref())
        .and_then(|b| b.continuous)
        .map(|cut| cut.interval)
}

/// What status says of continuous backup after a pass: the window (from the
/// agent's `report`, else what status already says) and, when the agent
/// has failed for longer than its grace, why.
pub fn observe(
    dkv: &DistributedKV,
    report: Option<&Report>,
    interval: Option<std::time::Duration>,
    now: Timestamp,
) -> (Option<ContinuousBackupStatus>, Option<String>) {
    let old = dkv
        .status
        .as_ref()
        .and_then(|s| s.continuous_backup.as_ref());
    match report {
        Some(report) => (
            status_of(report, old),
            interval.and_then(|interval| failing_message(report, interval, now)),
        ),
        None => (old.cloned(), None),
    }
}

/// A gap that `window` shows and the cluster's status did not yet is a
/// Warning Event: those revisions can never be restored.
pub async fn report_new_gaps(
    dkv: &DistributedKV,
    window: Option<&ContinuousBackupStatus>,
    reach: &BackupsReach<'_>,
) {
    let known: Vec<&RevisionGap> = dkv
        .status
        .iter()
        .filter_map(|s| s.continuous_backup.as_ref())
        .flat_map(|c| &c.gaps)
        .collect();
    for gap in window.iter().flat_map(|w| &w.gaps) {
        if known.contains(&gap) {
            continue;
        }
        let event = Event {
            type_: EventType::Warning,
            reason: "ContinuousBackupGap".to_owned(),
            note: Some(format!(
                "continuous backup could not continue its chain (etcd compacted revisions it still needed, or it was stopped too long): the revisions after {} and before {} were not recorded and cannot be restored; a new chain starts from a full snapshot at revision {}",
                gap.after_revision, gap.until_revision, gap.until_revision
            )),
            action: "ContinuousBackup".to_owned(),
            secondary: None,
        };
        reach
            .recorder
            .publish_or_warn(&event, &dkv.object_ref(&()))
            .await;
    }
}

/// `status.continuousBackup` from the agent's `report`, given what status
/// says now (`old`): the newest point moves only when it is
/// [`STATUS_REFRESH`] newer (or the chain, its gaps or the oldest point
/// changed), so a recording cluster's status is rewritten at most that
/// often.
pub fn status_of(
    report: &Report,
    old: Option<&ContinuousBackupStatus>,
) -> Option<ContinuousBackupStatus> {
    let point = |p: Point| RecoveryPoint {
        revision: p.revision,
        time: Time(p.time),
    };
    let fresh = ContinuousBackupStatus {
        chain: report.chain.clone(),
        oldest: report.oldest.map(point),
        newest: report.newest.map(point),
        last_segment_time: report.last_stored.map(Time),
        gaps: report
            .gaps
            .iter()
            .map(|&(after, until)| RevisionGap {
                after_revision: after,
                until_revision: until,
            })
            .collect(),
    };
    if fresh == ContinuousBackupStatus::default() {
        return old.cloned();
    }
    let Some(old) = old else {
        return Some(fresh);
    };
    let same_shape =
        old.chain == fresh.chain && old.oldest == fresh.oldest && old.gaps == fresh.gaps;
    let moved_enough = match (&old.newest, &fresh.newest) {
        (Some(was), Some(now)) => now.time.0.duration_since(was.time.0) >= STATUS_REFRESH,
        (None, Some(_)) => true,
        _ => false,
    };
    if same_shape && !moved_enough {
        Some(old.clone())
    } else {
        Some(fresh)
    }
}

/// Why the agent counts as failing for status: it has failed without
/// storing anything for longer than the grace.
pub fn failing_message(
    report: &Report,
    cut_interval: std::time::Duration,
    now: Timestamp,
) -> Option<String> {
    let (message, since) = report.failing.as_ref()?;
    let grace =
        FAILING_GRACE.max(SignedDuration::try_from(cut_interval * 3).unwrap_or(FAILING_GRACE));
    (now.duration_since(*since) >= grace).then(|| {
        format!(
            "continuous backup stores nothing: {message}; changes since the newest durable point are not recoverable until it does (retried with backoff)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn report(newest_second: i64) -> Report {
        Report {
            chain: Some("c1".into()),
            oldest: Some(Point {
                revision: 10,
                time: at(0),
            }),
            newest: Some(Point {
                revision: 10 + newest_second,
                time: at(newest_second),
            }),
            last_stored: Some(at(newest_second)),
            gaps: vec![],
            failing: None,
        }
    }

    #[test]
    fn the_newest_point_moves_in_status_at_most_every_refresh() {
        let first = status_of(&report(10), None).unwrap();
        assert_eq!(first.newest.as_ref().map(|p| p.revision), Some(20));
        // 20 s later: status keeps what it says (no write).
        assert_eq!(status_of(&report(30), Some(&first)), Some(first.clone()));
        // 30 s later: it moves.
        let moved = status_of(&report(40), Some(&first)).unwrap();
        assert_eq!(moved.newest.as_ref().map(|p| p.revision), Some(50));
        // A gap shows at once.
        let mut gapped = report(41);
        gapped.gaps.push((50, 90));
        let shown = status_of(&gapped, Some(&moved)).unwrap();
        assert_eq!(shown.gaps.len(), 1);
        // An agent that reports nothing yet leaves status as it is.
        assert_eq!(status_of(&Report::default(), Some(&moved)), Some(moved));
    }

    #[test]
    fn an_agent_counts_as_failing_after_its_grace() {
        let mut failing = report(0);
        failing.failing = Some(("store unreachable".into(), at(0)));
        let interval = std::time::Duration::from_secs(10);
        assert_eq!(failing_message(&failing, interval, at(59)), None);
        let message = failing_message(&failing, interval, at(60)).unwrap_or_default();
        assert!(message.contains("store unreachable"), "{message}");
        // A long interval stretches the grace to three intervals.
        let long = std::time::Duration::from_secs(120);
        assert_eq!(failing_message(&failing, long, at(300)), None);
        assert!(failing_message(&failing, long, at(360)).is_some());
        assert_eq!(failing_message(&report(0), interval, at(1000)), None);
    }
}
