//! Member volumes follow `spec.storage.size`: each member's claim is grown
//! in place (online expansion; no member restarts), and the cluster is not
//! converged until every claim reports the new capacity.
//!
//! The StatefulSet's claim template is immutable: once every member volume
//! has the new size, the StatefulSet is re-created with a template of that
//! size over its running pods ([`recreate_statefulset`]: deleted with
//! `propagationPolicy: Orphan`, applied again, its pods adopted unchanged,
//! so no member restarts). Until then a member added gets a claim of the old
//! size and is grown like the others. A size below what the volumes hold
//! (their claims' capacity, or the claim template) is refused, by the
//! admission webhook and by validation; a lower size that is not (a growth
//! no volume reached, set back) leaves the claims asking for more than the
//! spec.

use std::sync::Arc;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::{Client, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::cluster::apply::as_applied;
use crate::cluster::error::{Error, Result};
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming::FIELD_MANAGER;
use crate::parts::naming::volume_claim;
use crate::quantity::{StorageSize, parse_quantity};

/// Where the member volumes stand against `spec.storage.size`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Volumes {
    /// Member claims.
    pub total: usize,
    /// Member claims whose capacity is below the size the spec asks for.
    pub below: usize,
    /// The size the spec asks for.
    pub size: Option<String>,
    /// Why a claim cannot grow, as the API server said (its StorageClass
    /// does not allow expansion, say): the user must act.
    pub refused: Option<String>,
    /// Member claims no volume is bound to yet (phase `Pending`).
    pub pending: Vec<PendingClaim>,
}

/// A member claim waiting for a volume.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingClaim {
    pub name: String,
    /// Its StorageClass, whose provisioner should create the volume.
    pub class: Option<String>,
    /// When the claim was created.
    pub since: Option<jiff::Timestamp>,
}

fn pending(claim: &PersistentVolumeClaim) -> Option<PendingClaim> {
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    (phase.is_none_or(|p| p == "Pending")).then(|| PendingClaim {
        name: claim.name_any(),
        class: claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone()),
        since: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
    })
}

/// The claims of the cluster's members (`data-<cluster>-<ordinal>`).
fn member_claims<'a>(
    cluster: &'a ValidatedCluster,
    claims: &'a [Arc<PersistentVolumeClaim>],
) -> impl Iterator<Item = &'a Arc<PersistentVolumeClaim>> + 'a {
    claims.iter().filter(move |c| {
        let name = c.name_any();
        c.metadata.deletion_timestamp.is_none()
            && name
                .rsplit_once('-')
                .and_then(|(_, ordinal)| ordinal.parse::<i32>().ok())
                .is_some_and(|ordinal| volume_claim(&cluster.name, ordinal) == name)
    })
}

