//! `spec.standby`: a cluster that follows another through the other's
//! continuous backup, for disaster recovery.
//!
//! - *Seeding*: the standby is created as a restore of the source's newest
//!   point ([`crate::cluster::validate::ValidatedStandby::seed`]): the
//!   newest chain base, then the changes after it replayed. When the
//!   replay is recorded, so is the standby's revision offset
//!   ([`OFFSET_ANNOTATION`]): its own revision less the source revision it
//!   then holds.
//! - *Following*: a task of the operator's ([`followers`]) applies each
//!   source revision stored after that, in order, one transaction per
//!   source revision, each guarded to land only in its place and only
//!   once ([`engine`]), so the standby's revision less the
//!   offset is always exactly the source revision it holds: the position
//!   lives with the data, and a restart goes on where it stopped.
//! - *Promotion* (`enabled: false`): the follower applies everything
//!   stored, reports the source revision held (`status.standby.
//!   promotedAtRevision`) and ends; no follower runs again.
//!
//! Nothing but the follower writes to a standby: it applies as root, and
//! while it follows every other role can only read ([`roles`]).

pub mod demotion;
pub mod engine;
pub mod followers;
pub mod leases;
mod listing;
pub mod promotion;
pub mod roles;

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::{StandbyPhase, StandbyStatus};
use dkv_backup::{Keyring, StoreConfig};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use self::demotion::Demotion;
use self::followers::{FollowReport, FollowerSpec};
use crate::cluster::backups::BackupsReach;
use crate::cluster::error::{Error, Result};
use crate::cluster::security::credentials::Credentials;
use crate::cluster::validate::{ValidatedCluster, ValidatedStandby};

/// Annotation on a standby's StatefulSet: its revision less the source
/// revision it holds, recorded once the seeding replay is done.
pub const OFFSET_ANNOTATION: &str = "dkv.io/standby-revision-offset";

/// The offset recorded on `sts`.
pub fn recorded_offset(sts: &StatefulSet) -> Option<i64> {
    sts.metadata
        .annotations
        .as_ref()?
        .get(OFFSET_ANNOTATION)?
        .parse()
        .ok()
}

/// A follower that has failed for this long is reported `Failing` (one
/// retry or two after a member restarts are expected).
const FAILING_GRACE: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// Whether `recorded` (status) says the cluster was promoted (or its
/// demotion called off): an ordinary cluster, unless demoted again.
pub fn is_promoted(recorded: Option<&StandbyStatus>) -> bool {
    recorded.is_some_and(|s| match s.phase {
        Some(phase) => phase == StandbyPhase::Promoted,
        None => s.promoted_at_revision.is_some(),
    })
}

/// Runs, restarts or stops the follower of `cluster` and returns its
/// report. `formed`: the standby has all its seed; `offset`: the one
/// recorded when the seeding replay was done; `promoted`: status records
/// the promotion (nothing follows after it).
pub async fn ensure(
    cluster: &ValidatedCluster,
    (endpoints, credentials): (&[String], &Credentials),
    (formed, offset, promoted): (bool, Option<i64>, bool),
    reach: &BackupsReach<'_>,
) -> Result<Option<FollowReport>> {
    let (namespace, name) = (&cluster.namespace, &cluster.name);
    let Some(standby) = cluster.standby.as_ref().filter(|_| !promoted) else {
        reach.followers.stop(namespace, name);
        return Ok(None);
    };
    let (true, Some(offset), Some(user)) = (
        formed && !endpoints.is_empty(),
        offset,
        credentials.user().cloned(),
    ) else {
        return Ok(reach.followers.report(namespace, name));
    };
    // A setting that is wrong is reported at once (failing "since ever"),
    // not after the grace a transient failure gets.
    let failing = |message: String| {
        reach.followers.stop(namespace, name);
        Ok(Some(FollowReport {
            failing: Some((message, Timestamp::UNIX_EPOCH)),
            ..reach.followers.report(namespace, name).unwrap_or_default()
        }))
    };
    let store = match store_config(reach, namespace, standby).await? {
        Ok(store) => store,
        Err(message) => return failing(message),
    };
    let keys = match &standby.decryption_keys {
        None => Keyring::default(),
        Some(reference) => {
            match crate::parts::backup_keys::read_keys(reach.client, namespace, reference, None)
                .await
                .map_err(|source| Error::Read {
                    kind: "Secret",
                    name: reference.name.clone(),
                    source,
                })? {
                Ok(keys) => keys,
                Err(message) => {
                    return failing(format!("spec.standby.source.encryption: {message}"));
                }
            }
        }
    };
    let mut endpoints = endpoints.to_vec();
    endpoints.sort();
    Ok(Some(reach.followers.ensure(FollowerSpec {
        namespace: namespace.clone(),
        cluster: name.clone(),
        source: standby.source.destination.as_str().to_owned(),
        source_namespace: standby.source.namespace.clone(),
        source_cluster: standby.source.cluster.clone(),
        store,
        keys,
        endpoints,
        tls: credentials.client_identity().cloned(),
        user: Some(user),
        offset,
        promote: !standby.following,
    })))
}

