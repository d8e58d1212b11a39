//! The scheduler's loop: every pending pod of the default scheduler is placed by [`crate::scheduler::schedule`] on a
//! snapshot of the caches, then bound (`spec.nodeName`, the `PodScheduled` condition, a `Scheduled` Event), or left
//! Pending with `PodScheduled=False/Unschedulable` and a `FailedScheduling` Event carrying kube-scheduler's message.
//!
//! Claims of `WaitForFirstConsumer` classes get the `volume.kubernetes.io/selected-node` annotation their provisioner
//! waits for before the pod is bound, as the volume binding plugin does. Like kube-scheduler, the loop assumes its own
//! bindings until the pod cache shows them, so pods placed in one pass see each other (anti-affinity, spread).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::Context;
use crate::scheduler::{ClaimFact, Unschedulable, VolumeFacts, schedule};

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// How long an unschedulable pod waits before it is tried again without any change (kube-scheduler's backoff tops
/// out at 10 s; its unschedulable queue flushes after at most 5 minutes).
const RETRY: Duration = Duration::from_secs(5);
/// How long a binding is assumed without the cache showing it.
const ASSUME_FOR: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Scheduler {
    /// Pod uid → the node it was bound to, and when; until the cache shows the binding.
    assumed: HashMap<String, (String, Instant)>,
    /// Pod uid → the last FailedScheduling message recorded, so an unchanged verdict is not recorded again.
    reported: HashMap<String, String>,
}

/// The scheduler's name: pods that name no other are its; it signs its Events with it.
const SCHEDULER: &str = "default-scheduler";

fn is_pending_for_us(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.node_name.as_deref().unwrap_or_default().is_empty()
        && pod.metadata.deletion_timestamp.is_none()
        && spec
            .scheduler_name
            .as_deref()
            .is_none_or(|s| s == SCHEDULER)
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// What placement knows of every claim: bound (with its volume's node affinity), or waiting for a consumer or for
/// the binder.
fn volume_facts(ctx: &Context) -> VolumeFacts {
    let mut facts = VolumeFacts::new();
    let volumes = ctx.caches.volumes.state();
    let classes = ctx.caches.storage_classes.state();
    for pvc in ctx.caches.claims.state() {
        let ns = pvc.metadata.namespace.as_deref().unwrap_or_default();
        let name = pvc.metadata.name.as_deref().unwrap_or_default();
        let spec = pvc.spec.as_ref();
        let fact = match spec.and_then(|s| s.volume_name.as_deref()) {
            Some(volume) => ClaimFact::Bound {
                node_affinity: volumes
                    .iter()
                    .find(|v| v.metadata.name.as_deref() == Some(volume))
                    .and_then(|v| v.spec.as_ref()?.node_affinity.as_ref()?.required.clone()),
            },
            None => {
                let class_name = spec.and_then(|s| s.storage_class_name.as_deref());
                let class = classes.iter().find(|c| match class_name {
                    Some(n) => c.metadata.name.as_deref() == Some(n),
                    None => c
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("storageclass.kubernetes.io/is-default-class"))
                        .is_some_and(|v| v == "true"),
                });
                let waits = class.is_some_and(|c| {
                    c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
                });
                if waits {
                    ClaimFact::Unbound
                } else {
                    ClaimFact::UnboundImmediate
                }
            }
        };
        facts.insert(ns, name, fact);
    }
    facts
}

fn claim_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
        })
        .collect()
}

