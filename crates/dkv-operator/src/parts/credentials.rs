//! The root credentials of a cluster with authentication on
//! ([`crate::cluster::security::auth`] creates them and turns authentication
//! on), as the pods that are not members use them: the backup agents'
//! environment, and the copies kept with a backup (owned by its
//! `DistributedKVBackup`) and with a continuous backup (owned by nothing: it
//! outlives the cluster), without which a restore of their data could not
//! authenticate.

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, Secret, SecretKeySelector};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, Resource, ResourceExt};

use super::naming;

pub const USERNAME_KEY: &str = "username";
pub const PASSWORD_KEY: &str = "password";
/// `"true"` on the Secret once authentication is on.
pub const ENABLED_ANNOTATION: &str = "dkv.io/auth-enabled";
/// Environment of backup agents: the root credentials, from the Secret.
pub const USERNAME_ENV: &str = "DKV_ETCD_USERNAME";
pub const PASSWORD_ENV: &str = "DKV_ETCD_PASSWORD";

/// A copy of the root credentials could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("failed to read Secret {name}: {source}")]
    Read {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to create Secret {name}: {source}")]
    Create {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The agents' environment: the root credentials, by reference.
pub fn credentials_env(cluster: &str) -> Vec<EnvVar> {
    [(USERNAME_ENV, USERNAME_KEY), (PASSWORD_ENV, PASSWORD_KEY)]
        .into_iter()
        .map(|(env, key)| EnvVar {
            name: env.to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: naming::auth_secret(cluster),
                    key: key.to_owned(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        })
        .collect()
}

/// Keeps a copy of `cluster`'s root credentials with the backup `backup`
/// (owned by it) when authentication is on, so that a restore of its
/// snapshot can authenticate. Idempotent.
pub async fn keep_for_backup(
    client: &Client,
    namespace: &str,
    cluster: &str,
    backup: &dkv_api::DistributedKVBackup,
) -> Result<(), CopyError> {
    let owner = backup.controller_owner_ref(&()).map(|mut owner| {
        // Owned, not controlled: the record's controller is the cluster's.
        owner.controller = None;
        owner
    });
    let copy_name = naming::backup_auth_secret(&backup.name_any());
    keep_copy(client, namespace, cluster, copy_name, owner).await
}

/// Keeps a copy of `cluster`'s root credentials for restores from its
/// continuous backup, owned by nothing: the backup outlives the cluster,
/// and so must what opens its data. Idempotent.
pub async fn keep_for_continuous(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<(), CopyError> {
    let copy_name = naming::continuous_auth_secret(cluster);
    keep_copy(client, namespace, cluster, copy_name, None).await
}

/// Copies `cluster`'s root Secret to `copy_name` once authentication is on.
async fn keep_copy(
    client: &Client,
    namespace: &str,
    cluster: &str,
    copy_name: String,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
) -> Result<(), CopyError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let read = |name: String| async {
        secrets
            .get_opt(&name)
            .await
            .map_err(|source| CopyError::Read { name, source })
    };
    if read(copy_name.clone()).await?.is_some() {
        return Ok(());
    }
    let Some(root) = read(naming::auth_secret(cluster)).await? else {
        return Ok(());
    };
    if root
        .annotations()
        .get(ENABLED_ANNOTATION)
        .map(String::as_str)
        != Some("true")
    {
        // The snapshot has no users yet: a restore starts fresh.
        return Ok(());
    }
    let mut labels = dkv_api::labels::cluster_labels(cluster);
    labels.insert(dkv_api::labels::COMPONENT_KEY.to_owned(), "auth".to_owned());
    let copy = Secret {
        metadata: ObjectMeta {
            name: Some(copy_name.clone()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            owner_references: owner.map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        type_: root.type_.clone(),
        data: root.data.clone(),
        ..Secret::default()
    };
    match secrets.create(&PostParams::default(), &copy).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(CopyError::Create {
            name: copy_name,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_read_the_credentials_from_the_secret_only() {
        let env = credentials_env("orders");
        assert_eq!(env.len(), 2);
        for var in &env {
            assert!(var.value.is_none(), "{var:?}");
            let key_ref = var
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
                .map(|r| r.name.as_str());
            assert_eq!(key_ref, Some("orders-etcd-root"));
        }
    }
}
