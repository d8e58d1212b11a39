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

use std::collections::BTreeMap;

use dkv_etcd::UserCredentials;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, Secret, SecretKeySelector};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use super::error::{Error, Result};
use super::naming;
use super::validate::ValidatedCluster;

pub const USERNAME_KEY: &str = "username";
pub const PASSWORD_KEY: &str = "password";
/// `"true"` on the Secret once authentication is on.
pub const ENABLED_ANNOTATION: &str = "dkv.io/auth-enabled";
/// The administrator etcd requires before authentication can be enabled.
pub const ROOT_USER: &str = "root";
/// Environment of backup agents: the root credentials, from the Secret.
pub const USERNAME_ENV: &str = "DKV_ETCD_USERNAME";
pub const PASSWORD_ENV: &str = "DKV_ETCD_PASSWORD";

/// The root credentials and whether authentication is on yet.
#[derive(Debug, Clone)]
pub struct AuthState {
    pub root: UserCredentials,
    pub enabled: bool,
}

/// A new random password: 192 bits, hex.
fn generate_password() -> String {
    rand::random::<[u8; 24]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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
            let mut labels = dkv_api::labels::cluster_labels(&cluster.name);
            labels.insert(dkv_api::labels::COMPONENT_KEY.to_owned(), "auth".to_owned());
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(cluster.namespace.clone()),
                    labels: Some(labels),
                    owner_references: Some(vec![cluster.owner.clone()]),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/basic-auth".to_owned()),
                data: Some(BTreeMap::from([
                    (
                        USERNAME_KEY.to_owned(),
                        ByteString(ROOT_USER.as_bytes().to_vec()),
                    ),
                    (
                        PASSWORD_KEY.to_owned(),
                        ByteString(generate_password().into_bytes()),
                    ),
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
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Error::SecretInvalid {
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

/// Records on the Secret that authentication is on.
pub async fn mark_enabled(client: &Client, cluster: &ValidatedCluster) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace);
    let name = naming::auth_secret(&cluster.name);
    let patch = serde_json::json!({"metadata": {"annotations": {ENABLED_ANNOTATION: "true"}}});
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
