//! The EndpointSlice controller: one IPv4 slice per Service with a selector (`<service>-<suffix>`, owned by the
//! Service), each pod an endpoint with ready/serving/terminating conditions. As upstream's controller does, a slice
//! carries its Service's labels besides its own two, so a controller can watch the slices of the Services it labels.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};

use super::Context;
use super::endpoints::{backends, target_port};
use crate::informer::get;
use crate::meta::SERVICE_NAME_LABEL;

const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const CONTROLLER: &str = "endpointslice-controller.k8s.io";

fn desired(svc: &Service, ctx: &Context) -> Option<(Vec<Endpoint>, Vec<EndpointPort>)> {
    let backends = backends(ctx, svc)?;
    let spec = svc.spec.clone().unwrap_or_default();
    let publish_all = spec.publish_not_ready_addresses == Some(true);
    let endpoints = backends
        .iter()
        .map(|b| Endpoint {
            addresses: vec![b.ip.clone()],
            conditions: Some(EndpointConditions {
                ready: Some((b.ready && !b.terminating) || publish_all),
                serving: Some(b.ready),
                terminating: Some(b.terminating),
            }),
            hostname: b.hostname.clone(),
            node_name: b.node_name(),
            target_ref: Some(b.pod_reference()),
            ..Endpoint::default()
        })
        .collect();
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| EndpointPort {
            name: Some(p.name.clone().unwrap_or_default()),
            port: backends
                .first()
                .and_then(|b| target_port(p, &b.pod))
                .or(Some(p.port)),
            protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
            app_protocol: p.app_protocol.clone(),
        })
        .collect();
    Some((endpoints, ports))
}

/// The Service's labels, then the two that tie a slice to its Service and controller (which win over a Service
/// label of the same key).
fn slice_labels(svc: &Service, name: &str) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.to_string(), name.to_owned());
    labels.insert(MANAGED_BY.to_string(), CONTROLLER.to_string());
    labels
}

pub async fn reconcile(ctx: &Context) -> Option<std::time::Duration> {
    for svc in ctx.caches.services.state() {
        let Some((endpoints, ports)) = desired(&svc, ctx) else {
            continue;
        };
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let mut ours = ctx.caches.endpoint_slices.state_filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns.as_str())
                && s.metadata.labels.as_ref().is_some_and(|l| {
                    l.get(SERVICE_NAME_LABEL) == Some(&name)
                        && l.get(MANAGED_BY).is_some_and(|m| m == CONTROLLER)
                })
        });
        ours.sort_by_key(|s| s.metadata.name.clone());
        let endpoints = (!endpoints.is_empty()).then_some(endpoints);
        let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &ns);
        // One slice per Service holds every endpoint here; extras are removed.
        for extra in ours.iter().skip(1) {
            let _ = api
                .delete(
                    extra.metadata.name.as_deref().unwrap_or_default(),
                    &Default::default(),
                )
                .await;
        }
        let existing = ours.first().cloned();
        let labels = slice_labels(&svc, &name);
        match existing {
            Some(s)
                if s.endpoints == endpoints
                    && s.ports.as_ref() == Some(&ports)
                    && s.metadata.labels.as_ref() == Some(&labels) => {}
            Some(s) => {
                let mut updated = (*s).clone();
                updated.endpoints = endpoints;
                updated.ports = Some(ports);
                updated.metadata.labels = Some(labels);
                let slice_name = updated.metadata.name.clone().unwrap_or_default();
                if let Err(e) = api
                    .replace(&slice_name, &PostParams::default(), &updated)
                    .await
                {
                    tracing::debug!(service = %name, error = %e, "updating an EndpointSlice");
                }
            }
            None => {
                let slice = EndpointSlice {
                    metadata: ObjectMeta {
                        generate_name: Some(format!("{name}-")),
                        namespace: Some(ns.clone()),
                        labels: Some(labels),
                        owner_references: Some(vec![OwnerReference {
                            api_version: "v1".into(),
                            kind: "Service".into(),
                            name: name.clone(),
                            uid: svc.metadata.uid.clone().unwrap_or_default(),
                            controller: Some(true),
                            block_owner_deletion: Some(true),
                        }]),
                        ..ObjectMeta::default()
                    },
                    address_type: "IPv4".into(),
                    endpoints,
                    ports: Some(ports),
                };
                match api.create(&PostParams::default(), &slice).await {
                    // A generated name: wait for the cache to know it, or the next pass would create another.
                    Ok(created) => {
                        let created = created.metadata.name.unwrap_or_default();
                        for _ in 0..50 {
                            if get(&ctx.caches.endpoint_slices, &ns, &created).is_some() {
                                break;
                            }
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        }
                    }
                    Err(e) => {
                        tracing::debug!(service = %name, error = %e, "creating an EndpointSlice")
                    }
                }
            }
        }
    }
    None
}