impl Scheduler {
    /// One pass over the pending pods, oldest first.
    pub async fn pass(&mut self, ctx: &Context) -> Option<Duration> {
        let mut pods: Vec<Pod> = ctx
            .caches
            .pods
            .state()
            .iter()
            .map(|p| (**p).clone())
            .collect();
        let live: std::collections::HashSet<String> =
            pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        self.assumed
            .retain(|uid, (_, at)| live.contains(uid) && at.elapsed() < ASSUME_FOR);
        self.reported.retain(|uid, _| live.contains(uid));
        for pod in &mut pods {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let bound = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
            if bound {
                self.assumed.remove(&uid);
            } else if let Some((node, _)) = self.assumed.get(&uid)
                && let Some(spec) = pod.spec.as_mut()
            {
                spec.node_name = Some(node.clone());
            }
        }
        let mut pending: Vec<usize> = (0..pods.len())
            .filter(|i| is_pending_for_us(&pods[*i]))
            .collect();
        if pending.is_empty() {
            return None;
        }
        pending.sort_by_key(|i| {
            let p = &pods[*i];
            (
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                p.metadata.name.clone(),
            )
        });
        let nodes: Vec<Node> = ctx
            .caches
            .nodes
            .state()
            .iter()
            .map(|n| (**n).clone())
            .collect();
        let volumes = volume_facts(ctx);
        let mut retry = None;
        for i in pending {
            let pod = pods[i].clone();
            match schedule(&pod, &nodes, &pods, &volumes) {
                Ok(node) => {
                    if bind(ctx, &pod, &node).await {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        self.assumed
                            .insert(uid.clone(), (node.clone(), Instant::now()));
                        self.reported.remove(&uid);
                        if let Some(spec) = pods[i].spec.as_mut() {
                            spec.node_name = Some(node);
                        }
                    } else {
                        retry = Some(Duration::from_secs(1));
                    }
                }
                Err(unschedulable) => {
                    self.unschedulable(ctx, &pod, &unschedulable).await;
                    retry = Some(RETRY);
                }
            }
        }
        retry
    }

    async fn unschedulable(&mut self, ctx: &Context, pod: &Pod, verdict: &Unschedulable) {
        let message = verdict.message();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if self.reported.get(&uid) == Some(&message) {
            return;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        let status = json!({"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            "lastProbeTime": null, "lastTransitionTime": Time(jiff::Timestamp::now()),
        }]}});
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            tracing::debug!(pod = %name, error = %e, "reporting an unschedulable pod");
            return;
        }
        record_event(ctx, pod, true, "FailedScheduling", message.clone());
        self.reported.insert(uid, message);
    }
}

/// Selects the node for the pod's waiting claims, then binds the pod; false when the binding has to be retried.
async fn bind(ctx: &Context, pod: &Pod, node: &str) -> bool {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &ns);
    for claim in claim_names(pod) {
        let Some(pvc) = crate::informer::get(&ctx.caches.claims, &ns, &claim) else {
            return false;
        };
        let selected = pvc
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(SELECTED_NODE));
        let bound = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_ref())
            .is_some();
        if !selected && !bound {
            let patch = json!({"metadata": {"annotations": {SELECTED_NODE: node}}});
            if let Err(e) = claims
                .patch(&claim, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::debug!(claim = %claim, error = %e, "selecting the node of a claim");
                return false;
            }
        }
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    // Only an unbound pod may be bound: the uid precondition keeps a recreated pod of the same name out of it.
    let patch = json!({
        "metadata": {"uid": pod.metadata.uid},
        "spec": {"nodeName": node},
    });
    if let Err(e) = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::debug!(pod = %name, error = %e, "binding a pod");
        // Gone meanwhile: nothing to retry.
        return matches!(e, kube::Error::Api(ref s) if s.code == 404);
    }
    let status = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "True", "lastProbeTime": null,
        "lastTransitionTime": Time(jiff::Timestamp::now()),
    }]}});
    let _ = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await;
    record_event(
        ctx,
        pod,
        false,
        "Scheduled",
        format!("Successfully assigned {ns}/{name} to {node}"),
    );
    true
}

/// Records a scheduler Event about the pod in the background; failures only cost the Event.
fn record_event(ctx: &Context, pod: &Pod, warning: bool, reason: &str, message: String) {
    crate::pod_events::record(
        &ctx.client,
        pod,
        crate::pod_events::Reporter {
            component: SCHEDULER,
            instance: Some(SCHEDULER.into()),
            host: None,
        },
        crate::pod_events::PodEvent {
            container: None,
            warning,
            reason,
            message,
            action: if warning { "Scheduling" } else { "Binding" },
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(node: Option<&str>, scheduler: Option<&str>, phase: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [], "nodeName": node, "schedulerName": scheduler},
            "status": {"phase": phase},
        }))
        .unwrap_or_default()
    }

    #[test]
    fn only_unbound_live_pods_of_the_default_scheduler_are_placed() {
        assert!(is_pending_for_us(&pod(None, None, None)));
        assert!(is_pending_for_us(&pod(
            None,
            Some("default-scheduler"),
            Some("Pending")
        )));
        assert!(!is_pending_for_us(&pod(Some("node-1"), None, None)));
        assert!(!is_pending_for_us(&pod(None, Some("my-scheduler"), None)));
        assert!(!is_pending_for_us(&pod(None, None, Some("Failed"))));
    }
}
