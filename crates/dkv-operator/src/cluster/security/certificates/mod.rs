//! The certificates of a cluster's etcd (`spec.tls`) as the operator looks
//! after them: issued from the cluster's own CA, requested from
//! cert-manager ([`crate::cluster::security::cert_manager`]) or provided by the user, checked,
//! renewed, and the CA rotated ([`crate::cluster::security::ca_rotation`]). Which Secrets hold
//! them and where pods mount them is [`crate::parts::tls`].
//!
//! Each transport's certificates come from one [`CertificateSource`]. Certificates
//! dkv did not issue itself (`Provided` by the user, or issued by
//! cert-manager) are checked with [`crate::pki::check`] — chain, names,
//! usages, validity, key — before any member mounts them, and re-read every
//! [`EXTERNAL_RECHECK`]: when their content changes, members restart onto
//! them one at a time, as for a renewal.
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
//!
//! This module holds what the reconcile asks for ([`ensure`]) and the Secrets
//! it reads and writes; `auto` keeps the cluster's own CA and certificates,
//! `issue` issues from a CA, and `external` checks the certificates dkv does
//! not issue.

mod auto;
mod external;
mod issue;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use crate::cluster::error::{Error, Result};
use crate::cluster::security::ca_rotation;
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming;
use crate::parts::tls::{CA_CERT, CertificateSource, TLS_CERT, TLS_KEY, server_name};
use auto::ensure_auto;
use dkv_etcd::ClientTls;
use external::{check_external, missing};

const CA_KEY: &str = "ca.key";
/// When a certificate in the Secret expires (RFC 3339), read without
/// parsing X.509.
pub const NOT_AFTER_ANNOTATION: &str = "dkv.io/not-after";
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
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
/// How often certificates dkv does not issue are read again (their Secrets
/// are not watched).
pub const EXTERNAL_RECHECK: Duration = Duration::from_secs(30);

/// What a TLS cluster's reconcile needs: the operator's client identity and
/// the serial of the current member certificate (carried by the pod
/// template; a new one restarts the members one at a time).
#[derive(Debug, Clone)]
pub struct TlsState {
    /// The operator's identity on the client transport (none when clients
    /// talk plaintext).
    pub client: Option<ClientTls>,
    pub member_serial: String,
    /// When the first of the certificates comes due for renewal.
    pub renew_at: jiff::Timestamp,
    /// A CA rotation is under way (it advances as members roll).
    pub rotating: Option<ca_rotation::Phase>,
    /// (Secret, notAfter) of the certificate in each Secret in use.
    pub expiries: Vec<(String, jiff::Timestamp)>,
}

/// What the reconcile observed that certificate management needs.
#[derive(Debug, Clone, Default)]
pub struct CertificateInputs<'a> {
    /// `dkv.io/rotate-ca` on the cluster.
    pub rotation_requested: Option<&'a str>,
    /// The serial each member pod was started with.
    pub pod_serials: Vec<Option<String>>,
    /// No operation is pinned.
    pub idle: bool,
}

