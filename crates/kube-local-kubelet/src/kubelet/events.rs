//! Events a kubelet reports about its pods (Scheduled, Pulled, Started, Killing, BackOff, Unhealthy, ...), as
//! `kubectl describe pod` shows.

use k8s_openapi::api::core::v1::Pod;

use crate::pod_events::{self, PodEvent, Reporter};

/// Records an event in the background; failures only cost the event.
pub fn record(
    client: &kube::Client,
    pod: &Pod,
    container: Option<&str>,
    warning: bool,
    reason: &str,
    message: String,
    component: &str,
) {
    // The node whose kubelet reports: the pod's.
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    pod_events::record(
        client,
        pod,
        Reporter {
            component,
            instance: node.clone(),
            host: node,
        },
        PodEvent {
            container,
            warning,
            reason,
            message,
            action: reason,
        },
    );
}