/// The object store settings the source's credentials Secret holds, or
/// what is wrong with it.
async fn store_config(
    reach: &BackupsReach<'_>,
    namespace: &str,
    standby: &ValidatedStandby,
) -> Result<std::result::Result<StoreConfig, String>> {
    let secret = standby.credentials_secret.as_deref();
    Ok(super::store_config(reach, namespace, secret)
        .await?
        .ok_or_else(|| {
            format!(
                "spec.standby.source.credentialsSecret: Secret {:?} does not exist; create it with credentials that can read the source's store",
                secret.unwrap_or_default()
            )
        }))
}

/// What `status.standby` says after a pass: from the follower's report
/// (`report`, this pass's or its last), else what status said.
pub fn status(
    dkv: &DistributedKV,
    cluster: Option<&ValidatedCluster>,
    report: Option<&FollowReport>,
    now: Timestamp,
) -> Option<StandbyStatus> {
    let spec = dkv.spec.standby.as_ref()?;
    let recorded = dkv
        .status
        .as_ref()
        .and_then(|s| s.standby.clone())
        .unwrap_or_default();
    let was_promoted = is_promoted(Some(&recorded));
    if was_promoted && !spec.enabled {
        return Some(StandbyStatus {
            phase: Some(StandbyPhase::Promoted),
            lag_seconds: None,
            lag_revisions: None,
            promotion_recorded_time: report
                .and_then(|r| r.promotion_recorded)
                .map(Time)
                .or(recorded.promotion_recorded_time.clone()),
            ..recorded
        });
    }
    // Demoted again after a promotion: that promotion is history.
    let old = if was_promoted {
        StandbyStatus {
            source: recorded.source,
            ..StandbyStatus::default()
        }
    } else {
        recorded
    };
    let source = cluster
        .and_then(|c| c.standby.as_ref())
        .map(ValidatedStandby::describe)
        .or(old.source.clone());
    let Some(report) = report else {
        let waiting = if was_promoted {
            StandbyPhase::Demoting
        } else {
            StandbyPhase::Seeding
        };
        return Some(StandbyStatus {
            phase: Some(old.phase.unwrap_or(waiting)),
            source,
            ..old
        });
    };
    if let Some(demotion) = &report.demotion {
        return Some(demotion_status(demotion, source));
    }
    let (phase, message) = if let Some((revision, _)) = report.promoted {
        (
            StandbyPhase::Promoted,
            Some(
                report
                    .stopped
                    .clone()
                    .unwrap_or_else(|| format!("promoted holding source revision {revision}")),
            ),
        )
    } else if let Some(why) = &report.stopped {
        (StandbyPhase::Stopped, Some(why.clone()))
    } else if let Some((why, _)) = report
        .failing
        .as_ref()
        .filter(|(_, since)| now.duration_since(*since) >= FAILING_GRACE)
    {
        (StandbyPhase::Failing, Some(why.clone()))
    } else if !spec.enabled {
        (StandbyPhase::Promoting, None)
    } else if report.applied.is_none() {
        (StandbyPhase::Seeding, None)
    } else {
        (StandbyPhase::Following, None)
    };
    let applied = report.applied.or(old.applied_revision);
    Some(StandbyStatus {
        phase: Some(phase),
        source,
        applied_revision: applied,
        applied_time: report.applied_time.map(Time).or(old.applied_time),
        lag_revisions: report
            .newest_stored
            .zip(applied)
            .map(|(newest, applied)| (newest - applied).max(0)),
        lag_seconds: applied.map(|_| {
            report
                .oldest_unapplied
                .map_or(0, |t| now.duration_since(t).as_secs().max(0))
        }),
        last_checked: report.last_checked.map(Time).or(old.last_checked),
        promoted_at_revision: report.promoted.map(|(revision, _)| revision),
        promoted_time: report.promoted.map(|(_, at)| Time(at)),
        revision_offset: report.offset.or(old.revision_offset),
        promotion_recorded_time: report.promotion_recorded.map(Time),
        demoted_at_revision: old.demoted_at_revision,
        demoted_time: old.demoted_time,
        message,
    })
}

