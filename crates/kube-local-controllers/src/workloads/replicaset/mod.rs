//! The ReplicaSet controller, after upstream's `replica_set.go`.
//!
//! A ReplicaSet keeps `spec.replicas` active pods (not finished, not being deleted) that its selector matches and it
//! controls. Pods are made from the template with `generateName: <set>-` (so a five-character random suffix), the
//! template's labels, annotations and finalizers, and a controller reference that blocks the set's deletion. As
//! upstream's `ClaimPods`, the set adopts orphans its selector matches and releases pods it controls that no longer
//! match. Scaling up creates in slow-start batches (1, 2, 4, ...) that stop at the first failure; scaling down removes
//! the pods [`ranking`] puts first. Writes not yet visible in the pod cache are held in [`expectations`] so a lagging
//! cache never doubles them. Status: `replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas` (ready
//! for `minReadySeconds`) and `observedGeneration`.

mod expectations;
mod ranking;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

pub use expectations::Expectations;
use expectations::Seen;

use super::Context;
use super::endpoints::{available_in, is_pod_ready};
use super::ownership::{Claim, Claimant, adopt, claim, controller_ref, release};

/// Upstream's `burstReplicas`: at most this many creations or deletions per pass.
const BURST: usize = 500;

/// Whether a pod counts towards its set: not finished and not being deleted (upstream's `FilterActivePods`).
pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// One pass over every ReplicaSet; returns when to look again at the latest.
pub async fn reconcile(ctx: &Context, expectations: &Expectations) -> Option<Duration> {
    let sets = ctx.caches.replicasets.state();
    let live: HashSet<String> = sets
        .iter()
        .filter_map(|rs| rs.metadata.uid.clone())
        .collect();
    expectations.forget_all_but(&live);
    let mut next: Option<Duration> = None;
    for rs in sets {
        if let Some(wake) = sync_replicaset(ctx, expectations, &rs).await {
            next = Some(next.map_or(wake, |n| n.min(wake)));
        }
    }
    next
}

/// The pod `rs` creates from its template (named by the API server from `generateName`).
fn new_pod(rs: &ReplicaSet) -> Option<Pod> {
    let template = rs.spec.template.as_ref()?;
    let name = rs.metadata.name.as_deref()?;
    let tmeta = template.metadata.clone().unwrap_or_default();
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: rs.metadata.namespace.clone(),
            labels: tmeta.labels,
            annotations: tmeta.annotations,
            finalizers: tmeta.finalizers,
            owner_references: Some(vec![controller_ref("apps/v1", "ReplicaSet", &rs.metadata)]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    })
}

async fn sync_replicaset(
    ctx: &Context,
    expectations: &Expectations,
    rs: &ReplicaSet,
) -> Option<Duration> {
    let uid = rs.metadata.uid.as_deref()?;
    let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
    let spec = &rs.spec;
    let deleting = rs.metadata.deletion_timestamp.is_some();
    let in_ns = ctx
        .caches
        .pods
        .state_filter(|p| p.metadata.namespace.as_deref() == Some(ns));
    let satisfied = expectations.satisfied(uid, in_ns.iter().map(|p| Seen::of(p)));
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);

    let who = Claimant {
        uid,
        namespace: ns,
        selector: &spec.selector,
        deleting,
    };
    let mut owned: Vec<&Pod> = Vec::new();
    let mut ownership_changed = false;
    for pod in in_ns.iter().filter(|p| is_active(p)) {
        match claim(&who, &pod.metadata) {
            Claim::Owned => owned.push(pod),
            Claim::Adopt => {
                let owner = controller_ref("apps/v1", "ReplicaSet", &rs.metadata);
                ownership_changed |= adopt(&pods, &pod.metadata, owner).await;
            }
            Claim::Release => ownership_changed |= release(&pods, &pod.metadata, uid).await,
            Claim::Ignore => {}
        }
    }
    if ownership_changed {
        // Act once the cache shows the new owners: acting now would count without them.
        return Some(Duration::from_millis(100));
    }

    let mut wake = None;
    if !satisfied {
        wake = Some(Duration::from_secs(1));
    } else if !deleting {
        let want = usize::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
        if owned.len() < want {
            create_pods(ctx, expectations, rs, (want - owned.len()).min(BURST)).await;
        } else if owned.len() > want {
            let doomed = ranking::pods_to_delete(&owned, (owned.len() - want).min(BURST));
            for pod in doomed {
                delete_pod(&pods, expectations, uid, pod).await;
            }
        }
    }
    let status_wake = update_status(ctx, rs, &owned).await;
    match (wake, status_wake) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Creates `count` pods in slow-start batches (1, 2, 4, ...), stopping after a batch with a failure.
