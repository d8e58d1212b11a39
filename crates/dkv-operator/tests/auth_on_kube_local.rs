//! `spec.auth.enabled` end to end on kube-local with real etcd: dkv turns
//! etcd authentication on once the cluster has formed, keeps the root
//! credentials in the documented Secret, refuses nobody it should not and
//! everybody it should, and still backs up, upgrades (3.4 → 3.5) and scales
//! the cluster, authenticating as root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use dkv_api::backup::v1alpha1::BackupPhase;
use dkv_api::{DistributedKV, DistributedKVBackup};
use dkv_backup::testing::MotoServer;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::backups::{create_secret, wait_backup_finished};
use support::etcd_cluster::{member_endpoints, wait_for, wait_settled};

const NS: &str = "ledger";
const CLUSTER: &str = "accounts";

async fn root_secret(client: &Client) -> Secret {
    Api::<Secret>::namespaced(client.clone(), NS)
        .get(&format!("{CLUSTER}-etcd-root"))
        .await
        .unwrap()
}

fn value(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

fn options() -> etcd_client::ConnectOptions {
    etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_auth_on_strangers_are_refused_and_the_operator_still_backs_up_upgrades_and_scales() {
    let moto = MotoServer::start("dkv-backups");
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let operator = support::RunningOperator::start(client.clone(), false);
    create_secret(&client, NS, "s3-creds", moto.env()).await;
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            CLUSTER,
            3,
            "registry.k8s.io/etcd:3.4.23-0",
            json!({"auth": {"enabled": true},
                   "backup": {"destination": {"uri": moto.uri("auth"), "credentialsSecret": "s3-creds"},
                              "schedule": "0 0 1 1 *"}}),
        ),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, CLUSTER, 3).await;

    // Authentication goes on after the cluster formed.
    let started = Instant::now();
    let secret = loop {
        let secret = root_secret(&client).await;
        if secret
            .annotations()
            .get("dkv.io/auth-enabled")
            .map(String::as_str)
            == Some("true")
        {
            break secret;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "authentication not enabled: {:?}",
            secret.annotations()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let (user, password) = (value(&secret, "username"), value(&secret, "password"));
    assert_eq!(user, "root");
    assert!(password.len() >= 32);

    let endpoints = member_endpoints(&client, NS, CLUSTER).await;
    let mut stranger = etcd_client::Client::connect(&endpoints, Some(options()))
        .await
        .unwrap();
    let refused = stranger.put("k", "v", None).await;
    assert!(refused.is_err(), "an unauthenticated write was accepted");
    eprintln!("unauthenticated write: {}", refused.err().unwrap());
    let wrong = etcd_client::Client::connect(
        &endpoints,
        Some(options().with_user("root", "not-the-password")),
    )
    .await;
    assert!(wrong.is_err(), "a wrong password was accepted");
    let root = || async {
        etcd_client::Client::connect(
            member_endpoints(&client, NS, CLUSTER).await,
            Some(options().with_user(user.clone(), password.clone())),
        )
        .await
        .unwrap()
    };
    support::etcd_cluster::put_retrying(&mut root().await, "balance", "42").await;

    // A backup: the agent authenticates as root.
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    let backup: DistributedKVBackup = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {"name": "with-auth", "namespace": NS}, "spec": {"cluster": CLUSTER}
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    let status = wait_backup_finished(&backups, "with-auth")
        .await
        .status
        .unwrap();
    assert_eq!(
        status.phase,
        Some(BackupPhase::Completed),
        "{:?}",
        status.message
    );

    // An upgrade and a scale-up: the operator authenticates as root.
    dkvs.patch(
        CLUSTER,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"image": "registry.k8s.io/etcd:3.5.16-0"}})),
    )
    .await
    .unwrap();
    wait_for(&dkvs, CLUSTER, "all members on 3.5.16", |d| {
        support::etcd_cluster::settled_at(d, 3)
            && d.status.as_ref().and_then(|s| s.current_version.as_deref()) == Some("3.5.16")
    })
    .await;
    dkvs.patch(
        CLUSTER,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 5}})),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, CLUSTER, 5).await;
    let mut etcd = root().await;
    assert_eq!(etcd.member_list().await.unwrap().members().len(), 5);
    let read = etcd.get("balance", None).await.unwrap();
    assert_eq!(read.kvs()[0].value_str().unwrap(), "42");
    // Still refused without credentials.
    let mut stranger = etcd_client::Client::connect(
        member_endpoints(&client, NS, CLUSTER).await,
        Some(options()),
    )
    .await
    .unwrap();
    assert!(stranger.get("balance", None).await.is_err());

    // The password is nowhere but in its Secret.
    let mut visible = String::new();
    for part in [
        serde_json::to_string(&dkvs.get(CLUSTER).await.unwrap()).unwrap(),
        serde_json::to_string(
            &Api::<Event>::namespaced(client.clone(), NS)
                .list(&Default::default())
                .await
                .unwrap()
                .items,
        )
        .unwrap(),
        serde_json::to_string(
            &Api::<StatefulSet>::namespaced(client.clone(), NS)
                .list(&Default::default())
                .await
                .unwrap()
                .items,
        )
        .unwrap(),
        serde_json::to_string(
            &Api::<CronJob>::namespaced(client.clone(), NS)
                .list(&Default::default())
                .await
                .unwrap()
                .items,
        )
        .unwrap(),
        serde_json::to_string(
            &Api::<Job>::namespaced(client.clone(), NS)
                .list(&Default::default())
                .await
                .unwrap()
                .items,
        )
        .unwrap(),
        serde_json::to_string(&backups.list(&Default::default()).await.unwrap().items).unwrap(),
    ] {
        visible.push_str(&part);
    }
    assert!(!visible.contains(&password), "the root password leaked");
    operator.stop().await;
}
