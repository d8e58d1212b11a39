//! The certificates of a cluster's etcd (`spec.tls`) as the operator looks
//! after them: issued from the cluster's own CA, requested from
//! cert-manager ([`super::cert_manager`]) or provided by the user, checked,
//! renewed, and the CA rotated ([`super::ca_rotation`]). Which Secrets hold
//! them and where pods mount them is [`super::tls`].
//!
//! Each transport's certificates come from one [`Source`]. Certificates
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

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use super::ca_rotation;
use super::error::{Error, Result};
use super::naming;
use super::tls::{
    CA_CERT, CLIENT_COMMON_NAME, Source, TLS_CERT, TLS_KEY, member_hosts, server_name,
};
use super::validate::ValidatedCluster;
use crate::pki::{self, Authority, Issued, Leaf, Role, Usage};
use dkv_etcd::ClientTls;

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
    /// The operator's identity on the client transport (none when clients
    /// talk plaintext).
    pub client: Option<ClientTls>,
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
/// cert-manager ([`super::cert_manager`]) or provided by the user, and
/// returns the operator's client identity and the members' serial.
pub async fn ensure(
    client: &Client,
    cluster: &ValidatedCluster,
    lifetime: CertificateLifetime,
    may_create_ca: bool,
    observed: &Observed<'_>,
) -> Result<TlsState> {
    let sources = &cluster.tls_sources;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace);
    let name = &cluster.name;
    if sources.any(|s| matches!(s, Source::CertManager { .. })) && !cluster.paused {
        super::cert_manager::ensure(client, cluster).await?;
    }
    // The Secrets dkv does not issue, read once.
    let own = [
        naming::tls_member_secret(name),
        naming::tls_client_secret(name),
    ];
    let uses_auto = sources.any(|s| *s == Source::Auto);
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
    let external =
        sources.any(|s| matches!(s, Source::Provided { .. } | Source::CertManager { .. }));
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
    Ok(TlsState {
        client: client_identity,
        member_serial,
        renew_at,
        rotating: auto.and_then(|a| a.rotating),
    })
}

/// What a cluster's own CA issued, after [`ensure_auto`].
struct AutoCertificates {
    member: Secret,
    client: Secret,
    renew_at: jiff::Timestamp,
    rotating: Option<ca_rotation::Phase>,
}

/// The Secret `secret` that the cluster's spec (or cert-manager) should
/// provide does not exist.
fn missing(cluster: &ValidatedCluster, secret: &str) -> Error {
    match certificate_for(cluster, secret) {
        Some(certificate) => Error::CertificatePending {
            certificate,
            secret: secret.to_owned(),
        },
        None => Error::TlsSecretUnusable {
            secret: secret.to_owned(),
            setting: setting_of(cluster, secret),
            problem: "it does not exist: create it with tls.crt, tls.key and ca.crt".to_owned(),
        },
    }
}

/// The cert-manager Certificate that writes `secret`, if any.
fn certificate_for(cluster: &ValidatedCluster, secret: &str) -> Option<String> {
    super::cert_manager::requests(cluster)
        .into_iter()
        .find(|r| r.secret == secret)
        .map(|r| r.name)
}

/// Which spec field (or Certificate) a Secret comes from, for messages.
fn setting_of(cluster: &ValidatedCluster, secret: &str) -> String {
    if let Some(certificate) = certificate_for(cluster, secret) {
        return format!("issued by cert-manager for Certificate {certificate}");
    }
    let sources = &cluster.tls_sources;
    let mut settings = Vec::new();
    if let Source::Provided { secret: peer, .. } = &sources.peer
        && peer == secret
    {
        settings.push("spec.tls.peer.secretRef");
    }
    if let Source::Provided {
        secret: server,
        client_secret,
    } = &sources.client
    {
        if server == secret {
            settings.push("spec.tls.client.secretRef");
        }
        if client_secret.as_deref() == Some(secret) {
            settings.push("spec.tls.client.clientSecretRef");
        }
    }
    if settings.is_empty() {
        "spec.tls".to_owned()
    } else {
        settings.join(", ")
    }
}

