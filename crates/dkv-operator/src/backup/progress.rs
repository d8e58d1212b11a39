//! A backup's phase, read from its Job and the Job's pod (pure).

use dkv_api::backup::v1alpha1::{BackupArtifact, BackupContent, BackupPhase};
use dkv_api::conditions::status as condition_status;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

/// What the backup's status says after this look.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub phase: BackupPhase,
    pub artifact: Option<BackupArtifact>,
    pub message: Option<String>,
}

/// The artifact as `dkv backup` reports it in its termination message.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgentArtifact {
    uri: String,
    size_bytes: u64,
    sha256: String,
    revision: i64,
    etcd_version: String,
    #[serde(default)]
    compression: Option<String>,
    #[serde(default)]
    encryption_key_id: Option<String>,
    #[serde(default)]
    content: Option<BackupContent>,
}

fn condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == type_ && c.status == condition_status::TRUE)
        })
}

/// The newest termination message of the agent container among the pods.
fn agent_message(pods: &[Pod]) -> Option<String> {
    pods.iter()
        .filter_map(|p| {
            let started = p.metadata.creation_timestamp.clone();
            let message = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|c| c.name == "backup")?
                .state
                .as_ref()?
                .terminated
                .as_ref()?
                .message
                .clone()?;
            Some((started, message))
        })
        .max_by(|a, b| a.0.as_ref().map(|t| t.0).cmp(&b.0.as_ref().map(|t| t.0)))
        .map(|(_, m)| m.trim().to_owned())
        .filter(|m| !m.is_empty())
}

pub fn of(job: &Job, pods: &[Pod]) -> Progress {
    if condition(job, "Complete") {
        let message = agent_message(pods);
        return match message
            .as_deref()
            .map(serde_json::from_str::<AgentArtifact>)
        {
            Some(Ok(a)) => Progress {
                phase: BackupPhase::Completed,
                artifact: Some(BackupArtifact {
                    uri: a.uri,
                    size_bytes: i64::try_from(a.size_bytes).unwrap_or(i64::MAX),
                    sha256: a.sha256,
                    revision: a.revision,
                    etcd_version: Some(a.etcd_version),
                    compression: a.compression,
                    encryption_key_id: a.encryption_key_id,
                    content: a.content,
                }),
                message: None,
            },
            _ => Progress {
                phase: BackupPhase::Failed,
                artifact: None,
                message: Some(format!(
                    "the backup Job completed but its pod reported no artifact (termination message: {})",
                    message.as_deref().unwrap_or("none")
                )),
            },
        };
    }
    if condition(job, "Failed") {
        return Progress {
            phase: BackupPhase::Failed,
            artifact: None,
            message: Some(
                agent_message(pods)
                    .unwrap_or_else(|| "the backup Job failed without a message".to_owned()),
            ),
        };
    }
    let running = job.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0;
    Progress {
        phase: if running {
            BackupPhase::Running
        } else {
            BackupPhase::Pending
        },
        artifact: None,
        message: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: serde_json::Value) -> Job {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "b"}, "status": status}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn pod(message: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "b-x", "creationTimestamp": "2026-11-22T06:00:00Z"},
            "status": {"containerStatuses": [{
                "name": "backup", "image": "dkv", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "message": message}}
            }]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_completed_job_yields_the_agents_artifact() {
        let done = job(serde_json::json!({"conditions": [{"type": "Complete", "status": "True"}]}));
        let message = r#"{"uri":"s3://b/p/shop/orders/orders-20261122-060000.db","sizeBytes":1234,"sha256":"ab","revision":9,"etcdVersion":"3.5.16","takenAt":"2026-11-22T06:00:00Z"}"#;
        let p = of(&done, &[pod(message)]);
        assert_eq!(p.phase, BackupPhase::Completed);
        let a = p.artifact.unwrap_or_default();
        assert_eq!(
            (a.size_bytes, a.revision, a.sha256.as_str()),
            (1234, 9, "ab")
        );
        // No artifact: never reported as completed.
        assert_eq!(of(&done, &[pod("garbage")]).phase, BackupPhase::Failed);
        assert_eq!(of(&done, &[]).phase, BackupPhase::Failed);
    }

    #[test]
    fn failures_carry_the_agents_reason_and_running_jobs_are_running() {
        let failed = job(serde_json::json!({"conditions": [{"type": "Failed", "status": "True"}]}));
        let p = of(&failed, &[pod("access denied by s3://b/p")]);
        assert_eq!(p.phase, BackupPhase::Failed);
        assert_eq!(p.message.as_deref(), Some("access denied by s3://b/p"));
        assert_eq!(
            of(&job(serde_json::json!({"active": 1})), &[]).phase,
            BackupPhase::Running
        );
        assert_eq!(
            of(&job(serde_json::json!({})), &[]).phase,
            BackupPhase::Pending
        );
    }
}
