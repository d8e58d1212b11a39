//! Hibernation of a real 3-member etcd cluster managed by dkv on kube-local,
//! with the admission webhooks on and a writer recording every acknowledged
//! write: `spec.hibernation: true` stops every member (pods gone, volumes
//! kept, backups suspended) and the status says `Hibernated` without a
//! fault; scaling, upgrading and backup edits are refused through the real
//! `kubectl` with the way out; waking brings back the same members (IDs and
//! cluster ID) on their data, and no acknowledged write is lost. And with a
//! member hung, hibernation waits (saying for what) until it is back.

use std::process::Output;
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use dkv_api::conditions::{reasons, types};
use dkv_api::distributedkv::v1beta1::Phase;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use dkv_test_support as support;

use support::etcd_cluster::{
    Writer, assert_no_write_lost, condition_reason, member_ids, patch_spec, wait_for, wait_settled,
};

const NS: &str = "hibernation";
const IMAGE: &str = "registry.k8s.io/etcd:3.5.16-0";
const MEMBERS: &str = "dkv.io/cluster=orders,app.kubernetes.io/name=distributedkv";

fn kubectl(env: &kube_local::Environment, args: &[&str]) -> Output {
    std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(["-n", NS])
        .args(args)
        .output()
        .unwrap()
}

/// `kubectl args` fails, and says which field and how to get out.
fn refused(env: &kube_local::Environment, args: &[&str], field: &str) {
    let out = kubectl(env, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "kubectl {args:?} went through");
    assert!(
        stderr.contains(field) && stderr.contains("wake it first (spec.hibernation: false)"),
        "kubectl {args:?}: {stderr}"
    );
    eprintln!("kubectl {}: {}", args.join(" "), stderr.trim());
}

