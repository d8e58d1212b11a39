//! The writes of stage 6 (applied, [`super::stage`]): make the children match the [`DesiredChildren`] objects.
//!
//! Server-side apply with the field manager `dkv-operator` and `force`: the
//! operator owns the fields it sets and takes them back from anyone who
//! edited them (drift repair), while fields it never sets stay with whoever
//! set them. An apply is skipped when the cached object already holds every
//! field (see [`crate::cluster::diff`]) — after convergence the operator sends no
//! writes at all.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, info};

use super::build::DesiredChildren;
use super::dereference::Observed;
use super::error::{Error, Result};
use crate::cluster::context::VerifiedTemplates;
use crate::cluster::diff::is_subset;
use crate::parts::naming::FIELD_MANAGER;

/// Applies every prepared child and removes children no longer wanted;
/// the StatefulSet as the API server returned it (or as cached, when no
/// write was needed).
pub async fn apply(
    client: &Client,
    namespace: &str,
    prepared: DesiredChildren,
    observed: &Observed,
    verified: &VerifiedTemplates,
) -> Result<StatefulSet> {
    // The record first: a pod the StatefulSet starts reads it.
    apply_one(
        client,
        namespace,
        &prepared.members,
        observed.members.as_deref(),
    )
    .await?;
    let statefulset = apply_statefulset(
        client,
        namespace,
        &prepared.statefulset,
        observed.statefulset.as_deref(),
        verified,
    )
    .await?;
    apply_one(
        client,
        namespace,
        &prepared.peer_service,
        observed.peer_service.as_deref(),
    )
    .await?;
    if let Some(service) = &prepared.client_service {
        apply_one(
            client,
            namespace,
            service,
            observed.client_service.as_deref(),
        )
        .await?;
    }
    apply_one(client, namespace, &prepared.pdb, observed.pdb.as_deref()).await?;
    match (&prepared.backup_cronjob, observed.backup_cronjob.as_deref()) {
        (Some(cronjob), live) => {
            apply_one(client, namespace, cronjob, live).await?;
        }
        (None, Some(stale)) => {
            delete_stale(client, namespace, stale).await?;
        }
        (None, None) => {}
    }
    Ok(statefulset)
}

/// [`apply_one`] for the StatefulSet, whose cached copy has no pod template
/// spec (see [`VerifiedTemplates`]).
async fn apply_statefulset(
    client: &Client,
    namespace: &str,
    desired: &StatefulSet,
    live: Option<&StatefulSet>,
    verified: &VerifiedTemplates,
) -> Result<StatefulSet> {
    let applied = as_applied(desired);
    let hash = applied_hash(&applied).unwrap_or_default();
    let Some(live) = live else {
        let created = apply_one(client, namespace, desired, None).await?;
        verified.record(&created, &hash);
        return Ok(created);
    };
    if live.spec.template.spec.is_some() {
        // A whole object (not from the cache): compared as any child.
        return apply_one(client, namespace, desired, Some(live)).await;
    }
    let mut outside_template = applied.clone();
    outside_template.spec.template.spec = None;
    if needs_no_write(&outside_template, live) {
        if verified.holds(live, &hash) {
            debug!(statefulset = %live.name_any(), "child up to date");
            return Ok(live.clone());
        }
        let name = live.name_any();
        let full = Api::<StatefulSet>::namespaced(client.clone(), namespace)
            .get_opt(&name)
            .await
            .map_err(|source| Error::Read {
                kind: "StatefulSet",
                name: name.clone(),
                source,
            })?;
        if let Some(full) = full
            && needs_no_write(&applied, &full)
        {
            verified.record(&full, &hash);
            debug!(statefulset = %name, "child up to date (pod template read)");
            return Ok(full);
        }
    }
    let written = apply_one(client, namespace, desired, None).await?;
    verified.record(&written, &hash);
    Ok(written)
}

fn applied_hash(applied: &StatefulSet) -> Option<String> {
    applied
        .metadata
        .annotations
        .as_ref()?
        .get(APPLIED_HASH_ANNOTATION)
        .cloned()
}