/// What status says of a demotion that does not follow yet, or has just
/// started to.
fn demotion_status(demotion: &Demotion, source: Option<String>) -> StandbyStatus {
    let status = StandbyStatus {
        source,
        demoted_time: Some(Time(demotion.since)),
        demoted_at_revision: demotion.durable_at,
        message: demotion.message.clone(),
        ..StandbyStatus::default()
    };
    if demotion.called_off {
        return StandbyStatus {
            phase: Some(StandbyPhase::Promoted),
            demoted_at_revision: None,
            ..status
        };
    }
    if let Some((from, offset)) = demotion.following {
        return StandbyStatus {
            phase: Some(StandbyPhase::Following),
            applied_revision: Some(from),
            revision_offset: Some(offset),
            message: None,
            ..status
        };
    }
    let phase = if demotion.stopped {
        StandbyPhase::Stopped
    } else if demotion.durable_at.is_some() {
        StandbyPhase::Demoted
    } else {
        StandbyPhase::Demoting
    };
    StandbyStatus {
        phase: Some(phase),
        ..status
    }
}

/// Why the standby does not follow, when it does not (for `Degraded`).
pub fn not_following(status: Option<&StandbyStatus>) -> Option<String> {
    let status = status?;
    match status.phase? {
        StandbyPhase::Stopped | StandbyPhase::Failing => Some(format!(
            "standby of {}: {}",
            status.source.as_deref().unwrap_or("its source"),
            status.message.as_deref().unwrap_or("not following")
        )),
        _ => None,
    }
}

/// Whether a standby still refuses writes: it follows or is demoted, or
/// its promotion is not recorded yet.
pub fn read_only(status: Option<&StandbyStatus>, cluster: &ValidatedCluster) -> bool {
    cluster
        .standby
        .as_ref()
        .is_some_and(|s| s.following || !is_promoted(status))
}

