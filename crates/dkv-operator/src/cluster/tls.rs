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

use super::ca_rotation;
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
/// On the CA Secret: the CA's common name (rotations number them).
const CA_NAME_ANNOTATION: &str = "dkv.io/ca-name";
/// On the CA Secret during a rotation: the phase (see [`ca_rotation`]).
const PHASE_ANNOTATION: &str = "dkv.io/ca-rotation";
/// On the CA Secret: the rotation request last completed / under way.
const ROTATED_FOR_ANNOTATION: &str = "dkv.io/ca-rotated-for";
const PENDING_FOR_ANNOTATION: &str = "dkv.io/ca-rotation-for";
const NEXT_CA_NAME_ANNOTATION: &str = "dkv.io/next-ca-name";
const NEXT_NOT_AFTER_ANNOTATION: &str = "dkv.io/next-ca-not-after";
/// On leaf Secrets: the common name of the CA that signed the certificate.
const ISSUER_ANNOTATION: &str = "dkv.io/issuer";
const NEXT_CA_CERT: &str = "next-ca.crt";
const NEXT_CA_KEY: &str = "next-ca.key";
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
/// the serial of the current member certificate (carried by the pod
/// template; a new one restarts the members one at a time).
#[derive(Debug, Clone)]
pub struct TlsState {
    pub client: ClientTls,
    pub member_serial: String,
    /// When the first of the certificates comes due for renewal.
    pub renew_at: jiff::Timestamp,
    /// A CA rotation is under way (it advances as members roll).
    pub rotating: Option<ca_rotation::Phase>,
}

/// What the reconcile observed that certificate management needs.
#[derive(Debug, Clone, Default)]
pub struct Observed<'a> {
    /// `dkv.io/rotate-ca` on the cluster.
    pub rotation_requested: Option<&'a str>,
    /// The serial each member pod was started with.
    pub pod_serials: Vec<Option<String>>,
    /// No operation is pinned.
    pub idle: bool,
}

