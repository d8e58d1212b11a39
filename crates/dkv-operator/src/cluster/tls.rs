//! TLS of a cluster's etcd (`spec.tls`): which transports use it, the
//! certificates the operator issues from the cluster's own CA, and where
//! pods find them.
//!
//! With `mode: Auto` the operator keeps three Secrets, owned by the
//! `DistributedKV` (deleted with it):
//! - `<name>-tls-ca`: the cluster's CA (`ca.crt`, `ca.key`); only the
//!   operator reads it;
//! - `<name>-tls-member`: one certificate every member presents, as server
//!   and as client of its peers, valid for every member's stable name
//!   (`*.<name>-peer.<ns>.svc`) and the client Service's names — no pod IPs,
//!   which change;
//! - `<name>-tls-client`: a client certificate for the operator, the backup
//!   agents and applications (the documented Secret to mount).
//!
//! The CA is created only together with the cluster (no StatefulSet yet): a
//! new CA for running members would make them refuse each other, so a CA
//! Secret that disappears later is reported, never silently replaced. Leaf
//! certificates are reissued from the same CA when their Secret is missing.

use std::collections::BTreeMap;
use std::time::Duration;

use dkv_api::distributedkv::v1beta1::{TlsMode, TlsSpec};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::core::v1::{KeyToPath, SecretVolumeSource, Volume, VolumeMount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use super::error::{Error, Result};
use super::naming;
use super::validate::ValidatedCluster;
use crate::pki::{Authority, Issued, Leaf, Usage};
use dkv_etcd::ClientTls;

/// Where members find their certificate (`tls.crt`, `tls.key`, `ca.crt`).
pub const MEMBER_TLS_DIR: &str = "/etc/dkv/tls/member";
/// Where backup agents find the client certificate.
pub const CLIENT_TLS_DIR: &str = "/etc/dkv/tls/client";
pub const CA_CERT: &str = "ca.crt";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
const CA_KEY: &str = "ca.key";
/// When a certificate in the Secret expires (RFC 3339), read without
/// parsing X.509.
pub const NOT_AFTER_ANNOTATION: &str = "dkv.io/not-after";
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// On member pods (from their template): the serial of the member
/// certificate they were started with.
pub const SERIAL_ANNOTATION: &str = "dkv.io/tls-member-serial";
/// Common name of the client certificate (what etcd's auth would map to a
/// user, were it on).
pub const CLIENT_COMMON_NAME: &str = "dkv-client";
const MEMBER_TLS_VOLUME: &str = "member-tls";
const CLIENT_TLS_VOLUME: &str = "client-tls";

/// Which of a cluster's transports use TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TlsSettings {
    pub peer: bool,
    pub client: bool,
}

impl TlsSettings {
    /// What `spec.tls` asks for; without it, plaintext.
    pub fn from_spec(spec: Option<&TlsSpec>) -> Self {
        spec.map_or_else(Self::default, |tls| Self {
            peer: tls.peer.mode == TlsMode::Auto,
            client: tls.client.mode == TlsMode::Auto,
        })
    }

    pub fn any(self) -> bool {
        self.peer || self.client
    }

    pub fn peer_scheme(self) -> &'static str {
        scheme(self.peer)
    }

    pub fn client_scheme(self) -> &'static str {
        scheme(self.client)
    }
}

fn scheme(tls: bool) -> &'static str {
    if tls { "https" } else { "http" }
}

/// The names in the member certificate.
pub fn member_hosts(cluster: &str, namespace: &str) -> Vec<String> {
    let peer = naming::peer_service(cluster);
    let client = naming::client_service(cluster);
    vec![
        format!("*.{peer}.{namespace}.svc"),
        format!("*.{peer}.{namespace}.svc.cluster.local"),
        format!("{client}.{namespace}.svc"),
        format!("{client}.{namespace}.svc.cluster.local"),
        format!("{client}.{namespace}"),
        client,
        "localhost".to_owned(),
    ]
}

/// The name clients verify members by: the client Service's.
pub fn server_name(cluster: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", naming::client_service(cluster))
}

/// How long issued certificates are valid; each is reissued once a third
/// of its validity is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertificateLifetime {
    pub leaf: Duration,
}

impl Default for CertificateLifetime {
    fn default() -> Self {
        Self {
            leaf: Duration::from_secs(365 * 24 * 3600),
        }
    }
}

impl CertificateLifetime {
    fn renew_before(&self) -> i64 {
        i64::try_from(self.leaf.as_secs() / 3).unwrap_or(i64::MAX)
    }

    fn due(&self, not_after: jiff::Timestamp, now: jiff::Timestamp) -> bool {
        not_after.as_second().saturating_sub(now.as_second()) <= self.renew_before()
    }

    /// When a certificate valid until `not_after` is renewed.
    fn renew_at(&self, not_after: jiff::Timestamp) -> jiff::Timestamp {
        jiff::Timestamp::from_second(not_after.as_second().saturating_sub(self.renew_before()))
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }
}

