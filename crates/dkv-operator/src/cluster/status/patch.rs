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
/// and an explicit `null` for each field `old` has and `new` does not (a
/// cleared `operation`, say), at any depth of nested objects: a merge patch
/// merges objects key by key (a cleared `rollout.rolledBack` would stay
/// otherwise) and replaces arrays whole. (Server-side apply would depend on
/// how each server prunes a struct its manager stopped applying; an
/// explicit null does not.)
fn status_merge_patch(
    old: &DistributedKVStatus,
    new: &DistributedKVStatus,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut status = serde_json::to_value(new)?;
    null_what_went(&mut status, &serde_json::to_value(old)?);
    Ok(json!({ "status": status }))
}

/// Adds to the object `new` an explicit `null` for each key `old` has and
/// `new` does not, and recurses into the objects both have.
fn null_what_went(new: &mut serde_json::Value, old: &serde_json::Value) {
    let (Some(fields), serde_json::Value::Object(old_fields)) = (new.as_object_mut(), old) else {
        return;
    };
    for (key, old_value) in old_fields {
        match fields.get_mut(key) {
            Some(value) => null_what_went(value, old_value),
            None => {
                fields.insert(key.clone(), serde_json::Value::Null);
            }
        }
    }
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

    #[test]
    fn nested_fields_no_longer_set_are_nulled_too() {
        use dkv_api::distributedkv::v1beta1::{RolledBack, RolloutStatus, RunningSpec};
        let good = RunningSpec {
            image: "registry.k8s.io/etcd:3.5.16-0".into(),
            ..RunningSpec::default()
        };
        let old = DistributedKVStatus {
            rollout: Some(RolloutStatus {
                last_good: Some(good.clone()),
                rolled_back: Some(RolledBack {
                    generation: 2,
                    pod: "orders-2".into(),
                    reason: "ImagePullBackOff".into(),
                    at: Time(jiff::Timestamp::UNIX_EPOCH),
                }),
                etcd35_log: None,
            }),
            ..DistributedKVStatus::default()
        };
        let new = DistributedKVStatus {
            rollout: Some(RolloutStatus {
                last_good: Some(good),
                rolled_back: None,
                etcd35_log: None,
            }),
            ..DistributedKVStatus::default()
        };
        let patch = status_merge_patch(&old, &new).unwrap();
        let rollout = patch["status"]["rollout"].as_object().unwrap();
        assert_eq!(rollout.get("rolledBack"), Some(&serde_json::Value::Null));
        assert_eq!(
            rollout["lastGood"]["image"],
            "registry.k8s.io/etcd:3.5.16-0"
        );
    }
}
