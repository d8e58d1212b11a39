//! What the backup and restore tests share: credentials Secrets and waiting
//! for a `DistributedKVBackup` to finish.

use std::time::{Duration, Instant};

use dkv_api::DistributedKVBackup;
use dkv_api::backup::v1alpha1::BackupPhase;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

/// Creates the Secret `name` in `ns` with `data` as string data.
pub async fn create_secret(client: &Client, ns: &str, name: &str, data: Vec<(String, String)>) {
    let data: serde_json::Map<String, serde_json::Value> =
        data.into_iter().map(|(k, v)| (k, json!(v))).collect();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns}, "stringData": data
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// Waits (up to two minutes) until the backup is `Completed` or `Failed`.
pub async fn wait_backup_finished(
    backups: &Api<DistributedKVBackup>,
    name: &str,
) -> DistributedKVBackup {
    let started = Instant::now();
    loop {
        let b = backups.get(name).await.unwrap();
        if matches!(
            b.status.as_ref().and_then(|s| s.phase),
            Some(BackupPhase::Completed | BackupPhase::Failed)
        ) {
            return b;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "backup {name} did not finish: {:?}",
            b.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits for the backup to finish and checks that it completed.
pub async fn wait_backup_completed(
    backups: &Api<DistributedKVBackup>,
    name: &str,
) -> DistributedKVBackup {
    let b = wait_backup_finished(backups, name).await;
    assert_eq!(
        b.status.as_ref().and_then(|s| s.phase),
        Some(BackupPhase::Completed),
        "backup {name}: {:?}",
        b.status
    );
    b
}

/// Takes an on-demand backup `name` of `cluster` (a `DistributedKVBackup`
/// to the cluster's own destination) and checks that it completed.
pub async fn backup_now(
    client: &Client,
    ns: &str,
    cluster: &str,
    name: &str,
) -> DistributedKVBackup {
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), ns);
    let backup: DistributedKVBackup = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {"name": name, "namespace": ns}, "spec": {"cluster": cluster}
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    wait_backup_completed(&backups, name).await
}