/// What a TLS cluster's reconcile needs: the operator's client identity and
/// the serial of the current member certificate (its expiry, carried by the
/// pod template).
#[derive(Debug, Clone)]
pub struct TlsState {
    pub client: ClientTls,
    pub member_serial: String,
    /// When the first of the certificates comes due for renewal.
    pub renew_at: jiff::Timestamp,
}

/// Makes sure the cluster's CA and certificates exist and are not due for
/// renewal, issuing what is missing or due (the CA only when
/// `may_create_ca`).
pub async fn ensure(
    client: &Client,
    cluster: &ValidatedCluster,
    lifetime: CertificateLifetime,
    may_create_ca: bool,
) -> Result<TlsState> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace);
    let ca_name = naming::tls_ca_secret(&cluster.name);
    let ca = match read(&secrets, &ca_name).await? {
        Some(secret) => authority_from(&secret, cluster)?,
        None if may_create_ca => {
            let ca = Authority::generate(&ca_common_name(cluster), CA_VALIDITY)?;
            let data = [(CA_CERT, &ca.cert_pem), (CA_KEY, &ca.key_pem)];
            create(&secrets, cluster, &ca_name, "Opaque", &data, ca.not_after).await?;
            ca
        }
        None => return Err(Error::TlsCaMissing { secret: ca_name }),
    };
    let hosts = member_hosts(&cluster.name, &cluster.namespace);
    let member = current_leaf(
        &secrets,
        cluster,
        &ca,
        &Leaf {
            common_name: &cluster.name,
            hosts: &hosts,
            usage: Usage::ServerAndClient,
            validity: lifetime.leaf,
        },
        &naming::tls_member_secret(&cluster.name),
        lifetime,
    )
    .await?;
    let client_name = naming::tls_client_secret(&cluster.name);
    let client_secret = current_leaf(
        &secrets,
        cluster,
        &ca,
        &Leaf {
            common_name: CLIENT_COMMON_NAME,
            hosts: &[],
            usage: Usage::Client,
            validity: lifetime.leaf,
        },
        &client_name,
        lifetime,
    )
    .await?;
    Ok(TlsState {
        client: ClientTls {
            ca_pem: ca.cert_pem,
            cert_pem: text(&client_secret, TLS_CERT, &client_name)?,
            key_pem: text(&client_secret, TLS_KEY, &client_name)?,
            server_name: server_name(&cluster.name, &cluster.namespace),
        },
        member_serial: not_after(&member).unwrap_or_default(),
        renew_at: [&member, &client_secret]
            .into_iter()
            .map(|s| {
                not_after(s)
                    .and_then(|t| t.parse().ok())
                    .map_or(jiff::Timestamp::UNIX_EPOCH, |t| lifetime.renew_at(t))
            })
            .min()
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
    })
}

fn not_after(secret: &Secret) -> Option<String> {
    secret.annotations().get(NOT_AFTER_ANNOTATION).cloned()
}

/// The Secret `name` holding `leaf`, issued now if it is missing or due for
/// renewal (replaced only if nobody changed it since it was read).
async fn current_leaf(
    secrets: &Api<Secret>,
    cluster: &ValidatedCluster,
    ca: &Authority,
    leaf: &Leaf<'_>,
    name: &str,
    lifetime: CertificateLifetime,
) -> Result<Secret> {
    let existing = read(secrets, name).await?;
    let due = existing.as_ref().map(|secret| {
        not_after(secret)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .is_none_or(|t| lifetime.due(t, jiff::Timestamp::now()))
    });
    match (existing, due) {
        (Some(secret), Some(false)) => Ok(secret),
        (existing, _) => {
            let issued = ca.issue(leaf)?;
            let mut secret = leaf_secret(cluster, name, ca, &issued);
            match existing {
                None => create_secret(secrets, name, &secret).await,
                Some(old) => {
                    tracing::info!(secret = %name, not_after = %issued.not_after, "renewed certificate");
                    secret.metadata.resource_version = old.metadata.resource_version;
                    secrets
                        .replace(name, &PostParams::default(), &secret)
                        .await
                        .map_err(|source| Error::Apply {
                            kind: "Secret".to_owned(),
                            name: name.to_owned(),
                            source,
                        })
                }
            }
        }
    }
}

fn ca_common_name(cluster: &ValidatedCluster) -> String {
    format!("dkv {}/{} CA", cluster.namespace, cluster.name)
}

async fn read(secrets: &Api<Secret>, name: &str) -> Result<Option<Secret>> {
    secrets.get_opt(name).await.map_err(|source| Error::Read {
        kind: "Secret",
        name: name.to_owned(),
        source,
    })
}

fn text(secret: &Secret, key: &'static str, name: &str) -> Result<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|bytes| String::from_utf8(bytes.0.clone()).ok())
        .ok_or_else(|| Error::SecretInvalid {
            secret: name.to_owned(),
            key,
            fix: "delete it and dkv issues a new one from the cluster's CA (a CA Secret must be restored, not deleted)",
        })
}

