//! PodDisruptionBudget status: expected and healthy pods, the healthy count the budget demands, and how many
//! disruptions it allows, with the `DisruptionAllowed` condition.
//!
//! As upstream, percentages and `maxUnavailable` scale with the replicas of the pods' controller (a StatefulSet, a
//! ReplicaSet, or the Deployment controlling that ReplicaSet; other pods count as one each), rounding up.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::Context;
use super::endpoints::is_pod_ready;
use crate::informer::get;

/// Whether `labels` match a LabelSelector (matchLabels and matchExpressions).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_labels && by_expressions
}

/// `intstr.GetScaledValueFromIntOrPercent` with rounding up.
fn scaled(value: &IntOrString, total: i32) -> i32 {
    match value {
        IntOrString::Int(i) => *i,
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map(|p| ((p * i64::from(total) + 99) / 100) as i32)
            .unwrap_or(0),
    }
}

/// The pod's controller as upstream's PDB controller scales by it: (kind/name, replicas). A ReplicaSet that a
/// Deployment controls counts as that Deployment.
fn scale_of(ctx: &Context, pod: &Pod) -> Option<(String, i32)> {
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    match owner.kind.as_str() {
        "StatefulSet" => {
            let set = get::<StatefulSet>(&ctx.caches.statefulsets, ns, &owner.name)?;
            Some((
                format!("StatefulSet/{}", owner.name),
                set.spec.replicas.unwrap_or(1),
            ))
        }
        "ReplicaSet" => {
            let rs = get::<ReplicaSet>(&ctx.caches.replicasets, ns, &owner.name)?;
            let deployment = rs
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && o.kind == "Deployment")
                .and_then(|o| get::<Deployment>(&ctx.caches.deployments, ns, &o.name));
            match deployment {
                Some(d) => Some((
                    format!(
                        "Deployment/{}",
                        d.metadata.name.as_deref().unwrap_or_default()
                    ),
                    d.spec.replicas.unwrap_or(1),
                )),
                None => Some((
                    format!("ReplicaSet/{}", owner.name),
                    rs.spec.replicas.unwrap_or(1),
                )),
            }
        }
        _ => None,
    }
}

fn expected_pods(ctx: &Context, pods: &[&Pod]) -> i32 {
    let mut controllers: BTreeMap<(String, String), i32> = BTreeMap::new();
    let mut loose = 0;
    for p in pods {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        match scale_of(ctx, p) {
            Some((controller, replicas)) => {
                controllers.insert((ns, controller), replicas);
            }
            None => loose += 1,
        }
    }
    loose + controllers.values().sum::<i32>()
}

pub async fn reconcile(ctx: &Context) -> Option<std::time::Duration> {
    for pdb in ctx.caches.disruption_budgets.state() {
        let ns = pdb.metadata.namespace.clone().unwrap_or_default();
        let name = pdb.metadata.name.clone().unwrap_or_default();
        let spec = pdb.spec.clone().unwrap_or_default();
        let selector = spec.selector.clone().unwrap_or_default();
        let all = ctx.caches.pods.state_filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str())
                && selector_matches(&selector, &p.metadata.labels.clone().unwrap_or_default())
        });
        let pods: Vec<&Pod> = all
            .iter()
            .map(|p| p.as_ref())
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let healthy = pods.iter().filter(|p| is_pod_ready(p)).count() as i32;
        let (expected, desired) = match (&spec.min_available, &spec.max_unavailable) {
            (Some(IntOrString::Int(n)), None) => (pods.len() as i32, *n),
            (Some(min), None) => {
                let expected = expected_pods(ctx, &pods);
                (expected, scaled(min, expected))
            }
            (_, Some(max)) => {
                let expected = expected_pods(ctx, &pods);
                (expected, (expected - scaled(max, expected)).max(0))
            }
            (None, None) => (pods.len() as i32, 0),
        };
        let allowed = (healthy - desired).max(0);
        let old = pdb.status.clone().unwrap_or_default();
        let unchanged = old.observed_generation == pdb.metadata.generation
            && old.current_healthy == Some(healthy)
            && old.desired_healthy == Some(desired)
            && old.expected_pods == Some(expected)
            && old.disruptions_allowed == Some(allowed)
            && old.conditions.as_ref().is_some_and(|cs| !cs.is_empty());
        if unchanged {
            continue;
        }
        let (status, reason) = if allowed > 0 {
            ("True", "SufficientPods")
        } else {
            ("False", "InsufficientPods")
        };
        let transition = old
            .conditions
            .as_ref()
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "DisruptionAllowed" && c.status == status)
            })
            .map(|c| c.last_transition_time.clone())
            .unwrap_or(Time(jiff::Timestamp::now()));
        let patch = json!({"status": {
            "observedGeneration": pdb.metadata.generation,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": allowed,
            "conditions": [{
                "type": "DisruptionAllowed", "status": status, "reason": reason, "message": "",
                "observedGeneration": pdb.metadata.generation, "lastTransitionTime": transition,
            }],
        }});
        let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
        let _ = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }
    None
}
