//! `restart`, `pause` and `resume`: annotations the operator acts on;
//! `hibernate` and `wake`: `spec.hibernation`; `release-old-members`:
//! `spec.bootstrap.join.oldMembers`.

use dkv_api::DistributedKV;
use dkv_api::labels::{RECONCILE_PAUSED, RESTARTED_AT};
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::client::{Target, is_paused};
use crate::error::{Error, Result};

/// Sets `dkv.io/restartedAt` to now: the operator restarts the members one
/// at a time onto the changed pod template, followers first.
pub async fn restart(target: &Target, name: &str) -> Result<()> {
    let cluster = target.cluster(name).await?;
    if is_paused(&cluster) {
        return Err(Error::Refused(format!(
            "DistributedKV {}/{name} is paused ({RECONCILE_PAUSED}=true), so the operator would not restart it; run `kubectl dkv resume {name}` first",
            target.namespace
        )));
    }
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now());
    annotate(target, name, json!({ RESTARTED_AT: now.to_string() })).await?;
    println!(
        "distributedkv.dkv.io/{name} restart requested: members restart one at a time, the leader last (watch: kubectl dkv status {name})"
    );
    Ok(())
}

/// Sets (`pause`) or removes the pause annotation.
pub async fn pause(target: &Target, name: &str, pause: bool) -> Result<()> {
    let cluster = target.cluster(name).await?;
    let verb = if pause { "paused" } else { "resumed" };
    if is_paused(&cluster) == pause {
        println!("distributedkv.dkv.io/{name} already {verb}");
        return Ok(());
    }
    let value = if pause {
        json!("true")
    } else {
        serde_json::Value::Null
    };
    annotate(target, name, json!({ RECONCILE_PAUSED: value })).await?;
    println!("distributedkv.dkv.io/{name} {verb}");
    Ok(())
}

/// Sets (`hibernate`) or clears `spec.hibernation`. Asking for what is
/// already so is refused in one line, so a script notices.
pub async fn hibernate(target: &Target, name: &str, hibernate: bool) -> Result<()> {
    let cluster = target.cluster(name).await?;
    let full = format!("{}/{name}", target.namespace);
    if cluster.spec.hibernation == hibernate {
        return Err(Error::Refused(if hibernate {
            format!(
                "DistributedKV {full} is already hibernated (spec.hibernation: true); wake it with `kubectl dkv wake {name}`"
            )
        } else {
            format!("DistributedKV {full} is not hibernated; nothing to wake")
        }));
    }
    // `false` is the default and is not stored: null removes the field.
    let value = if hibernate {
        json!(true)
    } else {
        serde_json::Value::Null
    };
    let patch = json!({ "spec": { "hibernation": value } });
    target
        .api::<DistributedKV>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::api(
            format!("setting spec.hibernation of DistributedKV {full}"),
            "DistributedKV",
            &target.namespace,
            name,
        ))?;
    if hibernate {
        println!(
            "distributedkv.dkv.io/{name} hibernating: the members stop once the cluster is at a consistent point; volumes, membership and cluster ID are kept (watch: kubectl dkv status {name})"
        );
    } else {
        println!(
            "distributedkv.dkv.io/{name} waking: the same members start on their volumes (watch: kubectl dkv status {name})"
        );
    }
    Ok(())
}

/// Sets `spec.bootstrap.join.oldMembers: Leave` on a cluster that joined a
/// running one. Refused, in one line, for a cluster that did not.
pub async fn release_old_members(target: &Target, name: &str) -> Result<()> {
    use dkv_api::distributedkv::v1beta1::OldMembers;
    let cluster = target.cluster(name).await?;
    let full = format!("{}/{name}", target.namespace);
    let Some(join) = cluster
        .spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.join.as_ref())
    else {
        return Err(Error::Refused(format!(
            "DistributedKV {full} did not join a running cluster (it has no spec.bootstrap.join): it has no old members"
        )));
    };
    if join.old_members == OldMembers::Leave {
        println!(
            "distributedkv.dkv.io/{name} already lets its old members leave (watch: kubectl dkv status {name})"
        );
        return Ok(());
    }
    let patch = json!({ "spec": { "bootstrap": { "join": { "oldMembers": "Leave" } } } });
    target
        .api::<DistributedKV>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::api(
            format!("setting spec.bootstrap.join.oldMembers of DistributedKV {full}"),
            "DistributedKV",
            &target.namespace,
            name,
        ))?;
    println!(
        "distributedkv.dkv.io/{name} lets its old members leave: once dkv's members are all voters, they are removed one at a time (watch: kubectl dkv status {name}, which says which old process may be stopped)"
    );
    Ok(())
}

/// Merges `annotations` into the cluster's (a null removes one).
async fn annotate(target: &Target, name: &str, annotations: serde_json::Value) -> Result<()> {
    let patch = json!({ "metadata": { "annotations": annotations } });
    target
        .api::<DistributedKV>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::api(
            format!("annotating DistributedKV {}/{name}", target.namespace),
            "DistributedKV",
            &target.namespace,
            name,
        ))?;
    Ok(())
}
