//! The volume provisioners and the PV/PVC binder.
//!
//! Two provisioners, as the two kinds of storage clusters have:
//! - [`PROVISIONER`] (`kube-local.io/local-path`): a local disk. The volume is a directory under the selected node's
//!   directory and carries node affinity for that node, so its claim keeps every later pod on that node (and a pod
//!   whose node is gone cannot move).
//! - [`NETWORK_PROVISIONER`] (`kube-local.io/network-disk`): a network disk. The volume is a directory shared by all
//!   nodes, without node affinity: it follows its pod to any node.
//!
//! A claim is provisioned once it may be (class `Immediate`, or the scheduler annotated `selected-node` for
//! `WaitForFirstConsumer`). Pre-bound or matching static PVs bind too. When a bound claim is deleted the PV is
//! `Released`, and its reclaim policy decides: `Delete` removes the PV and its directory (a local disk's only when its
//! node is up, as local-path's helper pod needs the node), `Retain` keeps both.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::Context;

/// The StorageClass whose claims cannot grow (`allowVolumeExpansion` unset);
/// the default class, `standard`, allows expansion.
pub const FIXED_SIZE_CLASS: &str = "fixed-size";

/// The StorageClass of network disks: volumes that follow their pod to any node. The default class, `standard`, is
/// of local disks, bound to the node where their claim was first used.
pub const NETWORK_CLASS: &str = "network";

pub const PROVISIONER: &str = "kube-local.io/local-path";
pub const NETWORK_PROVISIONER: &str = "kube-local.io/network-disk";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// The StorageClasses a cluster of kube-local nodes has: `standard` (the default: local disks, bound to the node
/// where their claim was first used, expandable), `network` (disks that follow their pod to any node) and
/// `fixed-size` (local disks that cannot grow), as JSON objects to create.
pub fn storage_classes() -> Vec<serde_json::Value> {
    vec![
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "standard", "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": true
        }),
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": NETWORK_CLASS},
            "provisioner": NETWORK_PROVISIONER, "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true
        }),
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": FIXED_SIZE_CLASS},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"
        }),
    ]
}

fn default_class(ctx: &Context) -> Option<Arc<StorageClass>> {
    ctx.caches.storage_classes.find(|c| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
            .is_some_and(|v| v == "true")
    })
}

fn class_of(ctx: &Context, pvc: &PersistentVolumeClaim) -> Option<Arc<StorageClass>> {
    match pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
    {
        Some("") => None,
        Some(name) => ctx
            .caches
            .storage_classes
            .find(|c| c.metadata.name.as_deref() == Some(name)),
        None => default_class(ctx),
    }
}

