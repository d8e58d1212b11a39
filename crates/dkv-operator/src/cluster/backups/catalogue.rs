//! What a cluster's `DistributedKVBackup` records say about the cluster: its
//! newest completed backup (`status.lastBackup`, `lastBackupTime`) and
//! whether its latest finished run failed (`Degraded=True, BackupFailed`).
//!
//! The cluster controller is the only writer of the cluster's status; it
//! derives these fields from the records on every pass (the records are
//! watched and mapped to their cluster through `spec.cluster`), so no other
//! writer can race it with an older value. Pure, apart from [`observe`]
//! reading the cache.

use std::sync::Arc;

use dkv_api::backup::v1alpha1::BackupPhase;
use dkv_api::distributedkv::v1beta1::{BackupArtifactRef, ContinuousBackupStatus};
use dkv_api::{DistributedKV, DistributedKVBackup};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::cluster::watches::Stores;

/// A finished run that failed and has no later successful run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedRun {
    pub name: String,
    pub message: String,
}

/// The backup facts of one cluster's status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackupSummary {
    /// The newest completed backup and when it completed.
    pub last: Option<(BackupArtifactRef, Time)>,
    /// Set when the latest finished run failed.
    pub failed: Option<FailedRun>,
    /// What continuous backup makes recoverable (`status.continuousBackup`).
    pub continuous: Option<ContinuousBackupStatus>,
    /// Why continuous backup stores nothing, once that lasts.
    pub continuous_failing: Option<String>,
    /// Where a standby stands (`status.standby`).
    pub standby: Option<dkv_api::distributedkv::v1beta1::StandbyStatus>,
}

/// Orders finished runs: when each finished (its completion, else its
/// start, else its creation), then when it started. Times have whole-second
/// precision, so ties happen; at a tie a success counts as the later run (a
/// good backup of that moment exists), then the name decides, so the answer
/// never depends on the cache's order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Recency {
    finished: jiff::Timestamp,
    started: Option<jiff::Timestamp>,
    created: Option<jiff::Timestamp>,
    succeeded: bool,
    name: String,
}

/// How recent a finished record is; `None` for a run still in flight.
fn recency(record: &DistributedKVBackup) -> Option<Recency> {
    let status = record.status.as_ref()?;
    let succeeded = match status.phase? {
        BackupPhase::Completed => status.artifact.is_some(),
        BackupPhase::Failed => false,
        BackupPhase::Pending | BackupPhase::Running => return None,
    };
    let created = record.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let started = status.start_time.as_ref().map(|t| t.0);
    let finished = status
        .completion_time
        .as_ref()
        .map(|t| t.0)
        .or(started)
        .or(created)?;
    Some(Recency {
        finished,
        started,
        created,
        succeeded,
        name: record.name_any(),
    })
}

/// The summary of `cluster`'s backups among `records` (all in its
/// namespace).
pub fn summarize(cluster: &str, records: &[Arc<DistributedKVBackup>]) -> BackupSummary {
    let mut finished: Vec<(Recency, &DistributedKVBackup)> = records
        .iter()
        .filter(|r| r.spec.cluster == cluster)
        .filter_map(|r| recency(r).map(|rank| (rank, r.as_ref())))
        .collect();
    // Newest first.
    finished.sort_by(|a, b| b.0.cmp(&a.0));
    let last = finished
        .iter()
        .find(|(rank, _)| rank.succeeded)
        .and_then(|(rank, record)| {
            let artifact = record.status.as_ref()?.artifact.as_ref()?;
            Some((
                BackupArtifactRef {
                    name: rank.name.clone(),
                    uri: artifact.uri.clone(),
                    size_bytes: artifact.size_bytes,
                    sha256: artifact.sha256.clone(),
                },
                Time(rank.finished),
            ))
        });
    let failed = finished
        .first()
        .filter(|(rank, _)| !rank.succeeded)
        .map(|(rank, record)| FailedRun {
            name: rank.name.clone(),
            message: record
                .status
                .as_ref()
                .and_then(|s| s.message.clone())
                .unwrap_or_else(|| "no reason given".to_owned()),
        });
    BackupSummary {
        last,
        failed,
        ..BackupSummary::default()
    }
}

