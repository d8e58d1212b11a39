//! The CronJob that takes scheduled backups (present only when
//! `spec.backup` is set).

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobTemplateSpec};
use kube::api::ObjectMeta;

use super::child_meta;
use crate::cluster::validate::ValidatedCluster;
use crate::parts::backup_agent::{
    AgentRun, agent_container, agent_job_spec, agent_labels, agent_volumes,
};
use crate::parts::naming;

/// The CronJob of `cluster`'s scheduled backups; suspended while the
/// members are stopped for hibernation (a run would only fail).
pub fn build(cluster: &ValidatedCluster, hibernated: bool) -> Option<CronJob> {
    let backup = cluster.backup.as_ref()?;
    let labels = agent_labels(&cluster.name);
    let run = AgentRun {
        image: &backup.image,
        cluster: &cluster.name,
        destination: backup.destination.as_str(),
        credentials_secret: backup.credentials_secret.as_deref(),
        client_tls: cluster.tls_sources.client_secret(&cluster.name),
        auth: cluster.auth,
        compress: backup.compress,
        encryption: backup.encryption.as_ref(),
    };
    let container = agent_container(&run);

    Some(CronJob {
        metadata: child_meta(cluster, naming::backup_cronjob(&cluster.name), "backup"),
        spec: CronJobSpec {
            schedule: backup.schedule.as_str().to_owned(),
            time_zone: Some("Etc/UTC".to_owned()),
            // Two snapshots of one cluster at once only double the load on
            // the members; a late run is better skipped than stacked.
            concurrency_policy: Some("Forbid".to_owned()),
            starting_deadline_seconds: Some(300),
            successful_jobs_history_limit: Some(3),
            failed_jobs_history_limit: Some(3),
            suspend: hibernated.then_some(true),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(agent_job_spec(labels, container, agent_volumes(&run), 2)),
            },
        },
        status: None,
    })
}
