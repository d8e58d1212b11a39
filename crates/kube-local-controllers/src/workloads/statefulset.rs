//! The StatefulSet controller, after upstream's `stateful_set_control.go`.
//!
//! Pods `<set>-<ordinal>` with stable hostnames under the governing Service; one PVC `<template>-<set>-<ordinal>` per
//! claim template, created before its pod and reused when the pod is recreated; `OrderedReady` creates in ascending
//! order waiting for each pod to be Running and Ready and removes in descending order one at a time, `Parallel` does
//! both at once. Templates are recorded as ControllerRevisions; `RollingUpdate` replaces pods from the highest ordinal
//! down to the partition, one at a time once all are ready; `OnDelete` only uses the new template for pods that are
//! recreated. `persistentVolumeClaimRetentionPolicy` is applied through owner references, so the garbage collector
//! removes claims with their set (`whenDeleted: Delete`) or with their scaled-down pod (`whenScaled: Delete`).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::Context;
use super::disruption::selector_matches;
use super::endpoints::{available_in, is_pod_ready};
use super::hashing::content_hash;
use crate::informer::get;

pub const REVISION_LABEL: &str = "controller-revision-hash";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

fn owner_ref(set: &StatefulSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "StatefulSet".into(),
        name: set.metadata.name.clone().unwrap_or_default(),
        uid: set.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Claims reference their owners without `controller`, as upstream's `setOwnerRef` does.
fn claim_owner(set: &StatefulSet) -> OwnerReference {
    OwnerReference {
        controller: None,
        block_owner_deletion: None,
        ..owner_ref(set)
    }
}

fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The revision's data: a strategic merge patch replacing the template, as upstream stores it.
fn revision_data(set: &StatefulSet) -> Value {
    let mut template = serde_json::to_value(&set.spec.template).unwrap_or(Value::Null);
    if let Some(t) = template.as_object_mut() {
        t.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

fn revision_hash(data: &Value, collision_count: i32) -> String {
    content_hash(
        serde_json::to_vec(data).unwrap_or_default(),
        collision_count,
    )
}

/// The template a revision recorded.
fn revision_template(rev: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut template = rev.data.0.pointer("/spec/template")?.clone();
    if let Some(t) = template.as_object_mut() {
        t.remove("$patch");
    }
    serde_json::from_value(template).ok()
}

fn ordinal_of(set_name: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(set_name)?.strip_prefix('-')?.parse().ok()
}

fn pod_revision(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(REVISION_LABEL)
        .map(String::as_str)
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn is_failed_or_succeeded(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed" | "Succeeded")
    )
}

fn is_running_and_ready(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && is_pod_ready(pod)
}

fn is_created(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some()
}

fn claim_name(template: &PersistentVolumeClaim, set: &str, ordinal: i32) -> String {
    format!(
        "{}-{set}-{ordinal}",
        template.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The pod of `ordinal` from `template`, at `revision`.
fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, revision: &str, ordinal: i32) -> Pod {
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let spec_set = set.spec.clone();
    let name = format!("{set_name}-{ordinal}");
    let tmeta = template.metadata.clone().unwrap_or_default();
    let mut labels = tmeta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(REVISION_LABEL.into(), revision.into());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    spec.subdomain = spec_set.service_name.clone().filter(|s| !s.is_empty());
    let mut volumes = spec.volumes.take().unwrap_or_default();
    for claim in spec_set.volume_claim_templates.iter().flatten() {
        let vname = claim.metadata.name.clone().unwrap_or_default();
        volumes.retain(|v| v.name != vname);
        volumes.push(Volume {
            name: vname,
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(claim, &set_name, ordinal),
                read_only: None,
            }),
            ..Volume::default()
        });
    }
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: tmeta.annotations,
            owner_references: Some(vec![owner_ref(set)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Ensures the ControllerRevision of the current template exists and is the newest; returns (all revisions sorted
/// by number, the update revision).
async fn sync_revisions(
    ctx: &Context,
    set: &StatefulSet,
) -> Option<(Vec<ControllerRevision>, ControllerRevision)> {
    let uid = set.metadata.uid.clone()?;
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let mut revisions: Vec<ControllerRevision> = ctx
        .caches
        .revisions
        .state_filter(|r| {
            r.metadata.namespace.as_deref() == Some(ns.as_str()) && controlled_by(&r.metadata, &uid)
        })
        .into_iter()
        .map(|r| (*r).clone())
        .collect();
    revisions.sort_by_key(|r| r.revision.unwrap_or(0));
    let data = revision_data(set);
    let max = revisions.last().and_then(|r| r.revision).unwrap_or(0);
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    if let Some(existing) = revisions.iter().find(|r| r.data.0 == data).cloned() {
        if existing.revision.unwrap_or(0) < max {
            // Rolling back to an earlier template makes its revision the newest again.
            let name = existing.metadata.name.clone().unwrap_or_default();
            let patch = json!({"revision": max + 1});
            if let Ok(updated) = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                revisions.retain(|r| r.metadata.name != updated.metadata.name);
                revisions.push(updated.clone());
                return Some((revisions, updated));
            }
        }
        return Some((revisions, existing));
    }
    let collision_count = set
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let hash = revision_hash(&data, collision_count);
    let mut labels = set.spec.selector.match_labels.clone().unwrap_or_default();
    labels.insert(REVISION_LABEL.into(), hash.clone());
    let rev = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{set_name}-{hash}")),
            namespace: Some(ns.clone()),
            labels: Some(labels),
            owner_references: Some(vec![owner_ref(set)]),
            ..ObjectMeta::default()
        },
        data: RawExtension(data),
        revision: Some(max + 1),
    };
    match api.create(&PostParams::default(), &rev).await {
        Ok(created) => {
            revisions.push(created.clone());
            Some((revisions, created))
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = api
                .get_opt(&format!("{set_name}-{hash}"))
                .await
                .ok()
                .flatten()?;
            Some((revisions, existing))
        }
        Err(e) => {
            tracing::debug!(set = %set_name, error = %e, "creating a ControllerRevision");
            None
        }
    }
}

/// Creates the pod's missing claims; false when one is being deleted (the pod must wait, as upstream).
async fn ensure_claims(ctx: &Context, set: &StatefulSet, ordinal: i32) -> bool {
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let spec = set.spec.clone();
    let when_deleted = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_deleted.clone())
        .unwrap_or_else(|| "Retain".into());
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let mut ok = true;
    for template in spec.volume_claim_templates.iter().flatten() {
        let name = claim_name(template, &set_name, ordinal);
        if let Some(existing) = get(&ctx.caches.claims, &ns, &name) {
            if existing.metadata.deletion_timestamp.is_some() {
                ok = false;
            }
            continue;
        }
        let mut labels = template.metadata.labels.clone().unwrap_or_default();
        labels.extend(spec.selector.match_labels.clone().unwrap_or_default());
        let claim = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                labels: Some(labels),
                annotations: template.metadata.annotations.clone(),
                owner_references: (when_deleted == "Delete").then(|| vec![claim_owner(set)]),
                ..ObjectMeta::default()
            },
            spec: template.spec.clone(),
            status: None,
        };
        match api.create(&PostParams::default(), &claim).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                tracing::debug!(claim = %name, error = %e, "creating a claim");
                ok = false;
            }
        }
    }
    ok
}