async fn events_with(client: &kube::Client, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.message.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hibernated_cluster_wakes_with_the_same_members_and_no_acknowledged_write_lost() {
    let (env, client, mut operator) = support::running_operator_with_webhooks(NS).await;

    let store = tempfile::tempdir().unwrap();
    let dkvs = support::create_cluster(
        &client,
        NS,
        "orders",
        3,
        IMAGE,
        // Plaintext (the defaulting webhook would turn TLS on): the writer
        // speaks plain gRPC.
        json!({
            "backup": {
                "destination": {"uri": format!("file://{}/", store.path().display())},
                "schedule": "@daily",
                "continuous": {"enabled": true, "interval": "1s"},
            },
            "tls": {"peer": {"mode": "Disabled"}, "client": {"mode": "Disabled"}},
        }),
    )
    .await;
    let formed = wait_settled(&dkvs, "orders", 3).await;
    eprintln!("3 healthy voters after {formed:?}");
    wait_for(&dkvs, "orders", "the cluster ID in status", |d| {
        d.status.as_ref().is_some_and(|s| s.cluster_id.is_some())
    })
    .await;
    let before = dkvs.get("orders").await.unwrap();
    let ids = member_ids(&before);
    let cluster_id = before.status.as_ref().and_then(|s| s.cluster_id.clone());
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(ids.iter().all(|(_, id)| id.is_some()), "{ids:?}");

    let writer = Writer::start(client.clone(), NS, "orders");
    support::wait::eventually(
        "the writer to get going",
        Duration::from_secs(60),
        Duration::from_millis(200),
        async || (writer.acknowledged().await >= 20).then_some(()),
    )
    .await;

    let recorded = |d: &DistributedKV| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.clone())
            .unwrap_or_default()
    };
    wait_for(&dkvs, "orders", "continuous backup recording", |d| {
        recorded(d).newest.is_some_and(|p| p.revision > 10)
    })
    .await;

    // Hibernate.
    let started = Instant::now();
    patch_spec(&dkvs, "orders", json!({"hibernation": true})).await;
    wait_for(&dkvs, "orders", "phase Hibernated", |d| {
        d.status.as_ref().and_then(|s| s.phase) == Some(Phase::Hibernated)
    })
    .await;
    eprintln!("hibernated after {:?}", started.elapsed());
    let acked_at_stop = writer.acknowledged().await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let member_pods = pods
        .list(&ListParams::default().labels(MEMBERS))
        .await
        .unwrap();
    assert!(member_pods.items.is_empty(), "member pods are gone");
    let kept = claims
        .list(&ListParams::default().labels(MEMBERS))
        .await
        .unwrap();
    assert_eq!(kept.items.len(), 3, "every member volume is kept");
    let sts = Api::<StatefulSet>::namespaced(client.clone(), NS)
        .get("orders")
        .await
        .unwrap();
    assert_eq!(sts.spec.replicas, Some(0));
    let cronjob = Api::<CronJob>::namespaced(client.clone(), NS)
        .get("orders-backup")
        .await
        .unwrap();
    assert_eq!(
        cronjob.spec.suspend,
        Some(true),
        "scheduled backups are suspended"
    );

    let hibernated = dkvs.get("orders").await.unwrap();
    let status = hibernated.status.clone().unwrap();
    assert_eq!(status.ready_replicas, 0);
    assert_eq!(
        condition_reason(&hibernated, types::AVAILABLE, "False").as_deref(),
        Some(reasons::HIBERNATED)
    );
    assert_eq!(
        condition_reason(&hibernated, types::PROGRESSING, "False").as_deref(),
        Some(reasons::HIBERNATED)
    );
    assert!(
        condition_reason(&hibernated, types::DEGRADED, "False").is_some(),
        "not degraded: {:?}",
        status.conditions
    );
    assert_eq!(member_ids(&hibernated), ids, "the membership is kept");
    assert_eq!(status.cluster_id, cluster_id);
    assert!(status.operation.is_none(), "{:?}", status.operation);
    let stopping = events_with(&client, "Hibernating").await;
    assert!(!stopping.is_empty(), "an Event as the members stop");
    let stopped = events_with(&client, "Hibernated").await;
    assert_eq!(stopped.len(), 1, "one Hibernated Event: {stopped:?}");
    eprintln!("Events: {stopping:?} {stopped:?}");

    // The real kubectl: `get` shows it; scale, upgrade and backup edits
    // are refused with the way out; a label goes through.
    let listed =
        String::from_utf8_lossy(&kubectl(&env, &["get", "dkv", "orders"]).stdout).into_owned();
    assert!(listed.contains("Hibernated"), "{listed}");
    eprintln!("{listed}");
    refused(&env, &["scale", "dkv/orders", "--replicas=5"], "spec.size");
    for (patch, field) in [
        (r#"{"spec":{"size":5}}"#, "spec.size"),
        (
            r#"{"spec":{"image":"registry.k8s.io/etcd:3.5.17-0"}}"#,
            "spec.image",
        ),
        (r#"{"spec":{"version":"3.5.17"}}"#, "spec.version"),
        (
            r#"{"spec":{"backup":{"schedule":"@hourly"}}}"#,
            "spec.backup",
        ),
    ] {
        let edit = ["patch", "dkv", "orders", "--type=merge", "-p", patch];
        refused(&env, &edit, field);
    }
    let on_demand: dkv_api::DistributedKVBackup = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {"name": "orders-now", "namespace": NS},
        "spec": {"cluster": "orders"},
    }))
    .unwrap();
    let refused_backup = Api::<dkv_api::DistributedKVBackup>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &on_demand)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused_backup
            .contains("is hibernated; wake it first (spec.hibernation: false), then back it up"),
        "{refused_backup}"
    );
    let labelled = kubectl(&env, &["label", "dkv", "orders", "team=shop"]);
    assert!(
        labelled.status.success(),
        "{}",
        String::from_utf8_lossy(&labelled.stderr)
    );

    // Left alone for a while, and through an operator restart, a
    // hibernated cluster stays so: nothing reads the absent members as lost.
    operator.stop().await;
    let mut args = support::operator_args(false);
    args.webhook = support::webhook_args();
    operator = support::RunningOperator::start_with(client.clone(), args);
    support::wait_until_admission_answers(&client, NS).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let still = dkvs.get("orders").await.unwrap();
    let status = still.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Hibernated));
    assert!(status.operation.is_none(), "{:?}", status.operation);
    assert!(
        pods.list(&ListParams::default().labels(MEMBERS))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(
        writer.acknowledged().await,
        acked_at_stop,
        "nothing acknowledges a write while every member is stopped"
    );

    // Wake.
    let started = Instant::now();
    patch_spec(&dkvs, "orders", json!({"hibernation": null})).await;
    let took = wait_settled(&dkvs, "orders", 3).await;
    eprintln!("awake (3 healthy voters, Available) after {took:?}");
    let awake = dkvs.get("orders").await.unwrap();
    assert_eq!(member_ids(&awake), ids, "the same members came back");
    let status = awake.status.clone().unwrap();
    assert_eq!(status.cluster_id, cluster_id, "the same cluster");
    assert_eq!(status.phase, Some(Phase::Running));
    // Continuous backup goes on in the same chain: nothing was missed.
    let chain_before = recorded(&hibernated).chain;
    let newest_before = recorded(&hibernated).newest.map_or(0, |p| p.revision);
    let took = wait_for(&dkvs, "orders", "continuous backup recording again", |d| {
        recorded(d)
            .newest
            .is_some_and(|p| p.revision > newest_before + 5)
    })
    .await;
    let window = recorded(&dkvs.get("orders").await.unwrap());
    assert_eq!(window.chain, chain_before, "the same chain: {window:?}");
    assert!(window.gaps.is_empty(), "no gap: {window:?}");
    eprintln!("continuous backup recording again after {took:?}: {window:?}");
    let awake_events = support::wait::eventually(
        "an Awake Event",
        Duration::from_secs(30),
        Duration::from_millis(250),
        async || {
            let events = events_with(&client, "Awake").await;
            (!events.is_empty()).then_some(events)
        },
    )
    .await;
    eprintln!("woke in {:?}: {awake_events:?}", started.elapsed());
    let cronjob = Api::<CronJob>::namespaced(client.clone(), NS)
        .get("orders-backup")
        .await
        .unwrap();
    assert_ne!(cronjob.spec.suspend, Some(true), "scheduled backups resume");

    // Writes go on after waking; every acknowledged one is there.
    support::wait::eventually(
        "writes after waking",
        Duration::from_secs(60),
        Duration::from_millis(200),
        async || (writer.acknowledged().await >= acked_at_stop + 20).then_some(()),
    )
    .await;
    let report = writer.stop().await;
    assert_no_write_lost(&client, NS, &report).await;
    operator.stop().await;
}

