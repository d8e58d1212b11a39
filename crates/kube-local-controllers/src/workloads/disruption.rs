//! PodDisruptionBudget status, as kube-controller-manager's disruption controller writes it: expected and healthy
//! pods, the healthy count the budget demands, how many disruptions it allows, the evictions not yet seen through
//! (`disruptedPods`), and the `DisruptionAllowed` condition.
//!
//! - `minAvailable` as a number counts the selected pods; percentages and `maxUnavailable` scale with the replicas of
//!   the pods' controllers (a StatefulSet, a ReplicaSet, or the Deployment controlling that ReplicaSet), rounding up.
//!   Pods without a controller are left out of that count; a controller kube-local cannot scale (a Job, a missing
//!   object) fails the pass, and the budget then allows no disruption (`SyncFailed`), as upstream.
//! - A pod the eviction subresource recorded in `disruptedPods` is not healthy until it is deleted or two minutes
//!   have passed (upstream's `DeletionTimeout`); the budget is looked at again when the oldest entry expires.
//! - A budget matching no pods allows no disruption.
//! - Status is written with a resourceVersion precondition, so a pass computed from caches older than an eviction's
//!   write never undoes it; a conflict waits for the next change.
//!
//! `unhealthyPodEvictionPolicy` changes nothing here: as upstream, only the eviction subresource reads it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};

use super::Context;
use super::endpoints::is_pod_ready;
use crate::informer::get;
pub(crate) use crate::selector::selector_matches;

/// How long an eviction recorded in `disruptedPods` keeps its pod out of the healthy count (upstream's
/// `DeletionTimeout`).
const DELETION_TIMEOUT: jiff::SignedDuration = jiff::SignedDuration::from_secs(120);

/// `intstr.GetScaledValueFromIntOrPercent` with rounding up; a malformed percentage is an error.
fn scaled(value: &IntOrString, total: i32) -> Result<i32, String> {
    match value {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map(|p| ((p * i64::from(total) + 99) / 100) as i32)
            .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}")),
    }
}

/// A pod's controller and its replicas, as the disruption controller scales by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Controller {
    /// No controller reference: left out of a scaled count.
    None,
    /// `kind/name` and its replicas.
    Scaled(String, i32),
}

/// The pod's controller; a ReplicaSet that a Deployment controls counts as that Deployment.
fn controller_of(ctx: &Context, pod: &Pod) -> Result<Controller, String> {
    let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    else {
        return Ok(Controller::None);
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let missing = || format!("found no controllers for pod {pod_name:?}");
    match owner.kind.as_str() {
        "StatefulSet" => {
            let set = get::<StatefulSet>(&ctx.caches.statefulsets, ns, &owner.name)
                .ok_or_else(missing)?;
            Ok(Controller::Scaled(
                format!("StatefulSet/{}", owner.name),
                set.spec.replicas.unwrap_or(1),
            ))
        }
        "ReplicaSet" => {
            let rs =
                get::<ReplicaSet>(&ctx.caches.replicasets, ns, &owner.name).ok_or_else(missing)?;
            let deployment = rs
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && o.kind == "Deployment")
                .and_then(|o| get::<Deployment>(&ctx.caches.deployments, ns, &o.name));
            Ok(match deployment {
                Some(d) => Controller::Scaled(
                    format!(
                        "Deployment/{}",
                        d.metadata.name.as_deref().unwrap_or_default()
                    ),
                    d.spec.replicas.unwrap_or(1),
                ),
                None => Controller::Scaled(
                    format!("ReplicaSet/{}", owner.name),
                    rs.spec.replicas.unwrap_or(1),
                ),
            })
        }
        _ => Err(missing()),
    }
}

/// What one pass computes for a budget.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Figures {
    pub expected: i32,
    pub desired: i32,
    pub healthy: i32,
    pub allowed: i32,
    /// The still-pending evictions of `disruptedPods`.
    pub disrupted: BTreeMap<String, Time>,
    /// When the oldest pending eviction expires.
    pub recheck_at: Option<jiff::Timestamp>,
}

