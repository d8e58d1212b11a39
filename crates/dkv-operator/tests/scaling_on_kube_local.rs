//! Scaling a real etcd cluster through dkv on kube-local, 1 → 3 → 5 → 3 → 1,
//! while a writer keeps writing sequenced keys and records every write etcd
//! acknowledged. At each stop the membership and `Available` are checked; at
//! the end every acknowledged write is read back: none may be lost.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::Mutex;

mod support;

const NS: &str = "scaling";

/// Client URLs of the cluster's running member pods, from the API.
async fn member_endpoints(client: &Client) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let list = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut endpoints: Vec<String> = list
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("http://{ip}:2379"))
        .collect();
    endpoints.sort();
    endpoints
}

/// Writes `key-00000`, `key-00001`, ... one after the other, each retried
/// until etcd acknowledges it, and records the acknowledged ones.
async fn writer(client: Client, stop: Arc<AtomicBool>, acked: Arc<Mutex<Vec<u64>>>) -> (u64, u64) {
    let mut etcd: Option<(Vec<String>, etcd_client::Client)> = None;
    let mut next = 0u64;
    let mut failures = 0u64;
    let mut last_refresh = Instant::now() - Duration::from_secs(10);
    while !stop.load(Ordering::Relaxed) {
        if last_refresh.elapsed() > Duration::from_millis(500) || etcd.is_none() {
            last_refresh = Instant::now();
            let endpoints = member_endpoints(&client).await;
            if !endpoints.is_empty() && etcd.as_ref().is_none_or(|(e, _)| *e != endpoints) {
                let options = etcd_client::ConnectOptions::new()
                    .with_connect_timeout(Duration::from_secs(1))
                    .with_timeout(Duration::from_secs(2));
                if let Ok(c) = etcd_client::Client::connect(endpoints.clone(), Some(options)).await
                {
                    etcd = Some((endpoints, c));
                }
            }
        }
        let Some((_, c)) = etcd.as_mut() else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let key = format!("key-{next:05}");
        match c.put(key, next.to_string(), None).await {
            Ok(_) => {
                acked.lock().await.push(next);
                next += 1;
            }
            Err(_) => {
                failures += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (next, failures)
}

async fn wait_for_size(dkvs: &Api<DistributedKV>, size: usize) -> Duration {
    let started = Instant::now();
    loop {
        if let Ok(d) = dkvs.get("orders").await
            && let Some(status) = &d.status
        {
            let voters = status
                .members
                .iter()
                .filter(|m| !m.learner && m.healthy)
                .count();
            let available = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Available" && c.status == "True");
            if voters == size
                && status.members.len() == size
                && status.operation.is_none()
                && available
                && d.spec.size as usize == size
            {
                return started.elapsed();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "cluster did not reach {size} healthy voters"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scale_1_3_5_3_1_without_losing_an_acknowledged_write() {
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let operator = support::RunningOperator::start(client.clone(), false);

    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let cluster: DistributedKV = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKV",
        "metadata": {"name": "orders", "namespace": NS},
        "spec": {"size": 1, "image": "registry.k8s.io/etcd:3.5.16-0",
                 "storage": {"storageClassName": "standard", "size": "1Gi", "reclaimPolicy": "Delete"}}
    }))
    .unwrap();
    dkvs.create(&PostParams::default(), &cluster).await.unwrap();
    let formed = wait_for_size(&dkvs, 1).await;
    eprintln!("create -> 1 healthy voter: {formed:?}");

    let stop_writer = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let writing = tokio::spawn(writer(client.clone(), stop_writer.clone(), acked.clone()));

    for size in [3, 5, 3, 1] {
        let before = acked.lock().await.len();
        dkvs.patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": size}})),
        )
        .await
        .unwrap();
        let took = wait_for_size(&dkvs, size).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let running = pods
            .list(&ListParams::default().labels("dkv.io/cluster=orders"))
            .await
            .unwrap()
            .items
            .len();
        assert_eq!(running, size, "pods follow membership at size {size}");
        let during = acked.lock().await.len() - before;
        eprintln!("scale to {size}: {took:?}, {during} writes acknowledged meanwhile");
    }

    stop_writer.store(true, Ordering::Relaxed);
    let (written, failures) = writing.await.unwrap();
    let acked = acked.lock().await.clone();
    assert!(
        acked.len() > 50,
        "the writer wrote throughout ({} acknowledged)",
        acked.len()
    );

    // Read every acknowledged write back (linearizable reads).
    let endpoints = member_endpoints(&client).await;
    let mut reader = etcd_client::Client::connect(endpoints, None).await.unwrap();
    let mut lost = Vec::new();
    for i in &acked {
        let response = reader.get(format!("key-{i:05}"), None).await.unwrap();
        match response.kvs().first() {
            Some(kv) if kv.value_str().unwrap() == i.to_string() => {}
            _ => lost.push(*i),
        }
    }
    eprintln!(
        "writer: {} acknowledged, {failures} failed attempts (retried), {} lost",
        acked.len(),
        lost.len()
    );
    assert_eq!(written as usize, acked.len());
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");

    operator.stop().await;
}
