//! Events about pods (Scheduled, Pulled, Started, Killing, BackOff, Unhealthy, ...), as `kubectl describe pod` shows.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, ObjectMeta, PostParams};

/// How an event names a container of the pod: by the list it is in (`spec.initContainers{init}`), as upstream's
/// container references do.
fn field_path(pod: &Pod, container: &str) -> String {
    let list = match pod.spec.as_ref() {
        Some(s)
            if s.init_containers
                .iter()
                .flatten()
                .any(|c| c.name == container) =>
        {
            "initContainers"
        }
        Some(s)
            if s.ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == container) =>
        {
            "ephemeralContainers"
        }
        _ => "containers",
    };
    format!("spec.{list}{{{container}}}")
}

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
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    // The node whose kubelet reports: the pod's.
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(ns.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: Some(ns.clone()),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            field_path: container.map(|c| field_path(pod, c)),
        },
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some(component.into()),
            host: node.clone(),
        }),
        reporting_component: Some(component.into()),
        reporting_instance: node,
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        action: Some(reason.into()),
        count: Some(1),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    tokio::spawn(async move {
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::debug!(error = %e, "recording a pod event");
        }
    });
}
