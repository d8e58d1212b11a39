//! etcd authentication (`spec.auth.enabled`): the root credentials in the
//! Secret `<name>-etcd-root`, and whether dkv has turned authentication on.
//!
//! The Secret (`username`, `password`; owned by the cluster) is created as
//! soon as the spec asks for authentication. Authentication itself is
//! enabled once the cluster has formed and nothing else is under way (the
//! root user is created first, so there is never a moment without an
//! administrator); the Secret's annotation [`ENABLED_ANNOTATION`] then
//! records it, and from the next pass on the operator authenticates. The
//! password never appears in status, Events, logs or object specs: pods
//! read it from the Secret.
//!
//! A snapshot keeps etcd's users and whether authentication is on, so a
//! cluster restored from one answers only to the root password of the
//! cluster it was taken of. Each backup of a cluster with authentication on
//! therefore keeps a copy of those credentials, `<backup>-etcd-root`, owned
//! by its `DistributedKVBackup`
//! ([`crate::parts::credentials::keep_for_backup`]); a cluster restored
//! from that backup starts with them, authentication already on.
//!
//! Continuous backup outlives its cluster (a point-in-time restore works
//! after the source is deleted), so its copy does too: while a cluster with
//! authentication on records continuous backup, dkv keeps
//! `<cluster>-continuous-etcd-root`, owned by nothing
//! ([`crate::parts::credentials::keep_for_continuous`]). A cluster restored from that cluster's
//! continuous backup, in the same namespace, starts with those credentials;
//! whether the restored data has authentication on depends on the point
//! (a chain's base may predate it), so the operator asks etcd before it
//! turns authentication on ([`dkv_etcd::EtcdAdmin::enable_auth`] accepts a
//! cluster where the root password already opens it).

use std::collections::BTreeMap;

use dkv_etcd::UserCredentials;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use crate::cluster::error::{Error, Result};
use crate::cluster::validate::ValidatedCluster;
use crate::parts::credentials::{ENABLED_ANNOTATION, PASSWORD_KEY, USERNAME_KEY};
use crate::parts::naming;

/// `"true"` on the Secret from just before dkv asks etcd to turn
/// authentication on: from then on etcd may have it on, whether or not
/// [`ENABLED_ANNOTATION`] was written after.
pub const ENABLING_ANNOTATION: &str = "dkv.io/auth-enabling";
/// The administrator etcd requires before authentication can be enabled.
pub const ROOT_USER: &str = "root";

/// The root credentials and whether authentication is on yet.
#[derive(Debug, Clone)]
pub struct AuthState {
    pub root: UserCredentials,
    pub enabled: bool,
}

/// A new random password: 192 bits, hex.
fn generate_password() -> String {
    hex::encode(rand::random::<[u8; 24]>())
}

/// The root credentials, creating their Secret if it is missing.
pub async fn ensure(client: &Client, cluster: &ValidatedCluster) -> Result<AuthState> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace);
    let name = naming::auth_secret(&cluster.name);
    let existing = secrets.get_opt(&name).await.map_err(|source| Error::Read {
        kind: "Secret",
        name: name.clone(),
        source,
    })?;
    let secret = match existing {
        Some(secret) => secret,
        None => {
            let restored = restored_credentials(client, cluster).await?;
            let (root_user, password) = match &restored {
                Some(copy) => (
                    value_of(copy, USERNAME_KEY).unwrap_or_else(|| ROOT_USER.to_owned()),
                    value_of(copy, PASSWORD_KEY).ok_or_else(|| Error::SecretInvalid {
                        secret: copy.name_any(),
                        key: PASSWORD_KEY,
                        fix: "it is the copy of the backed-up cluster's root credentials the restored data needs; restore it from that cluster's <name>-etcd-root Secret",
                    })?,
                ),
                None => (ROOT_USER.to_owned(), generate_password()),
            };
            let mut labels = dkv_api::labels::cluster_labels(&cluster.name);
            labels.insert(dkv_api::labels::COMPONENT_KEY.to_owned(), "auth".to_owned());
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(cluster.namespace.clone()),
                    labels: Some(labels),
                    // A snapshot's data has authentication on already; a
                    // point of continuous backup may predate it, and the
                    // operator then turns it on with these credentials.
                    annotations: restored.as_ref().map(|copy| {
                        let mut annotations = BTreeMap::from([(
                            RESTORED_FROM_ANNOTATION.to_owned(),
                            copy.name_any(),
                        )]);
                        // A backup's data and a running cluster have it on.
                        if cluster.join.is_some()
                            || matches!(
                                cluster.restore.as_ref().map(|r| &r.source),
                                Some(crate::cluster::validate::RestoreRef::Backup(_))
                            )
                        {
                            annotations.insert(ENABLED_ANNOTATION.to_owned(), "true".to_owned());
                        }
                        annotations
                    }),
                    owner_references: Some(vec![cluster.owner.clone()]),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/basic-auth".to_owned()),
                data: Some(BTreeMap::from([
                    (USERNAME_KEY.to_owned(), ByteString(root_user.into_bytes())),
                    (PASSWORD_KEY.to_owned(), ByteString(password.into_bytes())),
                ])),
                ..Secret::default()
            };
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .map_err(|source| Error::Apply {
                    kind: "Secret".to_owned(),
                    name: name.clone(),
                    source,
                })?
        }
    };
    let value = |key: &'static str| {
        value_of(&secret, key).ok_or_else(|| Error::SecretInvalid {
                secret: name.clone(),
                key,
            fix: "restore the Secret as dkv created it: once authentication is on, only the root password in it opens the cluster",
        })
    };
    Ok(AuthState {
        root: UserCredentials {
            name: value(USERNAME_KEY)?,
            password: value(PASSWORD_KEY)?,
        },
        enabled: secret
            .annotations()
            .get(ENABLED_ANNOTATION)
            .is_some_and(|v| v == "true"),
    })
}

