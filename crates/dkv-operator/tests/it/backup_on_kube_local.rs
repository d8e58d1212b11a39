//! On-demand backups through the operator, on kube-local with real etcd and a
//! real S3 server (moto, signatures checked): a `DistributedKVBackup` runs
//! `dkv backup` in a Job, its status ends `Completed` with the artifact the
//! bucket really holds, the cluster records it as `lastBackup`, and the
//! artifact restores into a new etcd with exactly the keys written. Wrong
//! credentials end `Failed` with the reason and without the secret, and
//! leave the cluster `Degraded/BackupFailed` until a later backup completes.
//! Retention prunes old records with their artifacts and keeps the newest.

use std::time::{Duration, Instant};

use dkv_api::backup::v1alpha1::BackupPhase;
use dkv_api::{DistributedKV, DistributedKVBackup};
use dkv_backup::testing::{EtcdProcess, MotoServer, etcd_bin_dir, loopback_ip, test_key};
use dkv_backup::{Location, MemberRestore, RestoreTool, fetch_artifact, restore_member};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use dkv_test_support as support;

use support::backups::{WithObjectStore, create_secret, wait_backup_finished};

use support::etcd_cluster::{
    annotate, condition_message, condition_reason, connect, member_endpoints, wait_for,
    wait_settled,
};

const NS: &str = "backups";
const KEYS: usize = 300;

/// The S3 environment with another secret access key.
fn with_secret_key(mut env: Vec<(String, String)>, key: &str) -> Vec<(String, String)> {
    for (name, value) in &mut env {
        if name == "AWS_SECRET_ACCESS_KEY" {
            *value = key.to_owned();
        }
    }
    env
}

