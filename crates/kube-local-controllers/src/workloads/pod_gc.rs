//! The pod garbage collector's orphan pass, as kube-controller-manager runs it: a pod bound to a node that no longer
//! exists (`kubectl delete node` of a machine gone for good) is force-deleted after a quarantine, since no kubelet
//! will ever finish it. That is what lets a StatefulSet re-create such a pod elsewhere.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};

use super::Context;

/// How long a node must be missing before its pods go (upstream's quarantine is 40 s; here the node monitor grace
/// period, which tests shorten).
fn quarantine(ctx: &Context) -> Duration {
    ctx.node_monitor_grace
}

#[derive(Default)]
pub struct PodGc {
    /// Node name → when its absence was first seen.
    missing_since: HashMap<String, Instant>,
}

impl PodGc {
    pub async fn pass(&mut self, ctx: &Context) -> Option<Duration> {
        let nodes = ctx.caches.node_names();
        let pods = ctx.caches.pods.state();
        let mut orphans: HashMap<String, Vec<&Pod>> = HashMap::new();
        for pod in &pods {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref())
                && !node.is_empty()
                && !nodes.contains(node)
            {
                orphans.entry(node.clone()).or_default().push(pod);
            }
        }
        self.missing_since
            .retain(|node, _| orphans.contains_key(node));
        let mut next = None;
        for (node, pods) in orphans {
            let since = *self
                .missing_since
                .entry(node.clone())
                .or_insert_with(Instant::now);
            let left = quarantine(ctx).saturating_sub(since.elapsed());
            if !left.is_zero() {
                next = Some(next.map_or(left, |n: Duration| n.min(left)));
                continue;
            }
            for pod in pods {
                let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: pod.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match Api::<Pod>::namespaced(ctx.client.clone(), ns)
                    .delete(name, &params)
                    .await
                {
                    Ok(_) => {
                        tracing::info!(pod = name, node = %node, "deleted a pod of a node that no longer exists")
                    }
                    Err(e) => tracing::debug!(pod = name, error = %e, "deleting an orphaned pod"),
                }
            }
        }
        next
    }
}