/// A short fingerprint of a member Secret's certificate and trusted CAs:
/// the pods' serial.
fn serial_of(secret: &Secret) -> String {
    let data = secret.data.as_ref();
    let bytes = [TLS_CERT, CA_CERT]
        .into_iter()
        .filter_map(|k| data.and_then(|d| d.get(k)))
        .flat_map(|v| v.0.iter().copied());
    // FNV-1a, 64 bits: stable across builds.
    let hash = bytes.fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Makes sure the cluster's CA and certificates exist, are not due for
/// renewal and follow a CA rotation under way, issuing and updating what
/// is missing, due or behind (the CA only when `may_create_ca`).
pub async fn ensure(
    client: &Client,
    cluster: &ValidatedCluster,
    lifetime: CertificateLifetime,
    may_create_ca: bool,
    observed: &Observed<'_>,
) -> Result<TlsState> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace);
    let ca_name = naming::tls_ca_secret(&cluster.name);
    let mut ca_secret = match read(&secrets, &ca_name).await? {
        Some(secret) => secret,
        None if may_create_ca => {
            let ca = Authority::generate(&ca_common_name(cluster, 1), CA_VALIDITY)?;
            let data = [(CA_CERT, &ca.cert_pem), (CA_KEY, &ca.key_pem)];
            let mut secret = secret(cluster, &ca_name, "Opaque", &data, ca.not_after);
            annotate(&mut secret, CA_NAME_ANNOTATION, Some(&ca.common_name));
            create_secret(&secrets, &ca_name, &secret).await?
        }
        None => return Err(Error::TlsCaMissing { secret: ca_name }),
    };

    // CA rotation: advance when the members have rolled out the current
    // phase (their serial is the member Secret's as it stands).
    let member_name = naming::tls_member_secret(&cluster.name);
    let member_before = read(&secrets, &member_name).await?;
    let serial_before = member_before.as_ref().map(serial_of);
    let settled = observed.idle
        && !observed.pod_serials.is_empty()
        && observed
            .pod_serials
            .iter()
            .all(|s| s.is_some() && *s == serial_before);
    let current = authority_from(&ca_secret, cluster, CA_CERT, CA_KEY, CA_NAME_ANNOTATION)?;
    let annotation = |s: &Secret, key: &str| s.annotations().get(key).cloned();
    let phase = annotation(&ca_secret, PHASE_ANNOTATION)
        .as_deref()
        .and_then(ca_rotation::Phase::parse);
    let rotated_for = annotation(&ca_secret, ROTATED_FOR_ANNOTATION);
    let movement = ca_rotation::next_move(&ca_rotation::Inputs {
        phase,
        rotated_for: rotated_for.as_deref(),
        requested: observed.rotation_requested,
        ca_due: CertificateLifetime { leaf: CA_VALIDITY }
            .due(current.not_after, jiff::Timestamp::now()),
        settled,
    });
    // A paused cluster is reported on, never changed.
    if movement != ca_rotation::Move::Stay && !cluster.paused {
        ca_secret = rotate(&secrets, cluster, ca_secret, &current, movement, observed).await?;
    }
    let current = authority_from(&ca_secret, cluster, CA_CERT, CA_KEY, CA_NAME_ANNOTATION)?;
    let phase = annotation(&ca_secret, PHASE_ANNOTATION)
        .as_deref()
        .and_then(ca_rotation::Phase::parse);
    let next = match phase {
        Some(ca_rotation::Phase::Trust | ca_rotation::Phase::Issue) => Some(authority_from(
            &ca_secret,
            cluster,
            NEXT_CA_CERT,
            NEXT_CA_KEY,
            NEXT_CA_NAME_ANNOTATION,
        )?),
        _ => None,
    };
    // Who signs, and whom everybody trusts, in this phase.
    let issuer = match (phase, &next) {
        (Some(ca_rotation::Phase::Issue), Some(next)) => next,
        _ => &current,
    };
    let bundle = match &next {
        Some(next) => format!("{}{}", current.cert_pem, next.cert_pem),
        None => current.cert_pem.clone(),
    };

    let hosts = member_hosts(&cluster.name, &cluster.namespace);
    let member = current_leaf(
        &secrets,
        cluster,
        Signer {
            issuer,
            bundle: &bundle,
        },
        &Leaf {
            common_name: &cluster.name,
            hosts: &hosts,
            usage: Usage::ServerAndClient,
            validity: lifetime.leaf,
        },
        &member_name,
        member_before,
        lifetime,
    )
    .await?;
    let client_name = naming::tls_client_secret(&cluster.name);
    let client_before = read(&secrets, &client_name).await?;
    let client_secret = current_leaf(
        &secrets,
        cluster,
        Signer {
            issuer,
            bundle: &bundle,
        },
        &Leaf {
            common_name: CLIENT_COMMON_NAME,
            hosts: &[],
            usage: Usage::Client,
            validity: lifetime.leaf,
        },
        &client_name,
        client_before,
        lifetime,
    )
    .await?;
    Ok(TlsState {
        client: ClientTls {
            ca_pem: bundle,
            cert_pem: text(&client_secret, TLS_CERT, &client_name)?,
            key_pem: text(&client_secret, TLS_KEY, &client_name)?,
            server_name: server_name(&cluster.name, &cluster.namespace),
        },
        member_serial: serial_of(&member),
        renew_at: [&member, &client_secret]
            .into_iter()
            .map(|s| {
                not_after(s)
                    .and_then(|t| t.parse().ok())
                    .map_or(jiff::Timestamp::UNIX_EPOCH, |t| lifetime.renew_at(t))
            })
            .min()
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        rotating: phase,
    })
}