/// Hibernation waits for a consistent point: with a member hung, the
/// cluster keeps running and says what it waits for; once the member is
/// back, it stops, and `dkv_cluster_hibernated` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hibernation_waits_while_a_member_is_unhealthy() {
    const NS: &str = "hibernation-wait";
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let (operator, metrics) = support::RunningOperator::start_with_metrics(client.clone());
    let hibernated_series = |value: &str| {
        format!("dkv_cluster_hibernated{{namespace=\"{NS}\",cluster=\"orders\"}} {value}")
    };
    let dkvs = support::create_cluster(&client, NS, "orders", 3, IMAGE, json!({})).await;
    wait_settled(&dkvs, "orders", 3).await;
    let kubelet = env.kubelet().unwrap();
    kubelet.pause_container(NS, "orders-1", "etcd").unwrap();
    wait_for(&dkvs, "orders", "orders-1 seen unhealthy", |d| {
        d.status
            .iter()
            .flat_map(|s| &s.members)
            .any(|m| m.name == "orders-1" && !m.healthy)
    })
    .await;

    patch_spec(&dkvs, "orders", json!({"hibernation": true})).await;
    let exported = support::http::plain_get(metrics, "/metrics")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default();
    assert!(exported.contains(&hibernated_series("0")), "{exported}");
    wait_for(&dkvs, "orders", "hibernation waiting for orders-1", |d| {
        condition_reason(d, types::PROGRESSING, "True").as_deref() == Some(reasons::HIBERNATING)
            && support::etcd_cluster::condition_message(d, types::PROGRESSING, Some("True"))
                .contains("orders-1")
    })
    .await;
    // It stays so while the member hangs: every pod runs, nothing stops.
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let sts = statefulsets.get("orders").await.unwrap();
        assert_eq!(sts.spec.replicas, Some(3), "no member stops yet");
        let d = dkvs.get("orders").await.unwrap();
        assert_ne!(d.status.and_then(|s| s.phase), Some(Phase::Hibernated));
    }
    let d = dkvs.get("orders").await.unwrap();
    eprintln!(
        "[{NS}] while orders-1 hangs: {}",
        support::etcd_cluster::condition_message(&d, types::PROGRESSING, None)
    );

    kubelet.resume_container(NS, "orders-1", "etcd").unwrap();
    let took = wait_for(&dkvs, "orders", "phase Hibernated", |d| {
        d.status.as_ref().and_then(|s| s.phase) == Some(Phase::Hibernated)
    })
    .await;
    eprintln!("[{NS}] orders-1 back -> hibernated after {took:?}");
    support::wait::eventually(
        "dkv_cluster_hibernated 1",
        Duration::from_secs(30),
        Duration::from_millis(250),
        async || {
            let (_, body) = support::http::plain_get(metrics, "/metrics").await?;
            body.contains(&hibernated_series("1")).then_some(())
        },
    )
    .await;
    operator.stop().await;
}