/// The figures of `pdb` over the pods its selector matches (terminating ones included), with `controller` telling
/// each pod's controller. `Err` is why the status cannot be computed.
pub(crate) fn figures(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    controller: impl Fn(&Pod) -> Result<Controller, String>,
    now: jiff::Timestamp,
) -> Result<Figures, String> {
    let spec = pdb.spec.clone().unwrap_or_default();
    let expected_scale = || -> Result<i32, String> {
        let mut scales: BTreeMap<String, i32> = BTreeMap::new();
        for p in pods {
            if let Controller::Scaled(key, replicas) = controller(p)? {
                scales.insert(key, replicas);
            }
        }
        Ok(scales.values().sum())
    };
    let (expected, desired) = match (&spec.max_unavailable, &spec.min_available) {
        (Some(max), _) => {
            let expected = expected_scale()?;
            (expected, (expected - scaled(max, expected)?).max(0))
        }
        (None, Some(IntOrString::Int(n))) => (pods.len() as i32, *n),
        (None, Some(min)) => {
            let expected = expected_scale()?;
            (expected, scaled(min, expected)?)
        }
        (None, None) => (0, 0),
    };

    let recorded = pdb
        .status
        .as_ref()
        .and_then(|s| s.disrupted_pods.clone())
        .unwrap_or_default();
    let mut disrupted = BTreeMap::new();
    let mut recheck_at: Option<jiff::Timestamp> = None;
    for p in pods {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = p.metadata.name.clone().unwrap_or_default();
        let Some(at) = recorded.get(&name) else {
            continue;
        };
        let expires = at.0 + DELETION_TIMEOUT;
        if expires > now {
            recheck_at = Some(recheck_at.map_or(expires, |r| r.min(expires)));
            disrupted.insert(name, at.clone());
        }
    }

    let healthy = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or_default()))
        .filter(|p| is_pod_ready(p))
        .count() as i32;
    // A budget whose pods the controller has not seen yet must not allow anything when they appear.
    let allowed = if expected <= 0 {
        0
    } else {
        (healthy - desired).max(0)
    };
    Ok(Figures {
        expected,
        desired,
        healthy,
        allowed,
        disrupted,
        recheck_at,
    })
}

