//! Rolling upgrade of a real 3-member etcd cluster from 3.4 to 3.5 through
//! dkv on kube-local, with a writer recording every acknowledged write:
//! every member ends on 3.5, leadership changes at most once (the planned
//! MoveLeader before the leader restarts), writes stall for at most a couple
//! of seconds, and nothing acknowledged is lost.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod support;

use support::etcd_cluster::{LeaderMonitor, Writer, lost_writes, wait_for};

const NS: &str = "upgrade";
const V34: &str = "registry.k8s.io/etcd:3.4.23-0";
const V35: &str = "registry.k8s.io/etcd:3.5.16-0";

fn versions(d: &DistributedKV) -> Vec<String> {
    d.status
        .iter()
        .flat_map(|s| &s.members)
        .filter_map(|m| m.version.clone())
        .collect()
}

async fn pod_images(client: &Client) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut images: Vec<String> = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| {
            p.spec
                .as_ref()?
                .containers
                .iter()
                .find(|c| c.name == "etcd")?
                .image
                .clone()
        })
        .collect();
    images.sort();
    images
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrade_3_4_to_3_5_keeps_the_cluster_serving() {
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let operator = support::RunningOperator::start(client.clone(), false);

    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    dkvs.create(
        &PostParams::default(),
        &support::cluster(NS, "orders", 3, V34, json!({})),
    )
    .await
    .unwrap();
    let formed = wait_for(&dkvs, "orders", "3 healthy voters on 3.4", |d| {
        support::etcd_cluster::settled_at(d, 3) && versions(d).iter().all(|v| v == "3.4.23")
    })
    .await;
    eprintln!("create 3 members on 3.4: {formed:?}");

    let writer = Writer::start(client.clone(), NS, "orders");
    let monitor = LeaderMonitor::start(client.clone(), NS, "orders");
    tokio::time::sleep(Duration::from_secs(2)).await;

    let started = Instant::now();
    dkvs.patch(
        "orders",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"image": V35}})),
    )
    .await
    .unwrap();
    let upgraded = wait_for(&dkvs, "orders", "every member on 3.5", |d| {
        support::etcd_cluster::settled_at(d, 3)
            && versions(d).len() == 3
            && versions(d).iter().all(|v| v == "3.5.16")
            && d.status.as_ref().and_then(|s| s.current_version.as_deref()) == Some("3.5.16")
    })
    .await;
    eprintln!("rolling upgrade 3.4 -> 3.5: {upgraded:?}");
    assert_eq!(
        pod_images(&client).await,
        vec![V35; 3],
        "every pod runs 3.5"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    let (leaders, term) = monitor.stop().await;
    let report = writer.stop().await;
    let lost = lost_writes(&client, NS, "orders", &report.acked).await;
    eprintln!(
        "upgrade took {:?}; leaders seen {leaders:x?} (last term {term}); writer: {} acknowledged, \
         {} failed attempts, longest gap {:?}, {} lost",
        started.elapsed(),
        report.acked.len(),
        report.failures,
        report.longest_gap,
        lost.len()
    );
    assert!(
        leaders.len() <= 2,
        "at most one leader change (the planned MoveLeader): {leaders:x?}"
    );
    assert!(
        report.longest_gap < Duration::from_secs(5),
        "writes stalled for {:?}",
        report.longest_gap
    );
    assert!(report.acked.len() > 50, "the writer wrote throughout");
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");

    operator.stop().await;
}
