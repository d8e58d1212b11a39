//! Writing status: a merge patch of what changed, sent only when something did, and an Event for each condition
//! that changed.

use crate::events::{Event, EventType};
use dkv_api::DistributedKV;
use dkv_api::conditions::status as condition_status;
use dkv_api::conditions::{reasons, types};
use dkv_api::distributedkv::v1beta1::DistributedKVStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::cluster::context::{Context, publish};
use crate::cluster::error::{Error, Result};

/// Writes `new` if it differs from the object's status, and publishes an
/// Event for every condition that changed status or reason. Returns whether
/// it wrote.
pub async fn write(dkv: &DistributedKV, new: DistributedKVStatus, ctx: &Context) -> Result<bool> {
    let old = dkv.status.clone().unwrap_or_default();
    if old == new {
        return Ok(false);
    }
    let name = dkv.name_any();
    let api: Api<DistributedKV> =
        Api::namespaced(ctx.client.clone(), &dkv.namespace().unwrap_or_default());
    let patch = status_merge_patch(&old, &new).map_err(|source| Error::Status {
        name: name.clone(),
        source: kube::Error::SerdeError(source),
    })?;
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Status {
            name: name.clone(),
            source,
        })?;
    ctx.metrics.set_phase(
        &kube::runtime::reflector::ObjectRef::from_obj(dkv),
        new.phase,
    );
    for event in transitions(&old.conditions, &new.conditions) {
        publish(dkv, event, ctx).await;
    }
    Ok(true)
}

/// A merge patch that turns status `old` into `new`: every field of `new`,
/// and an explicit `null` for each top-level field `old` has and `new` does
/// not (a cleared `operation`, say). Arrays and the nested objects are
/// replaced whole by a merge patch, so top-level nulls are all it takes.
/// (Server-side apply would depend on how each server prunes a struct its
/// manager stopped applying; an explicit null does not.)
fn status_merge_patch(
    old: &DistributedKVStatus,
    new: &DistributedKVStatus,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut status = serde_json::to_value(new)?;
    if let (Some(fields), serde_json::Value::Object(old_fields)) =
        (status.as_object_mut(), serde_json::to_value(old)?)
    {
        for key in old_fields.keys() {
            fields.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    Ok(json!({ "status": status }))
}

/// Events for conditions whose status or reason changed.
fn transitions(old: &[Condition], new: &[Condition]) -> Vec<Event> {
    new.iter()
        .filter(|c| {
            !old.iter()
                .any(|o| o.type_ == c.type_ && o.status == c.status && o.reason == c.reason)
        })
        .filter(|c| {
            !(c.type_ == types::DEGRADED
                && c.status == condition_status::FALSE
                && old.iter().all(|o| o.type_ != c.type_))
        })
        .map(|c| {
            let bad = (c.type_ == types::DEGRADED && c.status == condition_status::TRUE)
                || (c.type_ == types::AVAILABLE
                    && c.status == condition_status::FALSE
                    && c.reason == reasons::QUORUM_LOST);
            Event {
                type_: if bad {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: c.reason.clone(),
                note: Some(format!("{}={}: {}", c.type_, c.status, c.message)),
                action: "Reconcile".to_owned(),
                secondary: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_api::distributedkv::v1beta1::{Operation, OperationKind};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn fields_no_longer_set_are_nulled_in_the_status_patch() {
        let old = DistributedKVStatus {
            operation: Some(Operation {
                kind: OperationKind::AddLearner,
                target: "orders-3".into(),
                started_at: Time(jiff::Timestamp::UNIX_EPOCH),
            }),
            leader: Some("orders-0".into()),
            ready_replicas: 3,
            ..DistributedKVStatus::default()
        };
        let new = DistributedKVStatus {
            leader: Some("orders-1".into()),
            ready_replicas: 4,
            ..DistributedKVStatus::default()
        };
        let patch = status_merge_patch(&old, &new).unwrap();
        assert_eq!(patch["status"]["operation"], serde_json::Value::Null);
        assert!(
            patch["status"]
                .as_object()
                .unwrap()
                .contains_key("operation")
        );
        assert_eq!(patch["status"]["leader"], "orders-1");
        assert_eq!(patch["status"]["readyReplicas"], 4);
    }
}
