//! What the backup and restore tests share: credentials Secrets and waiting
//! for a `DistributedKVBackup` to finish.

use std::time::{Duration, Instant};

use dkv_api::DistributedKVBackup;
use dkv_api::backup::v1alpha1::{BackupArtifact, BackupPhase};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::etcd_cluster::patch_spec;

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

/// Creates the Secret `name` in `ns` holding the backup encryption key
/// `key_hex` under `key`, where a `keySecret` without `key` looks.
pub async fn create_key_secret(client: &Client, ns: &str, name: &str, key_hex: &str) {
    create_secret(
        client,
        ns,
        name,
        vec![("key".to_owned(), key_hex.to_owned())],
    )
    .await;
}

/// Creates the `DistributedKVBackup` `name` in `ns` with `spec` and checks
/// that it completed.
pub async fn create_backup(
    client: &Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> DistributedKVBackup {
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), ns);
    let backup: DistributedKVBackup = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {"name": name, "namespace": ns}, "spec": spec
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    wait_backup_completed(&backups, name).await
}

/// [`create_backup`], returning the artifact the completed backup records.
pub async fn create_backup_artifact(
    client: &Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> BackupArtifact {
    create_backup(client, ns, name, spec)
        .await
        .status
        .unwrap()
        .artifact
        .unwrap()
}

/// Takes an on-demand backup `name` of `cluster` (a `DistributedKVBackup`
/// to the cluster's own destination) and checks that it completed.
pub async fn backup_now(
    client: &Client,
    ns: &str,
    cluster: &str,
    name: &str,
) -> DistributedKVBackup {
    create_backup(client, ns, name, json!({"cluster": cluster})).await
}

/// The one-member cluster `name` in `ns` bootstrapped by restoring from
/// `source` (a `spec.bootstrap.restore`).
pub fn restored_cluster(
    ns: &str,
    name: &str,
    image: &str,
    source: serde_json::Value,
) -> dkv_api::DistributedKV {
    super::cluster(
        ns,
        name,
        1,
        image,
        json!({"bootstrap": {"restore": source}}),
    )
}

/// Creates a [`restored_cluster`] for each `(name, source)` in `restores`,
/// all before waiting on any, then checks that each settles holding exactly
/// `expected` (the test keys and values, in order).
pub async fn restore_clusters_holding(
    client: &Client,
    ns: &str,
    image: &str,
    restores: Vec<(&str, serde_json::Value)>,
    expected: &[(String, String)],
) {
    let dkvs: Api<dkv_api::DistributedKV> = Api::namespaced(client.clone(), ns);
    let names: Vec<&str> = restores.iter().map(|(name, _)| *name).collect();
    for (name, source) in restores {
        dkvs.create(
            &PostParams::default(),
            &restored_cluster(ns, name, image, source),
        )
        .await
        .unwrap();
    }
    for name in names {
        super::etcd_cluster::wait_settled(&dkvs, name, 1).await;
        assert_eq!(
            super::etcd_cluster::test_keys(client, ns, name).await,
            expected,
            "restored cluster {ns}/{name}"
        );
    }
}

/// What a test of backups to a real S3 server starts with: moto with a
/// bucket, kube-local with the kubelet, the namespace, the operator, and the
/// Secret `s3-creds` holding moto's credentials.
pub struct WithObjectStore {
    pub moto: dkv_backup::testing::MotoServer,
    pub env: kube_local::Environment,
    pub client: Client,
    pub operator: super::RunningOperator,
}

/// [`WithObjectStore`] with the bucket `dkv-backups`.
pub async fn with_object_store(ns: &str) -> WithObjectStore {
    with_object_store_in(ns, "dkv-backups").await
}

/// [`WithObjectStore`] with the bucket `bucket`.
pub async fn with_object_store_in(ns: &str, bucket: &str) -> WithObjectStore {
    let moto = dkv_backup::testing::MotoServer::start(bucket);
    let (env, client, operator) = super::running_operator(ns).await;
    create_secret(&client, ns, "s3-creds", moto.env()).await;
    WithObjectStore {
        moto,
        env,
        client,
        operator,
    }
}

impl WithObjectStore {
    /// `spec.backup` to moto under `prefix`, with `s3-creds`, on a schedule
    /// that never fires during a test (backups are taken on demand).
    pub fn backup_spec(&self, prefix: &str) -> serde_json::Value {
        json!({"destination": {"uri": self.moto.uri(prefix), "credentialsSecret": "s3-creds"},
               "schedule": "0 0 1 1 *"})
    }
}

/// The security scenario: a 3-member cluster with TLS, authentication and
/// backups to moto (plus `extra_spec`) forms, turns authentication on, is
/// backed up on demand (`backup`) and scaled to 4 members.
pub async fn exercise_secured_cluster(
    setup: &WithObjectStore,
    ns: &str,
    cluster: &str,
    backup: &str,
    extra_spec: serde_json::Value,
) {
    let mut spec = json!({"tls": {}, "auth": {"enabled": true},
                          "backup": setup.backup_spec(backup)});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    let client = &setup.client;
    let dkvs = super::create_cluster(
        client,
        ns,
        cluster,
        3,
        "registry.k8s.io/etcd:3.5.16-0",
        spec,
    )
    .await;
    super::etcd_cluster::wait_settled(&dkvs, cluster, 3).await;
    super::wait_auth_enabled(client, ns, cluster).await;
    backup_now(client, ns, cluster, backup).await;
    patch_spec(&dkvs, cluster, json!({"size": 4})).await;
    super::etcd_cluster::wait_settled(&dkvs, cluster, 4).await;
}

/// The newest revision any continuous backup chain of `namespace/cluster`
/// has stored under `destination` (0: none), from the segment names.
pub async fn stored_up_to(
    store: &dkv_backup::Store,
    destination: &dkv_backup::Location,
    namespace: &str,
    cluster: &str,
) -> i64 {
    let continuous =
        dkv_backup::continuous::archive::continuous_location(destination, namespace, cluster);
    dkv_backup::continuous::archive::chain_ends(store, &continuous)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|(_, last)| last)
        .max()
        .unwrap_or(0)
}

