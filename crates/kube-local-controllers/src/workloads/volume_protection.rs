//! Storage object in-use protection, as upstream's pvc-protection controller: every claim carries the
//! `kubernetes.io/pvc-protection` finalizer, which is removed once the claim is being deleted and no pod that has not
//! finished uses it. A claim deleted under a running pod (an operator reclaiming volumes) so stays until the pod is
//! gone.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::Context;

use crate::meta::PVC_PROTECTION_FINALIZER as FINALIZER;

fn uses(pod: &Pod, claim: &str) -> bool {
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    !finished
        && pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .is_some_and(|c| c.claim_name == claim)
            })
}

pub async fn reconcile(ctx: &Context) -> Option<std::time::Duration> {
    for pvc in ctx.caches.claims.state() {
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let name = pvc.metadata.name.clone().unwrap_or_default();
        let finalizers = pvc.metadata.finalizers.clone().unwrap_or_default();
        let has = finalizers.iter().any(|f| f == FINALIZER);
        let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
        let deleting = pvc.metadata.deletion_timestamp.is_some();
        let desired: Option<Vec<String>> = if !deleting && !has {
            let mut f = finalizers.clone();
            f.push(FINALIZER.into());
            Some(f)
        } else if deleting && has {
            let in_use = ctx
                .caches
                .pods
                .find(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()) && uses(p, &name))
                .is_some();
            (!in_use).then(|| {
                finalizers
                    .iter()
                    .filter(|f| *f != FINALIZER)
                    .cloned()
                    .collect()
            })
        } else {
            None
        };
        if let Some(finalizers) = desired {
            // The resourceVersion makes this a compare-and-swap: a concurrent change wins and the next pass retries.
            let patch = json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": pvc.metadata.resource_version,
            }});
            let _ = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        }
    }
    None
}