async fn wait_gone(dkvs: &Api<DistributedKV>, name: &str, within: Duration) {
    let started = Instant::now();
    while dkvs.get_opt(name).await.unwrap().is_some() {
        assert!(started.elapsed() < within, "{name} was not deleted");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn backup(name: &str, uri: &str, secret: &str) -> DistributedKVBackup {
    serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"cluster": "orders", "destination": {"uri": uri, "credentialsSecret": secret}}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_on_demand_backup_lands_in_the_bucket_and_restores_the_same_keys() {
    let moto = MotoServer::start("dkv-backups");
    let (_env, client, operator) = support::running_operator(NS).await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        "orders",
        3,
        "registry.k8s.io/etcd:3.5.16-0",
        json!({}),
    )
    .await;
    wait_settled(&dkvs, "orders", 3).await;

    let mut etcd = connect(member_endpoints(&client, NS, "orders").await)
        .await
        .unwrap();
    for i in 0..KEYS {
        let (key, value) = test_key(i);
        etcd.put(key, value, None).await.unwrap();
    }
    let source_cluster_id = etcd.status().await.unwrap().header().unwrap().cluster_id();

    create_secret(&client, NS, "s3-creds", moto.env()).await;
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    backups
        .create(
            &PostParams::default(),
            &backup("orders-manual", &moto.uri("prod"), "s3-creds"),
        )
        .await
        .unwrap();
    let done = wait_backup_finished(&backups, "orders-manual").await;
    let status = done.status.clone().unwrap();
    eprintln!(
        "on-demand backup: {:?} after {:?}: {:?}",
        status.phase,
        started.elapsed(),
        status.artifact
    );
    assert_eq!(status.phase, Some(BackupPhase::Completed), "{status:?}");
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    let artifact = status.artifact.unwrap();
    assert!(
        artifact
            .uri
            .starts_with("s3://dkv-backups/prod/backups/orders/orders-"),
        "{artifact:?}"
    );
    assert_eq!(artifact.etcd_version.as_deref(), Some("3.5.16"));

    // What the bucket holds, downloaded and hashed independently.
    let key = Location::parse(&artifact.uri)
        .unwrap()
        .path()
        .as_ref()
        .to_owned();
    let digest = moto.digest(&key);
    assert_eq!(
        (digest.size as i64, digest.sha256.as_str()),
        (artifact.size_bytes, artifact.sha256.as_str())
    );

    // The cluster's catalogue pointer, derived from the record by the
    // cluster controller.
    wait_for(&dkvs, "orders", "lastBackup orders-manual", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.last_backup.as_ref())
            .map(|b| (b.name.as_str(), b.uri.as_str()))
            == Some(("orders-manual", artifact.uri.as_str()))
    })
    .await;
    let cluster = dkvs.get("orders").await.unwrap().status.unwrap();
    assert_eq!(cluster.last_backup_time, status.completion_time);

    // Restore it into a new single-member etcd: exactly the keys written.
    let dir = tempfile::tempdir().unwrap();
    let fetched = fetch_artifact(
        &moto.config(),
        &artifact.uri,
        Some(&artifact.sha256),
        &dkv_backup::Keyring::default(),
        &dir.path().join("snapshot.db"),
    )
    .await
    .unwrap();
    let bin = etcd_bin_dir("3.5");
    let ip = loopback_ip(31, 0);
    let data_dir = dir.path().join("restored");
    restore_member(
        &RestoreTool::for_version("3.5.16", &bin).unwrap(),
        &MemberRestore {
            snapshot: fetched.path,
            name: "restored-0".to_owned(),
            initial_cluster: format!("restored-0=http://{ip}:2380"),
            initial_advertise_peer_urls: format!("http://{ip}:2380"),
            initial_cluster_token: "restored".to_owned(),
            data_dir: data_dir.clone(),
            revision_bump: None,
            // fetch_artifact checked it.
            snapshot_checked: true,
        },
    )
    .await
    .unwrap();
    let restored = EtcdProcess::start(&bin, "restored-0", &ip, &data_dir, "restored");
    let restored_status = restored.wait_ready().await;
    let expected: Vec<(String, String)> = (0..KEYS).map(test_key).collect();
    assert_eq!(restored.test_keys().await, expected);
    assert_ne!(
        restored_status.cluster_id, source_cluster_id,
        "a new cluster ID"
    );

    // Wrong credentials: Failed, with the reason, and the secret nowhere.
    let wrong_secret = "wrong-secret-key-do-not-print";
    create_secret(
        &client,
        NS,
        "bad-creds",
        with_secret_key(moto.env(), wrong_secret),
    )
    .await;
    backups
        .create(
            &PostParams::default(),
            &backup("orders-denied", &moto.uri("prod"), "bad-creds"),
        )
        .await
        .unwrap();
    let denied = wait_backup_finished(&backups, "orders-denied").await;
    let status = denied.status.unwrap();
    eprintln!("denied backup: {:?}", status.message);
    assert_eq!(status.phase, Some(BackupPhase::Failed));
    let message = status.message.unwrap_or_default();
    assert!(!message.is_empty(), "the reason is reported");
    assert!(!message.contains(wrong_secret), "{message}");
    let cluster = dkvs.get("orders").await.unwrap().status.unwrap();
    assert_eq!(
        cluster.last_backup.map(|b| b.name),
        Some("orders-manual".to_owned()),
        "a failed backup does not replace the last good one"
    );
    // Events on the backup and on the cluster, the secret in none of them.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    let failed_events = loop {
        let all = events.list(&Default::default()).await.unwrap().items;
        for e in &all {
            assert!(
                !e.message.clone().unwrap_or_default().contains(wrong_secret),
                "{e:?}"
            );
        }
        let failed: Vec<String> = all
            .iter()
            .filter(|e| e.reason.as_deref() == Some("BackupFailed"))
            .map(|e| e.involved_object.kind.clone().unwrap_or_default())
            .collect();
        if failed.len() >= 2 || started.elapsed() > Duration::from_secs(10) {
            break failed;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(
        failed_events.contains(&"DistributedKVBackup".to_owned())
            && failed_events.contains(&"DistributedKV".to_owned()),
        "BackupFailed on the backup and on the cluster: {failed_events:?}"
    );

    // The cluster is Degraded/BackupFailed, naming the run, not the secret.
    wait_for(&dkvs, "orders", "Degraded/BackupFailed", |d| {
        condition_reason(d, "Degraded", "True").as_deref() == Some("BackupFailed")
    })
    .await;
    let degraded = condition_message(&dkvs.get("orders").await.unwrap(), "Degraded", None);
    eprintln!("cluster after the denied backup: {degraded}");
    assert!(degraded.contains("orders-denied"), "{degraded}");
    assert!(!degraded.contains(wrong_secret), "{degraded}");
    let status_text = serde_json::to_string(&dkvs.get("orders").await.unwrap().status).unwrap();
    assert!(!status_text.contains(wrong_secret), "{status_text}");

    // A later successful backup clears it and becomes the last backup.
    backups
        .create(
            &PostParams::default(),
            &backup("orders-again", &moto.uri("prod"), "s3-creds"),
        )
        .await
        .unwrap();
    let again = wait_backup_finished(&backups, "orders-again").await;
    assert_eq!(
        again.status.as_ref().and_then(|s| s.phase),
        Some(BackupPhase::Completed),
        "{:?}",
        again.status
    );
    wait_for(&dkvs, "orders", "Degraded=False after a good backup", |d| {
        condition_reason(d, "Degraded", "False").is_some()
            && d.status
                .as_ref()
                .and_then(|s| s.last_backup.as_ref())
                .map(|b| b.name.as_str())
                == Some("orders-again")
    })
    .await;
    for e in events.list(&Default::default()).await.unwrap().items {
        assert!(
            !e.message.clone().unwrap_or_default().contains(wrong_secret),
            "{e:?}"
        );
    }

    operator.stop().await;
}