fn storage_of(
    quantities: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Option<f64> {
    parse_quantity(&quantities?.get("storage")?.0).ok()
}

fn requested(claim: &PersistentVolumeClaim) -> Option<f64> {
    storage_of(claim.spec.as_ref()?.resources.as_ref()?.requests.as_ref())
}

fn capacity(claim: &PersistentVolumeClaim) -> Option<f64> {
    storage_of(claim.status.as_ref()?.capacity.as_ref())
}

/// Where the member volumes stand, from the cached claims alone.
pub fn observe(cluster: &ValidatedCluster, claims: &[Arc<PersistentVolumeClaim>]) -> Volumes {
    let Some(storage) = &cluster.storage else {
        return Volumes::default();
    };
    let wanted = storage.size.bytes();
    let members: Vec<_> = member_claims(cluster, claims).collect();
    Volumes {
        total: members.len(),
        below: members
            .iter()
            .filter(|c| capacity(c).is_none_or(|have| have < wanted))
            .count(),
        size: Some(storage.size.as_str().to_owned()),
        refused: None,
        pending: members.iter().filter_map(|c| pending(c)).collect(),
    }
}

/// Asks every member claim below `spec.storage.size` for it, and reports
/// where the volumes stand. A refusal by the API server (403: the class
/// cannot expand; 422) is reported, not retried: it needs the user.
pub async fn grow(
    client: &Client,
    cluster: &ValidatedCluster,
    claims: &[Arc<PersistentVolumeClaim>],
) -> Result<Volumes> {
    let Some(storage) = &cluster.storage else {
        return Ok(Volumes::default());
    };
    let wanted = storage.size.bytes();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &cluster.namespace);
    let mut volumes = observe(cluster, claims);
    for claim in member_claims(cluster, claims) {
        if requested(claim).is_none_or(|asked| asked >= wanted) || volumes.refused.is_some() {
            continue;
        }
        let name = claim.name_any();
        let patch =
            json!({"spec": {"resources": {"requests": {"storage": storage.size.as_str()}}}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => info!(claim = %name, size = %storage.size, "asked a member volume to grow"),
            Err(kube::Error::Api(status)) if status.code == 403 || status.code == 422 => {
                volumes.refused = Some(format!(
                    "member volume {name} cannot grow to {}: {}",
                    storage.size, status.message
                ));
            }
            Err(source) => {
                return Err(Error::Apply {
                    kind: "PersistentVolumeClaim".to_owned(),
                    name,
                    source,
                });
            }
        }
    }
    Ok(volumes)
}

/// How long a member's claim may wait for a volume before that is a fault:
/// provisioners of network disks take seconds to tens of seconds.
pub const VOLUME_GRACE: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// When the first member claim still within [`VOLUME_GRACE`] leaves it:
/// status must be looked at again then, as nothing else may change.
pub fn volume_grace_ends(volumes: &Volumes) -> Option<jiff::Timestamp> {
    volumes
        .pending
        .iter()
        .filter_map(|c| c.since)
        .map(|since| since + VOLUME_GRACE)
        .filter(|end| *end > jiff::Timestamp::now())
        .min()
}

/// Whether the StatefulSet's claim template is smaller than `spec.storage.size`
/// while every member volume already has that size: the template is then
/// brought in line by [`recreate_statefulset`].
pub fn template_behind(cluster: &ValidatedCluster, volumes: &Volumes) -> bool {
    let Some(storage) = &cluster.storage else {
        return false;
    };
    storage.template_size.bytes() < storage.size.bytes()
        && volumes.total > 0
        && volumes.below == 0
        && volumes.refused.is_none()
}

/// `built` with its claim template asking for `size`: the StatefulSet
/// [`recreate_statefulset`] puts in place once every member volume has
/// grown.
pub fn with_claim_size(built: &StatefulSet, size: &StorageSize) -> StatefulSet {
    let mut statefulset = built.clone();
    let requests = statefulset
        .spec
        .volume_claim_templates
        .as_mut()
        .and_then(|templates| templates.first_mut())
        .and_then(|claim| claim.spec.as_mut())
        .and_then(|spec| spec.resources.as_mut())
        .and_then(|resources| resources.requests.as_mut());
    if let Some(requests) = requests {
        requests.insert(
            "storage".to_owned(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.as_str().to_owned()),
        );
    }
    statefulset
}

/// How long the garbage collector may take to release the pods of a
/// StatefulSet deleted with `propagationPolicy: Orphan` before this pass
/// gives up (the next one finishes the re-creation).
const ORPHANING_TIMEOUT: Duration = Duration::from_secs(20);

/// Re-creates the StatefulSet `live` as `desired` (the same pod template, a
/// larger claim template) without touching its pods: deleted with
/// `propagationPolicy: Orphan`, guarded by its uid, so the pods keep running
/// and lose only their owner reference; applied again once gone. Its
/// controller adopts the pods; their template, and so their revision, is
/// unchanged, so no member restarts. Should the operator stop in between,
/// the next pass re-creates it from the membership record (see
/// [`crate::cluster::plan::plan`]).
pub async fn recreate_statefulset(
    client: &Client,
    namespace: &str,
    live: &StatefulSet,
    desired: &StatefulSet,
) -> Result<StatefulSet> {
    let name = live.name_any();
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let params = DeleteParams {
        preconditions: live.uid().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            info!(statefulset = %name, "deleted the StatefulSet, orphaning its pods, to re-create it with the new claim size")
        }
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(source) => {
            return Err(Error::Delete {
                kind: "StatefulSet",
                name,
                source,
            });
        }
    }
    let deadline = Instant::now() + ORPHANING_TIMEOUT;
    loop {
        match api.get_opt(&name).await {
            Ok(Some(still)) if still.uid() == live.uid() => {
                if Instant::now() >= deadline {
                    return Err(Error::Recreating { name });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(_) => break,
            Err(source) => {
                return Err(Error::Read {
                    kind: "StatefulSet",
                    name,
                    source,
                });
            }
        }
    }
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&as_applied(desired)),
        )
        .await
        .map_err(|source| Error::Apply {
            kind: "StatefulSet".to_owned(),
            name: name.clone(),
            source,
        })?;
    info!(statefulset = %name, "re-created the StatefulSet over its running pods");
    // Its controller adopts the pods and reports their revision within
    // moments; status reads the revision, so wait for it rather than call
    // the members' template unknown meanwhile.
    let deadline = Instant::now() + ORPHANING_TIMEOUT;
    let mut current = applied;
    while crate::cluster::plan::update_revision(&current).is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match api.get_opt(&name).await {
            Ok(Some(sts)) => current = sts,
            Ok(None) => break,
            Err(source) => {
                return Err(Error::Read {
                    kind: "StatefulSet",
                    name,
                    source,
                });
            }
        }
    }
    Ok(current)
}
