//! The CronJob controller: creates a Job `<cronjob>-<minutes since epoch>` for the latest missed schedule time
//! (within `startingDeadlineSeconds`), honours `concurrencyPolicy` and `suspend`, keeps `status.active`,
//! `lastScheduleTime` and `lastSuccessfulTime`, and deletes finished Jobs beyond the history limits. Time comes from
//! the [`super::Clock`], which tests can move forward.

use std::sync::Arc;
use std::time::Duration;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::json;

use super::Context;
use super::job::is_finished;

const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

fn parse(schedule: &str) -> Option<Cron> {
    let schedule = schedule.trim();
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(schedule)
        .ok()
}

fn controlled_by(job: &Job, uid: &str) -> bool {
    job.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

pub async fn reconcile(ctx: &Context) -> Option<Duration> {
    let mut next: Option<Duration> = None;
    for cj in ctx.caches.cronjobs.state() {
        if let Some(wake) = sync_cronjob(ctx, &cj).await {
            next = Some(next.map_or(wake, |n| n.min(wake)));
        }
    }
    next
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

async fn sync_cronjob(ctx: &Context, cj: &Arc<CronJob>) -> Option<Duration> {
    if cj.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let uid = cj.metadata.uid.clone()?;
    let ns = cj.metadata.namespace.clone().unwrap_or_default();
    let name = cj.metadata.name.clone().unwrap_or_default();
    let spec = &cj.spec;
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let mut jobs: Vec<Arc<Job>> = ctx.caches.jobs.state_filter(|j| {
        j.metadata.namespace.as_deref() == Some(ns.as_str()) && controlled_by(j, &uid)
    });
    // Oldest first: by the time they were scheduled for (creation times have only second resolution).
    jobs.sort_by_key(|j| {
        (
            j.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SCHEDULED_TIMESTAMP))
                .and_then(|t| t.parse::<jiff::Timestamp>().ok()),
            j.metadata.creation_timestamp.clone().map(|t| t.0),
        )
    });

    // History: finished Jobs beyond the limits go, oldest first.
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    for (state, limit) in [
        ("Complete", spec.successful_jobs_history_limit.unwrap_or(3)),
        ("Failed", spec.failed_jobs_history_limit.unwrap_or(1)),
    ] {
        let finished: Vec<&Arc<Job>> = jobs
            .iter()
            .filter(|j| is_finished(j) == Some(state) && j.metadata.deletion_timestamp.is_none())
            .collect();
        let excess = finished.len().saturating_sub(limit.max(0) as usize);
        for j in &finished[..excess] {
            let _ = jobs_api
                .delete(j.metadata.name.as_deref().unwrap_or_default(), &background)
                .await;
        }
    }
    let mut active: Vec<Arc<Job>> = jobs
        .iter()
        .filter(|j| is_finished(j).is_none() && j.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    let last_successful = jobs
        .iter()
        .filter(|j| is_finished(j) == Some("Complete"))
        .filter_map(|j| j.status.as_ref()?.completion_time.clone())
        .max_by_key(|t| t.0)
        .or_else(|| cj.status.as_ref()?.last_successful_time.clone());
    let mut last_schedule = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.clone());

    let now = ctx.clock.now();
    let cron = parse(&spec.schedule);
    let tz = spec
        .time_zone
        .as_deref()
        .and_then(|z| jiff::tz::TimeZone::get(z).ok())
        .unwrap_or(jiff::tz::TimeZone::UTC);
    let mut wake = None;
    if let Some(cron) = &cron
        && spec.suspend != Some(true)
    {
        let since = last_schedule
            .as_ref()
            .map(|t| t.0)
            .or_else(|| cj.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .unwrap_or(now);
        // The latest schedule time in (since, now].
        let now_zoned = now.to_zoned(tz.clone());
        let due = cron
            .find_previous_occurrence(&now_zoned, true)
            .ok()
            .map(|z| z.timestamp())
            .filter(|t| *t > since);
        if let Some(scheduled) = due {
            let too_late = spec.starting_deadline_seconds.is_some_and(|d| {
                now.duration_since(scheduled) > jiff::SignedDuration::from_secs(d)
            });
            let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
            if too_late {
                last_schedule = Some(Time(scheduled));
            } else if policy == "Forbid" && !active.is_empty() {
                // Try again when a Job finishes (a change wakes this loop).
            } else {
                if policy == "Replace" {
                    for j in active.drain(..) {
                        let _ = jobs_api
                            .delete(j.metadata.name.as_deref().unwrap_or_default(), &background)
                            .await;
                    }
                }
                if let Some(job) = create_job(ctx, cj, &uid, scheduled).await {
                    active.push(Arc::new(job));
                }
                last_schedule = Some(Time(scheduled));
            }
        }
        if let Ok(next) = cron.find_next_occurrence(&now_zoned, false) {
            let left = next.timestamp().duration_since(now);
            wake = Duration::try_from(left)
                .ok()
                .map(|d| d + Duration::from_millis(5));
        }
    }

    let active_refs: Vec<ObjectReference> = active.iter().map(|j| job_ref(j)).collect();
    let status = json!({
        "active": if active_refs.is_empty() { serde_json::Value::Null } else { json!(active_refs) },
        "lastScheduleTime": last_schedule,
        "lastSuccessfulTime": last_successful,
    });
    let old = json!({
        "active": cj.status.as_ref().and_then(|s| s.active.as_ref()).map(|a| a.iter().map(|r| r.name.clone()).collect::<Vec<_>>()),
        "lastScheduleTime": cj.status.as_ref().and_then(|s| s.last_schedule_time.clone()),
        "lastSuccessfulTime": cj.status.as_ref().and_then(|s| s.last_successful_time.clone()),
    });
    let new_cmp = json!({
        "active": (!active_refs.is_empty()).then(|| active_refs.iter().map(|r| r.name.clone()).collect::<Vec<_>>()),
        "lastScheduleTime": last_schedule,
        "lastSuccessfulTime": last_successful,
    });
    if old != new_cmp {
        let api: Api<CronJob> = Api::namespaced(ctx.client.clone(), &ns);
        if let Err(e) = api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
        {
            tracing::debug!(cronjob = %name, error = %e, "writing CronJob status");
        }
    }
    wake
}

async fn create_job(
    ctx: &Context,
    cj: &CronJob,
    uid: &str,
    scheduled: jiff::Timestamp,
) -> Option<Job> {
    let ns = cj.metadata.namespace.clone().unwrap_or_default();
    let name = cj.metadata.name.clone().unwrap_or_default();
    let template = cj.spec.job_template.clone();
    let tmeta = template.metadata.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP.into(),
        scheduled.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    let job_name = format!("{name}-{}", scheduled.as_second().div_euclid(60));
    let job = Job {
        metadata: ObjectMeta {
            name: Some(job_name.clone()),
            namespace: Some(ns.clone()),
            labels: tmeta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "CronJob".into(),
                name: name.clone(),
                uid: uid.to_string(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    };
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    match api.create(&PostParams::default(), &job).await {
        Ok(j) => Some(j),
        Err(kube::Error::Api(e)) if e.code == 409 => api.get_opt(&job_name).await.ok().flatten(),
        Err(e) => {
            tracing::debug!(cronjob = %name, error = %e, "creating a Job");
            None
        }
    }
}