/// Waits until no record named in `names` exists.
async fn wait_records_gone(backups: &Api<DistributedKVBackup>, names: &[&str]) {
    let started = Instant::now();
    loop {
        let left: Vec<String> = backups
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|b| b.name_any())
            .filter(|n| names.contains(&n.as_str()))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "records not pruned: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The bucket keys (snapshot and sidecar) of an artifact URI.
fn artifact_keys(uri: &str) -> [String; 2] {
    let key = Location::parse(uri).unwrap().path().as_ref().to_owned();
    [key.clone(), format!("{key}.json")]
}

/// Moves a finished record's times `days` into the past, as if it had run
/// then.
async fn backdate(backups: &Api<DistributedKVBackup>, name: &str, days: i64) {
    let then = Time(jiff::Timestamp::now() - jiff::SignedDuration::from_hours(days * 24));
    backups
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"startTime": then, "completionTime": then}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_prunes_the_oldest_artifacts_and_records_and_keeps_the_newest() {
    let WithObjectStore {
        moto,
        env: _env,
        client,
        operator,
    } = support::backups::with_object_store(NS).await;
    create_secret(
        &client,
        NS,
        "bad-creds",
        with_secret_key(moto.env(), "not-the-secret"),
    )
    .await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        "orders",
        1,
        "registry.k8s.io/etcd:3.5.16-0",
        json!({"backup": {"destination": {"uri": moto.uri("kept"), "credentialsSecret": "s3-creds"},
                          "schedule": "0 0 1 1 *", "retention": {"maxAge": "1d"}}}),
    )
    .await;
    wait_settled(&dkvs, "orders", 1).await;
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);

    // Two real backups and a failed run, all recent: nothing is pruned.
    let on_cluster = |name: &str| -> DistributedKVBackup {
        serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
            "metadata": {"name": name, "namespace": NS}, "spec": {"cluster": "orders"}
        }))
        .unwrap()
    };
    let mut uris: std::collections::BTreeMap<&str, String> = std::collections::BTreeMap::new();
    for name in ["orders-old-1", "orders-old-2", "orders-new"] {
        if name == "orders-new" {
            // Runs 1 and 2 are now 3 and 2 days old (and so is the failure):
            // all older than retentionDays 1. Run 1 and the failure go; run
            // 2 is the newest success and stays until a newer one exists.
            // In this order: while run 1 alone is old, it goes; once run 2
            // is old too, it is the newest success; the pass that prunes
            // the failure (backdated last) has seen run 2 old and kept it.
            backdate(&backups, "orders-old-1", 3).await;
            backdate(&backups, "orders-old-2", 2).await;
            backdate(&backups, "orders-failed", 3).await;
            wait_records_gone(&backups, &["orders-old-1", "orders-failed"]).await;
            let left: Vec<String> = backups
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .map(|b| b.name_any())
                .collect();
            assert_eq!(left, ["orders-old-2"], "the newest success is kept");
            let objects = moto.list().objects;
            for key in artifact_keys(&uris["orders-old-1"]) {
                assert!(!objects.contains(&key), "{key} still in {objects:?}");
            }
            for key in artifact_keys(&uris["orders-old-2"]) {
                assert!(objects.contains(&key), "{key} missing from {objects:?}");
            }
        }
        // Artifacts are named to the second: one backup per second.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        backups
            .create(&PostParams::default(), &on_cluster(name))
            .await
            .unwrap();
        let done = wait_backup_finished(&backups, name).await;
        let status = done.status.unwrap();
        assert_eq!(
            status.phase,
            Some(BackupPhase::Completed),
            "{:?}",
            status.message
        );
        uris.insert(name, status.artifact.unwrap().uri);
        if name == "orders-old-2" {
            backups
                .create(
                    &PostParams::default(),
                    &backup("orders-failed", &moto.uri("kept"), "bad-creds"),
                )
                .await
                .unwrap();
            let failed = wait_backup_finished(&backups, "orders-failed").await;
            assert_eq!(
                failed.status.and_then(|s| s.phase),
                Some(BackupPhase::Failed)
            );
            assert_eq!(
                backups.list(&Default::default()).await.unwrap().items.len(),
                3
            );
        }
    }

    // The new backup completes: run 2 goes too, with its artifact; the
    // bucket holds exactly the new backup and its sidecar.
    wait_records_gone(&backups, &["orders-old-2"]).await;
    let left: Vec<String> = backups
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|b| b.name_any())
        .collect();
    assert_eq!(left, ["orders-new"]);
    let objects: Vec<String> = moto
        .list()
        .objects
        .into_iter()
        .filter(|k| k.starts_with("kept/"))
        .collect();
    assert_eq!(objects, artifact_keys(&uris["orders-new"]).to_vec());
    let cluster = dkvs.get("orders").await.unwrap();
    assert_eq!(
        cluster.status.and_then(|s| s.last_backup).map(|b| b.name),
        Some("orders-new".to_owned())
    );
    // Reported on the cluster.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    loop {
        let pruned: Vec<String> = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("BackupPruned"))
            .filter_map(|e| e.message)
            .collect();
        let mentions = |name: &str| pruned.iter().any(|m| m.contains(name));
        if ["orders-old-1", "orders-old-2", "orders-failed"]
            .iter()
            .all(|n| mentions(n))
        {
            eprintln!("pruning events: {pruned:?}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a BackupPruned Event per pruned backup: {pruned:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    operator.stop().await;
}

/// Every file under `dir`, as absolute paths, sorted.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.push(path.display().to_string());
            }
        }
    }
    found.sort();
    found
}