/// Checks the certificates dkv did not issue the way their TLS peers will
/// verify them, so that a wrong one is reported before any member mounts
/// it: the peer certificate as server (for every member's name) and as
/// client, against its own CAs; the members' client-side certificate as
/// server for the name the operator dials, against the CAs the operator
/// trusts, and as client against its own CAs (etcd's gRPC gateway dials
/// the member with it); the operator's certificate as client, against the
/// CAs members trust.
fn check_external<'a>(
    cluster: &ValidatedCluster,
    get: &impl Fn(&str) -> Result<&'a Secret>,
) -> Result<()> {
    let sources = &cluster.tls_sources;
    let name = &cluster.name;
    let external =
        |source: &Source| matches!(source, Source::Provided { .. } | Source::CertManager { .. });
    let unusable = |secret: &str, problem: pki::Unusable| Error::TlsSecretUnusable {
        secret: secret.to_owned(),
        setting: setting_of(cluster, secret),
        problem: problem.0,
    };
    let pem = |secret_name: &str, key: &'static str| -> Result<String> {
        text(get(secret_name)?, key, secret_name).map_err(|_| Error::TlsSecretUnusable {
            secret: secret_name.to_owned(),
            setting: setting_of(cluster, secret_name),
            problem: format!("it has no {key}"),
        })
    };
    if external(&sources.peer)
        && let Some(peer) = sources.peer_secret(name)
    {
        let members: Vec<String> = (0..cluster.size.max(1))
            .map(|ordinal| naming::member_host(name, &cluster.namespace, ordinal))
            .collect();
        pki::check(
            &pem(&peer, TLS_CERT)?,
            &pem(&peer, TLS_KEY)?,
            &pem(&peer, CA_CERT)?,
            &[Role::Server(&members), Role::Client],
        )
        .map_err(|e| unusable(&peer, e))?;
    }
    if external(&sources.client)
        && let (Some(server), Some(client)) =
            (sources.server_secret(name), sources.client_secret(name))
    {
        let dialled = [server_name(name, &cluster.namespace)];
        pki::check(
            &pem(&server, TLS_CERT)?,
            &pem(&server, TLS_KEY)?,
            &pem(&client, CA_CERT)?,
            &[Role::Server(&dialled)],
        )
        .map_err(|e| unusable(&server, e))?;
        pki::check(
            &pem(&server, TLS_CERT)?,
            &pem(&server, TLS_KEY)?,
            &pem(&server, CA_CERT)?,
            &[Role::Client],
        )
        .map_err(|e| unusable(&server, e))?;
        pki::check(
            &pem(&client, TLS_CERT)?,
            &pem(&client, TLS_KEY)?,
            &pem(&server, CA_CERT)?,
            &[Role::Client],
        )
        .map_err(|e| unusable(&client, e))?;
    }
    Ok(())
}

/// Makes sure the cluster's CA and certificates exist, are not due for
/// renewal and follow a CA rotation under way, issuing and updating what
/// is missing, due or behind (the CA only when `may_create_ca`).
async fn ensure_auto(
    client: &Client,
    cluster: &ValidatedCluster,
    lifetime: CertificateLifetime,
    may_create_ca: bool,
    observed: &Observed<'_>,
    serial_with: &(dyn Fn(Option<&Secret>) -> String + Sync),
) -> Result<AutoCertificates> {
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
    let serial_before = member_before.as_ref().map(|m| serial_with(Some(m)));
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
    Ok(AutoCertificates {
        renew_at: [&member, &client_secret]
            .into_iter()
            .map(|s| {
                not_after(s)
                    .and_then(|t| t.parse().ok())
                    .map_or(jiff::Timestamp::UNIX_EPOCH, |t| lifetime.renew_at(t))
            })
            .min()
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        member,
        client: client_secret,
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