fn authority_from(secret: &Secret, cluster: &ValidatedCluster) -> Result<Authority> {
    let name = secret.name_any();
    Ok(Authority {
        common_name: ca_common_name(cluster),
        cert_pem: text(secret, CA_CERT, &name)?,
        key_pem: text(secret, CA_KEY, &name)?,
        not_after: secret
            .annotations()
            .get(NOT_AFTER_ANNOTATION)
            .and_then(|t| t.parse().ok())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
    })
}

fn leaf_secret(cluster: &ValidatedCluster, name: &str, ca: &Authority, issued: &Issued) -> Secret {
    let data = [
        (TLS_CERT, &issued.cert_pem),
        (TLS_KEY, &issued.key_pem),
        (CA_CERT, &ca.cert_pem),
    ];
    secret(cluster, name, "kubernetes.io/tls", &data, issued.not_after)
}

async fn create(
    secrets: &Api<Secret>,
    cluster: &ValidatedCluster,
    name: &str,
    type_: &str,
    data: &[(&str, &String)],
    not_after: jiff::Timestamp,
) -> Result<Secret> {
    create_secret(
        secrets,
        name,
        &secret(cluster, name, type_, data, not_after),
    )
    .await
}

fn secret(
    cluster: &ValidatedCluster,
    name: &str,
    type_: &str,
    data: &[(&str, &String)],
    not_after: jiff::Timestamp,
) -> Secret {
    let mut labels = dkv_api::labels::cluster_labels(&cluster.name);
    labels.insert(dkv_api::labels::COMPONENT_KEY.to_owned(), "tls".to_owned());
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(cluster.namespace.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                NOT_AFTER_ANNOTATION.to_owned(),
                not_after.to_string(),
            )])),
            owner_references: Some(vec![cluster.owner.clone()]),
            ..ObjectMeta::default()
        },
        type_: Some(type_.to_owned()),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// A conflict (the Secret appeared since it was read) is transient: the
/// next pass reads it.
async fn create_secret(secrets: &Api<Secret>, name: &str, secret: &Secret) -> Result<Secret> {
    secrets
        .create(&PostParams::default(), secret)
        .await
        .map_err(|source| Error::Apply {
            kind: "Secret".to_owned(),
            name: name.to_owned(),
            source,
        })
}

fn secret_volume(volume: &str, secret: String) -> Volume {
    Volume {
        name: volume.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            // Readable by the owner and the pod's fsGroup (the user etcd and
            // the agents run as), nobody else.
            default_mode: Some(0o440),
            items: Some(
                [TLS_CERT, TLS_KEY, CA_CERT]
                    .into_iter()
                    .map(|key| KeyToPath {
                        key: key.to_owned(),
                        path: key.to_owned(),
                        ..KeyToPath::default()
                    })
                    .collect(),
            ),
            optional: Some(false),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn read_only_mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The member certificate volume of the member pods.
pub fn member_volume(cluster: &str) -> Volume {
    secret_volume(MEMBER_TLS_VOLUME, naming::tls_member_secret(cluster))
}

pub fn member_mount() -> VolumeMount {
    read_only_mount(MEMBER_TLS_VOLUME, MEMBER_TLS_DIR)
}

/// The client certificate volume of backup agent pods.
pub fn client_volume(cluster: &str) -> Volume {
    secret_volume(CLIENT_TLS_VOLUME, naming::tls_client_secret(cluster))
}

pub fn client_mount() -> VolumeMount {
    read_only_mount(CLIENT_TLS_VOLUME, CLIENT_TLS_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_api::distributedkv::v1beta1::TlsTransport;

    #[test]
    fn settings_follow_the_spec_and_default_to_plaintext_without_one() {
        assert_eq!(TlsSettings::from_spec(None), TlsSettings::default());
        let both = TlsSettings::from_spec(Some(&TlsSpec::default()));
        assert_eq!(
            (both.peer_scheme(), both.client_scheme()),
            ("https", "https")
        );
        let peer_only = TlsSettings::from_spec(Some(&TlsSpec {
            peer: TlsTransport::default(),
            client: TlsTransport {
                mode: TlsMode::Disabled,
            },
        }));
        assert!(peer_only.any());
        assert_eq!(
            (peer_only.peer_scheme(), peer_only.client_scheme()),
            ("https", "http")
        );
    }

    #[test]
    fn the_member_certificate_names_every_member_and_the_client_service() {
        let hosts = member_hosts("orders", "shop");
        for name in [
            "*.orders-peer.shop.svc",
            "*.orders-peer.shop.svc.cluster.local",
            "orders-client.shop.svc",
        ] {
            assert!(hosts.contains(&name.to_owned()), "{hosts:?}");
        }
        assert_eq!(server_name("orders", "shop"), "orders-client.shop.svc");
    }
}
