//! A Deployment's status and conditions, after upstream's `sync.go` (`calculateStatus`) and `progress.go`
//! (`syncRolloutStatus`): counts summed over its ReplicaSets, `Available` while at most `maxUnavailable` replicas are
//! missing, and `Progressing` recording a rollout's steps (`NewReplicaSetCreated`, `FoundNewReplicaSet`,
//! `ReplicaSetUpdated`, `NewReplicaSetAvailable`, `DeploymentPaused`/`DeploymentResumed`) or its failure to finish
//! within `progressDeadlineSeconds` (`ProgressDeadlineExceeded`).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::rollout::{Params, actual, available, ready, size};

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";
pub const RS_CREATE_ERROR: &str = "ReplicaSetCreateError";
const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

/// Now, to the second (as conditions are stored), so a stored condition compares equal to the one written.
pub fn now() -> Time {
    let now = jiff::Timestamp::now();
    Time(jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// A condition that changed at `now`.
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: &Time,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: Some(type_.into()),
        status: Some(status.into()),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

pub fn get<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.as_deref() == Some(type_))
}

pub fn remove(status: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = status.conditions.as_mut() {
        cs.retain(|c| c.type_.as_deref() != Some(type_));
    }
}

/// Upstream's `SetDeploymentCondition`: no change for the same status and reason; the transition time kept while
/// the status stays.
pub fn set(status: &mut DeploymentStatus, mut c: DeploymentCondition) {
    let type_ = c.type_.clone().unwrap_or_default();
    if let Some(current) = get(status, &type_) {
        if current.status == c.status && current.reason == c.reason {
            return;
        }
        if current.status == c.status {
            c.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove(status, &type_);
    status.conditions.get_or_insert_with(Vec::new).push(c);
}

pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec
        .progress_deadline_seconds
        .is_some_and(|s| s != i32::MAX)
}

fn replicas(d: &Deployment) -> i32 {
    d.spec.replicas.unwrap_or(1)
}

/// Upstream's `calculateStatus`: counts over `all` (the new ReplicaSet among them) and the `Available` condition.
pub fn calculate(
    d: &Deployment,
    p: &Params,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: &Time,
) -> DeploymentStatus {
    let old = d.status.clone().unwrap_or_default();
    let available_n: i32 = all.iter().map(|rs| available(rs)).sum();
    let total: i32 = all.iter().map(|rs| size(rs)).sum();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.iter().map(|rs| actual(rs)).sum()),
        updated_replicas: Some(new.map(actual).unwrap_or(0)),
        ready_replicas: Some(all.iter().map(|rs| ready(rs)).sum()),
        available_replicas: Some(available_n),
        unavailable_replicas: Some((total - available_n).max(0)),
        collision_count: old.collision_count,
        conditions: old.conditions,
        terminating_replicas: old.terminating_replicas,
    };
    let c = if available_n >= p.replicas - p.max_unavailable {
        condition(
            AVAILABLE,
            "True",
            MIN_AVAILABLE,
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        condition(
            AVAILABLE,
            "False",
            MIN_UNAVAILABLE,
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    set(&mut status, c);
    status
}

/// Upstream's `DeploymentComplete`: every replica updated and available, the latest spec observed.
pub fn complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let want = Some(replicas(d));
    status.updated_replicas == want
        && status.replicas == want
        && status.available_replicas == want
        && status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// Upstream's `DeploymentProgressing`: more updated, ready or available replicas than last recorded, or fewer old.
fn progressing(d: &Deployment, status: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(status.replicas) - n(status.updated_replicas);
    n(status.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(status.ready_replicas) > n(old.ready_replicas)
        || n(status.available_replicas) > n(old.available_replicas)
}

/// When the Progressing condition of `status` runs out of time, if it can (upstream's `DeploymentTimedOut`).
fn deadline(d: &Deployment, status: &DeploymentStatus) -> Option<jiff::Timestamp> {
    let seconds = d.spec.progress_deadline_seconds?;
    if !has_progress_deadline(d) {
        return None;
    }
    let c = get(status, PROGRESSING)?;
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => None,
        Some(TIMED_OUT) => Some(jiff::Timestamp::MIN),
        _ => {
            let from = c.last_update_time.as_ref()?.0;
            from.checked_add(jiff::SignedDuration::from_secs(i64::from(seconds)))
                .ok()
        }
    }
}

fn timed_out(d: &Deployment, status: &DeploymentStatus, now: &Time) -> bool {
    deadline(d, status).is_some_and(|at| at < now.0)
}

/// Upstream's `syncRolloutStatus`: `status` (from [`calculate`]) with its Progressing condition brought up to date;
/// and when to look again for the progress deadline.
pub fn with_progress(
    d: &Deployment,
    mut status: DeploymentStatus,
    new: Option<&ReplicaSet>,
    now: &Time,
) -> (DeploymentStatus, Option<Duration>) {
    if !has_progress_deadline(d) {
        remove(&mut status, PROGRESSING);
        return (status, None);
    }
    let subject = match new.and_then(|rs| rs.metadata.name.as_deref()) {
        Some(rs) => format!("ReplicaSet {rs:?}"),
        None => format!(
            "Deployment {:?}",
            d.metadata.name.as_deref().unwrap_or_default()
        ),
    };
    let current = d.status.as_ref().and_then(|s| get(s, PROGRESSING)).cloned();
    let is_complete = status.replicas == status.updated_replicas
        && current
            .as_ref()
            .is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE));
    if !is_complete {
        if complete(d, &status) {
            let c = condition(
                PROGRESSING,
                "True",
                NEW_RS_AVAILABLE,
                format!("{subject} has successfully progressed."),
                now,
            );
            set(&mut status, c);
        } else if progressing(d, &status) {
            let mut c = condition(
                PROGRESSING,
                "True",
                RS_UPDATED,
                format!("{subject} is progressing."),
                now,
            );
            // Progress moves lastUpdateTime even when the reason stays.
            if let Some(current) = &current {
                if current.status.as_deref() == Some("True") {
                    c.last_transition_time = current.last_transition_time.clone();
                }
                remove(&mut status, PROGRESSING);
            }
            set(&mut status, c);
        } else if timed_out(d, &status, now) {
            let c = condition(
                PROGRESSING,
                "False",
                TIMED_OUT,
                format!("{subject} has timed out progressing."),
                now,
            );
            set(&mut status, c);
        }
    }
    remove(&mut status, "ReplicaFailure");
    let wake = deadline(d, &status)
        .filter(|at| *at > now.0)
        .and_then(|at| Duration::try_from(at.duration_since(now.0)).ok())
        .map(|left| left + Duration::from_secs(1));
    (status, wake)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": 2},
            "spec": {"replicas": 2, "progressDeadlineSeconds": 600, "selector": {}, "template": {}},
            "status": status,
        }))
        .expect("a deployment")
    }

    fn rs(name: &str, size: i32, ready: i32) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"replicas": size, "selector": {}},
            "status": {"replicas": size, "readyReplicas": ready, "availableReplicas": ready},
        }))
        .expect("a replicaset")
    }

    #[test]
    fn a_finished_rollout_is_available_and_complete() {
        let d = deployment(json!({}));
        let p = Params::of(&d);
        let new = rs("web-a", 2, 2);
        let now = now();
        let status = calculate(&d, &p, &[&new], Some(&new), &now);
        assert_eq!(status.replicas, Some(2));
        assert_eq!(status.updated_replicas, Some(2));
        assert_eq!(status.unavailable_replicas, Some(0));
        assert_eq!(status.observed_generation, Some(2));
        let available = get(&status, AVAILABLE).expect("Available");
        assert_eq!(available.status.as_deref(), Some("True"));
        assert_eq!(
            available.reason.as_deref(),
            Some("MinimumReplicasAvailable")
        );
        let (status, wake) = with_progress(&d, status, Some(&new), &now);
        let progressing = get(&status, PROGRESSING).expect("Progressing");
        assert_eq!(progressing.reason.as_deref(), Some(NEW_RS_AVAILABLE));
        assert_eq!(
            progressing.message.as_deref(),
            Some("ReplicaSet \"web-a\" has successfully progressed.")
        );
        assert_eq!(wake, None);
    }

    #[test]
    fn a_rollout_in_flight_progresses_then_times_out() {
        let d = deployment(
            json!({"replicas": 2, "updatedReplicas": 0, "availableReplicas": 2, "readyReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
                            "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        );
        let p = Params::of(&d);
        let old = rs("web-a", 2, 2);
        let new = rs("web-b", 1, 0);
        let at = |s: &str| Time(s.parse().expect("a time"));
        let status = calculate(
            &d,
            &p,
            &[&old, &new],
            Some(&new),
            &at("2026-01-01T00:01:00Z"),
        );
        assert_eq!(status.unavailable_replicas, Some(1));
        let (status, wake) = with_progress(&d, status, Some(&new), &at("2026-01-01T00:01:00Z"));
        let c = get(&status, PROGRESSING).expect("Progressing");
        assert_eq!(c.reason.as_deref(), Some(RS_UPDATED));
        assert_eq!(c.last_transition_time, Some(at("2026-01-01T00:00:00Z")));
        assert_eq!(wake, Some(Duration::from_secs(601)));
        // Nothing moves for longer than the deadline.
        let mut stuck = d.clone();
        stuck.status = Some(status.clone());
        let status = calculate(
            &stuck,
            &p,
            &[&old, &new],
            Some(&new),
            &at("2026-01-01T00:12:00Z"),
        );
        let (status, _) = with_progress(&stuck, status, Some(&new), &at("2026-01-01T00:12:00Z"));
        let c = get(&status, PROGRESSING).expect("Progressing");
        assert_eq!(
            (c.status.as_deref(), c.reason.as_deref()),
            (Some("False"), Some(TIMED_OUT))
        );
    }
}
