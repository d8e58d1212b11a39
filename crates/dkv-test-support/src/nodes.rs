//! Several nodes: where member pods run, a node's `Ready` condition, how
//! many member pods are Ready, and draining nodes with the real `kubectl`
//! as a node upgrade does (evictions refused by a disruption budget, 429,
//! retried every 5 s).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, CustomResourceExt as _, ResourceExt};

/// The selector of etcd member pods (dkv's, and the benchmark's bare
/// StatefulSet's, which carries the same label).
pub const MEMBER_SELECTOR: &str = "app.kubernetes.io/component=etcd";

/// The member pods of `ns`.
async fn member_pod_list(client: &Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(MEMBER_SELECTOR))
        .await
        .unwrap()
        .items
}

/// Every member pod of `ns`: name → (UID, the image its `member-init`
/// runs): which pods an operator upgrade restarted, and onto which image.
pub async fn member_pods_and_images(
    client: &Client,
    ns: &str,
) -> BTreeMap<String, (String, String)> {
    member_pod_list(client, ns)
        .await
        .into_iter()
        .map(|pod| {
            let image = pod
                .spec
                .as_ref()
                .and_then(|s| s.init_containers.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.name == "member-init")
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            (pod.name_any(), (pod.uid().unwrap_or_default(), image))
        })
        .collect()
}

/// What `kubectl drain` prints each time an eviction is refused by a
/// PodDisruptionBudget (a 429) before it retries.
pub const BUDGET_REFUSAL: &str = "Cannot evict pod as it would violate the pod's disruption budget";

/// kube-local with dkv's CRDs and `nodes` nodes over 3 zones, each with its
/// own kubelet (as the tests configure it); nodes whose heartbeats stop are
/// declared lost (`Ready=Unknown`) after `grace`.
pub async fn environment(nodes: usize, grace: Duration) -> kube_local::Environment {
    let mut config = crate::kubelet_config();
    config.nodes.count = nodes;
    config.nodes.zones = 3;
    config.nodes.monitor_grace = grace;
    crate::environment_configured(
        vec![
            dkv_api::DistributedKV::crd(),
            dkv_api::DistributedKVBackup::crd(),
        ],
        Some(config),
    )
    .await
}

/// Member pod → (node, zone).
pub async fn placement(client: &Client, ns: &str) -> BTreeMap<String, (String, String)> {
    let nodes: BTreeMap<String, String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| {
            let zone = n
                .labels()
                .get("topology.kubernetes.io/zone")
                .cloned()
                .unwrap_or_default();
            (n.name_any(), zone)
        })
        .collect();
    member_pod_list(client, ns)
        .await
        .into_iter()
        .map(|p| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let zone = nodes.get(&node).cloned().unwrap_or_default();
            (p.name_any(), (node, zone))
        })
        .collect()
}

/// The node's `Ready` condition (`None` if the node or the condition cannot
/// be read).
pub async fn ready_condition(client: &Client, node: &str) -> Option<NodeCondition> {
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .ok()?
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")
}

/// The status of the node's `Ready` condition: `True`, `False`, `Unknown`.
pub async fn node_ready(client: &Client, node: &str) -> Option<String> {
    ready_condition(client, node).await.map(|c| c.status)
}

/// Whether `pod` is Ready and not being deleted.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// How many member pods of `ns` are Ready (and not being deleted); `None`
/// when they cannot be listed.
pub async fn ready_members(client: &Client, ns: &str) -> Option<usize> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(MEMBER_SELECTOR))
        .await
        .ok()?;
    Some(list.items.iter().filter(|p| pod_ready(p)).count())
}

/// Waits (up to two minutes) until `count` member pods of `ns` are Ready:
/// a drain returns once its pod is gone, before the operator's status has
/// seen the replacement, so a settled status alone can be one pass behind.
pub async fn wait_members_ready(client: &Client, ns: &str, count: usize) {
    let started = std::time::Instant::now();
    loop {
        let ready = ready_members(client, ns).await;
        if ready == Some(count) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{count} member pods of {ns} not Ready in two minutes (last seen: {ready:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Counts the Ready member pods every 100 ms until the flag is set; the
/// fewest seen.
pub fn watch_ready_members(
    client: Client,
    ns: &str,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<usize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let ns = ns.to_owned();
    let task = tokio::spawn(async move {
        let mut fewest = usize::MAX;
        while !stopped.load(Ordering::Relaxed) {
            if let Some(ready) = ready_members(&client, &ns).await {
                fewest = fewest.min(ready);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        fewest
    });
    (stop, task)
}

/// `kubectl args` against `kubeconfig` in a blocking thread, started now;
/// yields whether it succeeded and its stdout + stderr (an error if kubectl
/// could not be run).
pub fn kubectl_task(
    kubeconfig: &Path,
    args: &[&str],
) -> tokio::task::JoinHandle<std::io::Result<(bool, String)>> {
    let kubeconfig = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(&args)
            .output()?;
        Ok((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    })
}

/// `kubectl drain NODE` as a node upgrade runs it (evicting through the
/// eviction API, retrying refusals every 5 s, up to 150 s), started now.
pub fn drain_task(
    kubeconfig: &Path,
    node: &str,
) -> tokio::task::JoinHandle<std::io::Result<(bool, String)>> {
    kubectl_task(
        kubeconfig,
        &[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=150s",
        ],
    )
}