/// Applies one move of a CA rotation to the CA Secret.
async fn rotate(
    secrets: &Api<Secret>,
    cluster: &ValidatedCluster,
    mut ca_secret: Secret,
    current: &Authority,
    movement: ca_rotation::Move,
    observed: &Observed<'_>,
) -> Result<Secret> {
    use ca_rotation::{Move, Phase};
    let data = ca_secret.data.get_or_insert_default();
    let phase = match movement {
        Move::Stay => return Ok(ca_secret),
        Move::Start => {
            let generation = current
                .common_name
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(1);
            let next = Authority::generate(&ca_common_name(cluster, generation + 1), CA_VALIDITY)?;
            data.insert(
                NEXT_CA_CERT.to_owned(),
                ByteString(next.cert_pem.into_bytes()),
            );
            data.insert(
                NEXT_CA_KEY.to_owned(),
                ByteString(next.key_pem.into_bytes()),
            );
            annotate(
                &mut ca_secret,
                NEXT_CA_NAME_ANNOTATION,
                Some(&next.common_name),
            );
            annotate(
                &mut ca_secret,
                NEXT_NOT_AFTER_ANNOTATION,
                Some(&next.not_after.to_string()),
            );
            annotate(
                &mut ca_secret,
                PENDING_FOR_ANNOTATION,
                observed.rotation_requested,
            );
            Some(Phase::Trust)
        }
        Move::Enter(Phase::Finish) => {
            // The next CA becomes the CA.
            for (from, to) in [(NEXT_CA_CERT, CA_CERT), (NEXT_CA_KEY, CA_KEY)] {
                if let Some(value) = data.remove(from) {
                    data.insert(to.to_owned(), value);
                }
            }
            let name = ca_secret
                .annotations()
                .get(NEXT_CA_NAME_ANNOTATION)
                .cloned();
            let not_after = ca_secret
                .annotations()
                .get(NEXT_NOT_AFTER_ANNOTATION)
                .cloned();
            annotate(&mut ca_secret, CA_NAME_ANNOTATION, name.as_deref());
            annotate(&mut ca_secret, NOT_AFTER_ANNOTATION, not_after.as_deref());
            annotate(&mut ca_secret, NEXT_CA_NAME_ANNOTATION, None);
            annotate(&mut ca_secret, NEXT_NOT_AFTER_ANNOTATION, None);
            Some(Phase::Finish)
        }
        Move::Enter(phase) => Some(phase),
        Move::Complete => {
            let pending = ca_secret.annotations().get(PENDING_FOR_ANNOTATION).cloned();
            annotate(&mut ca_secret, ROTATED_FOR_ANNOTATION, pending.as_deref());
            annotate(&mut ca_secret, PENDING_FOR_ANNOTATION, None);
            None
        }
    };
    annotate(&mut ca_secret, PHASE_ANNOTATION, phase.map(|p| p.as_str()));
    tracing::info!(phase = ?phase, "CA rotation");
    let name = ca_secret.name_any();
    secrets
        .replace(&name, &PostParams::default(), &ca_secret)
        .await
        .map_err(|source| Error::Apply {
            kind: "Secret".to_owned(),
            name,
            source,
        })
}

fn annotate(secret: &mut Secret, key: &str, value: Option<&str>) {
    let annotations = secret.metadata.annotations.get_or_insert_default();
    match value {
        Some(v) => annotations.insert(key.to_owned(), v.to_owned()),
        None => annotations.remove(key),
    };
}

fn not_after(secret: &Secret) -> Option<String> {
    secret.annotations().get(NOT_AFTER_ANNOTATION).cloned()
}

/// Who signs a leaf and what its holders trust.
#[derive(Clone, Copy)]
struct Signer<'a> {
    issuer: &'a Authority,
    bundle: &'a str,
}