/// Applies `whenScaled: Delete` to a condemned pod's claims by making the pod their owner.
async fn hand_claims_to_pod(ctx: &Context, set: &StatefulSet, pod: &Pod, ordinal: i32) {
    let spec = set.spec.clone();
    let when_scaled = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_scaled.clone())
        .unwrap_or_else(|| "Retain".into());
    if when_scaled != "Delete" {
        return;
    }
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    for template in spec.volume_claim_templates.iter().flatten() {
        let name = claim_name(template, &set_name, ordinal);
        let Some(claim) = get(&ctx.caches.claims, &ns, &name) else {
            continue;
        };
        // The pod becomes the claim's only owner of the two, so the claim goes with the pod, not the set.
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        let set_uid = set.metadata.uid.clone().unwrap_or_default();
        let mut refs = claim.metadata.owner_references.clone().unwrap_or_default();
        if refs.iter().any(|r| r.uid == pod_uid) && !refs.iter().any(|r| r.uid == set_uid) {
            continue;
        }
        refs.retain(|r| r.uid != set_uid && r.uid != pod_uid);
        refs.push(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod_uid,
            controller: None,
            block_owner_deletion: None,
        });
        let patch = json!({"metadata": {"ownerReferences": refs}});
        let _ = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }
}

async fn delete_pod(ctx: &Context, pod: &Pod) {
    let api: Api<Pod> = Api::namespaced(
        ctx.client.clone(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let _ = api
        .delete(
            pod.metadata.name.as_deref().unwrap_or_default(),
            &DeleteParams::default(),
        )
        .await;
}

async fn create_pod(ctx: &Context, pod: &Pod) {
    let api: Api<Pod> = Api::namespaced(
        ctx.client.clone(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
    );
    match api.create(&PostParams::default(), pod).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            tracing::debug!(pod = ?pod.metadata.name, error = %e, "creating a StatefulSet pod")
        }
    }
}

pub async fn reconcile(ctx: &Context) -> Option<std::time::Duration> {
    let mut next = None;
    for set in ctx.caches.statefulsets.state() {
        if set.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(wake) = sync_set(ctx, &set).await {
            next = Some(next.map_or(wake, |n: std::time::Duration| n.min(wake)));
        }
    }
    next
}

/// Whether `meta` has no controller and carries labels `set`'s selector matches: an orphan the set may adopt.
fn adoptable(set: &StatefulSet, meta: &ObjectMeta) -> bool {
    let empty = std::collections::BTreeMap::new();
    let has_selector = set
        .spec
        .selector
        .match_labels
        .as_ref()
        .is_some_and(|l| !l.is_empty())
        || set
            .spec
            .selector
            .match_expressions
            .as_ref()
            .is_some_and(|e| !e.is_empty());
    meta.deletion_timestamp.is_none()
        && !meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true))
        && has_selector
        && selector_matches(&set.spec.selector, meta.labels.as_ref().unwrap_or(&empty))
}

