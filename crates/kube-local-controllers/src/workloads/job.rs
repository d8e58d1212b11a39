//! The Job controller: runs pods from the template until `completions` succeed (`parallelism` at a time), counts
//! failures against `backoffLimit` (container restarts count for `restartPolicy: OnFailure`), enforces
//! `activeDeadlineSeconds`, and reports `SuccessCriteriaMet`/`Complete` or `FailureTarget`/`Failed` as upstream does
//! (1.31+). `completionMode: Indexed` gives each pod an index (annotation, label, `JOB_COMPLETION_INDEX`, hostname
//! `<job>-<index>`) and completes when every index has succeeded. Finished Jobs with `ttlSecondsAfterFinished` are deleted when it expires. Failed pods are replaced after
//! upstream's back-off (10s doubling, at most 6 minutes).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::json;

use super::Context;
use super::endpoints::is_pod_ready;

const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(360);

pub fn is_finished(job: &Job) -> Option<&'static str> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find_map(|c| match (c.type_.as_str(), c.status.as_str()) {
            ("Complete", "True") => Some("Complete"),
            ("Failed", "True") => Some("Failed"),
            _ => None,
        })
}

fn controlled_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0)
}

fn finished_at(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max()
}

fn condition(type_: &str, reason: &str, message: &str, now: &Time) -> serde_json::Value {
    json!({"type": type_, "status": "True", "reason": reason, "message": message,
           "lastProbeTime": now, "lastTransitionTime": now})
}

