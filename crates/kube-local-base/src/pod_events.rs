//! Events about pods, written as the components that report them on a cluster do (the scheduler's `Scheduled` and
//! `FailedScheduling`; a kubelet's `Pulled`, `Started`, `Killing`, `BackOff`, `Unhealthy`, ...), so that
//! `kubectl describe pod` and `kubectl events` show them.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, ObjectMeta, PostParams};

/// Who reports an Event.
pub struct Reporter<'a> {
    /// `default-scheduler`, `kubelet`, ...
    pub component: &'a str,
    /// The reporting instance: the node for a kubelet, the component's name otherwise.
    pub instance: Option<String>,
    /// The node the reporter runs on (`source.host`), for a kubelet.
    pub host: Option<String>,
}

/// What an Event says about a pod.
pub struct PodEvent<'a> {
    /// The container it is about (`involvedObject.fieldPath`), if any.
    pub container: Option<&'a str>,
    pub warning: bool,
    pub reason: &'a str,
    pub message: String,
    /// What the reporter did (`Scheduling`, `Binding`, or the reason).
    pub action: &'a str,
}

/// How an Event names a container of the pod: by the list it is in (`spec.initContainers{init}`,
/// `spec.ephemeralContainers{debugger}`), as upstream's container references do.
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

/// Records `event` about `pod` in the background; a failure only costs the Event.
pub fn record(client: &kube::Client, pod: &Pod, reporter: Reporter<'_>, event: PodEvent<'_>) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let record = Event {
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
            field_path: event.container.map(|c| field_path(pod, c)),
        },
        reason: Some(event.reason.into()),
        message: Some(event.message),
        type_: Some(if event.warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some(reporter.component.into()),
            host: reporter.host,
        }),
        reporting_component: Some(reporter.component.into()),
        reporting_instance: reporter.instance,
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        action: Some(event.action.into()),
        count: Some(1),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    tokio::spawn(async move {
        if let Err(e) = api.create(&PostParams::default(), &record).await {
            tracing::debug!(error = %e, "recording a pod event");
        }
    });
}