/// Makes `set` the controller of its orphaned pods and revisions; says whether it adopted any. The patch carries
/// the object's UID and resourceVersion, so an object that changed meanwhile is left for the next pass.
async fn adopt_orphans(ctx: &Context, set: &StatefulSet) -> bool {
    let mut adopted = false;
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let in_ns = |meta: &ObjectMeta| meta.namespace.as_deref() == Some(ns.as_str());
    let adopt = |meta: &ObjectMeta| {
        let mut refs = meta.owner_references.clone().unwrap_or_default();
        refs.push(owner_ref(set));
        json!({"metadata": {
            "ownerReferences": refs,
            "uid": meta.uid,
            "resourceVersion": meta.resource_version,
        }})
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    for pod in ctx.caches.pods.state_filter(|p| {
        in_ns(&p.metadata)
            && adoptable(set, &p.metadata)
            && p.metadata
                .name
                .as_deref()
                .and_then(|n| ordinal_of(&set_name, n))
                .is_some()
    }) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        match pods
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(adopt(&pod.metadata)),
            )
            .await
        {
            Ok(_) => adopted = true,
            Err(e) => tracing::debug!(pod = %name, error = %e, "adopting a pod"),
        }
    }
    let revisions: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    for rev in ctx
        .caches
        .revisions
        .state_filter(|r| in_ns(&r.metadata) && adoptable(set, &r.metadata))
    {
        let name = rev.metadata.name.clone().unwrap_or_default();
        match revisions
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(adopt(&rev.metadata)),
            )
            .await
        {
            Ok(_) => adopted = true,
            Err(e) => tracing::debug!(revision = %name, error = %e, "adopting a revision"),
        }
    }
    adopted
}