/// One pass: provision, bind, release, reclaim.
pub async fn reconcile(ctx: &Context) -> Option<std::time::Duration> {
    let mut retry = None;
    let claims = ctx.caches.claims.state();
    let volumes = ctx.caches.volumes.state();
    for pvc in &claims {
        if pvc.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let bound_name = pvc.spec.as_ref().and_then(|s| s.volume_name.clone());
        let phase = pvc.status.as_ref().and_then(|s| s.phase.clone());
        match bound_name {
            Some(pv_name) => {
                // Bound by us or pre-bound by the user: finish the binding on both sides.
                if let Some(pv) = volumes
                    .iter()
                    .find(|v| v.metadata.name.as_deref() == Some(&pv_name))
                {
                    if phase.as_deref() != Some("Bound") {
                        mark_claim_bound(ctx, pvc, pv).await;
                    }
                    if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
                        mark_volume_bound(ctx, pv, pvc).await;
                    }
                    if phase.as_deref() == Some("Bound") {
                        expand_if_asked(ctx, pvc, pv).await;
                    }
                } else if phase.as_deref() == Some("Bound") {
                    set_claim_phase(ctx, pvc, "Lost").await;
                }
            }
            None => {
                if let Some(pv) = matching_static_volume(pvc, &volumes) {
                    bind(ctx, pvc, &pv).await;
                    continue;
                }
                let Some(class) = class_of(ctx, pvc) else {
                    continue;
                };
                if class.provisioner != PROVISIONER && class.provisioner != NETWORK_PROVISIONER {
                    continue;
                }
                let wait = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
                let selected = pvc
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(SELECTED_NODE));
                if wait && !selected {
                    if phase.is_none() {
                        set_claim_phase(ctx, pvc, "Pending").await;
                    }
                    continue;
                }
                if let Some(pv) = provision(ctx, pvc, &class).await {
                    bind(ctx, pvc, &pv).await;
                }
            }
        }
    }
    // Volumes whose claim is gone: Released, then reclaimed.
    for pv in &volumes {
        let Some(claim_ref) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
            if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Available") {
                set_volume_phase(ctx, pv, "Available").await;
            }
            continue;
        };
        let claim_exists = claims.iter().any(|c| {
            c.metadata.namespace == claim_ref.namespace
                && c.metadata.name == claim_ref.name
                && (claim_ref.uid.is_none() || c.metadata.uid == claim_ref.uid)
        });
        if claim_exists || claim_ref.uid.is_none() {
            continue;
        }
        let policy = pv
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            .unwrap_or("Retain");
        if policy == "Delete" {
            if let Some(node) = local_volume_node(pv)
                && !node_ready(ctx, &node)
            {
                retry = Some(std::time::Duration::from_secs(5));
                continue;
            }
            if let Some(path) = crate::kubelet::volumes::volume_path(pv)
                && path.starts_with(&ctx.dir)
            {
                let _ = std::fs::remove_dir_all(&path);
            }
            let _ = Api::<PersistentVolume>::all(ctx.client.clone())
                .delete(
                    pv.metadata.name.as_deref().unwrap_or_default(),
                    &DeleteParams::default(),
                )
                .await;
        } else if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Released") {
            set_volume_phase(ctx, pv, "Released").await;
        }
    }
    retry
}

/// The annotation the real PersistentVolume controller puts on a claim it leaves to an external provisioner.
const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";

/// One pass as an external provisioner and resizer beside the real PersistentVolume controller (which binds):
/// provision the claims it hands to one of our provisioners, grow bound volumes whose claim asks for more, and
/// delete the `Released` volumes of ours whose policy is `Delete`, with their directories.
pub async fn reconcile_external(ctx: &Context) -> Option<std::time::Duration> {
    let mut retry = None;
    let claims = ctx.caches.claims.state();
    let volumes = ctx.caches.volumes.state();
    for pvc in &claims {
        if pvc.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ours = pvc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STORAGE_PROVISIONER))
            .is_some_and(|p| p == PROVISIONER || p == NETWORK_PROVISIONER);
        match pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
            Some(pv_name) => {
                let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
                if let Some(pv) = volumes
                    .iter()
                    .find(|v| v.metadata.name.as_deref() == Some(pv_name))
                    && bound
                    && is_ours(pv)
                {
                    expand_if_asked(ctx, pvc, pv).await;
                }
            }
            None if ours => {
                let Some(class) = class_of(ctx, pvc) else {
                    continue;
                };
                let name = pvc.metadata.uid.as_ref().map(|uid| format!("pvc-{uid}"));
                let exists = volumes.iter().any(|v| v.metadata.name == name);
                if !exists && provision(ctx, pvc, &class).await.is_none() {
                    retry = Some(std::time::Duration::from_secs(5));
                }
            }
            None => {}
        }
    }
    for pv in &volumes {
        let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
        let delete = pv
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            == Some("Delete");
        if !(released && delete && is_ours(pv)) {
            continue;
        }
        if let Some(node) = local_volume_node(pv)
            && !node_ready(ctx, &node)
        {
            retry = Some(std::time::Duration::from_secs(5));
            continue;
        }
        // Only the directory this provisioner made for the volume: the one its name and node give, whatever
        // path the object names.
        if let Some(path) = crate::kubelet::volumes::volume_path(pv)
            && Some(&path) == provisioned_path(ctx, pv).as_ref()
        {
            let _ = std::fs::remove_dir_all(&path);
        }
        let _ = Api::<PersistentVolume>::all(ctx.client.clone())
            .delete(
                pv.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await;
    }
    retry
}

