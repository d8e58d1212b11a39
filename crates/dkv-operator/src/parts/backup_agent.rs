//! The backup agent's pod (`dkv backup`, once): what the cluster's CronJob
//! and an on-demand backup's Job both run.

use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec, PodTemplateSpec,
    SecretEnvSource, Volume,
};
use kube::api::ObjectMeta;

use super::{backup_keys, credentials, hardening, node_directory, tls};
use dkv_api::distributedkv::v1beta1::KeySecretReference;

/// What one run of the backup agent needs.
pub struct AgentRun<'a> {
    pub image: &'a str,
    pub cluster: &'a str,
    pub destination: &'a str,
    pub credentials_secret: Option<&'a str>,
    /// The cluster has client TLS: the agent mounts the client certificate
    /// in this Secret.
    pub client_tls: Option<String>,
    /// The cluster has (or will have) authentication on: the agent gets the
    /// root credentials from their Secret.
    pub auth: bool,
    /// `spec.backup.compression` is not `None`.
    pub compress: bool,
    /// `spec.backup.encryption.keySecret`: the agent gets the key as a file.
    pub encryption: Option<&'a KeySecretReference>,
}

/// `app.kubernetes.io/name` of backup agent pods.
pub const AGENT_APP_NAME: &str = "distributedkv-backup";

/// The labels of a backup agent's Job and pod. Not the members' labels: the
/// members' selector (`app.kubernetes.io/name=distributedkv` with the
/// instance) is the client and peer Services', the PodDisruptionBudget's
/// and the StatefulSet's, and an agent pod it matched would be a client
/// endpoint that refuses etcd traffic, count as a healthy member towards
/// the PDB's quorum, and repel members through their anti-affinity.
pub fn agent_labels(cluster: &str) -> std::collections::BTreeMap<String, String> {
    let mut labels = dkv_api::labels::cluster_labels(cluster);
    labels.insert(
        dkv_api::labels::NAME_KEY.to_owned(),
        AGENT_APP_NAME.to_owned(),
    );
    labels.insert(
        dkv_api::labels::COMPONENT_KEY.to_owned(),
        "backup".to_owned(),
    );
    labels
}

/// The container that runs `dkv backup` once (in a CronJob's or an
/// on-demand backup's Job).
pub fn agent_container(run: &AgentRun<'_>) -> Container {
    let mut args = vec![
        "backup".to_owned(),
        format!("--cluster={}", run.cluster),
        format!("--destination={}", run.destination),
    ];
    if run.client_tls.is_some() {
        args.push(format!("--client-tls-dir={}", tls::CLIENT_TLS_DIR));
    }
    if !run.compress {
        args.push("--compression=none".to_owned());
    }
    if run.encryption.is_some() {
        args.push(format!(
            "--encryption-key-file={}",
            backup_keys::BACKUP_KEY_FILE
        ));
    }
    Container {
        name: "backup".to_owned(),
        image: Some(run.image.to_owned()),
        args: Some(args),
        env: Some(
            std::iter::once(EnvVar {
                name: "POD_NAMESPACE".to_owned(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.namespace".to_owned(),
                        ..ObjectFieldSelector::default()
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            })
            .chain(
                run.auth
                    .then(|| credentials::credentials_env(run.cluster))
                    .into_iter()
                    .flatten(),
            )
            .collect(),
        ),
        // Credentials reach the agent only as environment from the Secret;
        // they are never part of any object the operator writes.
        env_from: run.credentials_secret.map(|secret| {
            vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: secret.to_owned(),
                    optional: Some(false),
                }),
                ..EnvFromSource::default()
            }]
        }),
        volume_mounts: Some(
            run.client_tls
                .as_ref()
                .map(|_| tls::client_mount())
                .into_iter()
                .chain(run.encryption.map(|_| backup_keys::backup_key_mount()))
                .chain(
                    node_directory::of_destination(run.destination)
                        .map(|dir| node_directory::mount(&dir, true)),
                )
                .collect(),
        )
        .filter(|m: &Vec<_>| !m.is_empty()),
        ..Container::default()
    }
}

/// The pod volumes `run` needs.
pub fn agent_volumes(run: &AgentRun<'_>) -> Option<Vec<Volume>> {
    let volumes: Vec<Volume> = run
        .client_tls
        .as_deref()
        .map(tls::client_volume)
        .into_iter()
        .chain(run.encryption.map(backup_keys::backup_key_volume))
        .chain(
            node_directory::of_destination(run.destination)
                .map(|dir| node_directory::volume(&dir, true)),
        )
        .collect();
    (!volumes.is_empty()).then_some(volumes)
}

/// The Job that runs the agent once: never restarted in place (a retry is a
/// new pod, and the agent names each artifact by its start time), at most an
/// hour.
pub fn agent_job_spec(
    labels: std::collections::BTreeMap<String, String>,
    container: Container,
    volumes: Option<Vec<Volume>>,
    backoff_limit: i32,
) -> JobSpec {
    JobSpec {
        backoff_limit: Some(backoff_limit),
        active_deadline_seconds: Some(3600),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                restart_policy: Some("Never".to_owned()),
                enable_service_links: Some(false),
                containers: hardening::harden(vec![container]),
                volumes,
                security_context: Some(hardening::pod()),
                ..PodSpec::default()
            }),
        },
        ..JobSpec::default()
    }
}
