//! The Endpoints controller: for each Service with a selector, its pods' addresses — ready pods under `addresses`,
//! others under `notReadyAddresses` (or `addresses` with `publishNotReadyAddresses`) — with target ports resolved.
//! [`super::endpoint_slices`] publishes the same view as EndpointSlices.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
    ServicePort,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ObjectMeta, PostParams};

use super::Context;
use crate::informer::get;

/// One pod behind a Service.
pub struct Backend {
    pub pod: Arc<Pod>,
    pub ip: String,
    pub ready: bool,
    pub terminating: bool,
    /// Set when the pod's hostname/subdomain make it addressable through this Service.
    pub hostname: Option<String>,
}

pub fn is_pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether a pod has been ready for `min_ready` seconds at `now` (else how long until it has). A ready pod without
/// a transition time counts as available.
pub fn available_in(
    pod: &Pod,
    min_ready: i32,
    now: jiff::Timestamp,
) -> Result<(), std::time::Duration> {
    if min_ready <= 0 {
        return Ok(());
    }
    let since = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    let Some(since) = since else { return Ok(()) };
    let at = since + jiff::SignedDuration::from_secs(i64::from(min_ready));
    match std::time::Duration::try_from(at.duration_since(now)) {
        Ok(left) if !left.is_zero() => Err(left),
        _ => Ok(()),
    }
}

fn selector_matches(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The pods selected by a Service that have an IP and have not finished.
pub fn backends(ctx: &Context, svc: &Service) -> Option<Vec<Backend>> {
    let spec = svc.spec.as_ref()?;
    let selector = spec.selector.as_ref().filter(|s| !s.is_empty())?;
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let mut out: Vec<Backend> = ctx
        .caches
        .pods
        .state_filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str()) && selector_matches(selector, p)
        })
        .into_iter()
        .filter_map(|pod| {
            let status = pod.status.as_ref()?;
            let ip = status.pod_ip.clone().filter(|ip| !ip.is_empty())?;
            if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
                return None;
            }
            let pod_spec = pod.spec.as_ref();
            let hostname = pod_spec
                .and_then(|s| s.hostname.clone())
                .filter(|_| pod_spec.and_then(|s| s.subdomain.as_deref()) == Some(name.as_str()));
            Some(Backend {
                ready: is_pod_ready(&pod),
                terminating: pod.metadata.deletion_timestamp.is_some(),
                ip,
                hostname,
                pod,
            })
        })
        .collect();
    out.sort_by(|a, b| a.ip.cmp(&b.ip));
    Some(out)
}

/// A Service port's target port number on a pod (named ports resolve through the pod's containers).
pub fn target_port(port: &ServicePort, pod: &Pod) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(p)) => Some(*p),
        Some(IntOrString::String(name)) => pod.spec.as_ref().and_then(|s| {
            s.containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
        }),
    }
}

fn address(b: &Backend) -> EndpointAddress {
    EndpointAddress {
        ip: b.ip.clone(),
        hostname: b.hostname.clone(),
        node_name: b.node_name(),
        target_ref: Some(b.pod_reference()),
    }
}

impl Backend {
    /// The node the backend's pod runs on.
    pub(super) fn node_name(&self) -> Option<String> {
        self.pod.spec.as_ref().and_then(|s| s.node_name.clone())
    }

    /// The backend's pod, as an endpoint's target.
    pub(super) fn pod_reference(&self) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            name: self.pod.metadata.name.clone(),
            namespace: self.pod.metadata.namespace.clone(),
            uid: self.pod.metadata.uid.clone(),
            ..ObjectReference::default()
        }
    }
}

/// (name, port, protocol) of a Service port on a pod.
type ResolvedPort = (String, i32, String);
/// Ready and not-ready addresses of one subset.
type Addresses = (Vec<EndpointAddress>, Vec<EndpointAddress>);

fn desired_subsets(svc: &Service, backends: &[Backend]) -> Vec<EndpointSubset> {
    let spec = svc.spec.clone().unwrap_or_default();
    let publish_all = spec.publish_not_ready_addresses == Some(true);
    // Pods with the same resolved ports share a subset, as upstream's repacking does.
    let mut subsets: BTreeMap<Vec<ResolvedPort>, Addresses> = BTreeMap::new();
    for b in backends.iter().filter(|b| !b.terminating || publish_all) {
        let ports: Vec<(String, i32, String)> = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p.name.clone().unwrap_or_default(),
                    target_port(p, &b.pod)?,
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ))
            })
            .collect();
        let entry = subsets.entry(ports).or_default();
        if (b.ready && !b.terminating) || publish_all {
            entry.0.push(address(b));
        } else {
            entry.1.push(address(b));
        }
    }
    subsets
        .into_iter()
        .map(|(ports, (ready, not_ready))| EndpointSubset {
            addresses: (!ready.is_empty()).then_some(ready),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: (!ports.is_empty()).then(|| {
                ports
                    .into_iter()
                    .map(|(name, port, protocol)| EndpointPort {
                        name: (!name.is_empty()).then_some(name),
                        port,
                        protocol: Some(protocol),
                        ..EndpointPort::default()
                    })
                    .collect()
            }),
        })
        .collect()
}

/// The label upstream's Endpoints controller puts on what it manages.
const MANAGED_BY: &str = "endpoints.kubernetes.io/managed-by";

pub async fn reconcile(ctx: &Context) -> Option<std::time::Duration> {
    // Endpoints of deleted Services go with them.
    for ep in ctx.caches.endpoints.state() {
        let ns = ep.metadata.namespace.clone().unwrap_or_default();
        let name = ep.metadata.name.clone().unwrap_or_default();
        let managed = ep
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(MANAGED_BY));
        if managed && get(&ctx.caches.services, &ns, &name).is_none() {
            let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), &ns);
            let _ = api.delete(&name, &Default::default()).await;
        }
    }
    for svc in ctx.caches.services.state() {
        let Some(backends) = backends(ctx, &svc) else {
            continue;
        };
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let subsets = desired_subsets(&svc, &backends);
        let subsets = (!subsets.is_empty()).then_some(subsets);
        let existing = get(&ctx.caches.endpoints, &ns, &name);
        let mut labels = svc.metadata.labels.clone().unwrap_or_default();
        if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
            labels.insert("service.kubernetes.io/headless".into(), String::new());
        }
        labels.insert(MANAGED_BY.into(), "endpoint-controller".into());
        let labels = (!labels.is_empty()).then_some(labels);
        let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), &ns);
        match existing {
            Some(ep) if ep.subsets == subsets && ep.metadata.labels == labels => {}
            Some(ep) => {
                let mut updated = (*ep).clone();
                updated.subsets = subsets;
                updated.metadata.labels = labels;
                if let Err(e) = api.replace(&name, &PostParams::default(), &updated).await {
                    tracing::debug!(service = %name, error = %e, "updating endpoints");
                }
            }
            None => {
                let ep = Endpoints {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        labels,
                        ..ObjectMeta::default()
                    },
                    subsets,
                };
                if let Err(e) = api.create(&PostParams::default(), &ep).await {
                    tracing::debug!(service = %name, error = %e, "creating endpoints");
                }
            }
        }
    }
    None
}
