//! dkv on several nodes: members spread over nodes and zones; a node that
//! dies (its power cut: processes SIGKILLed, heartbeats stopped, volumes
//! kept) and comes back; a whole zone lost. A writer counts every
//! acknowledged write, and none may be lost.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::json;

use dkv_test_support as support;

use support::etcd_cluster::{
    Writer, condition_message, condition_reason, member_ids, wait_for, wait_settled,
};
use support::nodes::{
    BUDGET_REFUSAL, drain_task, kubectl_task, node_ready, placement, pod_ready, watch_ready_members,
};

const IMAGE: &str = "registry.k8s.io/etcd:3.5.16-0";
/// Nodes whose heartbeats stop are declared lost after this long (40 s on a
/// real cluster; shortened so the tests wait less).
const GRACE: Duration = Duration::from_secs(6);

/// kube-local with `nodes` nodes over 3 zones, and the operator.
async fn environment(
    ns: &str,
    nodes: usize,
) -> (kube_local::Environment, Client, support::RunningOperator) {
    let env = support::nodes::environment(nodes, GRACE).await;
    let client = env.client();
    support::create_namespace(&client, ns).await;
    let operator = support::RunningOperator::start(client.clone(), false);
    (env, client, operator)
}

/// Keeps writing while `nodes` are down: acknowledged writes must keep
/// coming (quorum kept); returns how many were acknowledged meanwhile.
async fn writes_during(writer: &Writer, how_long: Duration) -> usize {
    let before = writer.acknowledged().await;
    tokio::time::sleep(how_long).await;
    writer.acknowledged().await - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_whose_node_dies_is_waited_for_and_rejoins_with_its_data() {
    const NS: &str = "node-lost";
    let (env, client, _operator) = environment(NS, 3).await;
    let dkvs = support::create_cluster(&client, NS, "orders", 3, IMAGE, json!({})).await;
    wait_settled(&dkvs, "orders", 3).await;
    let placed = placement(&client, NS).await;
    let nodes: BTreeSet<&String> = placed.values().map(|(n, _)| n).collect();
    assert_eq!(nodes.len(), 3, "one member per node: {placed:?}");
    let before = dkvs.get("orders").await.unwrap();
    // Each member's node and zone, in status.
    let in_status: BTreeMap<String, (String, String)> = before
        .status
        .iter()
        .flat_map(|s| &s.members)
        .map(|m| {
            (
                m.name.clone(),
                (
                    m.node.clone().unwrap_or_default(),
                    m.zone.clone().unwrap_or_default(),
                ),
            )
        })
        .collect();
    assert_eq!(in_status, placed, "status.members says where members run");
    let zones: BTreeSet<&String> = placed.values().map(|(_, z)| z).collect();
    assert_eq!(zones.len(), 3, "one member per zone by default: {placed:?}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let victim_uid = pods.get("orders-1").await.unwrap().uid();
    let (node, _) = placed["orders-1"].clone();

    let writer = Writer::start(client.clone(), NS, "orders");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kubelet = env.kubelet().unwrap();
    kubelet.kill_node(&node).unwrap();
    let killed = Instant::now();
    wait_for(&dkvs, "orders", "the lost member seen unhealthy", |d| {
        d.status
            .as_ref()
            .is_some_and(|s| s.members.iter().any(|m| m.name == "orders-1" && !m.healthy))
    })
    .await;
    let mut lost_at = None;
    while lost_at.is_none() {
        if node_ready(&client, &node).await.as_deref() == Some("Unknown") {
            lost_at = Some(killed.elapsed());
        }
        assert!(killed.elapsed() < GRACE * 5, "{node} never declared lost");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("[{NS}] {node} declared lost {lost_at:?} after its power was cut");
    // Status says which member is lost on which node, and what to do.
    wait_for(&dkvs, "orders", "Degraded/MemberNodeLost", |d| {
        condition_reason(d, "Degraded", "True").as_deref() == Some("MemberNodeLost")
    })
    .await;
    let d = dkvs.get("orders").await.unwrap();
    let message = condition_message(&d, "Degraded", Some("True"));
    assert!(
        message.contains("orders-1") && message.contains(&node),
        "{message}"
    );
    eprintln!("[{NS}] Degraded: {message}");
    assert!(
        d.status
            .iter()
            .flat_map(|s| &s.members)
            .any(|m| m.name == "orders-1" && m.node_lost_since.is_some())
    );
    // The two others keep serving.
    let during = writes_during(&writer, Duration::from_secs(5)).await;
    assert!(
        during > 0,
        "no write acknowledged while one member's node was down"
    );
    let d = dkvs.get("orders").await.unwrap();
    assert!(
        d.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Available"))
            .is_some_and(|c| c.status == "True"),
        "Available with 2 of 3 members: {:?}",
        d.status
    );

    kubelet.start_node(&node).await.unwrap();
    let back = Instant::now();
    wait_settled(&dkvs, "orders", 3).await;
    eprintln!(
        "[{NS}] {node} back: 3 healthy voters {:?} later",
        back.elapsed()
    );
    let report = writer.stop().await;
    let after = dkvs.get("orders").await.unwrap();
    assert_eq!(
        member_ids(&before),
        member_ids(&after),
        "without an opt-in, the same member comes back: nothing replaced"
    );
    assert_eq!(
        pods.get("orders-1").await.unwrap().uid(),
        victim_uid,
        "the same pod, with its data"
    );
    eprintln!(
        "[{NS}] {} acknowledged writes ({during} while {node} was down)",
        report.acked.len()
    );
    support::etcd_cluster::assert_no_write_lost(&client, NS, &report).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_zone_leaves_quorum_and_loses_no_write() {
    const NS: &str = "zone-lost";
    // Six nodes, two per zone.
    let (env, client, _operator) = environment(NS, 6).await;
    let spread = json!({"pod": {"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "orders"}},
    }]}});
    let dkvs = support::create_cluster(&client, NS, "orders", 3, IMAGE, spread).await;
    wait_settled(&dkvs, "orders", 3).await;
    let placed = placement(&client, NS).await;
    let zones: BTreeSet<&String> = placed.values().map(|(_, z)| z).collect();
    assert_eq!(zones.len(), 3, "one member per zone: {placed:?}");
    let (_, zone) = placed["orders-2"].clone();
    let zone_nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("topology.kubernetes.io/zone={zone}")))
        .await
        .unwrap()
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    assert_eq!(zone_nodes.len(), 2, "{zone_nodes:?}");

    let writer = Writer::start(client.clone(), NS, "orders");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kubelet = env.kubelet().unwrap();
    for node in &zone_nodes {
        kubelet.kill_node(node).unwrap();
    }
    eprintln!("[{NS}] {zone} lost: {zone_nodes:?} killed");
    tokio::time::sleep(GRACE).await;
    let during = writes_during(&writer, Duration::from_secs(5)).await;
    assert!(during > 0, "no write acknowledged while {zone} was down");
    for node in &zone_nodes {
        kubelet.start_node(node).await.unwrap();
    }
    wait_settled(&dkvs, "orders", 3).await;
    let report = writer.stop().await;
    eprintln!(
        "[{NS}] {} acknowledged writes ({during} while {zone} was down)",
        report.acked.len()
    );
    support::etcd_cluster::assert_no_write_lost(&client, NS, &report).await;
}

