//! `spec.bootstrap.restore` end to end, on kube-local with real etcd and a
//! real S3 server (moto): a backup of a running cluster becomes a new
//! cluster whose members run their etcd image's own restore tool — exactly
//! the keys of the backup, a new cluster ID — and a corrupted artifact is
//! refused before any etcd starts, with `Degraded/RestoreFailed` saying why.

use std::future::Future;
use std::time::{Duration, Instant};

use dkv_api::distributedkv::v1alpha1::Phase;
use dkv_backup::Location;
use dkv_backup::testing::{MotoServer, test_key};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use dkv_test_support as support;

use support::backups::{WithObjectStore, backup_now, create_backup_artifact, create_secret};

use support::etcd_cluster::{
    condition_message, condition_reason, connect, member_endpoints, put_retrying, wait_for,
    wait_settled,
};

const NS: &str = "restores";
const KEYS: usize = 300;

/// Runs `read` against the cluster's members, reconnecting and trying again
/// for a while: right after a cluster settles, one endpoint may still be a
/// pod that is (re)starting.
async fn read_cluster<T, F, Fut>(client: &kube::Client, cluster: &str, read: F) -> T
where
    F: Fn(etcd_client::Client) -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let started = Instant::now();
    loop {
        let endpoints = member_endpoints(client, NS, cluster).await;
        let error = match connect(endpoints.clone()).await {
            Some(etcd) => match read(etcd).await {
                Ok(value) => return value,
                Err(e) => e.to_string(),
            },
            None => "no member answered".to_owned(),
        };
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "reading {cluster} ({endpoints:?}): {error}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every key the test wrote (under `/dkv-test/`), read linearizably.
async fn test_keys(client: &kube::Client, cluster: &str) -> Vec<(String, String)> {
    read_cluster(client, cluster, |mut etcd| async move {
        // etcd returns a range in key order.
        let response = etcd
            .get(
                "/dkv-test/",
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await?;
        Ok(dkv_backup::testing::text_pairs(&response))
    })
    .await
}

async fn cluster_id(client: &kube::Client, cluster: &str) -> u64 {
    read_cluster(client, cluster, |mut etcd| async move {
        Ok(etcd
            .status()
            .await?
            .header()
            .expect("a status has a header")
            .cluster_id())
    })
    .await
}

fn init_container_names(sts: &StatefulSet) -> Vec<String> {
    sts.spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.init_containers.as_ref())
        .map(|c| c.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_restores_into_a_new_cluster_and_a_corrupted_one_starts_nothing() {
    let moto = MotoServer::start("dkv-restores");
    let (_env, client, operator) = support::running_operator(NS).await;
    let image = "registry.k8s.io/etcd:3.5.16-0";
    let dkvs = support::create_cluster(&client, NS, "orders", 3, image, json!({})).await;
    wait_settled(&dkvs, "orders", 3).await;

    let mut etcd = connect(member_endpoints(&client, NS, "orders").await)
        .await
        .unwrap();
    for i in 0..KEYS {
        let (key, value) = test_key(i);
        put_retrying(&mut etcd, &key, &value).await;
    }
    let expected: Vec<(String, String)> = (0..KEYS).map(test_key).collect();
    assert_eq!(test_keys(&client, "orders").await, expected);
    let source_id = cluster_id(&client, "orders").await;

    create_secret(&client, NS, "s3-creds", moto.env()).await;
    let artifact = create_backup_artifact(
        &client,
        NS,
        "orders-manual",
        json!({"cluster": "orders", "destination": {"uri": moto.uri("prod"), "credentialsSecret": "s3-creds"}}),
    )
    .await;
    // Writes after the backup are not in it.
    put_retrying(&mut etcd, "after-the-backup", "x").await;
    // The newest revision a client of the source has seen.
    let source_revision = etcd
        .get("after-the-backup", None)
        .await
        .unwrap()
        .header()
        .expect("a response has a header")
        .revision();

    // A new cluster from the backup record (credentials: the record's own).
    let started = Instant::now();
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            "copy",
            3,
            image,
            json!({"bootstrap": {"restore": {"backupName": "orders-manual"}}}),
        ),
    )
    .await
    .unwrap();
    let restoring = wait_for(&dkvs, "copy", "phase Restoring", |d| {
        d.status.as_ref().and_then(|s| s.phase) == Some(Phase::Restoring)
    })
    .await;
    let copy = dkvs.get("copy").await.unwrap();
    eprintln!(
        "copy Restoring after {restoring:?}: {:?}",
        copy.status.as_ref().map(|s| s
            .conditions
            .iter()
            .map(|c| (&c.type_, &c.reason, &c.message))
            .collect::<Vec<_>>())
    );
    assert_eq!(
        condition_reason(&copy, "Progressing", "True").as_deref(),
        Some("Restoring")
    );
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    assert_eq!(
        init_container_names(&statefulsets.get("copy").await.unwrap()),
        ["restore-fetch", "restore", "member-init"]
    );
    wait_settled(&dkvs, "copy", 3).await;
    eprintln!("copy restored and settled after {:?}", started.elapsed());

    assert_eq!(
        test_keys(&client, "copy").await,
        expected,
        "exactly the keys of the backup"
    );
    let mut restored = connect(member_endpoints(&client, NS, "copy").await)
        .await
        .unwrap();
    assert_eq!(
        restored
            .get("after-the-backup", None)
            .await
            .unwrap()
            .count(),
        0,
        "a write after the backup is not in it"
    );
    let restored_id = cluster_id(&client, "copy").await;
    assert_ne!(restored_id, source_id, "a new cluster ID");
    // Revisions never go back: the copy starts above every revision the
    // source served, and a client resuming a watch from one is told it was
    // compacted (and relists) instead of missing changes.
    let restored_revision = restored
        .get("/dkv-test/", None)
        .await
        .unwrap()
        .header()
        .expect("a response has a header")
        .revision();
    assert!(
        restored_revision > source_revision && restored_revision > 1_000_000_000,
        "the copy's revision {restored_revision} is not far above the source's {source_revision}"
    );
    let mut events = restored
        .watch(
            "/dkv-test/",
            Some(
                etcd_client::WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(source_revision),
            ),
        )
        .await
        .unwrap();
    let compacted = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.message().await {
                Ok(Some(response)) if response.canceled() => break response.compact_revision(),
                Ok(Some(_)) => continue,
                other => panic!("the watch ended without being cancelled: {other:?}"),
            }
        }
    })
    .await
    .expect("a watch from a revision of the source is cancelled at once");
    assert!(
        compacted > source_revision,
        "compacted at {compacted}, the source's revision was {source_revision}"
    );
    let members = restored.member_list().await.unwrap();
    let mut names: Vec<&str> = members.members().iter().map(|m| m.name()).collect();
    names.sort_unstable();
    assert_eq!(names, ["copy-0", "copy-1", "copy-2"]);
    put_retrying(&mut restored, "written-to-the-copy", "y").await;
    assert_eq!(
        etcd.get("written-to-the-copy", None).await.unwrap().count(),
        0,
        "the copy is a separate cluster"
    );

    // Once formed, the template no longer restores and the record of the
    // source is gone from the StatefulSet.
    let started = Instant::now();
    loop {
        let sts = statefulsets.get("copy").await.unwrap();
        let annotated = sts
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("dkv.io/restore-source"));
        if init_container_names(&sts) == ["member-init"] && !annotated {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the restore steps stay in the template: {:?}",
            init_container_names(&sts)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // ... and dropping the steps restarted no member: they ran once, before
    // each member first started. The members are still the pods that ran
    // them, once the StatefulSet's controller and the operator's passes
    // have seen the new template (a restart, one member at a time, would
    // begin within a second or two).
    support::eventually(
        "the StatefulSet's controller to see the template",
        Duration::from_secs(30),
        Duration::from_millis(250),
        async || {
            let sts = statefulsets.get("copy").await.ok()?;
            (sts.status.and_then(|s| s.observed_generation) == sts.metadata.generation)
                .then_some(())
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for _ in 0..20 {
        let members = pods
            .list(&ListParams::default().labels(&format!(
                "dkv.io/cluster=copy,{}=etcd",
                dkv_api::labels::COMPONENT_KEY
            )))
            .await
            .unwrap()
            .items;
        assert_eq!(members.len(), 3);
        for pod in &members {
            let steps: Vec<&str> = pod
                .spec
                .iter()
                .flat_map(|s| s.init_containers.iter().flatten())
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(
                steps,
                ["restore-fetch", "restore", "member-init"],
                "{} was re-created after the restore",
                pod.metadata.name.as_deref().unwrap_or_default()
            );
        }
        let copy = dkvs.get("copy").await.unwrap();
        assert!(
            support::etcd_cluster::settled_at(&copy, 3),
            "the copy left its settled state: {:?}",
            copy.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // A corrupted artifact: refused by the fetch step, no etcd ever starts.
    let key = Location::parse(&artifact.uri)
        .unwrap()
        .path()
        .as_ref()
        .to_owned();
    moto.corrupt(&key, 4096);
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            "broken",
            3,
            image,
            json!({"bootstrap": {"restore": {"backupName": "orders-manual"}}}),
        ),
    )
    .await
    .unwrap();
    wait_for(&dkvs, "broken", "Degraded/RestoreFailed", |d| {
        condition_reason(d, "Degraded", "True").as_deref() == Some("RestoreFailed")
    })
    .await;
    let broken = dkvs.get("broken").await.unwrap();
    let message = condition_message(&broken, "Degraded", None);
    eprintln!("broken: {message}");
    assert!(
        message.contains("sha256") && message.contains(&artifact.sha256),
        "the mismatch is named: {message}"
    );
    // Give the pods time to (wrongly) get further, then check that no etcd
    // container has run in any of them.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let broken_pods = pods
        .list(&ListParams::default().labels("dkv.io/cluster=broken"))
        .await
        .unwrap()
        .items;
    assert!(!broken_pods.is_empty());
    for pod in &broken_pods {
        let status = pod.status.as_ref().unwrap();
        for c in status.container_statuses.iter().flatten() {
            let ran = [c.state.as_ref(), c.last_state.as_ref()]
                .into_iter()
                .flatten()
                .any(|s| s.running.is_some() || s.terminated.is_some());
            assert!(!ran, "{} ran in {:?}", c.name, pod.metadata.name);
        }
        let restore_step = status
            .init_container_statuses
            .iter()
            .flatten()
            .find(|c| c.name == "restore")
            .unwrap();
        assert!(
            [
                restore_step.state.as_ref(),
                restore_step.last_state.as_ref()
            ]
            .into_iter()
            .flatten()
            .all(|s| s.running.is_none() && s.terminated.is_none()),
            "the restore tool never ran on the corrupt artifact: {restore_step:?}"
        );
    }
    assert_eq!(
        broken.status.as_ref().and_then(|s| s.phase),
        Some(Phase::Degraded)
    );

    operator.stop().await;
}

/// etcd 3.4 restores with its etcdctl (no etcdutl yet), and a restore can
/// name an artifact by URI: its sha256 then comes from the record beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_etcd_3_4_cluster_restores_from_an_artifact_uri() {
    let moto = MotoServer::start("dkv-restores-34");
    let (_env, client, operator) = support::running_operator(NS).await;
    let image = "registry.k8s.io/etcd:3.4.23-0";
    let dkvs = support::create_cluster(&client, NS, "legacy", 1, image, json!({})).await;
    wait_settled(&dkvs, "legacy", 1).await;
    let mut etcd = connect(member_endpoints(&client, NS, "legacy").await)
        .await
        .unwrap();
    for i in 0..KEYS {
        let (key, value) = test_key(i);
        put_retrying(&mut etcd, &key, &value).await;
    }
    let source_id = cluster_id(&client, "legacy").await;

    create_secret(&client, NS, "s3-creds", moto.env()).await;
    let artifact = create_backup_artifact(
        &client,
        NS,
        "legacy-manual",
        json!({"cluster": "legacy", "destination": {"uri": moto.uri("old"), "credentialsSecret": "s3-creds"}}),
    )
    .await;
    assert_eq!(artifact.etcd_version.as_deref(), Some("3.4.23"));

    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            "legacy-copy",
            3,
            image,
            json!({"bootstrap": {"restore": {"uri": artifact.uri, "credentialsSecret": "s3-creds"}}}),
        ),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, "legacy-copy", 3).await;
    let expected: Vec<(String, String)> = (0..KEYS).map(test_key).collect();
    assert_eq!(test_keys(&client, "legacy-copy").await, expected);
    assert_ne!(cluster_id(&client, "legacy-copy").await, source_id);

    operator.stop().await;
}

