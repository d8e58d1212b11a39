//! Encrypted, compressed backups end to end, on kube-local with real etcd,
//! the operator in-process and a real S3 server (moto): a cluster with
//! `spec.backup.encryption` stores its on-demand snapshot and its
//! continuous backup only as ciphertext (no value it holds appears in any
//! stored object); a restore without the key, or with another key, fails
//! before any etcd starts and names the key it needs; with the key, both a
//! snapshot restore and a restore from continuous backup hold exactly the
//! source's keys. The snapshot is verified (`spec.verify`: restored into a
//! scratch cluster, key count and hash compared), and verified again on
//! demand once damaged in the store, which fails and says why. Without its
//! key Secret nothing is stored unencrypted: continuous backup stops and a
//! backup fails, both naming the Secret.

use std::time::{Duration, Instant};

use dkv_api::DistributedKVBackup;
use dkv_api::backup::v1alpha1::{BackupVerification, VerificationPhase};
use dkv_api::conditions::{reasons, types};
use dkv_backup::testing::{MotoServer, test_key};
use dkv_backup::{Key, Location, Store};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use dkv_test_support as support;

use support::backups::{
    cluster_with_recorded_keys, create_backup_artifact, create_key_secret, create_secret,
    restore_clusters_holding, restored_cluster, wait_backup_finished,
};
use support::etcd_cluster::{
    annotate, condition_message, condition_reason, wait_for, wait_restore_refused,
};

