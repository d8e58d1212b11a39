//! `kubectl dkv hibernate` and `wake` through the real `kubectl`, against
//! kube-local with the operator and real etcd members: the phase shows in
//! `status`, asking again for what already is so is refused in one line,
//! and waking brings the same members back.

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::Phase;
use serde_json::json;

use dkv_test_support as support;

use crate::kubectl::Kubectl;
use support::etcd_cluster::{wait_for, wait_settled};

const NS: &str = "plugin-hibernate";

fn member_ids(d: &DistributedKV) -> Vec<Option<String>> {
    d.status
        .iter()
        .flat_map(|s| &s.members)
        .map(|m| m.id.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hibernate_and_wake_through_kubectl() {
    let (env, client, operator) = support::running_operator(NS).await;
    let kubectl = Kubectl::new(env.kubeconfig_path(), NS);
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
    let ids = member_ids(&dkvs.get("orders").await.unwrap());

    kubectl.refused(&["wake", "orders"], "is not hibernated");
    assert!(kubectl.ok(&["hibernate", "orders"]).contains("hibernating"));
    kubectl.refused(&["hibernate", "orders"], "is already hibernated");
    wait_for(&dkvs, "orders", "phase Hibernated", |d| {
        d.status.as_ref().and_then(|s| s.phase) == Some(Phase::Hibernated)
    })
    .await;
    let status = kubectl.ok(&["status", "orders"]);
    assert!(status.contains("Phase:       Hibernated"), "{status}");
    assert!(
        !status.contains("figures are missing"),
        "a hibernated cluster has no member to ask, and says so by its phase: {status}"
    );
    eprintln!("{status}");

    assert!(kubectl.ok(&["wake", "orders"]).contains("waking"));
    wait_settled(&dkvs, "orders", 3).await;
    assert_eq!(member_ids(&dkvs.get("orders").await.unwrap()), ids);
    kubectl.refused(&["wake", "orders"], "is not hibernated");
    operator.stop().await;
}