/// `conditions` with `DisruptionAllowed` set to `status`/`reason`/`message` (its transition time kept when the
/// status does not change), as `meta.SetStatusCondition`.
fn with_condition(
    conditions: Option<Vec<Condition>>,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: jiff::Timestamp,
) -> Vec<Condition> {
    let mut conditions = conditions.unwrap_or_default();
    let transition = conditions
        .iter()
        .find(|c| c.type_ == "DisruptionAllowed" && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    conditions.retain(|c| c.type_ != "DisruptionAllowed");
    conditions.push(Condition {
        type_: "DisruptionAllowed".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation,
        last_transition_time: transition,
    });
    conditions
}

/// The status to write for `figures` (`Err`: the fail-safe status), or `None` when the stored one is current.
pub(crate) fn next_status(
    pdb: &PodDisruptionBudget,
    figures: Result<Figures, String>,
    now: jiff::Timestamp,
) -> Option<PodDisruptionBudgetStatus> {
    let old = pdb.status.clone().unwrap_or_default();
    let generation = pdb.metadata.generation;
    match figures {
        Ok(f) => {
            let wanted = if f.allowed > 0 { "True" } else { "False" };
            let conditions_current = old.conditions.iter().flatten().any(|c| {
                c.type_ == "DisruptionAllowed"
                    && c.status == wanted
                    && c.observed_generation == old.observed_generation
            });
            let disrupted = (!f.disrupted.is_empty()).then_some(f.disrupted);
            let unchanged = old.current_healthy == Some(f.healthy)
                && old.desired_healthy == Some(f.desired)
                && old.expected_pods == Some(f.expected)
                && old.disruptions_allowed == Some(f.allowed)
                && old.disrupted_pods.clone().filter(|m| !m.is_empty()) == disrupted
                && old.observed_generation == generation
                && conditions_current;
            if unchanged {
                return None;
            }
            let reason = if f.allowed > 0 {
                "SufficientPods"
            } else {
                "InsufficientPods"
            };
            Some(PodDisruptionBudgetStatus {
                current_healthy: Some(f.healthy),
                desired_healthy: Some(f.desired),
                expected_pods: Some(f.expected),
                disruptions_allowed: Some(f.allowed),
                disrupted_pods: disrupted,
                observed_generation: generation,
                conditions: Some(with_condition(
                    old.conditions,
                    wanted,
                    reason,
                    "",
                    generation,
                    now,
                )),
            })
        }
        Err(why) => {
            let failed = old.conditions.iter().flatten().any(|c| {
                c.type_ == "DisruptionAllowed" && c.reason == "SyncFailed" && c.message == why
            });
            if old.disruptions_allowed.unwrap_or(0) == 0 && failed {
                return None;
            }
            let observed = old.observed_generation;
            Some(PodDisruptionBudgetStatus {
                disruptions_allowed: Some(0),
                conditions: Some(with_condition(
                    old.conditions.clone(),
                    "False",
                    "SyncFailed",
                    &why,
                    observed,
                    now,
                )),
                ..old
            })
        }
    }
}

pub async fn reconcile(ctx: &Context) -> Option<Duration> {
    let now = jiff::Timestamp::now();
    let mut recheck_at: Option<jiff::Timestamp> = None;
    for pdb in ctx.caches.disruption_budgets.state() {
        let ns = pdb.metadata.namespace.clone().unwrap_or_default();
        let name = pdb.metadata.name.clone().unwrap_or_default();
        // A policy/v1 budget without a selector selects nothing; an empty one selects every pod.
        let selector = pdb.spec.as_ref().and_then(|s| s.selector.clone());
        let all = ctx.caches.pods.state_filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str())
                && selector.as_ref().is_some_and(|s| {
                    selector_matches(s, &p.metadata.labels.clone().unwrap_or_default())
                })
        });
        let pods: Vec<&Pod> = all.iter().map(|p| p.as_ref()).collect();
        let computed = figures(&pdb, &pods, |p| controller_of(ctx, p), now);
        if let Ok(f) = &computed
            && let Some(at) = f.recheck_at
        {
            recheck_at = Some(recheck_at.map_or(at, |r| r.min(at)));
        }
        let Some(status) = next_status(&pdb, computed, now) else {
            continue;
        };
        let mut updated = (*pdb).clone();
        updated.status = Some(status);
        // The cached resourceVersion is a precondition: a conflict means newer state, and a newer pass.
        let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
        if let Err(e) = api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            tracing::debug!(budget = %name, namespace = %ns, error = %e, "writing PodDisruptionBudget status");
        }
    }
    recheck_at.map(|at| {
        let wait = at.duration_since(now).unsigned_abs();
        wait + Duration::from_millis(100)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn pdb(spec: serde_json::Value, status: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": "b", "namespace": "n", "generation": 1},
            "spec": spec, "status": status,
        }))
        .unwrap()
    }

    fn pod(name: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "n", "labels": {"app": "a"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
        }))
        .unwrap()
    }

    fn deployment_of_3(_: &Pod) -> Result<Controller, String> {
        Ok(Controller::Scaled("Deployment/d".into(), 3))
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn numbers_and_percentages_of_min_available_and_max_unavailable() {
        let pods = [pod("a", true), pod("b", true), pod("c", true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let cases = [
            (json!({"minAvailable": 2}), 2, 1),
            (json!({"minAvailable": "50%"}), 2, 1),
            (json!({"minAvailable": "100%"}), 3, 0),
            (json!({"maxUnavailable": 1}), 2, 1),
            (json!({"maxUnavailable": "34%"}), 1, 2),
            (json!({"maxUnavailable": "10%"}), 2, 1),
            (json!({"maxUnavailable": 0}), 3, 0),
        ];
        for (spec, desired, allowed) in cases {
            let f = figures(&pdb(spec.clone(), json!({})), &refs, deployment_of_3, now()).unwrap();
            assert_eq!(
                (f.expected, f.desired, f.healthy, f.allowed),
                (3, desired, 3, allowed),
                "{spec}"
            );
        }
    }

    #[test]
    fn a_recorded_eviction_counts_as_disrupted_until_it_expires() {
        let pods = [pod("a", true), pod("b", true), pod("c", true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let recorded =
            json!({"disruptedPods": {"a": "2025-12-31T23:59:30Z", "gone": "2025-12-31T23:59:30Z"}});
        let f = figures(
            &pdb(json!({"minAvailable": 2}), recorded.clone()),
            &refs,
            deployment_of_3,
            now(),
        )
        .unwrap();
        assert_eq!((f.healthy, f.allowed), (2, 0));
        assert_eq!(f.disrupted.keys().collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(f.recheck_at, Some("2026-01-01T00:01:30Z".parse().unwrap()));
        let later: jiff::Timestamp = "2026-01-01T00:02:00Z".parse().unwrap();
        let f = figures(
            &pdb(json!({"minAvailable": 2}), recorded),
            &refs,
            deployment_of_3,
            later,
        )
        .unwrap();
        assert_eq!((f.healthy, f.allowed), (3, 1));
        assert!(f.disrupted.is_empty());
    }

    #[test]
    fn no_pods_allow_nothing_and_unready_pods_are_not_healthy() {
        let f = figures(
            &pdb(json!({"maxUnavailable": 1}), json!({})),
            &[],
            deployment_of_3,
            now(),
        )
        .unwrap();
        assert_eq!((f.expected, f.allowed), (0, 0));
        let pods = [pod("a", true), pod("b", false)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let f = figures(
            &pdb(json!({"minAvailable": 1}), json!({})),
            &refs,
            deployment_of_3,
            now(),
        )
        .unwrap();
        assert_eq!((f.expected, f.healthy, f.allowed), (2, 1, 0));
    }

    #[test]
    fn unmanaged_pods_are_left_out_of_scaled_counts_and_unknown_controllers_fail() {
        let pods = [pod("a", true), pod("b", true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let f = figures(
            &pdb(json!({"maxUnavailable": 1}), json!({})),
            &refs,
            |_| Ok(Controller::None),
            now(),
        )
        .unwrap();
        assert_eq!((f.expected, f.desired, f.allowed), (0, 0, 0));
        let failed = figures(
            &pdb(json!({"minAvailable": "50%"}), json!({})),
            &refs,
            |_| Err("found no controllers for pod \"a\"".into()),
            now(),
        );
        let status = next_status(
            &pdb(json!({}), json!({"disruptionsAllowed": 3})),
            failed,
            now(),
        )
        .unwrap();
        assert_eq!(status.disruptions_allowed, Some(0));
        let c = &status.conditions.unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "SyncFailed")
        );
    }

    #[test]
    fn status_is_written_only_when_it_changes() {
        let pods = [pod("a", true), pod("b", true), pod("c", true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let budget = pdb(json!({"minAvailable": 2}), json!({}));
        let f = figures(&budget, &refs, deployment_of_3, now()).unwrap();
        let status = next_status(&budget, Ok(f.clone()), now()).unwrap();
        assert_eq!(status.observed_generation, Some(1));
        let c = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "SufficientPods")
        );
        let mut written = budget.clone();
        written.status = Some(status);
        assert_eq!(next_status(&written, Ok(f), now()), None);
    }
}