/// Where [`provision`] puts the directory of `pv`: under its node's directory for a local disk, else under the
/// shared `volumes/`.
fn provisioned_path(ctx: &Context, pv: &PersistentVolume) -> Option<std::path::PathBuf> {
    let name = pv.metadata.name.as_deref()?;
    if name.contains('/') || name == ".." || name == "." {
        return None;
    }
    Some(match local_volume_node(pv) {
        Some(node) if !node.contains('/') && node != ".." && node != "." => {
            crate::kubelet::node_dir(&ctx.dir, &node)
                .join("volumes")
                .join(name)
        }
        Some(_) => return None,
        None => ctx.dir.join("volumes").join(name),
    })
}

/// Whether one of our provisioners made `pv`.
fn is_ours(pv: &PersistentVolume) -> bool {
    pv.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("pv.kubernetes.io/provisioned-by"))
        .is_some_and(|p| p == PROVISIONER || p == NETWORK_PROVISIONER)
}

/// The node a local volume lives on (its node affinity's hostname), if it is one.
fn local_volume_node(pv: &PersistentVolume) -> Option<String> {
    let terms = &pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .find(|r| r.key == "kubernetes.io/hostname" && r.operator == "In")
        .and_then(|r| r.values.as_ref()?.first().cloned())
}

fn node_ready(ctx: &Context, name: &str) -> bool {
    ctx.caches
        .nodes
        .get(&kube::runtime::reflector::ObjectRef::new(name))
        .is_some_and(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
}

fn requested_storage(
    pvc: &PersistentVolumeClaim,
) -> Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    pvc.spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .cloned()
}

/// A static, Available PV pre-bound to this claim by name (claimRef without uid) or with a matching class.
fn matching_static_volume(
    pvc: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
) -> Option<Arc<PersistentVolume>> {
    volumes
        .iter()
        .find(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_some_and(|r| {
                    r.namespace == pvc.metadata.namespace
                        && r.name == pvc.metadata.name
                        && r.uid.is_none()
                })
        })
        .cloned()
}

async fn provision(
    ctx: &Context,
    pvc: &PersistentVolumeClaim,
    class: &StorageClass,
) -> Option<PersistentVolume> {
    let uid = pvc.metadata.uid.clone()?;
    let name = format!("pvc-{uid}");
    // A local disk lives on the node the scheduler chose (or, for a class that binds at once, the first node).
    let node = (class.provisioner == PROVISIONER).then(|| {
        pvc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE).cloned())
            .or_else(|| ctx.caches.node_names().into_iter().next())
    });
    let node = node.flatten();
    // A node the cluster has: the annotation is the scheduler's, but anyone who may edit the claim can write it.
    if let Some(name) = &node
        && ctx
            .caches
            .nodes
            .get(&kube::runtime::reflector::ObjectRef::new(name))
            .is_none()
    {
        tracing::debug!(node = %name, "a claim's selected node is not a node of the cluster");
        return None;
    }
    let path = match &node {
        Some(node) => crate::kubelet::node_dir(&ctx.dir, node)
            .join("volumes")
            .join(&name),
        None => ctx.dir.join("volumes").join(&name),
    };
    if let Err(e) = std::fs::create_dir_all(&path) {
        tracing::warn!(path = %path.display(), error = %e, "provisioning a local volume");
        return None;
    }
    let capacity: BTreeMap<String, _> = requested_storage(pvc)
        .map(|q| BTreeMap::from([("storage".to_string(), q)]))
        .unwrap_or_default();
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some(BTreeMap::from([(
                "pv.kubernetes.io/provisioned-by".to_string(),
                class.provisioner.clone(),
            )])),
            finalizers: None,
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: pvc.spec.as_ref().and_then(|s| s.access_modes.clone()),
            capacity: Some(capacity),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                name: pvc.metadata.name.clone(),
                namespace: pvc.metadata.namespace.clone(),
                uid: Some(uid),
                resource_version: pvc.metadata.resource_version.clone(),
                field_path: None,
            }),
            host_path: Some(HostPathVolumeSource {
                path: path.display().to_string(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            node_affinity: node.map(|node| VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "kubernetes.io/hostname".into(),
                            operator: "In".into(),
                            values: Some(vec![node]),
                        }]),
                        ..NodeSelectorTerm::default()
                    }],
                }),
            }),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            storage_class_name: class.metadata.name.clone(),
            volume_mode: Some("Filesystem".into()),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    };
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api.create(&PostParams::default(), &pv).await {
        Ok(created) => Some(created),
        Err(kube::Error::Api(e)) if e.code == 409 => api.get_opt(&name).await.ok().flatten(),
        Err(e) => {
            tracing::warn!(pv = %name, error = %e, "creating a PersistentVolume");
            None
        }
    }
}

