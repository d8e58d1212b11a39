//! `spec.rollout` (what a failed rollout leads to, and its deadline) and
//! what status records of rollouts: the spec that last ran on every member
//! and the rollback in effect. While a rollback is in effect the cluster is
//! validated — and so built — from that recorded spec, not from the user's,
//! which stays as written.

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::{RolledBack, RolloutFailurePolicy, RunningSpec};
use dkv_api::labels;
use kube::{Resource, ResourceExt};

use super::Problems;

/// `spec.rollout.progressDeadline` unless set.
pub const DEFAULT_PROGRESS_DEADLINE: &str = "10m";
/// Bounds of `spec.rollout.progressDeadline`, in nanoseconds: under 30 s a
/// healthy member restarting on a large data directory would be taken for
/// a failure.
const DEADLINE_RANGE: (i64, i64) = (30_000_000_000, 86_400_000_000_000);

/// `spec.rollout`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolloutPolicy {
    pub on_failure: RolloutFailurePolicy,
    /// How long a member restarted onto the new spec may take to become
    /// Ready and healthy in etcd.
    pub deadline: jiff::SignedDuration,
}

pub(super) fn rollout_policy(dkv: &DistributedKV, problems: &mut Problems) -> RolloutPolicy {
    let spec = dkv.spec.rollout.clone().unwrap_or_default();
    let text = spec
        .progress_deadline
        .unwrap_or_else(|| DEFAULT_PROGRESS_DEADLINE.to_owned());
    let nanos = go_parse_duration::parse_duration(&text)
        .ok()
        .filter(|n| (DEADLINE_RANGE.0..=DEADLINE_RANGE.1).contains(n));
    if nanos.is_none() {
        problems.add(
            "spec.rollout.progressDeadline",
            format!("{text:?} is not a duration from 30s to 24h; use e.g. \"10m\" (the default) or \"2m\""),
        );
    }
    RolloutPolicy {
        on_failure: spec.on_failure.unwrap_or_default(),
        deadline: jiff::SignedDuration::from_nanos(nanos.unwrap_or(600_000_000_000)),
    }
}

/// The fields of `dkv`'s spec the members' pod template is built from.
pub fn running_spec(dkv: &DistributedKV) -> RunningSpec {
    let spec = &dkv.spec;
    RunningSpec {
        generation: dkv.meta().generation,
        revision: None,
        image: spec.image.clone(),
        version: spec.version.clone(),
        resources: spec.resources.clone(),
        etcd: spec.etcd.clone(),
        pod: spec.pod.clone(),
        annotations: dkv
            .annotations()
            .iter()
            .filter(|(k, _)| k.as_str() == labels::RESTARTED_AT)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// Whether two recorded specs build the same template (where and when each
/// was recorded aside).
pub fn same_template(a: &RunningSpec, b: &RunningSpec) -> bool {
    let bare = |s: &RunningSpec| RunningSpec {
        generation: None,
        revision: None,
        ..s.clone()
    };
    bare(a) == bare(b)
}

/// The spec that last ran on every member, as status records it.
pub fn last_good(dkv: &DistributedKV) -> Option<RunningSpec> {
    dkv.status
        .as_ref()
        .and_then(|s| s.rollout.as_ref())
        .and_then(|r| r.last_good.clone())
}

/// The rollback in effect: one status records for the current generation
/// of the spec, with a last good spec to return to. An edit of the spec
/// (a new generation) ends it.
pub fn rollback_in_effect(dkv: &DistributedKV) -> Option<(RolledBack, RunningSpec)> {
    let rollout = dkv.status.as_ref()?.rollout.as_ref()?;
    let rolled_back = rollout.rolled_back.clone()?;
    (Some(rolled_back.generation) == dkv.meta().generation)
        .then(|| Some((rolled_back, rollout.last_good.clone()?)))
        .flatten()
}

/// `dkv` with the template's fields of its spec (and annotations) as
/// `running` records them.
pub fn with_running_spec(dkv: &DistributedKV, running: &RunningSpec) -> DistributedKV {
    let mut source = dkv.clone();
    source.spec.image = running.image.clone();
    source.spec.version = running.version.clone();
    source.spec.resources = running.resources.clone();
    source.spec.etcd = running.etcd.clone();
    source.spec.pod = running.pod.clone();
    let annotations = source.annotations_mut();
    annotations.remove(labels::RESTARTED_AT);
    annotations.extend(running.annotations.clone());
    source
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(spec: serde_json::Value, status: serde_json::Value) -> DistributedKV {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "dkv.io/v1beta1",
            "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 4,
                         "annotations": {"dkv.io/restartedAt": "new"}},
            "spec": spec,
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_deadline_is_a_bounded_duration() {
        let check = |deadline: Option<&str>| {
            let mut problems = Problems::default();
            let dkv = cluster(
                serde_json::json!({"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0",
                                   "rollout": {"onFailure": "Rollback", "progressDeadline": deadline}}),
                serde_json::json!({}),
            );
            let policy = rollout_policy(&dkv, &mut problems);
            (policy.deadline.as_secs(), problems.0.len())
        };
        assert_eq!(check(None), (600, 0));
        assert_eq!(check(Some("30s")), (30, 0));
        assert_eq!(check(Some("24h")), (86_400, 0));
        for bad in ["29s", "25h", "10", "soon"] {
            assert_eq!(check(Some(bad)).1, 1, "{bad}");
        }
    }

    #[test]
    fn a_rollback_lasts_until_the_next_edit_and_puts_back_every_template_field() {
        let good = RunningSpec {
            generation: Some(2),
            revision: Some("orders-abc".to_owned()),
            image: "registry.k8s.io/etcd:3.5.16-0".to_owned(),
            version: None,
            resources: None,
            etcd: None,
            pod: None,
            annotations: [(labels::RESTARTED_AT.to_owned(), "old".to_owned())].into(),
        };
        let status = |generation: i64| {
            serde_json::json!({"rollout": {
                "lastGood": good,
                "rolledBack": {"generation": generation, "pod": "orders-2", "reason": "ImagePullBackOff", "at": "2026-01-01T00:00:00Z"},
            }})
        };
        let spec = serde_json::json!({"size": 3, "image": "registry.k8s.io/etcd:9.9.9-0",
                                      "version": "3.5.30", "etcd": {"quotaBackendBytes": 1000}});
        let dkv = cluster(spec.clone(), status(4));
        let (rolled_back, running) =
            rollback_in_effect(&dkv).unwrap_or_else(|| panic!("in effect"));
        assert_eq!(rolled_back.pod, "orders-2");
        let source = with_running_spec(&dkv, &running);
        assert!(same_template(&running_spec(&source), &good));
        assert_eq!(
            source.spec.size, 3,
            "fields outside the template stay as written"
        );
        // The user's spec itself is untouched.
        assert_eq!(dkv.spec.image, "registry.k8s.io/etcd:9.9.9-0");
        // A new edit (generation 5 now) ends the rollback.
        assert!(rollback_in_effect(&cluster(spec, status(3))).is_none());
    }
}