/// A Warning Event when a standby stops following or starts failing, a
/// Normal one when it is promoted.
pub async fn announce(dkv: &DistributedKV, new: Option<&StandbyStatus>, reach: &BackupsReach<'_>) {
    use crate::events::{Event, EventType};
    use kube::Resource;
    let old = dkv.status.as_ref().and_then(|s| s.standby.as_ref());
    let (Some(new), old_phase) = (new, old.and_then(|s| s.phase)) else {
        return;
    };
    if new.phase == old_phase {
        return;
    }
    let (type_, reason, note) = match new.phase {
        Some(StandbyPhase::Promoted) => (
            EventType::Normal,
            "Promoted",
            format!(
                "promoted: holds every change of {} up to its revision {}; takes writes now",
                new.source.as_deref().unwrap_or("its source"),
                new.promoted_at_revision.unwrap_or_default()
            ),
        ),
        Some(StandbyPhase::Stopped) => (
            EventType::Warning,
            "StandbyStopped",
            new.message.clone().unwrap_or_default(),
        ),
        Some(StandbyPhase::Failing) => (
            EventType::Warning,
            "StandbyFailing",
            new.message.clone().unwrap_or_default(),
        ),
        _ => return,
    };
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Follow".to_owned(),
        secondary: None,
    };
    reach
        .recorder
        .publish_or_warn(&event, &dkv.object_ref(&()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A cluster with `spec.standby.enabled: enabled` whose status holds
    /// `standby`.
    fn cluster(enabled: bool, standby: serde_json::Value) -> DistributedKV {
        serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1beta1",
            "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "0b4c3e1a-5d7e-4f3a-9c2b-1a2b3c4d5e6f"},
            "spec": {
                "size": 1,
                "image": "registry.k8s.io/etcd:3.5.16-0",
                "auth": {"enabled": true},
                "standby": {"enabled": enabled, "source": {"uri": "s3://dr/", "cluster": "shop-dr/orders-dr"}}
            },
            "status": {"standby": standby}
        }))
        .expect("a DistributedKV")
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).expect("a time")
    }

    fn demotion(durable_at: Option<i64>) -> FollowReport {
        FollowReport {
            demotion: Some(Demotion {
                since: at(100),
                durable_at,
                message: Some("waiting".to_owned()),
                stopped: false,
                following: None,
                called_off: false,
            }),
            ..FollowReport::default()
        }
    }

    #[test]
    fn a_promoted_cluster_demoted_again_forgets_its_promotion_and_says_where_the_demotion_stands() {
        let promoted = json!({"phase": "Promoted", "promotedAtRevision": 120, "promotedTime": "2026-12-01T00:00:00Z", "appliedRevision": 120});
        // Still promoted: said as it was.
        let kept = status(&cluster(false, promoted.clone()), None, None, at(200))
            .expect("a standby status");
        assert_eq!(kept.phase, Some(StandbyPhase::Promoted));
        assert_eq!(kept.promoted_at_revision, Some(120));
        // Demoted again: the promotion is history.
        let demoting = status(
            &cluster(true, promoted.clone()),
            None,
            Some(&demotion(None)),
            at(200),
        )
        .expect("a standby status");
        assert_eq!(demoting.phase, Some(StandbyPhase::Demoting));
        assert_eq!(demoting.promoted_at_revision, None);
        assert_eq!(demoting.applied_revision, None);
        assert_eq!(demoting.demoted_time, Some(Time(at(100))));
        let demoted = status(
            &cluster(true, promoted.clone()),
            None,
            Some(&demotion(Some(480))),
            at(200),
        )
        .expect("a standby status");
        assert_eq!(demoted.phase, Some(StandbyPhase::Demoted));
        assert_eq!(demoted.demoted_at_revision, Some(480));
        // Before the pass reaches the demotion: not promoted any more.
        let unreported =
            status(&cluster(true, promoted), None, None, at(200)).expect("a standby status");
        assert_eq!(unreported.phase, Some(StandbyPhase::Demoting));
    }

    #[test]
    fn a_demotion_that_follows_records_its_offset_and_keeps_its_demotion_point() {
        let mut report = demotion(Some(480));
        if let Some(d) = report.demotion.as_mut() {
            d.following = Some((1_000_000_480, -999_999_999 - 1));
            d.message = None;
        }
        let demoted = json!({"phase": "Demoted", "demotedAtRevision": 480, "demotedTime": "2026-12-01T00:00:00Z"});
        let following = status(&cluster(true, demoted), None, Some(&report), at(200))
            .expect("a standby status");
        assert_eq!(following.phase, Some(StandbyPhase::Following));
        assert_eq!(following.applied_revision, Some(1_000_000_480));
        assert_eq!(following.revision_offset, Some(-1_000_000_000));
        assert_eq!(following.demoted_at_revision, Some(480));
        // The follower's reports then keep the demotion point and offset.
        let recorded = serde_json::to_value(&following).expect("status serializes");
        let next = FollowReport {
            applied: Some(1_000_000_490),
            newest_stored: Some(1_000_000_490),
            ..FollowReport::default()
        };
        let later =
            status(&cluster(true, recorded), None, Some(&next), at(210)).expect("a standby status");
        assert_eq!(later.phase, Some(StandbyPhase::Following));
        assert_eq!(later.revision_offset, Some(-1_000_000_000));
        assert_eq!(later.demoted_at_revision, Some(480));
        assert!(read_only(Some(&later), &validated(true)));
    }

    #[test]
    fn a_demotion_called_off_takes_writes_again() {
        let mut report = demotion(Some(480));
        if let Some(d) = report.demotion.as_mut() {
            d.called_off = true;
        }
        let demoted = json!({"phase": "Demoted", "demotedAtRevision": 480});
        let called_off = status(&cluster(false, demoted), None, Some(&report), at(200))
            .expect("a standby status");
        assert_eq!(called_off.phase, Some(StandbyPhase::Promoted));
        assert_eq!(called_off.promoted_at_revision, None);
        assert!(is_promoted(Some(&called_off)));
        assert!(!read_only(Some(&called_off), &validated(false)));
        // A cluster demoted again is read-only whatever status said.
        assert!(read_only(Some(&called_off), &validated(true)));
    }

    /// The spec of [`cluster`], validated.
    fn validated(enabled: bool) -> ValidatedCluster {
        let spec = serde_json::to_value(cluster(enabled, json!({})).spec).expect("a spec");
        crate::cluster::validate::validated_for_tests(spec)
    }
}
