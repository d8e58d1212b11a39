//! Scaling a real etcd cluster through dkv on kube-local, 1 → 3 → 5 → 3 → 1,
//! while a writer keeps writing sequenced keys and records every write etcd
//! acknowledged. At each stop the membership and `Available` are checked; at
//! the end every acknowledged write is read back: none may be lost.

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use dkv_test_support as support;

use support::etcd_cluster::{Writer, lost_writes, patch_spec, wait_settled};

const NS: &str = "scaling";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scale_1_3_5_3_1_without_losing_an_acknowledged_write() {
    let (_env, client, operator) = support::running_operator(NS).await;

    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let cluster = support::cluster(NS, "orders", 1, "registry.k8s.io/etcd:3.5.16-0", json!({}));
    dkvs.create(&PostParams::default(), &cluster).await.unwrap();
    let formed = wait_settled(&dkvs, "orders", 1).await;
    eprintln!("create -> 1 healthy voter: {formed:?}");

    let writer = Writer::start(client.clone(), NS, "orders");
    for size in [3, 5, 3, 1] {
        let before = writer.acknowledged().await;
        patch_spec(&dkvs, "orders", json!({"size": size})).await;
        let took = wait_settled(&dkvs, "orders", size).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let running = pods
            .list(&ListParams::default().labels("dkv.io/cluster=orders"))
            .await
            .unwrap()
            .items
            .len();
        assert_eq!(running, size, "pods follow membership at size {size}");
        let during = writer.acknowledged().await - before;
        eprintln!("scale to {size}: {took:?}, {during} writes acknowledged meanwhile");
    }

    let report = writer.stop().await;
    assert!(
        report.acked.len() > 50,
        "the writer wrote throughout ({} acknowledged)",
        report.acked.len()
    );
    let lost = lost_writes(&client, NS, "orders", &report.acked).await;
    eprintln!(
        "writer: {} acknowledged, {} failed attempts (retried), longest gap {:?}, {} lost",
        report.acked.len(),
        report.failures,
        report.longest_gap,
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");

    operator.stop().await;
}