/// Server-side applies `desired` unless `live` already matches it.
async fn apply_one<K>(client: &Client, namespace: &str, desired: &K, live: Option<&K>) -> Result<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug,
{
    let name = desired.name_any();
    let desired = as_applied(desired);
    if let Some(live) = live
        && needs_no_write(&desired, live)
    {
        debug!(kind = %K::kind(&()), %name, "child up to date");
        return Ok(live.clone());
    }
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api
        .patch(&name, &params, &Patch::Apply(&desired))
        .await
        .map_err(|source| Error::Apply {
            kind: K::kind(&()).to_string(),
            name: name.clone(),
            source,
        })?;
    info!(kind = %K::kind(&()), %name, created = live.is_none(), "applied child");
    Ok(applied)
}

/// `desired` carrying [`APPLIED_HASH_ANNOTATION`]: the SHA-256 of
/// everything the operator applies. The subset comparison alone cannot see
/// a field the operator *stopped* setting (a label removed from
/// `spec.pod.labels` is still on the live object, and "desired is a subset
/// of live" holds); the hash changes then, so the apply happens and
/// server-side apply removes the field the operator no longer owns.
pub fn as_applied<K: Resource + Clone + Serialize>(desired: &K) -> K {
    let mut out = desired.clone();
    if let Ok(text) = serde_json::to_vec(desired) {
        let digest = ring::digest::digest(&ring::digest::SHA256, &text);
        let hex = hex::encode(&digest.as_ref()[..16]);
        out.meta_mut()
            .annotations
            .get_or_insert_with(Default::default)
            .insert(APPLIED_HASH_ANNOTATION.to_owned(), hex);
    }
    out
}

impl DesiredChildren {
    /// The children as applying them leaves them (each carrying its
    /// [`APPLIED_HASH_ANNOTATION`]): what a converged cluster's caches hold.
    pub fn as_applied(&self) -> DesiredChildren {
        DesiredChildren {
            members: as_applied(&self.members),
            statefulset: as_applied(&self.statefulset),
            peer_service: as_applied(&self.peer_service),
            client_service: self.client_service.as_ref().map(as_applied),
            pdb: as_applied(&self.pdb),
            backup_cronjob: self.backup_cronjob.as_ref().map(as_applied),
        }
    }
}

/// The annotation on every child that records what the operator last
/// applied to it (see [`as_applied`]).
pub const APPLIED_HASH_ANNOTATION: &str = "dkv.io/applied-hash";

fn needs_no_write<K: Serialize>(desired: &K, live: &K) -> bool {
    match (serde_json::to_value(desired), serde_json::to_value(live)) {
        (Ok(desired), Ok(live)) => is_subset(&desired, &live),
        // Cannot compare: applying is always safe, merely a write more.
        _ => false,
    }
}

/// Deletes a child the spec no longer asks for (the backup CronJob after
/// backups were turned off), guarded by its uid so that a same-named object
/// created meanwhile is never deleted by mistake.
async fn delete_stale(client: &Client, namespace: &str, stale: &CronJob) -> Result<()> {
    let name = stale.name_any();
    let api: Api<CronJob> = Api::namespaced(client.clone(), namespace);
    let params = DeleteParams {
        preconditions: stale.uid().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        propagation_policy: Some(kube::api::PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            info!(%name, "deleted backup CronJob: backups are off");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(Error::Delete {
            kind: "CronJob",
            name,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;

    fn service(labels: &[(&str, &str)]) -> Service {
        let mut svc = Service::default();
        svc.metadata.name = Some("orders-client".to_owned());
        svc.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        svc
    }

    #[test]
    fn an_unchanged_child_needs_no_write() {
        let desired = service(&[("team", "a")]);
        let live = as_applied(&desired);
        assert!(needs_no_write(&as_applied(&desired), &live));
    }

    #[test]
    fn a_field_the_operator_stopped_setting_is_applied_away() {
        // The live object still carries the label the spec no longer asks
        // for: desired is a subset of it, yet it must be applied so that
        // server-side apply drops the label.
        let live = as_applied(&service(&[("team", "a"), ("tier", "gold")]));
        let desired = as_applied(&service(&[("team", "a")]));
        assert!(!needs_no_write(&desired, &live));
    }
}