/// Waits (a minute at most) until the continuous backup of
/// `namespace/cluster` under `destination` has stored `revision`.
pub async fn wait_stored(
    store: &dkv_backup::Store,
    destination: &dkv_backup::Location,
    namespace: &str,
    cluster: &str,
    revision: i64,
) {
    let started = Instant::now();
    while stored_up_to(store, destination, namespace, cluster).await < revision {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "continuous backup of {namespace}/{cluster} did not reach revision {revision}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A one-member cluster `name` created with `backup` as its
/// `spec.backup` (continuous backup on, to `store`'s `destination`), once
/// settled, with `keys` test keys (`dkv_backup::testing::test_key`) written
/// and recorded by its continuous backup. Returns the cluster API and the
/// keys and values written, in order, for comparing restores with.
#[allow(clippy::too_many_arguments)]
pub async fn cluster_with_recorded_keys(
    client: &Client,
    ns: &str,
    name: &str,
    image: &str,
    backup: serde_json::Value,
    store: &dkv_backup::Store,
    destination: &dkv_backup::Location,
    keys: usize,
) -> (Api<dkv_api::DistributedKV>, Vec<(String, String)>) {
    let dkvs = super::create_cluster(client, ns, name, 1, image, json!({ "backup": backup })).await;
    super::etcd_cluster::wait_settled(&dkvs, name, 1).await;
    let endpoints = super::etcd_cluster::member_endpoints(client, ns, name).await;
    let Some(mut etcd) = super::etcd_cluster::connect(endpoints.clone()).await else {
        panic!("no member of {ns}/{name} answered at {endpoints:?}");
    };
    let written: Vec<(String, String)> = (0..keys).map(dkv_backup::testing::test_key).collect();
    for (key, value) in &written {
        super::etcd_cluster::put_retrying(&mut etcd, key, value).await;
    }
    let revision = etcd
        .get("/dkv-test/", None)
        .await
        .unwrap_or_else(|e| panic!("reading {ns}/{name}: {e}"))
        .header()
        .map_or(0, |h| h.revision());
    wait_stored(store, destination, ns, name, revision).await;
    (dkvs, written)
}