/// The Secret `name` holding `leaf` (`existing` as read): issued if it is
/// missing, due for renewal or signed by another CA than `signer`'s, and
/// its trusted CAs updated if they are not `signer`'s bundle (replaced only
/// if nobody changed it since it was read).
#[allow(clippy::too_many_arguments)]
async fn current_leaf(
    secrets: &Api<Secret>,
    cluster: &ValidatedCluster,
    signer: Signer<'_>,
    leaf: &Leaf<'_>,
    name: &str,
    existing: Option<Secret>,
    lifetime: CertificateLifetime,
) -> Result<Secret> {
    let Some(old) = existing else {
        if cluster.paused {
            return Err(Error::SecretInvalid {
                secret: name.to_owned(),
                key: TLS_CERT,
                fix: "it is missing; dkv issues it once the cluster is no longer paused (dkv.io/reconcile-paused)",
            });
        }
        let issued = signer.issuer.issue(leaf)?;
        let secret = leaf_secret(cluster, name, signer, &issued);
        return create_secret(secrets, name, &secret).await;
    };
    let due = not_after(&old)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .is_none_or(|t| lifetime.due(t, jiff::Timestamp::now()));
    let signed_by_other = old
        .annotations()
        .get(ISSUER_ANNOTATION)
        .is_some_and(|issuer| *issuer != signer.issuer.common_name);
    if cluster.paused {
        return Ok(old);
    }
    let mut updated = if due || signed_by_other {
        let issued = signer.issuer.issue(leaf)?;
        tracing::info!(secret = %name, not_after = %issued.not_after, issuer = %signer.issuer.common_name, "issued certificate");
        leaf_secret(cluster, name, signer, &issued)
    } else if text(&old, CA_CERT, name).ok().as_deref() != Some(signer.bundle) {
        let mut secret = old.clone();
        secret.data.get_or_insert_default().insert(
            CA_CERT.to_owned(),
            ByteString(signer.bundle.as_bytes().to_vec()),
        );
        secret
    } else {
        return Ok(old);
    };
    updated.metadata.resource_version = old.metadata.resource_version;
    secrets
        .replace(name, &PostParams::default(), &updated)
        .await
        .map_err(|source| Error::Apply {
            kind: "Secret".to_owned(),
            name: name.to_owned(),
            source,
        })
}

/// The common name of a cluster's `generation`th CA (rotations count up).
fn ca_common_name(cluster: &ValidatedCluster, generation: u32) -> String {
    format!("dkv {}/{} CA {generation}", cluster.namespace, cluster.name)
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

fn authority_from(
    secret: &Secret,
    cluster: &ValidatedCluster,
    cert_key: &'static str,
    key_key: &'static str,
    name_annotation: &str,
) -> Result<Authority> {
    let name = secret.name_any();
    let annotations = secret.annotations();
    Ok(Authority {
        // CA Secrets from before rotations existed carry no name: their CA
        // is the first.
        common_name: annotations
            .get(name_annotation)
            .cloned()
            .unwrap_or_else(|| format!("dkv {}/{} CA", cluster.namespace, cluster.name)),
        cert_pem: text(secret, cert_key, &name)?,
        key_pem: text(secret, key_key, &name)?,
        not_after: annotations
            .get(if cert_key == CA_CERT {
                NOT_AFTER_ANNOTATION
            } else {
                NEXT_NOT_AFTER_ANNOTATION
            })
            .and_then(|t| t.parse().ok())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
    })
}

fn leaf_secret(
    cluster: &ValidatedCluster,
    name: &str,
    signer: Signer<'_>,
    issued: &Issued,
) -> Secret {
    let bundle = signer.bundle.to_owned();
    let data = [
        (TLS_CERT, &issued.cert_pem),
        (TLS_KEY, &issued.key_pem),
        (CA_CERT, &bundle),
    ];
    let mut secret = secret(cluster, name, "kubernetes.io/tls", &data, issued.not_after);
    annotate(
        &mut secret,
        ISSUER_ANNOTATION,
        Some(&signer.issuer.common_name),
    );
    secret
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
