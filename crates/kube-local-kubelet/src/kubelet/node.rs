//! The Node object of a kubelet: registered with its labels, addresses and capacity, and its `Ready` condition kept
//! `True` while the kubelet runs (the node lifecycle controller sets it `Unknown` when the heartbeats stop; the
//! kubelet sets it back when it returns). Heartbeats are the Lease's ([`super::lease`]); as upstream's kubelet, the
//! status itself is only re-posted when it changed or every few minutes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Shared, ZONE_LABEL};

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

/// The labels a cloud node carries: hostname, zone, OS and architecture.
fn node_labels(shared: &Shared) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", shared.node.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", std::env::consts::ARCH),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if let Some(zone) = &shared.node.zone {
        labels.insert(ZONE_LABEL.to_string(), zone.clone());
    }
    labels
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
    let labels = node_labels(shared);
    Node {
        metadata: ObjectMeta {
            name: Some(shared.node.name.clone()),
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
                    address: shared.node.name.clone(),
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
                kubelet_version: shared.config.version.clone(),
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

/// Creates the Node, or (a node coming back) refreshes its labels and status; its spec (cordon, taints) is kept.
pub async fn register(shared: &Shared) {
    let api: Api<Node> = Api::all(shared.client.clone());
    let node = node_object(shared);
    let name = shared.node.name.as_str();
    match api.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let labels = json!({"metadata": {"labels": node.metadata.labels}});
            if let Err(e) = api
                .patch(name, &PatchParams::default(), &Patch::Merge(&labels))
                .await
            {
                tracing::warn!(node = name, error = %e, "refreshing the node's labels");
            }
        }
        Err(e) => tracing::warn!(node = name, error = %e, "registering the node"),
    }
    let status = json!({"status": node.status});
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        tracing::warn!(node = name, error = %e, "posting the node status");
    }
}

/// How often the status is re-posted when nothing changed (upstream's `nodeStatusReportFrequency`).
const STATUS_REPORT: Duration = Duration::from_secs(300);

/// Keeps `Ready=True` posted while the kubelet runs: at once when someone else (the node lifecycle controller, after
/// missed heartbeats) changed it, and every [`STATUS_REPORT`] otherwise. Recreates the Node if it was deleted.
pub async fn keep_ready(shared: Arc<Shared>) {
    let api: Api<Node> = Api::all(shared.client.clone());
    let name = shared.node.name.clone();
    let mut last_report = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Ok(found) = api.get_opt(&name).await else {
            continue;
        };
        let Some(node) = found else {
            register(&shared).await;
            last_report = tokio::time::Instant::now();
            continue;
        };
        let mut conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
        let ready = conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready && last_report.elapsed() < STATUS_REPORT {
            continue;
        }
        let now = jiff::Timestamp::now();
        match conditions.iter_mut().find(|c| c.type_ == "Ready") {
            Some(c) if ready => c.last_heartbeat_time = Some(Time(now)),
            Some(c) => *c = ready_condition(now),
            None => conditions.push(ready_condition(now)),
        }
        let patch = json!({"status": {"conditions": conditions}});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => last_report = tokio::time::Instant::now(),
            Err(e) => tracing::debug!(node = %name, error = %e, "posting the node status"),
        }
    }
}