/// `kubectl args` against `env`: (success, stdout + stderr).
async fn kubectl(env: &kube_local::Environment, args: &[&str]) -> (bool, String) {
    kubectl_task(env.kubeconfig_path(), args)
        .await
        .unwrap()
        .unwrap()
}

/// `kubectl drain NODE`, which must succeed; what it printed.
async fn drain(env: &kube_local::Environment, node: &str) -> String {
    let (ok, out) = drain_task(env.kubeconfig_path(), node)
        .await
        .unwrap()
        .unwrap();
    assert!(ok, "kubectl drain {node}: {out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn draining_every_node_in_turn_keeps_quorum_and_loses_no_write() {
    const NS: &str = "drains";
    let (env, client, _operator) = environment(NS, 3).await;
    let dkvs = support::create_cluster(&client, NS, "orders", 3, IMAGE, json!({})).await;
    wait_settled(&dkvs, "orders", 3).await;
    let placed = placement(&client, NS).await;
    let node_of = |member: &str| placed[member].0.clone();
    let writer = Writer::start(client.clone(), NS, "orders");
    let (stop_watch, watch) = watch_ready_members(client.clone(), NS);
    let started = Instant::now();
    let mut refusals = 0;

    // The first node: its member is evicted and, its volume being local to
    // the node, waits Pending until the node is uncordoned.
    let first = node_of("orders-0");
    let out = drain(&env, &first).await;
    refusals += out.matches(BUDGET_REFUSAL).count();
    assert!(out.contains(&format!("node/{first} drained")), "{out}");
    // A second drain while that member is away is refused by the budget
    // (429) and retried by kubectl until the member is back.
    let second = node_of("orders-1");
    let second_drain = drain_task(env.kubeconfig_path(), &second);
    tokio::time::sleep(Duration::from_secs(7)).await;
    let (ok, _) = kubectl(&env, &["uncordon", &first]).await;
    assert!(ok);
    let (ok, out) = second_drain.await.unwrap().unwrap();
    assert!(ok, "kubectl drain {second}: {out}");
    let refused_second = out.matches(BUDGET_REFUSAL).count();
    assert!(
        refused_second > 0,
        "the second drain met the budget while the first member was away: {out}"
    );
    refusals += refused_second;
    assert!(kubectl(&env, &["uncordon", &second]).await.0);
    wait_settled(&dkvs, "orders", 3).await;
    // The third, alone.
    let third = node_of("orders-2");
    refusals += drain(&env, &third).await.matches(BUDGET_REFUSAL).count();
    assert!(kubectl(&env, &["uncordon", &third]).await.0);
    wait_settled(&dkvs, "orders", 3).await;
    let took = started.elapsed();

    stop_watch.store(true, std::sync::atomic::Ordering::Relaxed);
    let fewest_ready = watch.await.unwrap();
    let report = writer.stop().await;
    eprintln!(
        "[{NS}] drained {first}, {second}, {third} in {took:?}: {refusals} evictions refused by the budget (429), never fewer than {fewest_ready} members Ready, {} acknowledged writes",
        report.acked.len()
    );
    assert!(
        fewest_ready >= 2,
        "fewer than quorum members Ready during the drains: {fewest_ready}"
    );
    support::etcd_cluster::assert_no_write_lost(&client, NS, &report).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_replace_a_member_on_a_lost_node_is_replaced_on_another_node() {
    const NS: &str = "node-replaced";
    // Four nodes: the fourth (zone-a) is where the lost member can go.
    let (env, client, _operator) = environment(NS, 4).await;
    let recovery = json!({"recovery": {"lostNode": {"policy": "Replace", "afterSeconds": 5}}});
    let dkvs = support::create_cluster(&client, NS, "orders", 3, IMAGE, recovery).await;
    wait_settled(&dkvs, "orders", 3).await;
    let placed = placement(&client, NS).await;
    let (node, _) = placed["orders-1"].clone();
    let before = dkvs.get("orders").await.unwrap();
    let old_id = member_ids(&before)
        .into_iter()
        .find(|(n, _)| n == "orders-1")
        .and_then(|(_, id)| id)
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let old_claim =
        Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(client.clone(), NS)
            .get("data-orders-1")
            .await
            .unwrap();

    let writer = Writer::start(client.clone(), NS, "orders");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kubelet = env.kubelet().unwrap();
    kubelet.kill_node(&node).unwrap();
    let killed = Instant::now();
    while node_ready(&client, &node).await.as_deref() != Some("Unknown") {
        assert!(killed.elapsed() < GRACE * 5, "{node} never declared lost");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let declared = Instant::now();
    eprintln!(
        "[{NS}] {node} declared lost {:?} after its power was cut",
        killed.elapsed()
    );
    wait_for(&dkvs, "orders", "orders-1 replaced by a new voter", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.members.iter().any(|m| {
                m.name == "orders-1"
                    && m.id.as_ref().is_some_and(|id| *id != old_id)
                    && !m.learner
                    && m.healthy
            })
        })
    })
    .await;
    let replaced_in = declared.elapsed();
    eprintln!("[{NS}] node declared lost -> replacement voter in {replaced_in:?}");
    let new_node = pods
        .get("orders-1")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.node_name)
        .unwrap_or_default();
    assert_ne!(new_node, node, "the new member runs on another node");
    wait_settled(&dkvs, "orders", 3).await;

    // The old node returns: its member was removed, its pod force-deleted and
    // its claim deleted, so nothing of it rejoins.
    kubelet.start_node(&node).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    wait_settled(&dkvs, "orders", 3).await;
    let after = dkvs.get("orders").await.unwrap();
    assert!(
        member_ids(&after)
            .iter()
            .all(|(_, id)| id.as_deref() != Some(old_id.as_str())),
        "the replaced member never rejoins: {:?}",
        member_ids(&after)
    );
    let claim =
        Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(client.clone(), NS)
            .get("data-orders-1")
            .await
            .unwrap();
    assert_ne!(claim.uid(), old_claim.uid(), "a new claim on the new node");
    let report = writer.stop().await;
    eprintln!(
        "[{NS}] {} acknowledged writes; replacement voter {replaced_in:?} after the node was declared lost (target 60 s)",
        report.acked.len()
    );
    support::etcd_cluster::assert_no_write_lost(&client, NS, &report).await;
}

