//! A `file://` backup destination on `dkv local up`, run as root as the
//! operations guide has it: the continuous-backup agent (inside the `dkv
//! local` process, as root) writes the cluster's directory first, and the
//! backup Jobs, the scheduled ones, the verification and the restore (pods
//! running as user 65532) all write and read beside it. Before, the agent's
//! root-owned directory refused every Job ("Permission denied").

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dkv_api::backup::v1alpha1::{BackupPhase, VerificationPhase};
use dkv_api::{DistributedKV, DistributedKVBackup};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::local_mode_security::{Local, running_as_root};
use dkv_test_support as support;
use support::backups::{create_backup, wait_backup_finished};
use support::etcd_cluster::{Writer, lost_writes, wait_for, wait_settled};

const NS: &str = "default";
const POD_USER: u32 = 65532;

/// Every directory and file under `dir`, with its owner.
fn owners(dir: &Path) -> Vec<(PathBuf, u32, u32)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path.clone());
            }
            found.push((path, meta.uid(), meta.gid()));
        }
    }
    found.sort();
    found
}

/// The backups of `cluster` its schedule created (named after their Job).
async fn scheduled_backup(client: &Client) -> String {
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    loop {
        let list = backups.list(&Default::default()).await.unwrap().items;
        if let Some(record) = list
            .into_iter()
            .find(|b| b.name_any().starts_with("orders-backup"))
        {
            return record.name_any();
        }
        assert!(
            started.elapsed() < Duration::from_secs(150),
            "the schedule (every minute) never ran"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_writer_of_a_file_destination_writes_beside_the_others() {
    if !running_as_root() {
        eprintln!("skipped: pods run as user 65532 only when dkv local runs as root");
        return;
    }
    let local = Local::up();
    // The destination as the operations guide sets it up: the pods' user's,
    // readable by nobody else.
    let destination = local.state.parent().unwrap().join("backups");
    std::fs::create_dir(&destination).unwrap();
    std::os::unix::fs::chown(&destination, Some(POD_USER), Some(POD_USER)).unwrap();
    std::fs::set_permissions(
        &destination,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let client = local.client().await;
    support::wait_until_admission_answers(&client, NS).await;
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let uri = format!("file://{}/", destination.display());
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            "orders",
            1,
            "registry.k8s.io/etcd:3.5.16-0",
            // Plaintext, for the test's writer (dkv local's defaulting
            // webhook would give the cluster TLS otherwise).
            json!({"tls": {"peer": {"mode": "Disabled"}, "client": {"mode": "Disabled"}},
                   "backup": {"destination": {"uri": uri}, "schedule": "* * * * *",
                              "continuous": {"enabled": true, "interval": "1s"}}}),
        ),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, "orders", 1).await;
    let writer = Writer::start(client.clone(), NS, "orders");

    // The agent, in the dkv local process, writes the cluster's directory
    // first (its chain's base snapshot).
    wait_for(&dkvs, "orders", "a continuous-backup chain recorded", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .is_some_and(|c| c.newest.is_some())
    })
    .await;
    support::eventually(
        "50 acknowledged writes",
        Duration::from_secs(60),
        Duration::from_millis(200),
        async || (writer.acknowledged().await >= 50).then_some(()),
    )
    .await;
    let report = writer.stop().await;

    // An on-demand backup, verified: a Job as user 65532 writes beside the
    // agent's files, then the operator verifies it in a scratch cluster.
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    let on_demand = create_backup(
        &client,
        NS,
        "now",
        json!({"cluster": "orders", "verify": true}),
    )
    .await;
    let started = Instant::now();
    let verification = loop {
        let status = backups.get("now").await.unwrap().status.unwrap_or_default();
        if let Some(v) = status.verification.filter(|v| {
            matches!(
                v.phase,
                Some(VerificationPhase::Verified | VerificationPhase::Failed)
            )
        }) {
            break v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "the verification of the on-demand backup did not finish"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(
        verification.phase,
        Some(VerificationPhase::Verified),
        "{:?}",
        verification.message
    );

    // A scheduled one, from the CronJob, likewise.
    let scheduled = scheduled_backup(&client).await;
    let done = wait_backup_finished(&backups, &scheduled).await;
    let status = done.status.unwrap();
    assert_eq!(
        status.phase,
        Some(BackupPhase::Completed),
        "scheduled backup {scheduled}: {:?}",
        status.message
    );

    // A restore from the on-demand backup: the member's restore step reads
    // the destination as user 65532 and the restored cluster holds every
    // acknowledged write.
    let artifact = on_demand.status.unwrap().artifact.unwrap();
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            "restored",
            1,
            "registry.k8s.io/etcd:3.5.16-0",
            json!({"tls": {"peer": {"mode": "Disabled"}, "client": {"mode": "Disabled"}},
                   "bootstrap": {"restore": {"backupName": "now"}}}),
        ),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, "restored", 1).await;
    let lost = lost_writes(&client, NS, "restored", &report.acked).await;
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes missing from the restore of {}: {lost:?}",
        lost.len(),
        report.acked.len(),
        artifact.uri
    );

    // Whoever wrote it, everything in the destination is the pods' user's.
    let foreign: Vec<_> = owners(&destination)
        .into_iter()
        .filter(|(_, uid, gid)| (*uid, *gid) != (POD_USER, POD_USER))
        .collect();
    assert!(foreign.is_empty(), "not the pods' user's: {foreign:?}");
    eprintln!(
        "{} acknowledged writes restored; on-demand {} verified, scheduled {scheduled} completed",
        report.acked.len(),
        artifact.uri
    );
}