/// v1beta1 destinations beyond S3, and `retention.maxBackups`: backups go to
/// a `file://` directory (the agent pod mounts it from the node, here this
/// machine), and with `maxBackups: 2` the third backup prunes the first,
/// its record and both of its files.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_destination_keeps_at_most_max_backups() {
    let dir = tempfile::tempdir().unwrap();
    // The agent runs as user 65532 and mounts the directory from the node:
    // it must be writable by that user, as on a real node.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let (_env, client, operator) = support::running_operator(NS).await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        "orders",
        1,
        "registry.k8s.io/etcd:3.5.16-0",
        json!({"backup": {"destination": {"uri": format!("file://{}/", dir.path().display())},
                          "schedule": "0 0 1 1 *", "retention": {"maxBackups": 2}}}),
    )
    .await;
    wait_settled(&dkvs, "orders", 1).await;
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    let mut files = std::collections::BTreeMap::new();
    for name in ["orders-1", "orders-2", "orders-3"] {
        // Artifacts are named to the second: one backup per second.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let record: DistributedKVBackup = serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
            "metadata": {"name": name, "namespace": NS}, "spec": {"cluster": "orders"}
        }))
        .unwrap();
        backups
            .create(&PostParams::default(), &record)
            .await
            .unwrap();
        let status = wait_backup_finished(&backups, name).await.status.unwrap();
        assert_eq!(
            status.phase,
            Some(BackupPhase::Completed),
            "{:?}",
            status.message
        );
        let artifact = status.artifact.unwrap();
        let keys = artifact_keys(&artifact.uri).map(|key| format!("/{key}"));
        assert_eq!(
            std::fs::metadata(&keys[0]).unwrap().len(),
            artifact.size_bytes as u64,
            "{keys:?}"
        );
        files.insert(name, keys);
    }
    wait_records_gone(&backups, &["orders-1"]).await;
    let mut left: Vec<String> = backups
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|b| b.name_any())
        .collect();
    left.sort();
    assert_eq!(left, ["orders-2", "orders-3"]);
    let mut kept: Vec<String> = files["orders-2"]
        .iter()
        .chain(&files["orders-3"])
        .cloned()
        .collect();
    kept.sort();
    assert_eq!(files_under(dir.path()), kept);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scheduled_run_is_recorded_in_the_catalogue_and_on_the_cluster() {
    let WithObjectStore {
        moto,
        env,
        client,
        operator,
    } = support::backups::with_object_store(NS).await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        "orders",
        1,
        "registry.k8s.io/etcd:3.5.16-0",
        json!({"backup": {"destination": {"uri": moto.uri("scheduled"), "credentialsSecret": "s3-creds"}, "schedule": "*/5 * * * *"}}),
    )
    .await;
    wait_settled(&dkvs, "orders", 1).await;

    // The next scheduled time arrives (kube-local's CronJob clock).
    let started = Instant::now();
    env.clock().unwrap().advance(Duration::from_secs(300));
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    let record = loop {
        let list = backups.list(&Default::default()).await.unwrap().items;
        if let Some(record) = list.into_iter().next() {
            break record;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no record of the scheduled run"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let name = record.name_any();
    assert!(
        name.starts_with("orders-backup"),
        "named after the Job: {name}"
    );
    let owner = &record.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("DistributedKV", "orders")
    );

    let done = wait_backup_finished(&backups, &name).await;
    let status = done.status.unwrap();
    eprintln!(
        "scheduled backup {name}: {:?} after {:?}: {:?}",
        status.phase,
        started.elapsed(),
        status.artifact
    );
    assert_eq!(
        status.phase,
        Some(BackupPhase::Completed),
        "{:?}",
        status.message
    );
    let artifact = status.artifact.unwrap();
    assert!(
        artifact
            .uri
            .starts_with("s3://dkv-backups/scheduled/backups/orders/")
    );
    // The run fired before the member passed its readiness probe (the
    // client Service had no endpoint yet): the agent waits for the cluster
    // instead of failing its first attempt.
    let job = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), NS)
        .get(&name)
        .await
        .unwrap();
    assert_eq!(
        job.status.and_then(|s| s.failed).unwrap_or(0),
        0,
        "no failed attempt"
    );
    wait_for(&dkvs, "orders", "lastBackup from the scheduled run", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.last_backup.as_ref())
            .map(|b| b.name.as_str())
            == Some(name.as_str())
    })
    .await;
    let cluster = dkvs.get("orders").await.unwrap().status.unwrap();
    assert_eq!(cluster.last_backup_time, status.completion_time);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletion_takes_a_verified_final_backup_and_a_failing_one_blocks_it() {
    let WithObjectStore {
        moto,
        env: _env,
        client,
        operator,
    } = support::backups::with_object_store(NS).await;
    create_secret(
        &client,
        NS,
        "bad-creds",
        with_secret_key(moto.env(), "not-the-secret"),
    )
    .await;
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    for (name, creds) in [("orders", "s3-creds"), ("ledger", "bad-creds")] {
        dkvs.create(
            &PostParams::default(),
            &support::cluster(
                NS,
                name,
                1,
                "registry.k8s.io/etcd:3.5.16-0",
                json!({"backup": {"destination": {"uri": moto.uri("final"), "credentialsSecret": creds},
                                  "schedule": "0 0 1 1 *", "finalBackupOnDelete": true}}),
            ),
        )
        .await
        .unwrap();
    }
    wait_settled(&dkvs, "orders", 1).await;
    wait_settled(&dkvs, "ledger", 1).await;

    // orders: the final backup is taken, verified, and the cluster goes.
    let started = Instant::now();
    dkvs.delete("orders", &Default::default()).await.unwrap();
    wait_gone(&dkvs, "orders", Duration::from_secs(120)).await;
    eprintln!(
        "delete with final backup: gone after {:?}",
        started.elapsed()
    );
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    let finals: Vec<DistributedKVBackup> = backups
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|b| b.name_any().starts_with("orders-final-"))
        .collect();
    assert_eq!(
        finals.len(),
        1,
        "one final backup record, kept after the cluster"
    );
    let status = finals[0].status.clone().unwrap();
    assert_eq!(
        status.phase,
        Some(BackupPhase::Completed),
        "{:?}",
        status.message
    );
    let artifact = status.artifact.unwrap();
    let key = Location::parse(&artifact.uri)
        .unwrap()
        .path()
        .as_ref()
        .to_owned();
    let digest = moto.digest(&key);
    assert_eq!(
        (digest.size as i64, digest.sha256),
        (artifact.size_bytes, artifact.sha256)
    );

    // ledger: the final backup fails; deletion is blocked with the reason
    // until the user waives the backup.
    dkvs.delete("ledger", &Default::default()).await.unwrap();
    let blocked = wait_for(&dkvs, "ledger", "Degraded/BackupFailed", |d| {
        condition_reason(d, "Degraded", "True").as_deref() == Some("BackupFailed")
    })
    .await;
    let message = condition_message(&dkvs.get("ledger").await.unwrap(), "Degraded", None);
    eprintln!("blocked deletion after {blocked:?}: {message}");
    assert!(message.contains("dkv.io/skip-final-backup"), "{message}");
    assert!(!message.contains("not-the-secret"), "{message}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        dkvs.get_opt("ledger").await.unwrap().is_some(),
        "still blocked"
    );
    annotate(&dkvs, "ledger", "dkv.io/skip-final-backup", "true").await;
    wait_gone(&dkvs, "ledger", Duration::from_secs(60)).await;
    operator.stop().await;
}