/// `spec.recovery.policy: RestoreFromBackup`: when a majority is lost for
/// good, the cluster is recreated from its newest backup — every member
/// restarts from it as a new cluster; writes after the backup are gone (the
/// policy's documented price), everything in the backup is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quorum_lost_for_good_is_recovered_from_the_newest_backup_by_policy() {
    let WithObjectStore {
        moto,
        env,
        client,
        operator,
    } = support::backups::with_object_store_in(NS, "dkv-recovery").await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        "ledger",
        3,
        "registry.k8s.io/etcd:3.5.16-0",
        json!({
            "backup": {"destination": {"uri": moto.uri("ledger"), "credentialsSecret": "s3-creds"}, "schedule": "0 0 1 1 *"},
            "recovery": {"policy": "RestoreFromBackup", "afterSeconds": 10}
        }),
    )
    .await;
    wait_settled(&dkvs, "ledger", 3).await;
    let mut etcd = connect(member_endpoints(&client, NS, "ledger").await)
        .await
        .unwrap();
    for i in 0..KEYS {
        let (key, value) = test_key(i);
        put_retrying(&mut etcd, &key, &value).await;
    }
    let old_id = cluster_id(&client, "ledger").await;

    backup_now(&client, NS, "ledger", "ledger-manual").await;
    wait_for(&dkvs, "ledger", "lastBackup", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.last_backup.as_ref())
            .is_some_and(|b| b.name == "ledger-manual")
    })
    .await;
    // Acknowledged after the backup: the policy gives these up.
    put_retrying(&mut etcd, "after-the-backup", "lost").await;

    // Two of three members hang for good.
    let kubelet = env.kubelet().unwrap();
    for member in ["ledger-1", "ledger-2"] {
        kubelet.pause_container(NS, member, "etcd").unwrap();
    }
    let started = Instant::now();
    wait_for(&dkvs, "ledger", "a restore from backup", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.operation.as_ref())
            .is_some_and(|op| format!("{:?}", op.kind) == "RestoreFromBackup")
    })
    .await;
    eprintln!("restore from backup began after {:?}", started.elapsed());
    let restoring = dkvs.get("ledger").await.unwrap();
    assert_eq!(
        condition_reason(&restoring, "Progressing", "True").as_deref(),
        Some("Restoring")
    );
    wait_settled(&dkvs, "ledger", 3).await;
    eprintln!(
        "recreated from the backup, 3 healthy voters after {:?}",
        started.elapsed()
    );

    let expected: Vec<(String, String)> = (0..KEYS).map(test_key).collect();
    assert_eq!(test_keys(&client, "ledger").await, expected);
    let mut etcd = connect(member_endpoints(&client, NS, "ledger").await)
        .await
        .unwrap();
    assert_eq!(
        etcd.get("after-the-backup", None).await.unwrap().count(),
        0,
        "what came after the backup is not in it"
    );
    assert_ne!(
        cluster_id(&client, "ledger").await,
        old_id,
        "a new cluster: no member of the lost one can talk to it"
    );
    put_retrying(&mut etcd, "after-the-restore", "kept").await;
    // The template no longer restores once the cluster serves again: the
    // members restart onto it one at a time, then nothing is in flight.
    wait_for(&dkvs, "ledger", "converged after the restore", |d| {
        d.status.as_ref().is_some_and(|s| s.operation.is_none())
            && condition_reason(d, "Progressing", "False").as_deref() == Some("Converged")
    })
    .await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    while init_container_names(&statefulsets.get("ledger").await.unwrap()) != ["member-init"] {
        assert!(started.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    operator.stop().await;
}