async fn bind(ctx: &Context, pvc: &PersistentVolumeClaim, pv: &PersistentVolume) {
    let ns = pvc.metadata.namespace.clone().unwrap_or_default();
    let name = pvc.metadata.name.clone().unwrap_or_default();
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let provisioner = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("pv.kubernetes.io/provisioned-by"))
        .map_or(PROVISIONER, String::as_str);
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({
        "metadata": {"annotations": {
            "pv.kubernetes.io/bind-completed": "yes",
            "pv.kubernetes.io/bound-by-controller": "yes",
            "volume.kubernetes.io/storage-provisioner": provisioner,
            "volume.beta.kubernetes.io/storage-provisioner": provisioner,
        }},
        "spec": {"volumeName": pv_name},
    });
    if let Err(e) = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::debug!(claim = %name, error = %e, "binding a claim");
        return;
    }
    mark_volume_bound(ctx, pv, pvc).await;
    mark_claim_bound(ctx, pvc, pv).await;
}

/// Online expansion of a bound claim that asks for more than it has (the API server admitted the request only if
/// its class allows expansion): the volume's capacity grows, then the claim's `status.capacity` and
/// `allocatedResources` report it. A local directory has no size to grow, so this is immediate; the order of the
/// two writes is upstream's (the volume first, the claim last).
async fn expand_if_asked(ctx: &Context, pvc: &PersistentVolumeClaim, pv: &PersistentVolume) {
    let requested = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    let capacity = pvc
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    let (Some(requested), Some(capacity)) = (requested, capacity) else {
        return;
    };
    let parse = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        kube_quantity::ParsedQuantity::try_from(q).ok()
    };
    if !matches!((parse(requested), parse(capacity)), (Some(r), Some(c)) if r > c) {
        return;
    }
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let grow = json!({"spec": {"capacity": {"storage": requested}}});
    if volumes
        .patch(&pv_name, &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .is_err()
    {
        return;
    }
    let ns = pvc.metadata.namespace.clone().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let status = json!({"status": {
        "capacity": {"storage": requested},
        "allocatedResources": {"storage": requested},
        "conditions": null,
    }});
    let _ = claims
        .patch_status(
            pvc.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await;
}

async fn mark_claim_bound(ctx: &Context, pvc: &PersistentVolumeClaim, pv: &PersistentVolume) {
    let ns = pvc.metadata.namespace.clone().unwrap_or_default();
    let name = pvc.metadata.name.clone().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let spec = pv.spec.clone().unwrap_or_default();
    let status = json!({"status": {
        "phase": "Bound",
        "accessModes": spec.access_modes,
        "capacity": spec.capacity,
    }});
    let _ = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await;
}

async fn mark_volume_bound(ctx: &Context, pv: &PersistentVolume, pvc: &PersistentVolumeClaim) {
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if claim_ref.is_none_or(|r| r.uid.is_none()) {
        let patch = json!({"spec": {"claimRef": {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "namespace": pvc.metadata.namespace, "name": pvc.metadata.name, "uid": pvc.metadata.uid,
        }}});
        let _ = api
            .patch(&pv_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }
    set_volume_phase(ctx, pv, "Bound").await;
}

async fn set_volume_phase(ctx: &Context, pv: &PersistentVolume, phase: &str) {
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let status = json!({"status": {"phase": phase}});
    let _ = api
        .patch_status(
            pv.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await;
}

async fn set_claim_phase(ctx: &Context, pvc: &PersistentVolumeClaim, phase: &str) {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(
        ctx.client.clone(),
        pvc.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let status = json!({"status": {"phase": phase}});
    let _ = api
        .patch_status(
            pvc.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await;
}