/// Returns when to look again (a pod becoming available after `minReadySeconds`).
async fn sync_set(ctx: &Context, set: &StatefulSet) -> Option<std::time::Duration> {
    if adopt_orphans(ctx, set).await {
        // Act once the caches show the adopted objects as the set's: acting now would see them missing.
        return Some(std::time::Duration::from_millis(100));
    }
    let uid = set.metadata.uid.clone()?;
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let spec = set.spec.clone();
    let (revisions, update_rev) = sync_revisions(ctx, set).await?;
    let update_name = update_rev.metadata.name.clone().unwrap_or_default();
    let current_rev = set
        .status
        .as_ref()
        .and_then(|s| s.current_revision.as_deref())
        .and_then(|name| {
            revisions
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(name))
        })
        .cloned()
        .unwrap_or_else(|| update_rev.clone());
    let current_name = current_rev.metadata.name.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let start = spec
        .ordinals
        .as_ref()
        .and_then(|o| o.start)
        .unwrap_or(0)
        .max(0);
    let monotonic = spec.pod_management_policy.as_deref() != Some("Parallel");
    let strategy = spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.type_.clone())
        .unwrap_or_else(|| "RollingUpdate".into());
    let partition = spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0);

    let mut pods: Vec<(i32, Arc<Pod>)> = ctx
        .caches
        .pods
        .state_filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str()) && controlled_by(&p.metadata, &uid)
        })
        .into_iter()
        .filter_map(|p| Some((ordinal_of(&set_name, p.metadata.name.as_deref()?)?, p)))
        .collect();
    pods.sort_by_key(|(o, _)| *o);
    let in_range = |o: i32| o >= start && o < start + replicas;

    // Which template a (re)created pod gets: the current revision below the partition, the update revision above.
    let template_for = |ordinal: i32| -> (PodTemplateSpec, String) {
        let rolling_below_partition = strategy == "RollingUpdate" && ordinal < start + partition;
        if rolling_below_partition && let Some(t) = revision_template(&current_rev) {
            return (t, current_name.clone());
        }
        (spec.template.clone(), update_name.clone())
    };

    let mut blocked = false;
    // Create, replace failed pods, and (OrderedReady) wait for each in turn.
    for ordinal in start..start + replicas {
        if blocked {
            break;
        }
        match pods.iter().find(|(o, _)| *o == ordinal) {
            None => {
                if !ensure_claims(ctx, set, ordinal).await {
                    blocked |= monotonic;
                    continue;
                }
                let (template, revision) = template_for(ordinal);
                create_pod(ctx, &new_pod(set, &template, &revision, ordinal)).await;
                blocked |= monotonic;
            }
            Some((_, pod)) => {
                if is_failed_or_succeeded(pod) && !is_terminating(pod) {
                    delete_pod(ctx, pod).await;
                    blocked |= monotonic;
                    continue;
                }
                if monotonic && (is_terminating(pod) || !is_running_and_ready(pod)) {
                    blocked = true;
                }
            }
        }
    }

    // Scale down: condemned pods, highest ordinal first.
    let condemned: Vec<(i32, Arc<Pod>)> = pods
        .iter()
        .rev()
        .filter(|(o, _)| !in_range(*o))
        .cloned()
        .collect();
    if !blocked || !monotonic {
        for (ordinal, pod) in &condemned {
            if is_terminating(pod) {
                if monotonic {
                    break;
                }
                continue;
            }
            hand_claims_to_pod(ctx, set, pod, *ordinal).await;
            delete_pod(ctx, pod).await;
            if monotonic {
                break;
            }
        }
    }

    // RollingUpdate: replace outdated pods from the top down to the partition, one at a time, while all are ready.
    if strategy == "RollingUpdate" && condemned.is_empty() {
        let all_ready = pods
            .iter()
            .filter(|(o, _)| in_range(*o))
            .all(|(_, p)| is_running_and_ready(p) && !is_terminating(p));
        let complete = pods.iter().filter(|(o, _)| in_range(*o)).count() == replicas as usize;
        if all_ready && complete {
            for (ordinal, pod) in pods.iter().rev() {
                if *ordinal < start + partition {
                    break;
                }
                if pod_revision(pod) != Some(update_name.as_str()) {
                    delete_pod(ctx, pod).await;
                    break;
                }
            }
        }
    }

    let wake = update_status(
        ctx,
        set,
        &pods,
        &current_name,
        &update_name,
        &strategy,
        replicas,
    )
    .await;
    truncate_history(ctx, set, &revisions, &pods, &current_name, &update_name).await;
    wake
}

