//! Member volumes follow `spec.storage.size`: each member's claim is grown
//! in place (online expansion; no member restarts), and the cluster is not
//! converged until every claim reports the new capacity.
//!
//! The StatefulSet's claim template is immutable, so it keeps the size the
//! cluster was created with; a member added later gets a claim of that size
//! from the StatefulSet and is grown like the others. Shrinking is refused
//! (by the CRD's rules at admission, and by validation).

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tracing::info;

use super::error::{Error, Result};
use super::execute::volume_claim;
use super::validate::ValidatedCluster;
use crate::quantity::parse_quantity;

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
    let Ok(wanted) = parse_quantity(&storage.size) else {
        return Volumes::default();
    };
    let members: Vec<_> = member_claims(cluster, claims).collect();
    Volumes {
        total: members.len(),
        below: members
            .iter()
            .filter(|c| capacity(c).is_none_or(|have| have < wanted))
            .count(),
        size: Some(storage.size.clone()),
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
    let Ok(wanted) = parse_quantity(&storage.size) else {
        return Ok(Volumes::default());
    };
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &cluster.namespace);
    let mut volumes = observe(cluster, claims);
    for claim in member_claims(cluster, claims) {
        if requested(claim).is_none_or(|asked| asked >= wanted) || volumes.refused.is_some() {
            continue;
        }
        let name = claim.name_any();
        let patch = json!({"spec": {"resources": {"requests": {"storage": storage.size}}}});
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