/// The summary of `dkv`'s backups as the record cache holds them.
pub fn observe(dkv: &DistributedKV, stores: &Stores) -> BackupSummary {
    let namespace = dkv.namespace();
    let records: Vec<Arc<DistributedKVBackup>> = stores
        .backups
        .state()
        .into_iter()
        .filter(|r| r.namespace() == namespace)
        .collect();
    summarize(&dkv.name_any(), &records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(name: &str, cluster: &str, phase: &str, completed: &str) -> Arc<DistributedKVBackup> {
        let artifact = (phase == "Completed").then(|| {
            json!({"uri": format!("s3://b/p/shop/{cluster}/{name}.db"), "sizeBytes": 10, "sha256": "ab", "revision": 1})
        });
        let message = (phase == "Failed").then(|| format!("{name}: access denied"));
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {"cluster": cluster},
                "status": {"phase": phase, "completionTime": completed, "artifact": artifact, "message": message}
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    #[test]
    fn the_newest_completed_backup_is_the_last_backup() {
        let records = [
            record("b", "orders", "Completed", "2026-11-22T06:00:00Z"),
            record("c", "orders", "Completed", "2026-11-22T07:00:00Z"),
            record("a", "orders", "Completed", "2026-11-22T05:00:00Z"),
            record("other", "ledger", "Completed", "2026-11-22T09:00:00Z"),
            record("running", "orders", "Running", "2026-11-22T10:00:00Z"),
        ];
        let summary = summarize("orders", &records);
        let (last, time) = summary.last.unwrap_or_else(|| panic!("no last backup"));
        assert_eq!(
            (last.name.as_str(), last.uri.as_str(), last.size_bytes),
            ("c", "s3://b/p/shop/orders/c.db", 10)
        );
        assert_eq!(time.0.to_string(), "2026-11-22T07:00:00Z");
        assert_eq!(summary.failed, None);
        // The cache's order does not matter.
        let mut reversed = records.to_vec();
        reversed.reverse();
        assert_eq!(
            summarize("orders", &reversed),
            summarize("orders", &records)
        );
    }

    #[test]
    fn a_failed_latest_run_is_reported_until_a_later_one_completes() {
        let mut records = vec![
            record("good", "orders", "Completed", "2026-11-22T06:00:00Z"),
            record("denied", "orders", "Failed", "2026-11-22T07:00:00Z"),
        ];
        let summary = summarize("orders", &records);
        assert_eq!(
            summary.failed,
            Some(FailedRun {
                name: "denied".into(),
                message: "denied: access denied".into()
            })
        );
        assert_eq!(
            summary.last.map(|(b, _)| b.name),
            Some("good".to_owned()),
            "a failed run does not replace the last good backup"
        );
        // A run still in flight changes nothing.
        records.push(record("next", "orders", "Pending", "2026-11-22T08:00:00Z"));
        assert!(summarize("orders", &records).failed.is_some());
        // A later completed run clears it.
        records.push(record(
            "fixed",
            "orders",
            "Completed",
            "2026-11-22T09:00:00Z",
        ));
        let summary = summarize("orders", &records);
        assert_eq!(summary.failed, None);
        assert_eq!(summary.last.map(|(b, _)| b.name), Some("fixed".to_owned()));
        // An older failure after a newer success is history, not news.
        let records = [
            record("old-failure", "orders", "Failed", "2026-11-22T05:00:00Z"),
            record("good", "orders", "Completed", "2026-11-22T06:00:00Z"),
        ];
        assert_eq!(summarize("orders", &records).failed, None);
    }

    #[test]
    fn at_the_same_second_a_success_is_the_later_run() {
        // Whole-second times: a failed run and a good one can finish in the
        // same second; the good backup exists, so nothing is degraded.
        let records = [
            record("zz-denied", "orders", "Failed", "2026-11-22T06:00:00Z"),
            record("aa-good", "orders", "Completed", "2026-11-22T06:00:00Z"),
        ];
        let summary = summarize("orders", &records);
        assert_eq!(summary.failed, None);
        assert_eq!(
            summary.last.map(|(b, _)| b.name),
            Some("aa-good".to_owned())
        );
    }

    #[test]
    fn no_records_no_backup_facts() {
        assert_eq!(summarize("orders", &[]), BackupSummary::default());
        // A completed record without an artifact is not restorable: a failure.
        let mut odd = (*record("odd", "orders", "Completed", "2026-11-22T06:00:00Z")).clone();
        if let Some(status) = odd.status.as_mut() {
            status.artifact = None;
        }
        let summary = summarize("orders", &[Arc::new(odd)]);
        assert_eq!(summary.last, None);
        assert_eq!(summary.failed.map(|f| f.name), Some("odd".to_owned()));
    }
}
