//! Jobs and CronJobs: completion, failure against the back-off limit, schedules on a test clock, history limits.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::ListParams;
use serde_json::json;

use super::common::{Cluster, TESTAPP, eventually};

const NS: &str = "batch";

fn job_template(exit_code: i32) -> serde_json::Value {
    json!({"spec": {"restartPolicy": "Never", "containers": [{
        "name": "work", "image": TESTAPP,
        "env": [{"name": "EXIT_AFTER_MS", "value": "20"}, {"name": "EXIT_CODE", "value": exit_code.to_string()}],
    }]}})
}

fn condition(job: &Job, type_: &str) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .and_then(|c| c.reason.clone())
}

#[tokio::test]
async fn a_job_completes_and_a_failing_one_exceeds_its_backoff_limit() {
    let c = Cluster::start(NS).await;
    c.create::<Job>(
        NS,
        json!({
            "metadata": {"name": "ok"},
            "spec": {"completions": 2, "parallelism": 2, "template": job_template(0)},
        }),
    )
    .await;
    c.create::<Job>(
        NS,
        json!({
            "metadata": {"name": "bad"},
            "spec": {"backoffLimit": 0, "template": job_template(1)},
        }),
    )
    .await;
    let ok = eventually("ok to complete", Duration::from_secs(20), || async {
        c.api::<Job>(NS)
            .get("ok")
            .await
            .ok()
            .filter(|j| condition(j, "Complete").is_some())
    })
    .await;
    let status = ok.status.unwrap();
    assert_eq!(status.succeeded, Some(2));
    assert!(status.completion_time.is_some());
    assert_eq!(
        condition(&ok_again(&c, "ok").await, "SuccessCriteriaMet").as_deref(),
        Some("CompletionsReached")
    );

    let bad = eventually("bad to fail", Duration::from_secs(20), || async {
        c.api::<Job>(NS)
            .get("bad")
            .await
            .ok()
            .filter(|j| condition(j, "Failed").is_some())
    })
    .await;
    assert_eq!(
        condition(&bad, "Failed").as_deref(),
        Some("BackoffLimitExceeded")
    );
    assert_eq!(bad.status.unwrap().failed, Some(1));
}

async fn ok_again(c: &Cluster, name: &str) -> Job {
    c.api::<Job>(NS).get(name).await.unwrap()
}

#[tokio::test]
async fn a_cronjob_runs_jobs_on_schedule_and_keeps_its_history_limit() {
    let c = Cluster::start(NS).await;
    c.create::<CronJob>(
        NS,
        json!({
            "metadata": {"name": "tick"},
            "spec": {
                "schedule": "* * * * *",
                "successfulJobsHistoryLimit": 2,
                "jobTemplate": {"spec": {"template": job_template(0)}},
            },
        }),
    )
    .await;
    let mut names = Vec::new();
    for round in 1..=3 {
        let before = c
            .api::<CronJob>(NS)
            .get("tick")
            .await
            .unwrap()
            .status
            .and_then(|s| s.last_schedule_time);
        c.clock().advance(Duration::from_secs(60));
        // A new schedule time, and its Job (named after it) completes.
        let name = eventually(
            &format!("job {round} to complete"),
            Duration::from_secs(20),
            || async {
                let st = c.api::<CronJob>(NS).get("tick").await.ok()?.status?;
                let last = st
                    .last_schedule_time
                    .clone()
                    .filter(|t| Some(t) != before.as_ref())?;
                let name = format!("tick-{}", last.0.as_second() / 60);
                let job = c.api::<Job>(NS).get_opt(&name).await.ok()??;
                condition(&job, "Complete").map(|_| name)
            },
        )
        .await;
        names.push(name);
    }
    // Three ran; the oldest finished one is deleted.
    let jobs = eventually(
        "the two newest Jobs left",
        Duration::from_secs(10),
        || async {
            let mut left: Vec<String> = c
                .api::<Job>(NS)
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|j| j.metadata.name)
                .collect();
            left.sort();
            (left == names[1..]).then_some(left)
        },
    )
    .await;
    let jobs: Vec<Job> = {
        let mut out = Vec::new();
        for name in &jobs {
            out.push(c.api::<Job>(NS).get(name).await.unwrap());
        }
        out
    };
    let annotations = jobs[0].metadata.annotations.clone().unwrap();
    assert!(annotations.contains_key("batch.kubernetes.io/cronjob-scheduled-timestamp"));
}

#[tokio::test]
async fn an_indexed_job_runs_each_index_once() {
    let c = Cluster::start(NS).await;
    let mut template = job_template(0);
    template["spec"]["containers"][0]["command"] = json!([
        "sh",
        "-c",
        "echo index=$JOB_COMPLETION_INDEX host=$HOSTNAME"
    ]);
    c.create::<Job>(NS, json!({
        "metadata": {"name": "idx"},
        "spec": {"completions": 3, "parallelism": 2, "completionMode": "Indexed", "template": template},
    }))
    .await;
    let job = eventually("idx to complete", Duration::from_secs(20), || async {
        c.api::<Job>(NS)
            .get("idx")
            .await
            .ok()
            .filter(|j| condition(j, "Complete").is_some())
    })
    .await;
    let status = job.status.unwrap();
    assert_eq!(status.completed_indexes.as_deref(), Some("0-2"));
    assert_eq!(status.succeeded, Some(3));
    let pods = c
        .api::<k8s_openapi::api::core::v1::Pod>(NS)
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=idx"))
        .await
        .unwrap()
        .items;
    let mut indexes: Vec<String> = pods
        .iter()
        .map(|p| {
            p.metadata.labels.as_ref().unwrap()["batch.kubernetes.io/job-completion-index"].clone()
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2"]);
    let hostnames: Vec<String> = pods
        .iter()
        .map(|p| p.spec.as_ref().unwrap().hostname.clone().unwrap())
        .collect();
    assert!(
        hostnames.iter().all(|h| h.starts_with("idx-")),
        "{hostnames:?}"
    );
}
