//! `spec.rollout` (what dkv does when a rollout stops making progress) and
//! `status.rollout` (the spec that last ran on every member, and the
//! rollback, if any). The same in both API versions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::v1alpha1::{EtcdTuning, PodOverrides};

/// How a rollout (members restarting one at a time onto a changed pod
/// template: a new image or version, resources, pod overrides, etcd
/// settings, `dkv.io/restartedAt`) is watched.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// What dkv does once a member restarted onto the new spec has not
    /// become Ready and healthy in etcd within `progressDeadline`:
    /// `Pause` (the default) stops the rollout there and reports it;
    /// `Rollback` moves the members already restarted back onto the spec
    /// that last ran on every member, one at a time. The spec itself is
    /// never rewritten: the next edit starts a new rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<RolloutFailurePolicy>,
    /// How long a member restarted onto the new spec may take to become
    /// Ready and healthy in etcd: a duration from `30s` to `24h`, default
    /// `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"))]
    pub progress_deadline: Option<String>,
}

/// What a rollout that missed its deadline leads to.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RolloutFailurePolicy {
    /// Stop where the rollout is: the failed member keeps the new spec, the
    /// others the old one, until the spec is edited.
    #[default]
    Pause,
    /// Move the members on the new spec back, one at a time.
    Rollback,
}

/// What the operator knows of rollouts.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The spec that last ran on every member (recorded each time the
    /// cluster converges): what a rollback returns to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good: Option<RunningSpec>,
    /// Set when a rollout of the spec of generation `generation` was rolled
    /// back; cleared by the next edit of the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<RolledBack>,
}

/// The fields of a spec the members' pod template is built from, as they
/// were when it ran on every member.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunningSpec {
    /// The `metadata.generation` of that spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The StatefulSet revision (ControllerRevision) of that template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    // The three below are recorded as the spec had them; their schema is
    // the spec's, not repeated here (it would double the CRD's size).
    /// `spec.resources` as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "recorded_object")]
    pub resources: Option<ResourceRequirements>,
    /// `spec.etcd` as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "recorded_object")]
    pub etcd: Option<EtcdTuning>,
    /// `spec.pod` as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "recorded_object")]
    pub pod: Option<PodOverrides>,
    /// The annotations of the cluster that go into the template
    /// (`dkv.io/restartedAt`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The schema of a spec section recorded in status: an object kept as it
/// is (the spec's own schema checked it when it was written).
fn recorded_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A rollout that was rolled back.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolledBack {
    /// The `metadata.generation` whose rollout failed.
    pub generation: i64,
    /// The member pod that did not become Ready and healthy in time.
    pub pod: String,
    /// Why, as its status said.
    pub reason: String,
    /// When dkv decided to roll back.
    pub at: Time,
}
