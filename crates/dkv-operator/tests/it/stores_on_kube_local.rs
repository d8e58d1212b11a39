//! Backups through the operator to the object stores other than S3, on
//! kube-local with real etcd, the operator in-process and a real server
//! reached only through the credentials Secret a user writes: Azure Blob
//! Storage (Azurite, shared-key signatures checked, its endpoint in
//! `AZURE_STORAGE_ENDPOINT`) and Google Cloud Storage (fake-gcs-server,
//! its address in `STORAGE_EMULATOR_HOST`; dkv writes through the JSON
//! API). A cluster with encrypted continuous backup takes an on-demand
//! snapshot that the bucket really holds, and both the snapshot and the
//! newest point of its continuous backup restore into new clusters with
//! exactly the keys written; retention then deletes the expired snapshot's
//! objects and keeps the newer one's. (S3 runs the same paths in the other
//! `*_on_kube_local` suites; dkv-backup's `every_store` covers each store
//! below the operator.)

use std::time::{Duration, Instant};

use dkv_api::DistributedKVBackup;
use dkv_backup::testing::{StoreKind, StoreServer};
use dkv_backup::{Location, Store};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use dkv_test_support as support;

use support::backups::{
    cluster_with_recorded_keys, create_backup_artifact, create_key_secret, create_secret,
    restore_clusters_holding,
};

const NS: &str = "stores";
const IMAGE: &str = "registry.k8s.io/etcd:3.5.16-0";
const KEYS: usize = 100;
const KEY_HEX: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// Encrypted continuous and on-demand backups of one cluster to `kind`,
/// restored from the snapshot and from the newest point.
async fn backups_restore_through_the_operator(kind: StoreKind) {
    let server = StoreServer::start(kind, "dkv-stores");
    let (_env, client, _operator) = support::running_operator(NS).await;
    create_secret(&client, NS, "store-creds", server.env()).await;
    create_key_secret(&client, NS, "store-key", KEY_HEX).await;
    let uri = server.uri("kube");
    let destination = Location::parse(&uri).unwrap();
    let store = Store::open(&destination, &server.config()).unwrap();
    let (_dkvs, expected) = cluster_with_recorded_keys(
        &client,
        NS,
        "orders",
        IMAGE,
        json!({
            "destination": {"uri": uri, "credentialsSecret": "store-creds"},
            "schedule": "0 0 1 1 *",
            "continuous": {"enabled": true, "interval": "1s"},
            "encryption": {"keySecret": {"name": "store-key"}},
            "retention": {"maxAge": "1d"}
        }),
        &store,
        &destination,
        KEYS,
    )
    .await;

    let artifact = create_backup_artifact(&client, NS, "orders-manual", on_demand()).await;
    let prefix = format!("{}://dkv-stores/kube/{NS}/orders/orders-", kind.scheme());
    assert!(artifact.uri.starts_with(&prefix), "{artifact:?}");
    assert!(artifact.uri.ends_with(".db.zst.enc"), "{artifact:?}");
    let object = object_path(&artifact.uri);
    let digest = server.digest(&object).await;
    assert_eq!(
        (digest.size as i64, digest.sha256.as_str()),
        (artifact.size_bytes, artifact.sha256.as_str())
    );

    restore_clusters_holding(
        &client,
        NS,
        IMAGE,
        vec![
            (
                "copy",
                json!({"backupName": "orders-manual",
                       "encryption": {"keySecret": {"name": "store-key"}}}),
            ),
            (
                "newest",
                json!({"uri": uri, "credentialsSecret": "store-creds", "sourceCluster": "orders",
                       "encryption": {"keySecret": {"name": "store-key"}}}),
            ),
        ],
        &expected,
    )
    .await;

    // Retention (maxAge 1d): once a newer backup exists and the first is
    // two days old, its record goes and so do its objects; the newer
    // one's stay.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let later = create_backup_artifact(&client, NS, "orders-later", on_demand()).await;
    let then = Time(jiff::Timestamp::now() - jiff::SignedDuration::from_hours(48));
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    backups
        .patch_status(
            "orders-manual",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"startTime": then, "completionTime": then}})),
        )
        .await
        .unwrap();
    let started = Instant::now();
    while backups.get_opt("orders-manual").await.unwrap().is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "orders-manual was not pruned"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let objects = server.objects().await;
    let later_object = object_path(&later.uri);
    for key in [object.clone(), format!("{object}.json")] {
        assert!(!objects.contains(&key), "{key} still in {objects:?}");
    }
    for key in [later_object.clone(), format!("{later_object}.json")] {
        assert!(objects.contains(&key), "{key} missing from {objects:?}");
    }
}

/// The spec of an on-demand backup of `orders` to its own destination.
fn on_demand() -> serde_json::Value {
    json!({"cluster": "orders"})
}

/// The object an artifact's URI names, as the store server lists it.
fn object_path(uri: &str) -> String {
    Location::parse(uri).unwrap().path().as_ref().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azure_backups_restore_through_the_operator() {
    backups_restore_through_the_operator(StoreKind::Azure).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gcs_backups_restore_through_the_operator() {
    backups_restore_through_the_operator(StoreKind::Gcs).await;
}
