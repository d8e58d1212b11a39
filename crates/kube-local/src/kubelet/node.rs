//! The Node object of this kubelet, and the trivial scheduler that binds every unscheduled pod to it.
//!
//! Binding sets `spec.nodeName` once (the API server allows exactly that update) and the PodScheduled condition. A
//! pod whose claims are not there yet stays Pending, as the volume binding plugin keeps it; claims of
//! WaitForFirstConsumer classes get the `volume.kubernetes.io/selected-node` annotation their provisioner waits for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Pod,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{NODE_NAME, Shared};
use crate::informer::{get, run_loop};

fn ready_condition(now: jiff::Timestamp) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: Some("KubeletReady".into()),
        message: Some("kubelet is posting ready status".into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

fn node_object(shared: &Shared) -> Node {
    let now = jiff::Timestamp::now();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", cpus.to_string()),
        ("memory", "16Gi".to_string()),
        ("pods", "250".to_string()),
        ("ephemeral-storage", "100Gi".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v)))
    .collect();
    let labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", NODE_NAME),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", std::env::consts::ARCH),
        ("node-role.kubernetes.io/control-plane", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(NODE_NAME.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: shared.host_ip.clone(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: NODE_NAME.into(),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: i32::from(shared.kubelet_port.get().copied().unwrap_or(0)),
                }),
            }),
            allocatable: Some(resources.clone()),
            capacity: Some(resources),
            conditions: Some(vec![ready_condition(now)]),
            node_info: Some(NodeSystemInfo {
                architecture: std::env::consts::ARCH.into(),
                boot_id: String::new(),
                container_runtime_version: "kube-local://process".into(),
                kernel_version: String::new(),
                kube_proxy_version: String::new(),
                kubelet_version: "v1.37.0-kube-local".into(),
                machine_id: String::new(),
                operating_system: "linux".into(),
                os_image: "kube-local".into(),
                system_uuid: String::new(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}

/// Creates (or refreshes) the Node with its status.
pub async fn register(shared: &Shared) {
    let api: Api<Node> = Api::all(shared.client.clone());
    let node = node_object(shared);
    match api.create(&PostParams::default(), &node).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => tracing::warn!(error = %e, "registering the node"),
    }
    let status = json!({"status": node.status});
    if let Err(e) = api
        .patch_status(NODE_NAME, &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        tracing::warn!(error = %e, "posting the node status");
    }
}

/// Keeps the Ready condition's heartbeat fresh and recreates the Node if someone deleted it.
pub async fn heartbeat(shared: Arc<Shared>) {
    let api: Api<Node> = Api::all(shared.client.clone());
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        match api.get_opt(NODE_NAME).await {
            Ok(Some(node)) => {
                let mut conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
                let now = jiff::Timestamp::now();
                match conditions.iter_mut().find(|c| c.type_ == "Ready") {
                    Some(c) => c.last_heartbeat_time = Some(Time(now)),
                    None => conditions.push(ready_condition(now)),
                }
                let patch = json!({"status": {"conditions": conditions}});
                let _ = api
                    .patch_status(NODE_NAME, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
            Ok(None) => register(&shared).await,
            Err(_) => {}
        }
    }
}

/// Binds unscheduled pods (no `spec.schedulerName`, or `default-scheduler`) to this node.
pub async fn schedule(shared: Arc<Shared>) {
    let changes = shared.caches.changes();
    run_loop(changes, || async {
        let pending: Vec<Arc<Pod>> = shared.caches.pods.state_filter(|p| {
            let Some(spec) = &p.spec else { return false };
            spec.node_name.as_deref().unwrap_or_default().is_empty()
                && p.metadata.deletion_timestamp.is_none()
                && spec
                    .scheduler_name
                    .as_deref()
                    .is_none_or(|s| s == "default-scheduler")
        });
        let mut retry = None;
        for pod in pending {
            if !bind(&shared, &pod).await {
                retry = Some(Duration::from_secs(1));
            }
        }
        retry
    })
    .await;
}

/// Whether the node's labels satisfy a node selector term (matchExpressions; matchFields on `metadata.name`).
fn term_matches(
    term: &k8s_openapi::api::core::v1::NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
) -> bool {
    let requirement = |r: &k8s_openapi::api::core::v1::NodeSelectorRequirement,
                       value: Option<&String>| {
        let values = r.values.clone().unwrap_or_default();
        let number = |v: &str| v.parse::<i64>().ok();
        match r.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            "Gt" => value
                .and_then(|v| number(v))
                .zip(values.first().and_then(|v| number(v)))
                .is_some_and(|(a, b)| a > b),
            "Lt" => value
                .and_then(|v| number(v))
                .zip(values.first().and_then(|v| number(v)))
                .is_some_and(|(a, b)| a < b),
            _ => false,
        }
    };
    let name = NODE_NAME.to_string();
    term.match_expressions
        .iter()
        .flatten()
        .all(|r| requirement(r, labels.get(&r.key)))
        && term
            .match_fields
            .iter()
            .flatten()
            .all(|r| requirement(r, (r.key == "metadata.name").then_some(&name)))
}

/// Whether the pod's nodeSelector and required node affinity admit this node.
fn fits(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = &pod.spec else { return true };
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let affinity_ok = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_none_or(|required| {
            required
                .node_selector_terms
                .iter()
                .any(|t| term_matches(t, labels))
        });
    selector_ok && affinity_ok
}

/// Binds one pod; false when it has to wait (claims missing, or the node does not fit).
async fn bind(shared: &Shared, pod: &Pod) -> bool {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let node_labels = node_object(shared).metadata.labels.unwrap_or_default();
    if !fits(pod, &node_labels) {
        set_unschedulable(
            shared,
            pod,
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        )
        .await;
        return false;
    }
    let claims: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
        })
        .collect();
    let pvc_api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(shared.client.clone(), &ns);
    for claim in &claims {
        let Some(pvc) = get(&shared.caches.claims, &ns, claim) else {
            set_unschedulable(
                shared,
                pod,
                &format!("0/1 nodes are available: persistentvolumeclaim \"{claim}\" not found."),
            )
            .await;
            return false;
        };
        let annotated = pvc
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("volume.kubernetes.io/selected-node"));
        let bound = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_ref())
            .is_some();
        if !annotated && !bound {
            let patch = json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": NODE_NAME}}});
            let _ = pvc_api
                .patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        }
    }
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
    let patch = json!({"spec": {"nodeName": NODE_NAME}});
    if let Err(e) = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::debug!(pod = %name, error = %e, "binding a pod");
        return matches!(e, kube::Error::Api(ref s) if s.code == 404);
    }
    let status = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "True", "lastTransitionTime": Time(jiff::Timestamp::now()),
    }]}});
    let _ = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await;
    super::events::record(
        &shared.client,
        pod,
        None,
        false,
        "Scheduled",
        format!("Successfully assigned {ns}/{name} to {NODE_NAME}"),
        "default-scheduler",
    );
    true
}

async fn set_unschedulable(shared: &Shared, pod: &Pod, message: &str) {
    let already = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "PodScheduled" && c.message.as_deref() == Some(message))
        });
    if already {
        return;
    }
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
    let status = json!({"status": {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastTransitionTime": Time(jiff::Timestamp::now()),
    }]}});
    let _ = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await;
}