/// A short fingerprint of a member Secret's certificate and trusted CAs:
/// the pods' serial.
/// (For one Secret, the same value as before members could mount two, so
/// operator upgrades restart nobody.)
fn serial_of_all(secrets: &[Secret]) -> String {
    let bytes = secrets
        .iter()
        .flat_map(|secret| {
            let data = secret.data.as_ref();
            [TLS_CERT, CA_CERT]
                .into_iter()
                .filter_map(move |k| data.and_then(|d| d.get(k)))
        })
        .flat_map(|v| v.0.iter().copied());
    // FNV-1a, 64 bits: stable across builds.
    let hash = bytes.fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Makes sure every certificate the cluster's transports need exists and
/// can be used: issued by dkv ([`ensure_auto`]), requested from
/// cert-manager ([`crate::cluster::security::cert_manager`]) or provided by the user, and
/// returns the operator's client identity and the members' serial.
pub async fn ensure(
    client: &Client,
    cluster: &ValidatedCluster,
    lifetime: CertificateLifetime,
    may_create_ca: bool,
    observed: &CertificateInputs<'_>,
) -> Result<TlsState> {
    let sources = &cluster.tls_sources;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace);
    let name = &cluster.name;
    if sources.any(|s| matches!(s, CertificateSource::CertManager { .. })) && !cluster.paused {
        crate::cluster::security::cert_manager::ensure(client, cluster).await?;
    }
    // The Secrets dkv does not issue, read once.
    let own = [
        naming::tls_member_secret(name),
        naming::tls_client_secret(name),
    ];
    let uses_auto = sources.any(|s| *s == CertificateSource::Auto);
    let mut fetched: BTreeMap<String, Secret> = BTreeMap::new();
    let member_names = sources.member_secrets(name);
    let wanted = member_names
        .iter()
        .cloned()
        .chain(sources.client_secret(name))
        .filter(|n| !(uses_auto && own.contains(n)));
    for secret_name in wanted {
        if let std::collections::btree_map::Entry::Vacant(slot) = fetched.entry(secret_name) {
            let secret = read(&secrets, slot.key())
                .await?
                .ok_or_else(|| missing(cluster, slot.key()))?;
            slot.insert(secret);
        }
    }
    // The members' serial, with a given version of dkv's member Secret.
    let serial_with = |auto_member: Option<&Secret>| {
        let mounted: Vec<Secret> = member_names
            .iter()
            .filter_map(|n| {
                if uses_auto && *n == own[0] {
                    auto_member.cloned()
                } else {
                    fetched.get(n).cloned()
                }
            })
            .collect();
        serial_of_all(&mounted)
    };
    let auto = if uses_auto {
        Some(
            ensure_auto(
                client,
                cluster,
                lifetime,
                may_create_ca,
                observed,
                &serial_with,
            )
            .await?,
        )
    } else {
        None
    };
    let external = sources.any(|s| {
        matches!(
            s,
            CertificateSource::Provided { .. } | CertificateSource::CertManager { .. }
        )
    });
    let member_serial = serial_with(auto.as_ref().map(|a| &a.member));
    if let Some(auto) = &auto {
        for secret in [&auto.member, &auto.client] {
            fetched.insert(secret.name_any(), secret.clone());
        }
    }
    let get = |secret_name: &str| {
        fetched
            .get(secret_name)
            .ok_or_else(|| missing(cluster, secret_name))
    };
    check_external(cluster, &get)?;

    let client_identity = match sources.client_secret(name) {
        Some(client_name) => {
            let secret = get(&client_name)?;
            Some(ClientTls {
                ca_pem: text(secret, CA_CERT, &client_name)?,
                cert_pem: text(secret, TLS_CERT, &client_name)?,
                key_pem: text(secret, TLS_KEY, &client_name)?,
                server_name: server_name(&cluster.name, &cluster.namespace),
            })
        }
        None => None,
    };
    let recheck = jiff::Timestamp::now()
        .checked_add(EXTERNAL_RECHECK)
        .unwrap_or(jiff::Timestamp::MAX);
    let renew_at = [
        auto.as_ref().map(|a| a.renew_at),
        external.then_some(recheck),
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(recheck);
    let expiries = fetched
        .iter()
        .filter_map(|(name, secret)| Some((name.clone(), certificate_expiry(secret)?)))
        .collect();
    Ok(TlsState {
        client: client_identity,
        member_serial,
        renew_at,
        rotating: auto.and_then(|a| a.rotating),
        expiries,
    })
}

/// When the (first) certificate in a Secret's `tls.crt` expires.
fn certificate_expiry(secret: &Secret) -> Option<jiff::Timestamp> {
    let pem = secret.data.as_ref()?.get(TLS_CERT)?;
    dkv_readouts::certificate::read_pem(&pem.0)
        .ok()
        .map(|c| c.not_after)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_mounted_secret_keeps_the_serial_it_had_before_members_could_mount_two() {
        let secret = Secret {
            data: Some(BTreeMap::from([
                (TLS_CERT.to_owned(), ByteString(b"cert".to_vec())),
                (CA_CERT.to_owned(), ByteString(b"ca".to_vec())),
                (TLS_KEY.to_owned(), ByteString(b"key".to_vec())),
            ])),
            ..Secret::default()
        };
        // FNV-1a of "certca", the value operators before this one wrote.
        let expected = b"certca".iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        assert_eq!(
            serial_of_all(std::slice::from_ref(&secret)),
            format!("{expected:016x}")
        );
        let other = Secret {
            data: Some(BTreeMap::from([(
                TLS_CERT.to_owned(),
                ByteString(b"x".to_vec()),
            )])),
            ..Secret::default()
        };
        assert_ne!(
            serial_of_all(&[secret.clone(), other]),
            serial_of_all(&[secret])
        );
    }
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
    pub(crate) fn renew_before(&self) -> i64 {
        i64::try_from(self.leaf.as_secs() / 3).unwrap_or(i64::MAX)
    }

    pub(crate) fn due(&self, not_after: jiff::Timestamp, now: jiff::Timestamp) -> bool {
        not_after.as_second().saturating_sub(now.as_second()) <= self.renew_before()
    }

    /// When a certificate valid until `not_after` is renewed.
    pub(crate) fn renew_at(&self, not_after: jiff::Timestamp) -> jiff::Timestamp {
        jiff::Timestamp::from_second(not_after.as_second().saturating_sub(self.renew_before()))
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }
}
