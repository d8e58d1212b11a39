//! The Job of one on-demand backup (pure).

use dkv_api::DistributedKVBackup;
use dkv_api::distributedkv::v1beta1::KeySecretReference;
use k8s_openapi::api::batch::v1::Job;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::parts::backup_agent::{
    AgentRun, agent_container, agent_job_spec, agent_labels, agent_volumes,
};

/// Where and how one backup runs, resolved from the backup and its cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub cluster: String,
    pub destination: String,
    pub credentials_secret: Option<String>,
    pub image: String,
    /// The cluster has client TLS: the Secret with the agent's client
    /// certificate.
    pub client_tls: Option<String>,
    /// The cluster has authentication on (or asks for it).
    pub auth: bool,
    /// The cluster's `spec.backup.compression` is not `None`.
    pub compress: bool,
    /// The cluster's `spec.backup.encryption.keySecret`.
    pub encryption: Option<KeySecretReference>,
}

/// Job names are label values (`job-name`): at most 63 characters.
pub fn job_name(backup: &DistributedKVBackup) -> String {
    let name = backup.name_any();
    if name.len() <= 63 {
        return name;
    }
    // FNV-1a: stable across builds, so a restarted operator finds its Job.
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let prefix: String = name.chars().take(54).collect();
    format!("{prefix}-{hash:08x}")
}

pub fn build(backup: &DistributedKVBackup, resolved: &Resolved) -> Job {
    let mut labels = agent_labels(&resolved.cluster);
    labels.insert("dkv.io/backup".to_owned(), job_name(backup));
    let run = AgentRun {
        image: &resolved.image,
        cluster: &resolved.cluster,
        destination: &resolved.destination,
        credentials_secret: resolved.credentials_secret.as_deref(),
        client_tls: resolved.client_tls.clone(),
        auth: resolved.auth,
        compress: resolved.compress,
        encryption: resolved.encryption.as_ref(),
    };
    let container = agent_container(&run);
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(backup)),
            namespace: backup.namespace(),
            labels: Some(labels.clone()),
            owner_references: backup.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        // The agent never overwrites an object and names each by its start
        // time, so a retry is a new, complete attempt.
        spec: Some(agent_job_spec(labels, container, agent_volumes(&run), 1)),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(name: &str) -> DistributedKVBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
            "metadata": {"name": name, "namespace": "shop", "uid": "u-1"},
            "spec": {"cluster": "orders"}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A backup of `orders` to S3, with credentials from `secret`.
    fn resolved(secret: Option<&str>) -> Resolved {
        Resolved {
            cluster: "orders".into(),
            destination: "s3://bucket/prefix".into(),
            credentials_secret: secret.map(str::to_owned),
            image: "ghcr.io/dkv-io/dkv:1".into(),
            client_tls: None,
            auth: false,
            compress: true,
            encryption: None,
        }
    }

    #[test]
    fn the_job_runs_the_agent_once_with_credentials_from_the_secret() {
        let resolved = resolved(Some("s3-creds"));
        let job = build(&backup("nightly"), &resolved);
        assert_eq!(job.metadata.name.as_deref(), Some("nightly"));
        let owner = &job
            .metadata
            .owner_references
            .as_ref()
            .unwrap_or_else(|| panic!("owner"))[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("DistributedKVBackup", Some(true))
        );
        let spec = job.spec.unwrap_or_default();
        let pod = spec.template.spec.unwrap_or_default();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let c = &pod.containers[0];
        assert_eq!(
            c.args.clone().unwrap_or_default(),
            vec![
                "backup",
                "--cluster=orders",
                "--destination=s3://bucket/prefix"
            ]
        );
        let secret = c.env_from.as_ref().and_then(|e| e[0].secret_ref.as_ref());
        assert_eq!(secret.map(|s| s.name.as_str()), Some("s3-creds"));
    }

    #[test]
    fn the_members_selector_never_matches_a_backup_pod() {
        let resolved = resolved(None);
        let job = build(&backup("nightly"), &resolved);
        let pod_labels = job
            .spec
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.labels)
            .unwrap_or_default();
        let selector = dkv_api::labels::selector_labels("orders");
        assert!(
            !selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
            "{pod_labels:?} matches {selector:?}"
        );
        // What the operator finds backup Jobs and their cluster by.
        assert_eq!(pod_labels["app.kubernetes.io/component"], "backup");
        assert_eq!(pod_labels["app.kubernetes.io/managed-by"], "dkv-operator");
        assert_eq!(pod_labels[dkv_api::labels::CLUSTER_KEY], "orders");
    }

    #[test]
    fn long_backup_names_give_valid_job_names() {
        let long = "b".repeat(100);
        let name = job_name(&backup(&long));
        assert!(name.len() <= 63, "{name}");
        assert_ne!(
            job_name(&backup(&long)),
            job_name(&backup(&format!("{long}x")))
        );
    }
}