pub async fn reconcile(ctx: &Context) -> Option<Duration> {
    let mut next: Option<Duration> = None;
    for job in ctx.caches.jobs.state() {
        let wake = sync_job(ctx, &job).await;
        next = match (next, wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    next
}

async fn sync_job(ctx: &Context, job: &Arc<Job>) -> Option<Duration> {
    let uid = job.metadata.uid.clone()?;
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let now = Time(jiff::Timestamp::now());

    if job.metadata.deletion_timestamp.is_some() {
        return None;
    }
    if is_finished(job).is_some() {
        let ttl = job
            .spec
            .as_ref()
            .and_then(|s| s.ttl_seconds_after_finished)?;
        let done = job.status.as_ref().and_then(|s| {
            s.completion_time.clone().or_else(|| {
                s.conditions
                    .as_ref()?
                    .iter()
                    .find_map(|c| c.last_transition_time.clone())
            })
        })?;
        let expires = done.0 + jiff::SignedDuration::from_secs(ttl.into());
        let left = expires.duration_since(jiff::Timestamp::now());
        if left.is_negative() || left.is_zero() {
            let dp = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            };
            let _ = jobs.delete(&name, &dp).await;
            return None;
        }
        return Duration::try_from(left).ok();
    }

    let spec = job.spec.clone().unwrap_or_default();
    let pods: Vec<Arc<Pod>> = ctx.caches.pods.state_filter(|p| {
        p.metadata.namespace.as_deref() == Some(ns.as_str()) && controlled_by(p, &uid)
    });
    let on_failure = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        == Some("OnFailure");
    let active: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| {
            !matches!(phase(p), "Succeeded" | "Failed") && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    // Indexed Jobs count an index once however many of its pods succeeded.
    let succeeded_indexes: std::collections::BTreeSet<i32> = pods
        .iter()
        .filter(|p| phase(p) == "Succeeded")
        .filter_map(|p| completion_index(p))
        .collect();
    let succeeded = if indexed {
        succeeded_indexes.len() as i32
    } else {
        pods.iter().filter(|p| phase(p) == "Succeeded").count() as i32
    };
    let failed_pods: Vec<&Arc<Pod>> = pods.iter().filter(|p| phase(p) == "Failed").collect();
    let mut failed = failed_pods.len() as i32;
    if on_failure {
        failed += pods.iter().map(|p| restarts(p)).sum::<i32>();
    }
    let ready = active.iter().filter(|p| is_pod_ready(p)).count() as i32;
    let terminating = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .count() as i32;
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let completions = spec.completions;
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let start_time = job
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .unwrap_or_else(|| now.clone());
    let suspended = spec.suspend == Some(true);

    let deadline_exceeded = spec.active_deadline_seconds.is_some_and(|d| {
        jiff::Timestamp::now().duration_since(start_time.0) >= jiff::SignedDuration::from_secs(d)
    });
    let complete = match completions {
        Some(c) => succeeded >= c,
        None => succeeded > 0 && active.is_empty(),
    };
    let mut conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .map(|cs| serde_json::to_value(cs).unwrap_or_default())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let mut completion_time = None;
    let mut wake = None;
    let failure = if failed > backoff_limit {
        Some((
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ))
    } else if deadline_exceeded && !complete {
        Some((
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ))
    } else {
        None
    };
    if let Some((reason, message)) = failure {
        for p in &active {
            let _ = pods_api
                .delete(
                    p.metadata.name.as_deref().unwrap_or_default(),
                    &DeleteParams::default(),
                )
                .await;
        }
        conditions.push(condition("FailureTarget", reason, message, &now));
        conditions.push(condition("Failed", reason, message, &now));
    } else if complete {
        conditions.push(condition(
            "SuccessCriteriaMet",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            &now,
        ));
        conditions.push(condition(
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            &now,
        ));
        completion_time = Some(now.clone());
    } else if !suspended {
        let remaining = match completions {
            Some(c) => (c - succeeded).max(0),
            None if succeeded > 0 => 0,
            None => parallelism,
        };
        let want = parallelism.min(remaining) - active.len() as i32;
        // Replacements for failed pods wait out the back-off since the last failure.
        let delay = if failed > 0 {
            (BACKOFF_BASE * 2u32.saturating_pow((failed - 1).min(16) as u32)).min(BACKOFF_MAX)
        } else {
            Duration::ZERO
        };
        let last_failure = failed_pods.iter().filter_map(|p| finished_at(p)).max();
        let wait = last_failure
            .map(|t| {
                let since = jiff::Timestamp::now().duration_since(t);
                delay.saturating_sub(Duration::try_from(since).unwrap_or(Duration::ZERO))
            })
            .unwrap_or(Duration::ZERO);
        if want > 0 && !wait.is_zero() {
            wake = Some(wait);
        } else if want > 0 {
            if indexed {
                let busy: std::collections::BTreeSet<i32> =
                    active.iter().filter_map(|p| completion_index(p)).collect();
                let pending = (0..completions.unwrap_or(0))
                    .filter(|i| !succeeded_indexes.contains(i) && !busy.contains(i))
                    .take(want as usize);
                for index in pending {
                    create_pod(ctx, job, &uid, Some(index)).await;
                }
            } else {
                for _ in 0..want {
                    create_pod(ctx, job, &uid, None).await;
                }
            }
            // Wait for the cache to show them, so the next pass does not create them again.
            let expected = pods.len() + want as usize;
            for _ in 0..50 {
                let seen = ctx
                    .caches
                    .pods
                    .state_filter(|p| {
                        p.metadata.namespace.as_deref() == Some(ns.as_str())
                            && controlled_by(p, &uid)
                    })
                    .len();
                if seen >= expected {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if let Some(d) = spec.active_deadline_seconds {
            let left = (start_time.0 + jiff::SignedDuration::from_secs(d))
                .duration_since(jiff::Timestamp::now());
            if let Ok(left) = Duration::try_from(left) {
                wake = Some(wake.map_or(left, |w: Duration| w.min(left)));
            }
        }
    }
    if suspended {
        conditions.retain(|c| c["type"] != "Suspended");
        conditions.push(json!({"type": "Suspended", "status": "True", "reason": "JobSuspended", "message": "Job suspended", "lastProbeTime": now, "lastTransitionTime": now}));
    }

    let status = json!({
        "startTime": start_time,
        "active": active.len(),
        "ready": ready,
        "succeeded": succeeded,
        "failed": failed,
        "terminating": terminating,
        "conditions": if conditions.is_empty() { serde_json::Value::Null } else { json!(conditions) },
        "completionTime": completion_time,
        "uncountedTerminatedPods": {},
        "completedIndexes": indexed.then(|| compress_indexes(&succeeded_indexes)),
    });
    let old = serde_json::to_value(&job.status).unwrap_or_default();
    let changed = status.as_object().is_some_and(|m| {
        m.iter().any(|(k, v)| match (old.get(k), v) {
            (_, serde_json::Value::Null) => false,
            (Some(o), v) => o != v,
            (None, v) => !(v == &json!(0) || v == &json!({})),
        })
    });
    if changed {
        let _ = jobs
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await;
    }
    wake
}

const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

fn completion_index(pod: &Pod) -> Option<i32> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(COMPLETION_INDEX)?
        .parse()
        .ok()
}

/// `1,3-5,7`: the format of `status.completedIndexes`.
fn compress_indexes(indexes: &std::collections::BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(i32, i32)> = None;
    for &i in indexes {
        run = match run {
            Some((start, end)) if i == end + 1 => Some((start, i)),
            Some((start, end)) => {
                parts.push(if start == end {
                    start.to_string()
                } else {
                    format!("{start}-{end}")
                });
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some((start, end)) = run {
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

async fn create_pod(ctx: &Context, job: &Job, uid: &str, index: Option<i32>) {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let Some(spec) = &job.spec else { return };
    let template = spec.template.clone();
    let tmeta = template.metadata.unwrap_or_default();
    let mut labels = tmeta.labels.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    let mut pod_spec = template.spec;
    if let Some(index) = index {
        // Indexed pods: the index as annotation, label and JOB_COMPLETION_INDEX, and a stable hostname.
        labels.insert(COMPLETION_INDEX.into(), index.to_string());
        annotations.insert(COMPLETION_INDEX.into(), index.to_string());
        if let Some(spec) = pod_spec.as_mut() {
            spec.hostname = Some(format!("{name}-{index}"));
            for c in spec
                .containers
                .iter_mut()
                .chain(spec.init_containers.iter_mut().flatten())
            {
                c.env.get_or_insert_with(Vec::new).insert(
                    0,
                    k8s_openapi::api::core::v1::EnvVar {
                        name: "JOB_COMPLETION_INDEX".into(),
                        value: Some(index.to_string()),
                        value_from: None,
                    },
                );
            }
        }
    }
    let generate_name = match index {
        Some(i) => format!("{name}-{i}-"),
        None => format!("{name}-"),
    };
    let pod = Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: Some(ns.clone()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: name.clone(),
                uid: uid.to_string(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: pod_spec,
        status: None,
    };
    if let Err(e) = Api::<Pod>::namespaced(ctx.client.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await
    {
        tracing::debug!(job = %name, error = %e, "creating a Job pod");
    }
}