const NS: &str = "encrypted";
const IMAGE: &str = "registry.k8s.io/etcd:3.5.16-0";
const KEYS: usize = 200;
/// The key, as `openssl rand -hex 32` prints it.
const KEY_HEX: &str = "6b2f0c3e9a41d5877e0f1b2c3d4e5f60718293a4b5c6d7e8f90112233445566a";
const OTHER_KEY_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// The verification of `backup` once it has finished (answering `request`).
async fn wait_verification(
    backups: &Api<DistributedKVBackup>,
    backup: &str,
    request: Option<&str>,
) -> BackupVerification {
    let started = Instant::now();
    loop {
        let verification = backups
            .get(backup)
            .await
            .unwrap()
            .status
            .and_then(|s| s.verification);
        if let Some(v) = &verification
            && v.request.as_deref() == request
            && matches!(
                v.phase,
                Some(VerificationPhase::Verified | VerificationPhase::Failed)
            )
        {
            return v.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "the verification of {backup} did not finish: {verification:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether the DistributedKV `name` is gone within a minute.
async fn verify_scratch_gone(dkvs: &Api<dkv_api::DistributedKV>, name: &str) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if dkvs.get_opt(name).await.unwrap().is_none() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn encrypted_backups_restore_only_with_their_key() {
    let moto = MotoServer::start("dkv-encrypted");
    let (_env, client, operator) = support::running_operator(NS).await;
    create_secret(&client, NS, "s3-creds", moto.env()).await;
    create_key_secret(&client, NS, "vault-key", KEY_HEX).await;
    create_key_secret(&client, NS, "other-key", OTHER_KEY_HEX).await;
    let key_id = Key::parse(KEY_HEX.as_bytes()).unwrap().id().to_owned();
    let uri = moto.uri("vault");
    let destination = Location::parse(&uri).unwrap();
    let store = Store::open(&destination, &moto.config()).unwrap();
    let (dkvs, expected) = cluster_with_recorded_keys(
        &client,
        NS,
        "vault",
        IMAGE,
        json!({
            "destination": {"uri": uri, "credentialsSecret": "s3-creds"},
            "schedule": "0 0 1 1 *",
            "continuous": {"enabled": true, "interval": "1s"},
            "encryption": {"keySecret": {"name": "vault-key"}}
        }),
        &store,
        &destination,
        KEYS,
    )
    .await;

    // An on-demand snapshot: compressed, encrypted, the key's id recorded.
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    let artifact = create_backup_artifact(
        &client,
        NS,
        "vault-manual",
        json!({"cluster": "vault", "verify": true}),
    )
    .await;
    assert!(artifact.uri.ends_with(".db.zst.enc"), "{artifact:?}");
    assert_eq!(artifact.compression.as_deref(), Some("zstd"));
    assert_eq!(artifact.encryption_key_id.as_deref(), Some(key_id.as_str()));
    let content = artifact.content.unwrap();
    assert_eq!(content.keys, KEYS as i64, "{content:?}");

    // spec.verify: restored into a scratch cluster, compared, reported.
    let verified = wait_verification(&backups, "vault-manual", None).await;
    println!("verification: {verified:?}");
    assert_eq!(
        verified.phase,
        Some(VerificationPhase::Verified),
        "{verified:?}"
    );
    let message = verified.message.unwrap_or_default();
    assert!(
        message.contains(&format!("{KEYS} keys")) && message.contains("HashKV"),
        "{message}"
    );

    // Nothing the cluster holds is readable in the bucket: not in the
    // snapshots, not in the segments.
    let listing = moto.list();
    let (segments, snapshots) = (
        listing
            .objects
            .iter()
            .filter(|o| o.ends_with(".jsonl.zst.enc"))
            .count(),
        listing
            .objects
            .iter()
            .filter(|o| o.ends_with(".db.zst.enc"))
            .count(),
    );
    assert!(segments > 0 && snapshots >= 2, "{listing:?}");
    let needle = test_key(KEYS - 1).1;
    for object in &listing.objects {
        let bytes = store
            .get_small(&object.as_str().into())
            .await
            .unwrap_or_else(|e| panic!("{object}: {e}"));
        if object.ends_with(".enc") {
            assert!(
                dkv_backup::encryption::is_encrypted(&bytes),
                "{object} is not encrypted"
            );
        }
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "{object} holds a value in the clear"
        );
    }
    println!(
        "{} objects, {segments} encrypted segments, {snapshots} encrypted snapshots; key id {key_id}",
        listing.objects.len()
    );

    // Without the key: the fetch step refuses, naming the key it needs.
    let restore = |name: &str, source: serde_json::Value| restored_cluster(NS, name, IMAGE, source);
    dkvs.create(
        &PostParams::default(),
        &restore("no-key", json!({"backupName": "vault-manual"})),
    )
    .await
    .unwrap();
    let message = wait_restore_refused(&dkvs, "no-key").await;
    println!("no key: {message}");
    assert!(
        message.contains(&key_id) && message.contains("keySecret"),
        "{message}"
    );

    // Another key, from continuous backup: refused before anything starts.
    dkvs.create(
        &PostParams::default(),
        &restore(
            "wrong-key",
            json!({"uri": uri, "credentialsSecret": "s3-creds", "sourceCluster": "vault",
                   "encryption": {"keySecret": {"name": "other-key"}}}),
        ),
    )
    .await
    .unwrap();
    let message = wait_restore_refused(&dkvs, "wrong-key").await;
    println!("wrong key: {message}");
    let other_id = Key::parse(OTHER_KEY_HEX.as_bytes())
        .unwrap()
        .id()
        .to_owned();
    assert!(
        message.contains(&key_id) && message.contains(&other_id),
        "{message}"
    );

    // With the key: the snapshot, and the newest point of continuous backup.
    restore_clusters_holding(
        &client,
        NS,
        IMAGE,
        vec![
            (
                "copy",
                json!({"backupName": "vault-manual",
                       "encryption": {"keySecret": {"name": "vault-key"}}}),
            ),
            (
                "newest",
                json!({"uri": uri, "credentialsSecret": "s3-creds", "sourceCluster": "vault",
                       "encryption": {"keySecret": {"name": "vault-key", "key": "key"}}}),
            ),
        ],
        &expected,
    )
    .await;

    // The scratch cluster went once it reported.
    let scratch = verify_scratch_gone(&dkvs, "vault-manual-verify").await;
    assert!(scratch, "the scratch cluster is still there");

    // Damaged in the store, then verified again on demand: it fails, and
    // says why.
    let object = Location::parse(&artifact.uri)
        .unwrap()
        .path()
        .as_ref()
        .to_owned();
    moto.corrupt(&object, 100);
    annotate(&backups, "vault-manual", "dkv.io/verify", "after-damage").await;
    let failed = wait_verification(&backups, "vault-manual", Some("after-damage")).await;
    println!("verification after damage: {failed:?}");
    assert_eq!(failed.phase, Some(VerificationPhase::Failed), "{failed:?}");
    let message = failed.message.unwrap_or_default();
    assert!(message.contains("sha256"), "{message}");

    // The key Secret named by the spec is gone: nothing is stored
    // unencrypted instead. Continuous backup stops and says why; a new
    // backup fails at once, naming the Secret.
    dkvs.patch(
        "vault",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"backup": {"encryption": {"keySecret": {"name": "missing-key"}}}}}),
        ),
    )
    .await
    .unwrap();
    wait_for(&dkvs, "vault", "Degraded/ContinuousBackupFailing", |d| {
        condition_reason(d, types::DEGRADED, "True").as_deref()
            == Some(reasons::CONTINUOUS_BACKUP_FAILING)
    })
    .await;
    let message = condition_message(
        &dkvs.get("vault").await.unwrap(),
        types::DEGRADED,
        Some("True"),
    );
    println!("continuous backup without its key: {message}");
    assert!(message.contains("missing-key"), "{message}");
    let keyless: DistributedKVBackup = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {"name": "vault-keyless", "namespace": NS},
        "spec": {"cluster": "vault"}
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &keyless)
        .await
        .unwrap();
    let refused = wait_backup_finished(&backups, "vault-keyless").await;
    let status = refused.status.unwrap();
    println!("backup without its key: {:?}", status.message);
    assert_eq!(
        status.phase,
        Some(dkv_api::backup::v1alpha1::BackupPhase::Failed)
    );
    assert!(
        status
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("missing-key"),
        "{status:?}"
    );

    operator.stop().await;
}