/// With network volumes (they follow their pod), `Replace` keeps the member:
/// its stuck pod is force-deleted and restarts on another node on the same
/// volume, with the same member ID and its data; nothing is removed from etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_replace_a_member_on_a_network_volume_restarts_elsewhere_on_it() {
    const NS: &str = "node-network";
    let (env, client, _operator) = environment(NS, 4).await;
    let spec = json!({
        "storage": {"storageClassName": "network", "size": "1Gi", "reclaimPolicy": "Delete"},
        "recovery": {"lostNode": {"policy": "Replace", "afterSeconds": 5}},
    });
    let dkvs = support::create_cluster(&client, NS, "orders", 3, IMAGE, spec).await;
    wait_settled(&dkvs, "orders", 3).await;
    let (node, _) = placement(&client, NS).await["orders-1"].clone();
    let ids_before = member_ids(&dkvs.get("orders").await.unwrap());
    let claims =
        Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(client.clone(), NS);
    let old_claim = claims.get("data-orders-1").await.unwrap();

    let writer = Writer::start(client.clone(), NS, "orders");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kubelet = env.kubelet().unwrap();
    kubelet.kill_node(&node).unwrap();
    let killed = Instant::now();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    loop {
        let pod = pods.get_opt("orders-1").await.unwrap();
        let elsewhere = pod.as_ref().is_some_and(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node.as_str())
                && pod_ready(p)
        });
        if elsewhere {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "orders-1 never restarted off {node}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "[{NS}] orders-1 Ready on another node {:?} after {node} lost power",
        killed.elapsed()
    );
    wait_settled(&dkvs, "orders", 3).await;
    assert_eq!(
        member_ids(&dkvs.get("orders").await.unwrap()),
        ids_before,
        "the same members, with the same IDs"
    );
    assert_eq!(
        claims.get("data-orders-1").await.unwrap().uid(),
        old_claim.uid(),
        "the same volume"
    );

    // The old node returns with nothing of the member on it.
    kubelet.start_node(&node).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_settled(&dkvs, "orders", 3).await;
    assert_eq!(member_ids(&dkvs.get("orders").await.unwrap()), ids_before);
    let report = writer.stop().await;
    eprintln!("[{NS}] {} acknowledged writes", report.acked.len());
    support::etcd_cluster::assert_no_write_lost(&client, NS, &report).await;
}