#[allow(clippy::too_many_arguments)]
async fn update_status(
    ctx: &Context,
    set: &StatefulSet,
    pods: &[(i32, Arc<Pod>)],
    current: &str,
    update: &str,
    strategy: &str,
    replicas: i32,
) -> Option<std::time::Duration> {
    let min_ready = set.spec.min_ready_seconds.unwrap_or(0);
    let (mut created, mut ready, mut available, mut current_n, mut updated_n) = (0, 0, 0, 0, 0);
    let mut wake: Option<std::time::Duration> = None;
    for (_, p) in pods {
        if is_created(p) {
            created += 1;
        }
        if is_running_and_ready(p) {
            ready += 1;
            match available_in(p, min_ready, jiff::Timestamp::now()) {
                Ok(()) => available += 1,
                Err(left) => wake = Some(wake.map_or(left, |w| w.min(left))),
            }
        }
        if is_created(p) && !is_terminating(p) {
            if pod_revision(p) == Some(current) {
                current_n += 1;
            }
            if pod_revision(p) == Some(update) {
                updated_n += 1;
            }
        }
    }
    let mut current_revision = current.to_string();
    // A finished rolling update makes the update revision current.
    if strategy == "RollingUpdate"
        && updated_n == created
        && ready == created
        && created == replicas
    {
        current_revision = update.to_string();
        current_n = updated_n;
    }
    let status = json!({
        "observedGeneration": set.metadata.generation,
        "replicas": created,
        "readyReplicas": ready,
        "availableReplicas": available,
        "currentReplicas": current_n,
        "updatedReplicas": updated_n,
        "currentRevision": current_revision,
        "updateRevision": update,
        "collisionCount": set.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0),
    });
    let old = serde_json::to_value(&set.status).unwrap_or(Value::Null);
    let unchanged = status
        .as_object()
        .is_some_and(|m| m.iter().all(|(k, v)| old.get(k).unwrap_or(&json!(0)) == v));
    if unchanged {
        return wake;
    }
    let api: Api<StatefulSet> = Api::namespaced(
        ctx.client.clone(),
        set.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let _ = api
        .patch_status(
            set.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await;
    wake
}

/// Deletes the oldest revisions no pod uses beyond `revisionHistoryLimit`.
async fn truncate_history(
    ctx: &Context,
    set: &StatefulSet,
    revisions: &[ControllerRevision],
    pods: &[(i32, Arc<Pod>)],
    current: &str,
    update: &str,
) {
    let limit = set.spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    let live: Vec<&str> = pods
        .iter()
        .filter_map(|(_, p)| pod_revision(p))
        .chain([current, update])
        .collect();
    let history: Vec<&ControllerRevision> = revisions
        .iter()
        .filter(|r| !live.contains(&r.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    if history.len() <= limit {
        return;
    }
    let api: Api<ControllerRevision> = Api::namespaced(
        ctx.client.clone(),
        set.metadata.namespace.as_deref().unwrap_or_default(),
    );
    for r in &history[..history.len() - limit] {
        let _ = api
            .delete(
                r.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_names_are_stable_and_safe() {
        let a = revision_hash(&json!({"spec": {"template": {"x": 1}}}), 0);
        let b = revision_hash(&json!({"spec": {"template": {"x": 1}}}), 0);
        let c = revision_hash(&json!({"spec": {"template": {"x": 2}}}), 0);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(
            a.chars()
                .all(|ch| "bcdfghjklmnpqrstvwxz2456789".contains(ch))
        );
    }

    #[test]
    fn ordinals() {
        assert_eq!(ordinal_of("web", "web-10"), Some(10));
        assert_eq!(ordinal_of("web", "web2-1"), None);
    }
}