async fn create_pods(ctx: &Context, expectations: &Expectations, rs: &ReplicaSet, count: usize) {
    let Some(pod) = new_pod(rs) else { return };
    let uid = rs.metadata.uid.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(
        ctx.client.clone(),
        rs.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let params = PostParams::default();
    let mut remaining = count;
    let mut batch = 1;
    while remaining > 0 {
        let n = batch.min(remaining);
        let results = futures::future::join_all((0..n).map(|_| api.create(&params, &pod))).await;
        let mut failed = false;
        for r in results {
            match r {
                Ok(created) => {
                    expectations.created(uid, created.metadata.name.as_deref().unwrap_or_default())
                }
                Err(e) => {
                    failed = true;
                    tracing::debug!(replicaset = ?rs.metadata.name, error = %e, "creating a pod");
                }
            }
        }
        if failed {
            return;
        }
        remaining -= n;
        batch *= 2;
    }
}

async fn delete_pod(api: &Api<Pod>, expectations: &Expectations, rs_uid: &str, pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    expectations.deleted(rs_uid, pod.metadata.uid.as_deref().unwrap_or_default());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => tracing::debug!(pod = name, error = %e, "deleting a ReplicaSet pod"),
    }
}

/// The status `rs` reports for its pods `owned` at `now`, and when a ready pod becomes available.
fn status_of(
    rs: &ReplicaSet,
    owned: &[&Pod],
    now: jiff::Timestamp,
) -> (ReplicaSetStatus, Option<Duration>) {
    let min_ready = rs.spec.min_ready_seconds.unwrap_or(0);
    let template_labels = rs
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let (mut fully_labeled, mut ready, mut available) = (0, 0, 0);
    let mut wake: Option<Duration> = None;
    for pod in owned {
        let labels = pod.metadata.labels.as_ref();
        if template_labels
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        {
            fully_labeled += 1;
        }
        if is_pod_ready(pod) {
            ready += 1;
            match available_in(pod, min_ready, now) {
                Ok(()) => available += 1,
                Err(left) => wake = Some(wake.map_or(left, |w| w.min(left))),
            }
        }
    }
    let old = rs.status.clone().unwrap_or_default();
    let status = ReplicaSetStatus {
        replicas: i32::try_from(owned.len()).unwrap_or(i32::MAX),
        fully_labeled_replicas: Some(fully_labeled),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        observed_generation: rs.metadata.generation,
        ..old
    };
    (status, wake)
}

async fn update_status(ctx: &Context, rs: &ReplicaSet, owned: &[&Pod]) -> Option<Duration> {
    let (status, wake) = status_of(rs, owned, jiff::Timestamp::now());
    if rs.status.as_ref() == Some(&status) {
        return wake;
    }
    let api: Api<ReplicaSet> = Api::namespaced(
        ctx.client.clone(),
        rs.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let patch = json!({"status": {
        "replicas": status.replicas,
        "fullyLabeledReplicas": status.fully_labeled_replicas,
        "readyReplicas": status.ready_replicas,
        "availableReplicas": status.available_replicas,
        "observedGeneration": status.observed_generation,
    }});
    if let Err(e) = api
        .patch_status(
            rs.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        tracing::debug!(replicaset = ?rs.metadata.name, error = %e, "updating ReplicaSet status");
    }
    wake
}

/// The pods of `rs` as the pod cache shows them (active ones it controls).
pub fn pods_of(ctx: &Context, rs: &ReplicaSet) -> Vec<Arc<Pod>> {
    let uid = rs.metadata.uid.as_deref().unwrap_or_default();
    let ns = rs.metadata.namespace.as_deref();
    ctx.caches.pods.state_filter(|p| {
        p.metadata.namespace.as_deref() == ns
            && super::ownership::controller_uid(&p.metadata) == Some(uid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: serde_json::Value, ready_at: Option<&str>) -> Pod {
        let conditions = ready_at
            .map(|t| vec![json!({"type": "Ready", "status": "True", "lastTransitionTime": t})])
            .unwrap_or_default();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": labels},
            "status": {"phase": "Running", "conditions": conditions},
        }))
        .expect("a pod")
    }

    #[test]
    fn status_counts_labels_readiness_and_availability() {
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": 3},
            "spec": {
                "minReadySeconds": 10,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web", "tier": "front"}}},
            },
        }))
        .expect("a replicaset");
        let now: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().expect("a time");
        let full_old = pod(
            json!({"app": "web", "tier": "front"}),
            Some("2026-01-01T00:00:00Z"),
        );
        let partial_new = pod(json!({"app": "web"}), Some("2026-01-01T00:00:55Z"));
        let unready = pod(json!({"app": "web", "tier": "front"}), None);
        let (status, wake) = status_of(&rs, &[&full_old, &partial_new, &unready], now);
        assert_eq!(status.replicas, 3);
        assert_eq!(status.fully_labeled_replicas, Some(2));
        assert_eq!(status.ready_replicas, Some(2));
        assert_eq!(status.available_replicas, Some(1));
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(wake, Some(Duration::from_secs(5)));
    }

    #[test]
    fn pods_carry_the_template_and_a_blocking_controller_reference() {
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "web-abc", "namespace": "ns", "uid": "u1"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]},
                },
            },
        }))
        .expect("a replicaset");
        let pod = new_pod(&rs).expect("a pod");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-abc-"));
        assert_eq!(
            pod.metadata.labels,
            Some([("app".to_string(), "web".to_string())].into())
        );
        let owner = &pod.metadata.owner_references.expect("owners")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ReplicaSet", "u1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }
}