/// An install whose RBAC leaves Nodes out (deploy/'s ClusterRole without its
/// nodes rule) on a kube-local that enforces RBAC: the operator never asks
/// for Nodes, and still creates and serves its clusters, with the member's
/// node (from its pod) but no zone in status.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_that_may_not_watch_nodes_still_runs_its_clusters() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::PostParams;

    const NS: &str = "no-nodes";
    const OPERATOR_NS: &str = "dkv-system";
    let mut config = support::kubelet_config();
    config.nodes.count = 2;
    let env = kube_local::Environment::builder()
        .crds(vec![
            DistributedKV::crd(),
            dkv_api::DistributedKVBackup::crd(),
        ])
        .kubelet_config(config)
        .authenticate(true)
        .build()
        .await
        .unwrap();
    let admin = env.client();
    support::create_namespace(&admin, OPERATOR_NS).await;
    support::create_namespace(&admin, NS).await;

    let path = support::repo_root().join("deploy/rbac/cluster_role.yaml");
    let mut role: ClusterRole =
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let rules = role.rules.get_or_insert_default();
    let before = rules.len();
    rules.retain(|r| {
        !r.resources
            .as_ref()
            .is_some_and(|res| res.iter().any(|x| x == "nodes"))
    });
    assert_eq!(
        rules.len(),
        before - 1,
        "deploy/'s ClusterRole grants nodes"
    );
    let role_name = role.name_any();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "dkv-operator-without-nodes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": "dkv-operator", "namespace": OPERATOR_NS}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let token = support::metrics::service_account_token(&admin, OPERATOR_NS, "dkv-operator").await;
    let operator =
        support::RunningOperator::start(env.client_with_token(Some(&token)).unwrap(), false);

    let dkvs = support::create_cluster(&admin, NS, "limited", 1, IMAGE, json!({})).await;
    wait_settled(&dkvs, "limited", 1).await;
    let dkv = dkvs.get("limited").await.unwrap();
    let member = &dkv.status.as_ref().unwrap().members[0];
    assert!(
        member.node.is_some(),
        "the node comes from the pod: {member:?}"
    );
    assert_eq!(member.zone, None, "zones come from Nodes, not watched");
    assert_eq!(member.node_lost_since, None);
    let refused: Vec<_> = env
        .forbidden()
        .into_iter()
        .filter(|r| r.user.contains("dkv-operator"))
        .collect();
    assert!(
        refused.is_empty(),
        "the operator asked for what it may not: {refused:?}"
    );
    operator.stop().await;
}