/// Why `spec.auth.enabled: false` is refused once dkv turned it on.
pub const CANNOT_TURN_OFF: &str = "etcd authentication is on in this cluster (dkv turned it on) and dkv does not turn it off; set it back to true";

/// Whether etcd may have authentication on for cluster `name`: dkv turned
/// it on, or began to (its root Secret says so). A spec that asked for
/// authentication and never got it (the cluster never formed, a rollout in
/// the way) has not.
pub async fn enabled_in_etcd(client: &Client, namespace: &str, name: &str) -> kube::Result<bool> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets.get_opt(&naming::auth_secret(name)).await?;
    Ok(secret.is_some_and(|s| {
        [ENABLED_ANNOTATION, ENABLING_ANNOTATION]
            .iter()
            .any(|key| s.annotations().get(*key).is_some_and(|v| v == "true"))
    }))
}

/// On a restored cluster's root Secret: the backup copy it came from.
pub const RESTORED_FROM_ANNOTATION: &str = "dkv.io/auth-restored-from";

fn value_of(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .filter(|v| !v.is_empty())
}

/// The credentials a new cluster's data already answers to: a backup's
/// copy when it was taken with authentication on, the source's continuous
/// copy when its continuous backup recorded with it on, or the running
/// cluster's root credentials when it joins one with authentication on
/// (`spec.bootstrap.join.credentialsSecretRef`).
pub async fn restored_credentials(
    client: &Client,
    cluster: &ValidatedCluster,
) -> Result<Option<Secret>> {
    let joined = cluster
        .join
        .as_ref()
        .and_then(|j| j.credentials_secret.clone());
    let name = match cluster.restore.as_ref().map(|r| &r.source) {
        _ if joined.is_some() => joined.unwrap_or_default(),
        Some(crate::cluster::validate::RestoreRef::Backup(backup)) => {
            naming::backup_auth_secret(backup)
        }
        Some(crate::cluster::validate::RestoreRef::Continuous(source)) => {
            naming::continuous_auth_secret(&source.cluster)
        }
        _ => return Ok(None),
    };
    Api::<Secret>::namespaced(client.clone(), &cluster.namespace)
        .get_opt(&name)
        .await
        .map_err(|source| Error::Read {
            kind: "Secret",
            name,
            source,
        })
}

/// Records on the Secret that authentication is on.
pub async fn mark_enabled(client: &Client, cluster: &ValidatedCluster) -> Result<()> {
    mark(client, cluster, ENABLED_ANNOTATION).await
}

/// Records on the root Secret that dkv is about to ask etcd to turn
/// authentication on (see [`ENABLING_ANNOTATION`]).
pub async fn mark_enabling(client: &Client, cluster: &ValidatedCluster) -> Result<()> {
    mark(client, cluster, ENABLING_ANNOTATION).await
}

async fn mark(client: &Client, cluster: &ValidatedCluster, annotation: &str) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace);
    let name = naming::auth_secret(&cluster.name);
    let patch = serde_json::json!({"metadata": {"annotations": {annotation: "true"}}});
    secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|source| Error::Apply {
            kind: "Secret".to_owned(),
            name,
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_long_random_and_printable() {
        let a = generate_password();
        assert_eq!(a.len(), 48);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, generate_password());
    }
}
